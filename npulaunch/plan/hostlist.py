"""Slurm's compact texts: host lists (``node[01-04,07]``) and task counts (``4(x2),2``), expanded
as Slurm itself does, with a bound on the size so that a typo fails at once. Pure.
"""

from __future__ import annotations

import math
from itertools import product
from typing import List

from npulaunch.host.errors import SchedulerError
from npulaunch.host.lazyre import lazy_re

MAX_HOSTS = 65536  # a typo such as node[1-10000000] must fail at once, not fill the launcher's memory


def invalid_value(where: str, found: str, allowed: str, hint: str = "") -> SchedulerError:
    text = f"{where}: found {found}; allowed: {allowed}"
    return SchedulerError(text + (f" ({hint})" if hint else ""))


class _Malformed(ValueError):
    """Raised inside the text parsers; turned into a SchedulerError naming the variable."""


_HOSTLIST_ALLOWED = "comma-separated host names, with ranges in brackets: node01, node[01-04,07], rack[1-2]-n[1-3]"
_HOSTLIST_PIECE = lazy_re(r"\[([^\[\]]*)\]|([A-Za-z0-9._-]+)")
_RANGE = lazy_re(r"([0-9]+)(?:-([0-9]+))?")
_TASKS = lazy_re(r"([0-9]+)(?:\(x([0-9]+)\))?")


def expand_hostlist(text: str, where: str = "hostlist") -> List[str]:
    """Every host of a Slurm hostlist, in Slurm's order (what ``scontrol show hostnames`` prints).
    ``where`` names the text in errors (the variable it came from)."""
    try:
        hosts: List[str] = []
        for item in _split_items(text.strip()):
            hosts.extend(_expand_item(item, MAX_HOSTS - len(hosts)))
        return hosts
    except _Malformed as exc:
        raise invalid_value(where, f"{text!r} ({exc})", _HOSTLIST_ALLOWED) from None


def _split_items(text: str) -> List[str]:
    """Split at the commas outside brackets."""
    items, depth, start = [], 0, 0
    for at, char in enumerate(text):
        if char == "[":
            if depth:
                raise _Malformed(f"'[' inside brackets at position {at}")
            depth = 1
        elif char == "]":
            if not depth:
                raise _Malformed(f"']' without '[' at position {at}")
            depth = 0
        elif char == "," and not depth:
            items.append(text[start:at])
            start = at + 1
    if depth:
        raise _Malformed("'[' without ']'")
    return items + [text[start:]]


def _expand_item(item: str, room: int) -> List[str]:
    """``rack[1-2]-n[1-3]``: the product of its bracket groups, the leftmost varying slowest."""
    if not item:
        raise _Malformed("an empty name")
    choices: List[List[str]] = []
    at = 0
    for match in _HOSTLIST_PIECE.finditer(item):
        if match.start() != at:
            break
        choices.append([match.group(2)] if match.group(2) is not None else _expand_group(match.group(1)))
        at = match.end()
    if at != len(item):
        raise _Malformed(f"{item[at]!r} in {item!r}: host names hold letters, digits, '.', '-' and '_'")
    if math.prod(len(c) for c in choices) > room:
        raise _Malformed(f"more than {MAX_HOSTS} hosts")
    return ["".join(parts) for parts in product(*choices)]


def _expand_group(group: str) -> List[str]:
    """``01-03,7`` -> 01, 02, 03, 7: each range keeps the width of its start."""
    values: List[str] = []
    for piece in group.split(","):
        match = _RANGE.fullmatch(piece)
        if not match:
            raise _Malformed(f"[{group}]: {piece!r} is not a number or a range such as 01-04")
        low, high = int(match.group(1)), int(match.group(2) or match.group(1))
        if low > high:
            raise _Malformed(f"[{group}]: the range {piece} runs backwards")
        if high - low >= MAX_HOSTS:
            raise _Malformed(f"more than {MAX_HOSTS} hosts")
        values.extend(str(n).zfill(len(match.group(1))) for n in range(low, high + 1))
    return values


def parse_tasks_per_node(text: str, where: str = "tasks per node") -> List[int]:
    """``4(x2),2`` -> [4, 4, 2] (Slurm's ``SLURM_TASKS_PER_NODE``: a count, ``(xN)`` repeats it)."""
    counts: List[int] = []
    for piece in text.strip().split(","):
        match = _TASKS.fullmatch(piece)
        repeat = int(match.group(2) or 1) if match else 0
        if not match or int(match.group(1)) < 1 or repeat < 1 or len(counts) + repeat > MAX_HOSTS:
            raise invalid_value(
                where,
                f"{text!r} (at {piece!r})",
                "comma-separated task counts >= 1, each optionally repeated: 8, 4(x2),2",
            )
        counts.extend([int(match.group(1))] * repeat)
    return counts
