"""Text tables that fit a terminal: the width to fit (the terminal's, or 80 off one), and columns as wide
as their content that, when the table is too wide, give way by cutting their cells with an ellipsis, never
by pushing the columns after them out of line. Used by ``npulaunch status`` (views/jobview.py) and the
catalog's tables (views/catalogview.py). Pure, apart from asking the terminal its width.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import List, Sequence

ELLIPSIS = "…"
GAP = "  "  # between two columns


def terminal_width() -> int:
    """The terminal's width when stdout is one, else 80 (a pipe, a file, CI logs)."""
    import shutil
    import sys

    return shutil.get_terminal_size((80, 24)).columns if sys.stdout.isatty() else 80


def fit(text: str, width: int) -> str:
    """``text`` in ``width`` characters, cut with an ellipsis when it is longer."""
    return text if len(text) <= width else text[: max(0, width - 1)] + ELLIPSIS


@dataclass(frozen=True)
class Column:
    """A column of a fitted table: its heading, its alignment, how narrow it may be cut (0: never; a
    number or a rank is never cut, a host name or a log line may be), and when: columns of a lower
    ``keep`` give way first."""

    title: str
    right: bool = False
    min_width: int = 0
    keep: int = 0


def fit_widths(columns: Sequence[Column], natural: Sequence[int], width: int) -> List[int]:
    """Each column's width: its content's, or less when the table is wider than ``width``. Of the columns
    that may be cut, those of the lowest ``keep`` give way first, the widest of them first, none below its
    ``min_width``; when they all reach it the table stays wider than ``width`` (and stays aligned)."""
    widths = list(natural)
    over = sum(widths) + len(GAP) * (len(widths) - 1) - width
    while over > 0:
        cuttable = [i for i, c in enumerate(columns) if c.min_width and widths[i] > c.min_width]
        if not cuttable:
            break
        first = min(columns[i].keep for i in cuttable)
        cuttable = [i for i in cuttable if columns[i].keep == first]
        widest = max(cuttable, key=lambda i: (widths[i], i))  # on a tie, the later column (the log line)
        others = [widths[i] for i in cuttable if i != widest]
        floor = max([columns[widest].min_width] + [w for w in others if w <= widths[widest]])  # the next widest
        step = min(over, widths[widest] - floor) or 1
        widths[widest] -= step
        over -= step
    return widths


def fit_table(columns: Sequence[Column], rows: Sequence[Sequence[str]], width: int) -> List[str]:
    """The table's lines, heading first, in at most ``width`` characters where the columns allow it.
    The last column is not padded (no trailing blanks)."""
    table = [[c.title for c in columns]] + [list(row) for row in rows]
    natural = [max(len(row[i]) for row in table) for i in range(len(columns))]
    widths = fit_widths(columns, natural, width)
    lines = []
    for row in table:
        cells = []
        for i, column in enumerate(columns):
            text = fit(row[i], widths[i])
            cells.append(text.rjust(widths[i]) if column.right else text.ljust(widths[i]))
        lines.append(GAP.join(cells).rstrip())
    return lines
