"""``python -m npulaunch``: the same as the ``npulaunch`` command."""

from npulaunch.cli import entry

entry()
