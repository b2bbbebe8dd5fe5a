"""``python -m npulaunch``: the same as the ``npulaunch`` command."""

from npulaunch.command import main

main()
