"""The root cause as data and words: ``RootCause`` (what diagnose/rootcause.py and diagnose/hardware.py
pick), the groups of the other ranks beside it, and how ranks and times are named in its messages.
Pure.
"""

from __future__ import annotations

import time
from dataclasses import dataclass
from typing import Any, Dict, List, Optional, Sequence, Tuple

from npulaunch.host.cann.codes import CAUSE, SYMPTOM
from npulaunch.host.events import Event, EventKind, signature_label
from npulaunch.host.ranges import ranges
from npulaunch.host.records import RankResult, RankState
from npulaunch.host.spec import HELPER_RANK, process_name


@dataclass(frozen=True)
class RankGroup:
    """Other ranks that ended the same way, e.g. ranks 0-2: ``EI0002, waiting on rank 5``."""

    ranks: Tuple[int, ...]
    what: str


@dataclass(frozen=True)
class RootCause:
    rank: int
    host: str
    device_id: int
    cls: str  # failure class: device_kernel_fault, hccl_exec_timeout, exit, signal, hang, ...
    code: str  # CANN error code, or "exit 3" / "SIGSEGV" / ""
    time: Optional[float]
    time_source: str  # "plog timestamp", "read time", "exit"
    first_line: str
    excerpt: Tuple[str, ...]
    hint: str
    retryable: bool
    why: str
    others: Tuple[RankGroup, ...] = ()
    kind: str = CAUSE  # CAUSE, or SYMPTOM when no rank reported a cause
    codes: Tuple[str, ...] = ()  # the other codes of the message
    detail: str = ""  # what the message says beyond its code: the call, the operator, the device, the reason
    retryable_why: str = ""  # where Huawei's text says a retry helps
    code_info: Optional[Dict[str, Any]] = None  # the catalog's facts of the code (host/cann/codes.py summary)
    # what the rank raised, from its error file (host/errorfile.py: exception, message, where, traceback, ...)
    raised: Optional[Dict[str, Any]] = None

    @property
    def label(self) -> str:
        return failure_label(self.code, self.cls)


def failure_label(code: str, cls: str) -> str:
    """How a failure is named in one word: its code (``EZ9999``, ``SIGSEGV``, ``exit 3``), else its
    class (``hang``)."""
    return code or cls


def clock_text(epoch: Optional[float]) -> str:
    if epoch is None:
        return "?"
    return time.strftime("%H:%M:%S", time.localtime(epoch)) + ("%.3f" % (epoch % 1))[1:]


def ranked_findings(events: Sequence[Event]) -> List[Event]:
    """The signature matches, earliest line first."""
    return sorted(
        (e for e in events if e.kind is EventKind.SIGNATURE_MATCHED), key=lambda e: e.data.get("line_time", e.time)
    )


def first_findings(events: Sequence[Event], ranked: Optional[List[Event]] = None) -> Dict[int, Event]:
    """Each rank's first finding."""
    first: Dict[int, Event] = {}
    for matched in ranked_findings(events) if ranked is None else ranked:
        first.setdefault(matched.rank if matched.rank is not None else -1, matched)
    return first


def rank_groups(results: Sequence[RankResult], first: Dict[int, Event], root: int) -> Tuple[RankGroup, ...]:
    groups: Dict[str, List[int]] = {}
    for result in results:
        if result.rank == root:
            continue
        event = first.get(result.rank)
        raised = str((result.raised or {}).get("exception") or "")
        if event is not None and event.data.get("signature_kind") == SYMPTOM:
            what = f"{signature_label(event.data)}, waiting on rank {root}"
        elif raised and (event is None or event.data.get("signature") == "python-traceback"):
            what = f"raised {raised}"
        elif event is not None:
            what = f"{signature_label(event.data)} ({event.data['cls']})"
        elif result.state is RankState.STOPPED:
            what = "stopped by npulaunch"
        else:
            what = result.state.value
        groups.setdefault(what, []).append(result.rank)
    return tuple(RankGroup(tuple(ranks), what) for what, ranks in sorted(groups.items(), key=lambda g: g[1][0]))


def ranks_word(ranks: Sequence[int]) -> str:
    """``rank 3`` or ``ranks 0-2, 5`` (and ``the scheduler``, a framework's process that is no rank)."""
    real = [rank for rank in ranks if rank != HELPER_RANK]
    words = [f"rank {real[0]}" if len(real) == 1 else f"ranks {rank_ranges(real)}"] if real else []
    if len(real) < len(ranks):
        words.append(process_name(HELPER_RANK))
    return " and ".join(words)


def rank_ranges(ranks: Sequence[int]) -> str:
    """``[0, 1, 2, 5, 7, 8]`` -> ``0-2, 5, 7-8``."""
    return ranges(ranks)
