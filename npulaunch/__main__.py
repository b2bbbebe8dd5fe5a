"""``python -m npulaunch``: the same as the ``npulaunch`` command."""

import sys

from npulaunch.cli import main

sys.exit(main())
