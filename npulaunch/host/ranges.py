"""Numbers written as runs: ``[0, 1, 2, 5, 7, 8]`` -> ``0-2, 5, 7-8``, for rank lists, NPU ids and CPU
lists alike. Standard library only, Python 3.7+."""

from __future__ import annotations

from typing import Iterable, List


def ranges(numbers: Iterable[int], separator: str = ", ") -> str:
    """The distinct numbers, sorted, each run of consecutive ones as ``first-last``."""
    runs: List[List[int]] = []
    for number in sorted(set(numbers)):
        if runs and number == runs[-1][1] + 1:
            runs[-1][1] = number
        else:
            runs.append([number, number])
    return separator.join(str(a) if a == b else "%d-%d" % (a, b) for a, b in runs)
