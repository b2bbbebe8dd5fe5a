"""Error signatures: the lines that explain why an Ascend job failed, matched line by line in every
rank's output and plogs. Each says whether it is usually a *cause* or a *symptom* (a rank that
timed out waiting for another), whether a restart can help, and what to do.

Standard library only, Python 3.7+: the agent matches on compute hosts. A leaf: it knows lines,
not ranks or jobs. Facts (codes, meanings) follow Huawei's error-code reference; wording is ours.
"""

from __future__ import annotations

import re
import time
from dataclasses import dataclass
from typing import Dict, Iterable, List, Optional, Pattern, Sequence, Tuple, Union

CAUSE, SYMPTOM = "cause", "symptom"


@dataclass(frozen=True)
class Signature:
    name: str  # stable id, e.g. "EZ9999-aicore"
    pattern: str  # a regular expression searched in each line
    cls: str  # failure class, e.g. "device_kernel_fault"
    kind: str  # CAUSE or SYMPTOM
    retryable: bool
    hint: str
    code: str = ""  # the CANN error code, when there is one
    fatal: bool = False  # the job cannot go on: stop it now rather than wait for timeouts
    needles: Tuple[str, ...] = ()  # literal text a matching line must contain (lower-case: any case)


SIGNATURES: Tuple[Signature, ...] = (
    Signature(
        "EI0006",
        r"\bEI0006\b",
        "hccl_connect_timeout",
        SYMPTOM,
        True,
        "a peer never connected while HCCL set up its links: look for the rank that did not start "
        "or was slower (compilation); HCCL_CONNECT_TIMEOUT sets how long ranks wait",
        "EI0006",
        fatal=True,
        needles=("EI0006",),
    ),
    Signature(
        "EI0002",
        r"\bEI0002\b",
        "hccl_exec_timeout",
        SYMPTOM,
        False,
        "a collective operation timed out, usually because another rank failed or stalled first; "
        "hccl_timeout / HCCL_EXEC_TIMEOUT set how long ranks wait",
        "EI0002",
        fatal=True,
        needles=("EI0002",),
    ),
    Signature(
        "EI0004",
        r"\bEI0004\b",
        "invalid_rank_table",
        CAUSE,
        False,
        "the rank table is invalid: check RANK_TABLE_FILE, device IPs and rank ids",
        "EI0004",
        fatal=True,
        needles=("EI0004",),
    ),
    Signature(
        "EI0014",
        r"\bEI0014\b",
        "invalid_rank_table",
        CAUSE,
        False,
        "the rank table does not match the ranks started: check RANK_TABLE_FILE",
        "EI0014",
        fatal=True,
        needles=("EI0014",),
    ),
    Signature(
        "EI0008",
        r"\bEI0008\b",
        "cann_version_mismatch",
        CAUSE,
        False,
        "ranks run different CANN versions: install the same version on every host",
        "EI0008",
        fatal=True,
        needles=("EI0008",),
    ),
    Signature(
        "EE1002",
        r"\bEE1002\b",
        "stream_sync_timeout",
        SYMPTOM,
        False,
        "stream synchronisation timed out (stream_sync_timeout, milliseconds): a kernel or a "
        "collective did not finish, often waiting on another rank",
        "EE1002",
        fatal=True,
        needles=("EE1002",),
    ),
    Signature(
        "507046",
        r"\b507046\b",
        "stream_sync_timeout",
        SYMPTOM,
        False,
        "the runtime reported a stream synchronisation timeout (507046)",
        "507046",
        fatal=True,
        needles=("507046",),
    ),
    Signature(
        "EZ9999-aicore",
        r"\bEZ9999\b.*\b(aicore|aivec) error\b|\b(aicore|aivec) error\b.*\bEZ9999\b",
        "device_kernel_fault",
        CAUSE,
        False,
        "a kernel faulted on the NPU (AI Core/vector error): look at the operator named in the plog; "
        "op_debug_config oom can locate memory overwrites",
        "EZ9999",
        fatal=True,
        needles=("EZ9999",),
    ),
    Signature(
        "EL0004",
        r"\bEL0004\b",
        "device_out_of_memory",
        CAUSE,
        False,
        "device memory ran out: reduce the batch size or memory options",
        "EL0004",
        fatal=True,
        needles=("EL0004",),
    ),
    Signature(
        "out-of-memory",
        r"(?i:\bout of memory\b)",
        "device_out_of_memory",
        CAUSE,
        False,
        "memory ran out: reduce the batch size or memory options",
        needles=("out of memory",),
    ),
    Signature(
        "python-traceback",
        r"^Traceback \(most recent call last\):",
        "python_exception",
        CAUSE,
        False,
        "the script raised an exception: see the excerpt",
        needles=("Traceback",),
    ),
    Signature(
        "segfault",
        r"(?i:\bsegmentation fault\b)",
        "segfault",
        CAUSE,
        False,
        "the process crashed with a segmentation fault",
        needles=("segmentation fault",),
    ),
)

# "[ERROR] HCCL(12345,python3):2024-01-02-03:04:05.678.901 [...]": plogs stamp each line like this
_PLOG_TIME = re.compile(r"(\d{4})-(\d{2})-(\d{2})-(\d{2}):(\d{2}):(\d{2})\.(\d{3})\.(\d{3})")


def parse_plog_time(line: str) -> Optional[float]:
    """The plog timestamp of a line as epoch seconds (local time, as CANN writes it), or None."""
    match = _PLOG_TIME.search(line)
    if not match:
        return None
    y, mo, d, h, mi, s, ms, us = (int(g) for g in match.groups())
    try:
        base = time.mktime((y, mo, d, h, mi, s, 0, 0, -1))
    except (OverflowError, ValueError):
        return None
    return base + ms / 1000.0 + us / 1e6


class Matcher:
    """Finds the signatures lines carry. Lines come in batches and almost never match, so a batch
    is first checked as one string: for the literal needles of the built-in signatures (a plain
    substring search) and with the job's own patterns; only a batch that passes is looked at line
    by line (8 ranks x 100k lines: about 0.4 us a line instead of 10)."""

    def __init__(self, signatures: Sequence[Signature] = SIGNATURES) -> None:
        self.signatures = tuple(signatures)
        self._each = [(s, re.compile(s.pattern)) for s in self.signatures]
        # needles with no letters (a numeric code) are matched exactly: no lower-cased copy for them
        self._exact = _prefilter({n for s in self.signatures for n in s.needles if n != n.lower() or n.upper() == n})
        self._folded = _prefilter({n for s in self.signatures for n in s.needles if n == n.lower() and n.upper() != n})
        unfiltered = [s.pattern for s in self.signatures if not s.needles]
        self._unfiltered = re.compile("|".join("(?:%s)" % p for p in unfiltered), re.MULTILINE) if unfiltered else None

    def _may_match(self, text: str) -> bool:
        if any(_found(needle, text) for needle in self._exact):
            return True
        if self._folded:
            lowered = text.lower()
            if any(_found(needle, lowered) for needle in self._folded):
                return True
        return self._unfiltered is not None and self._unfiltered.search(text) is not None

    def match(self, line: str) -> Optional[Signature]:
        """The first signature (in catalog order) the line carries."""
        if not self._may_match(line):
            return None
        for signature, pattern in self._each:
            if pattern.search(line):
                return signature
        return None

    def scan(self, lines: Sequence[str], joined: Optional[str] = None) -> List[Tuple[int, Signature]]:
        """``(index, signature)`` for each line of a batch that carries one. ``joined``: the
        lines joined with newlines, when the caller has them already."""
        if not lines or not self._may_match("\n".join(lines) if joined is None else joined):
            return []
        found = []
        for index, line in enumerate(lines):
            signature = self.match(line)
            if signature is not None:
                found.append((index, signature))
        return found


Needle = Union[str, Pattern[str]]


def _prefilter(needles: Iterable[str]) -> Tuple[Needle, ...]:
    """Needles grouped by their first character: a group is one regular expression starting with
    that literal character, which the regex engine looks for as fast as ``in`` finds a string, so
    the eight E-codes cost one pass over the text instead of eight (measured: 4 ms instead of 59
    ms for 15 MB). A needle alone in its group stays a string."""
    groups: Dict[str, List[str]] = {}
    for needle in sorted(needles):
        groups.setdefault(needle[0], []).append(needle)
    return tuple(
        group[0]
        if len(group) == 1
        else re.compile(re.escape(first) + "(?:" + "|".join(re.escape(n[1:]) for n in group) + ")")
        for first, group in sorted(groups.items())
    )


def _found(needle: Needle, text: str) -> bool:
    return needle in text if isinstance(needle, str) else needle.search(text) is not None


def user_signatures(patterns: Iterable[dict]) -> List[Signature]:
    """Signatures from the YAML's monitor.patterns (already validated by the config layer)."""
    return [
        Signature(
            name=p["name"],
            pattern=p["pattern"],
            cls=p.get("class", p["name"]),
            kind=p.get("kind", CAUSE),
            retryable=bool(p.get("retryable", False)),
            hint=p.get("hint", "matched the job's own pattern"),
            code=p.get("code", ""),
        )
        for p in patterns
    ]
