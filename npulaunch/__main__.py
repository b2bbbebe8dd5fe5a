"""``python -m npulaunch``: the same as the ``npulaunch`` command."""

import sys

from .cli import main

sys.exit(main())
