"""Pick the root cause of a failed job from what every rank reported: the earliest *cause*, never
the ranks that only timed out waiting for it (their symptoms are ranked after any cause, even
when printed first on a faster host). Pure: events and results in, a RootCause out.
"""

from __future__ import annotations

import time
from dataclasses import dataclass
from typing import Any, Callable, Dict, List, Optional, Sequence, Tuple, TypeVar

from npulaunch.host.cann.codes import CAUSE, SYMPTOM, specificity
from npulaunch.host.cann.findings import GENERIC_PHRASES
from npulaunch.host.errorfile import written_at
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


def _clock_text(epoch: Optional[float]) -> str:
    if epoch is None:
        return "?"
    return time.strftime("%H:%M:%S", time.localtime(epoch)) + ("%.3f" % (epoch % 1))[1:]


def _exit_text(result: RankResult) -> str:
    if result.error:
        return result.error
    return f"killed by {result.signal}" if result.signal else f"exit {result.exit_code}"


def pick(results: Sequence[RankResult], events: Sequence[Event]) -> Optional[RootCause]:
    """The root cause, or None when every rank succeeded and nothing was reported. A fault of the
    hardware (an NPU the health watch saw fail, a host lost) comes before what the ranks printed when it
    came first or struck the rank that failed first (hardware_cause)."""
    software = _software_cause(results, events)
    hardware = hardware_cause(results, events, software)
    return hardware or software


NPU_FAULT = "npu_fault"  # the failure class of a fault the NPU health watch saw (host/health/watch.py)
HOST_LOST = "host_lost"  # a host whose agent went away (SSH connection closed, host unreachable)


def hardware_cause(
    results: Sequence[RankResult], events: Sequence[Event], software: Optional[RootCause]
) -> Optional[RootCause]:
    """The earliest fault of the hardware, when it is the root cause: an NPU_HEALTH event whose action is
    "reschedule" on an NPU the job uses, or a lost agent (AGENT_LOST). It is, when it happened before the
    first failure the ranks reported (or there is none), or when it struck that failure's rank: its NPU
    (same host and device) or its host. A rank failing on a faulty NPU failed because of the NPU."""
    faults = [e for e in events if _is_hardware(e)]
    if not faults:
        return None
    by_rank = {r.rank: r for r in results}
    chosen = None
    for event in sorted(faults, key=lambda e: e.time):
        symptom = software is not None and software.kind == SYMPTOM  # a symptom ranks after any cause
        if software is None or software.time is None or symptom or event.time <= software.time:
            chosen = event
            break
        if _struck(event, software):
            chosen = event
            break
    if chosen is None:
        return None
    ranks = [r for r in _ranks_of(chosen, results) if r in by_rank]
    rank = ranks[0] if ranks else min(by_rank) if by_rank else 0
    result = by_rank.get(rank)
    why = "a hardware fault"
    if software is not None:
        why += (
            f" struck rank {software.rank}, the first to fail ({software.label})"
            if _struck(chosen, software)
            else f" came before the first failure the ranks reported (rank {software.rank}, {software.label})"
        )
    others = _others(results, _first_findings(events), rank)
    if chosen.kind is EventKind.AGENT_LOST:
        status = chosen.data.get("exit_status")
        line = f"lost the agent on {chosen.host}" + (f" (exit status {status})" if status is not None else "")
        if chosen.data.get("why"):
            line += f": {chosen.data['why']}"
        return RootCause(
            rank,
            chosen.host,
            result.device_id if result else -1,
            HOST_LOST,
            "",
            chosen.time,
            "launcher",
            line,
            (line,),
            "the host, its network or its SSH connection went away; with spares npulaunch continues without it",
            False,
            why + f" ({line} at {_clock_text(chosen.time)})",
            others,
        )
    data = chosen.data
    codes = tuple(str(c) for c in data.get("codes") or ())
    levels = data.get("levels") or {}
    level = str(data.get("level") or "")
    code = next((c for c in codes if levels.get(c) == level), codes[0] if codes else "")
    line = f"npu-smi: {chosen.host} NPU {data.get('device')}: health {data.get('health')}"
    if codes:
        line += f", error codes {' '.join(codes)}"
    if data.get("nic") == "DOWN":
        line += ", NIC link DOWN"
    detail = str(data.get("info") or "")
    return RootCause(
        rank,
        chosen.host,
        int(data.get("device", result.device_id if result else -1)),
        NPU_FAULT,
        code,
        chosen.time,
        "health watch",
        line,
        (line,),
        "the NPU reported a fault that MindCluster handles by isolating the chip and rescheduling the job; "
        "with spare NPUs or hosts npulaunch does the same (recovery)",
        False,
        why + f" ({line} at {_clock_text(chosen.time)})",
        others,
        codes=tuple(c for c in codes if c != code),
        detail=detail,
        code_info=_fault_info(code, level),
    )


def _fault_info(code: str, level: str) -> Dict[str, Any]:
    """The catalog's facts of a fault code (MindCluster's level first: what the watch judged by)."""
    from npulaunch.host.cann.lookup import describe

    info = describe(code) if code else None
    facts: Dict[str, Any] = info.summary() if info is not None else {"family": "fault", "known": False}
    facts["level"] = level or facts.get("level")
    return facts


def _findings(events: Sequence[Event]) -> List[Event]:
    """The signature matches, earliest line first."""
    return sorted(
        (e for e in events if e.kind is EventKind.SIGNATURE_MATCHED), key=lambda e: e.data.get("line_time", e.time)
    )


def _first_findings(events: Sequence[Event], ranked: Optional[List[Event]] = None) -> Dict[int, Event]:
    """Each rank's first finding."""
    first: Dict[int, Event] = {}
    for matched in _findings(events) if ranked is None else ranked:
        first.setdefault(matched.rank if matched.rank is not None else -1, matched)
    return first


def _is_hardware(event: Event) -> bool:
    if event.kind is EventKind.AGENT_LOST:
        return True
    return event.kind is EventKind.NPU_HEALTH and event.data.get("action") == "reschedule"


def _struck(event: Event, cause: RootCause) -> bool:
    if event.host != cause.host:
        return False
    return event.kind is EventKind.AGENT_LOST or event.data.get("device") == cause.device_id


def _ranks_of(event: Event, results: Sequence[RankResult]) -> List[int]:
    if event.kind is EventKind.NPU_HEALTH and event.data.get("ranks"):
        return sorted(int(r) for r in event.data["ranks"])
    device = event.data.get("device") if event.kind is EventKind.NPU_HEALTH else None
    return sorted(r.rank for r in results if r.host == event.host and (device is None or r.device_id == device))


def _software_cause(results: Sequence[RankResult], events: Sequence[Event]) -> Optional[RootCause]:
    """The root cause among what the ranks printed and how they ended."""
    by_rank = {r.rank: r for r in results}
    ranked = _findings(events)
    first = _first_findings(events, ranked)
    candidates: List[Tuple[float, int, Optional[Event]]] = []  # (time, rank, its first cause or None)
    for rank, matched in first.items():
        if matched.data.get("signature_kind") == CAUSE:
            # a rank printed its lines before it exited: when a line was only read after the exit
            # (a backlog, read once the job was being stopped), the exit bounds when it was printed
            # (and so does the moment it raised, when its error file says: read times of two ranks' tracebacks
            # read in the same loop turn do not order them)
            ended = by_rank[rank].end_time if rank in by_rank else None
            raised = written_at(by_rank[rank].raised) if rank in by_rank else None
            when = min(t for t in (matched.data["line_time"], ended, raised) if t is not None)
            candidates.append((when, rank, matched))
    for result in results:
        failed = result.state in (RankState.FAILED, RankState.SPAWN_FAILED)
        if failed and result.rank not in first:
            raised = written_at(result.raised)
            ended = result.end_time or 0.0
            candidates.append((ended if raised is None else min(ended, raised), result.rank, None))
    symptoms: List[Tuple[float, int, Optional[Event]]] = sorted(
        ((e.data["line_time"], rank, e) for rank, e in first.items() if e.data.get("signature_kind") == SYMPTOM),
        key=lambda s: (s[0], s[1]),
    )
    hang = next((e for e in events if e.kind is EventKind.HANG_DETECTED), None)
    if candidates:
        _, rank, event = min(candidates, key=lambda c: (c[0], c[1]))
        why = "the earliest failure that is a cause"
    elif symptoms:
        _, rank, event = symptoms[0]
        why = "no rank reported a cause; this is the earliest symptom"
    elif hang is not None:
        return _hang_cause(by_rank, hang, first)
    else:
        return None
    result = by_rank[rank]
    waiting = sorted(r for r, e in first.items() if e.data.get("signature_kind") == SYMPTOM and r != rank)
    if waiting and candidates:
        codes = sorted({signature_label(first[r].data) for r in waiting})
        why += f"; {ranks_word(waiting)} reported {', '.join(codes)} (symptoms of waiting), "
        why += "whatever the order they were printed in"
    if event is None:
        return RootCause(
            rank,
            result.host,
            result.device_id,
            "signal" if result.signal else "exit",
            result.signal or f"exit {result.exit_code}",
            result.end_time,
            "exit",
            _exit_text(result),
            (),
            "see the rank's log",
            False,
            why + f" (rank {rank} {_exit_text(result)} at {_clock_text(result.end_time)})",
            _others(results, first, rank),
        )
    better = same_failure(event, [e for e in ranked if e.rank == event.rank], _said)
    if better is not event:
        why += f"; rank {rank} printed {signature_label(event.data)} first, and {signature_label(better.data)} "
        why += "in the same failure says more"
        event = better
    data = event.data
    code = str(data.get("code") or "")
    if not code:  # a phrase (a plog's device error, a traceback): the rank's own code for it, where it printed one
        coded = next((e for e in ranked if e.rank == event.rank and _names_it(e, data)), None)
        if coded is not None:
            code = str(coded.data["code"])
            why += f"; rank {rank} printed {code} with it"
    return RootCause(
        rank,
        result.host,
        result.device_id,
        data["cls"],
        code or signature_label(data),
        data["line_time"],
        data["line_time_source"],
        data["line"],
        tuple(data.get("context", [])) + (data["line"],) + tuple(data.get("after", [])),
        data["hint"],
        bool(data.get("retryable")),
        why + f" (rank {rank}: {signature_label(data)} at "
        f"{_clock_text(data['line_time'])}, {data['line_time_source']}, in {data['source']})",
        _others(results, first, rank),
        kind=str(data.get("signature_kind") or CAUSE),
        codes=tuple(data.get("codes") or ()),
        detail=str(data.get("detail") or ""),
        retryable_why=str(data.get("retryable_why") or ""),
        code_info=data.get("code_info"),
    )


FAILURE_WINDOW_S = 5.0  # a rank's findings this close after its first are the same failure (MindSpore's log line,
# then the exception that carries CANN's block; torch_npu's traceback, then the plog's device error)


T = TypeVar("T")
Said = Tuple[str, str, Optional[float]]  # a finding's code, kind (cause or symptom) and time stamp


def same_failure(first: T, of_rank: Sequence[T], said: Callable[[T], Said]) -> T:
    """The finding that says most of the failure a rank's first finding begins: among the rank's causes
    printed within FAILURE_WINDOW_S after it (or whose time is not known), the one whose code is the most
    specific (a user CANN code, then an internal one, an ACL code, ...: host/cann/codes.py), the first of
    those. ``said`` reads a finding (an event here, a located finding in diagnose/offline.py)."""
    code, _, start = said(first)
    best, best_rank = first, specificity(code) if code else (99, 0)
    for other in of_rank:
        code, kind, stamp = said(other)
        if not code or kind != CAUSE:
            continue
        if stamp is not None and start is not None and not 0 <= stamp - start <= FAILURE_WINDOW_S:
            continue
        if specificity(code) < best_rank:
            best, best_rank = other, specificity(code)
    return best


def _said(event: Event) -> Said:
    return str(event.data.get("code") or ""), str(event.data.get("signature_kind") or ""), event.data["line_time"]


def _names_it(other: Event, phrase: Dict[str, Any]) -> bool:
    """Whether another finding of the phrase's rank gives the phrase its code: one with a code that is a
    cause (a device error's EZ9999), or any code for a traceback's or a crash's phrase."""
    if not other.data.get("code"):
        return False
    return other.data.get("signature_kind") == CAUSE or phrase.get("signature") in GENERIC_PHRASES


def _hang_cause(by_rank: Dict[int, RankResult], hang: Event, first: Dict[int, Event]) -> RootCause:
    silent = {int(k): v for k, v in hang.data.get("silent_s", {}).items()}
    rank = max(silent, key=lambda r: (silent[r], -r)) if silent else min(by_rank)
    result = by_rank[rank]
    scope = (
        "the whole job stopped printing"
        if hang.data.get("whole_job")
        else f"{ranks_word(sorted(silent))} stopped printing"
    )
    why = (
        f"no rank failed or reported an error; {scope} ({hang.data.get('phase')} phase, limit "
        f"{hang.data.get('limit_s')} s); rank {rank} has been silent longest ({silent.get(rank, 0):.1f} s)"
    )
    return RootCause(
        rank,
        result.host,
        result.device_id,
        "hang",
        "",
        hang.time,
        "watchdog",
        "",
        (),
        "the job made no progress: look at the last lines and stack dumps of the silent ranks; "
        "monitor.hang_timeout_s sets the limit",
        False,
        why,
        _others(list(by_rank.values()), first, rank),
    )


def _others(results: Sequence[RankResult], first: Dict[int, Event], root: int) -> Tuple[RankGroup, ...]:
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
