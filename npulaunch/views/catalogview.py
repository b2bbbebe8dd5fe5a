"""Show the catalog: ``npulaunch options`` and ``npulaunch env-vars`` as tables, one entry in
full, or JSON. Pure rendering; the catalog itself lives in npulaunch/catalog/.
"""

from __future__ import annotations

import json
from typing import Any, Iterable, List, Optional, Sequence, Union

from npulaunch.config.catalog import EnvVarSpec, OptionSpec
from npulaunch.views.columns import fit, terminal_width

Spec = Union[OptionSpec, EnvVarSpec]


def select(specs: Iterable[Spec], area: Optional[str] = None, word: Optional[str] = None) -> List[Spec]:
    """Entries of an area and/or mentioning a word (in the name, description or notes)."""
    chosen = []
    for spec in specs:
        if area and spec.area != area:
            continue
        if word and word.lower() not in f"{spec.name} {spec.description} {spec.notes}".lower():
            continue
        chosen.append(spec)
    return chosen


def _cell(value: Any) -> str:
    if value is None:
        return "-"
    if isinstance(value, bool):
        return str(value).lower()
    return str(value)


MIN_WRAP = 16  # narrower than this, a wrapping column goes on lines of its own under the row


def _wrap(text: str, width: int) -> List[str]:
    """Lines of at most ``width`` characters, broken between words; a word longer than a line is
    cut with an ellipsis, never silently."""
    import textwrap

    lines = textwrap.wrap(text, width=width, break_long_words=False, break_on_hyphens=False) or [""]
    return [fit(line, width) for line in lines]


def render_columns(rows: Sequence[Sequence[str]], wrapping: Sequence[int], width: int, caps: Sequence[int]) -> str:
    """A table in ``width`` columns. Columns not in ``wrapping`` keep their width up to their cap
    (``caps[i]``; longer cells end in an ellipsis); the ``wrapping`` ones share what is left and are
    broken between words. When that leaves them less than MIN_WRAP each, they go under the row,
    indented, on lines of their own."""
    count = len(rows[0])
    natural = [max(len(row[i]) for row in rows) for i in range(count)]
    fixed = [i for i in range(count) if i not in wrapping]
    widths = {i: min(natural[i], caps[i]) for i in fixed}
    used = sum(widths.values()) + 2 * (len(fixed) - 1)
    room = width - used - 2 * len(wrapping)
    stacked = room < MIN_WRAP * len(wrapping)
    while stacked and used > width:  # too narrow even for the fixed columns: the widest gives way
        widest = max(fixed, key=lambda i: widths[i])
        widths[widest] -= used - width
        used = width
    if not stacked:
        total = sum(natural[i] for i in wrapping) or 1
        for i in wrapping:
            widths[i] = max(MIN_WRAP, min(natural[i], room * natural[i] // total))
        spare = room - sum(widths[i] for i in wrapping)
        for i in wrapping:  # what rounding left, to the columns that can use it
            extra = min(spare, natural[i] - widths[i])
            widths[i] += max(0, extra)
            spare -= max(0, extra)
    lines: List[str] = []
    for row in rows:
        head = "  ".join(fit(row[i], widths[i]).ljust(widths[i]) for i in fixed)
        if stacked:
            lines.append(head.rstrip())
            for i in wrapping:
                lines.extend("    " + part for part in _wrap(row[i], width - 4))
            continue
        cells = {i: _wrap(row[i], widths[i]) for i in wrapping}
        depth = max(len(cell) for cell in cells.values())
        for n in range(depth):
            parts = [head if n == 0 else " " * len(head)]
            parts += [(cells[i][n] if n < len(cells[i]) else "").ljust(widths[i]) for i in wrapping]
            lines.append("  ".join(parts).rstrip())
    return "\n".join(lines) + "\n"


def render_table(specs: Sequence[Spec], width: Optional[int] = None) -> str:
    """The catalog as a table that fits ``width`` columns (the terminal's, or 80)."""
    if not specs:
        return "no entries match\n"
    width = width or terminal_width()
    rows: List[Sequence[str]]
    if isinstance(specs[0], OptionSpec):
        rows = [("name", "type", "default", "scenario", "status", "description")]
        rows += [
            (s.name, s.type, _cell(s.default), s.scenario, s.status, s.description)
            for s in specs
            if isinstance(s, OptionSpec)
        ]
        table = render_columns(rows, (5,), width, (60, 4, 12, 9, 12, 0))
    else:
        rows = [("name", "type", "default", "allowed", "description")]
        rows += [
            (s.name, s.kind, _cell(s.default), s.to_dict()["allowed"], s.description)
            for s in specs
            if isinstance(s, EnvVarSpec)
        ]
        table = render_columns(rows, (3, 4), width, (60, 5, 10, 0, 0))
    return table + f"({len(specs)} entries)\n"


def render_entry(spec: Spec) -> str:
    data = spec.to_dict()
    order = [
        "name",
        "type",
        "area",
        "scenario",
        "status",
        "default",
        "default_note",
        "allowed",
        "unit",
        "form",
        "writes",
        "products",
        "replacement",
        "set_by_launcher",
        "description",
        "notes",
        "example",
    ]
    lines = []
    for key in order:
        value = data.get(key)
        if value in (None, "", [], False) and key not in ("default", "writes"):
            continue
        if key == "writes" and not value:
            continue
        shown = json.dumps(value) if isinstance(value, (dict, list)) else _cell(value)
        lines.append(f"{key + ':':<16} {shown}")
    return "\n".join(lines) + "\n"


def render_json(specs: Sequence[Spec]) -> str:
    return json.dumps([spec.to_dict() for spec in specs], indent=2) + "\n"
