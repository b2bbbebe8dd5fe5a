"""The ``npulaunch`` command's entry point (and ``python -m npulaunch``'s): the dataclass code cache
(npulaunch/codecache.py) first, since the command's imports define most of npulaunch's classes, then
the command line."""

from __future__ import annotations


def main() -> None:
    from npulaunch import codecache

    codecache.install()
    from npulaunch.cli import entry

    entry()
