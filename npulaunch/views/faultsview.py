"""``npulaunch faults``' output: the fault history's entries (plan/ledger.py) as a table fitted to the terminal,
then what it keeps off now and why (plan/faulthistory.py), or all of it as JSON. Pure rendering.
"""

from __future__ import annotations

import json
import time
from typing import List, Sequence

from npulaunch.plan.faulthistory import KeptOff
from npulaunch.plan.ledger import CLEARED, Entry, Ledger
from npulaunch.views.columns import Column, fit_table

COLUMNS = (
    Column("time"),
    Column("what"),
    Column("host"),
    Column("NPU", right=True),
    Column("code"),
    Column("level"),
    Column("job", min_width=8, keep=1),
    Column("reason", min_width=12),
)


def render_faults(ledger: Ledger, kept: KeptOff, width: int, cleared: Sequence[str] = ()) -> str:
    """The entries, oldest first, then what is kept off now; ``cleared``: what this command just cleared."""
    lines = [f"fault history: {ledger.path}"]
    if not ledger.entries and not ledger.error:
        lines[0] += ": no entries" + ("" if ledger.skipped else " yet")
    else:
        lines.extend(fit_table(COLUMNS, [_row(entry) for entry in ledger.entries], width))
    lines.extend(ledger.warnings())
    lines.extend(cleared)
    if not kept.items:
        lines.append("it keeps nothing off now")
    else:
        lines.append(f"it keeps off now (a fault for {kept.window_h:g} h, a repeated code until cleared):")
        lines.extend(f"  {k.key}: {k.why}" for k in kept.items)
        lines.append(f"clear one: npulaunch faults {ledger.path} --clear HOST[:NPU] (or --all)")
    return "\n".join(lines) + "\n"


def render_json(ledger: Ledger, kept: KeptOff) -> str:
    record = {
        "ledger": ledger.path,
        "entries": [entry.to_json() for entry in ledger.entries],
        "skipped_lines": [{"line": number, "why": why} for number, why in ledger.skipped],
        "error": ledger.error or None,
        "window_h": kept.window_h,
        "kept_off": kept.to_json(),
    }
    return json.dumps(record, indent=2) + "\n"


def cleared_lines(targets: Sequence[Entry], before: KeptOff) -> List[str]:
    """What each clearing released of what was kept off before it."""
    lines = []
    for target in targets:
        released = [
            k
            for k in before.items
            if target.host is None or (k.host == target.host and (target.device is None or k.device == target.device))
        ]
        what = "everything" if target.host is None else target.what_place
        if target.host is not None and target.device is None:
            what += " and its NPUs"
        said = "; ".join(k.key for k in released) if released else "nothing of it was kept off"
        lines.append(f"cleared {what} (released: {said})")
    return lines


def _row(entry: Entry) -> List[str]:
    job = f"{entry.job_id} #{entry.attempt}" if entry.job_id and entry.attempt else entry.job_id
    if entry.what == CLEARED:
        job = f"by {entry.by}" if entry.by else "-"
    device = "-" if entry.device is None else str(entry.device)
    return [
        time.strftime("%Y-%m-%d %H:%M", time.localtime(entry.time)),
        entry.what,
        "*" if entry.host is None else entry.host,
        "*" if entry.what == CLEARED and entry.device is None else device,
        entry.code or "-",
        entry.level or "-",
        job or "-",
        entry.reason or "-",
    ]


def _covers(target: Entry, host: str, device: object) -> bool:
    if target.host is None:
        return True
    return target.host == host and (target.device is None or target.device == device)
