"""Show the catalog: ``npulaunch options`` and ``npulaunch env-vars`` as tables, one entry in
full, or JSON. Pure rendering; the catalog itself lives in npulaunch/catalog/.
"""

from __future__ import annotations

import json
from typing import Any, Iterable, List, Optional, Sequence, Union

from npulaunch.config.catalog import EnvVarSpec, OptionSpec

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


def render_table(specs: Sequence[Spec]) -> str:
    if not specs:
        return "no entries match\n"
    rows: List[Sequence[str]]
    if isinstance(specs[0], OptionSpec):
        rows = [("name", "type", "default", "scenario", "status", "description")]
        rows += [
            (s.name, s.type, _cell(s.default), s.scenario, s.status, s.description)
            for s in specs
            if isinstance(s, OptionSpec)
        ]
    else:
        rows = [("name", "type", "default", "allowed", "description")]
        rows += [
            (s.name, s.kind, _cell(s.default), s.to_dict()["allowed"], s.description)
            for s in specs
            if isinstance(s, EnvVarSpec)
        ]
    widths = [min(40, max(len(row[i]) for row in rows)) for i in range(len(rows[0]) - 1)]
    lines = ["  ".join(cell[:40].ljust(width) for cell, width in zip(row, widths)) + "  " + row[-1] for row in rows]
    return "\n".join(lines) + f"\n({len(specs)} entries)\n"


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
