"""Pick the root cause of a failed job from what every rank reported: the earliest *cause*, never
the ranks that only timed out waiting for it (their symptoms are ranked after any cause, even
when printed first on a faster host). Pure: events and results in, a RootCause out (diagnose/cause.py);
a fault of the hardware is diagnose/hardware.py's.
"""

from __future__ import annotations

from typing import Any, Callable, Dict, List, Mapping, Optional, Sequence, Tuple, TypeVar

from npulaunch.diagnose.cause import (
    RootCause,
    clock_text,
    first_findings,
    rank_groups,
    ranked_findings,
    ranks_word,
)
from npulaunch.diagnose.hang import hang_root_cause
from npulaunch.diagnose.hardware import hardware_cause
from npulaunch.diagnose.peers import elsewhere
from npulaunch.host.cann.codes import CAUSE, SYMPTOM, specificity
from npulaunch.host.cann.findings import GENERIC_PHRASES
from npulaunch.host.errorfile import written_at
from npulaunch.host.events import Event, EventKind, signature_label
from npulaunch.host.records import RankResult, RankState


def _exit_text(result: RankResult) -> str:
    if result.error:
        return result.error
    return f"killed by {result.signal}" if result.signal else f"exit {result.exit_code}"


def pick(
    results: Sequence[RankResult], events: Sequence[Event], hosts: Optional[Mapping[str, Sequence[int]]] = None
) -> Optional[RootCause]:
    """The root cause, or None when every rank succeeded and nothing was reported. A fault of the
    hardware (an NPU the health watch saw fail, a host lost) comes before what the ranks printed when it
    came first or struck the rank that failed first (hardware_cause). ``hosts``: every host of the job and
    its ranks (a node of a multi-node job has the results of its own ranks only)."""
    software = _software_cause(results, events, hosts or {})
    hardware = hardware_cause(results, events, software)
    return hardware or software


def _software_cause(
    results: Sequence[RankResult], events: Sequence[Event], hosts: Mapping[str, Sequence[int]]
) -> Optional[RootCause]:
    """The root cause among what the ranks printed and how they ended."""
    by_rank = {r.rank: r for r in results}
    ranked = ranked_findings(events)
    first = first_findings(events, ranked)
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
    if hang is not None:  # what ranks printed once the hang was seen comes of the stop it led to (a peer's
        # "Connection closed" when the stalled rank is stopped first), not of the stall
        symptoms = [s for s in symptoms if s[0] < hang.time]
    if candidates:
        _, rank, event = min(candidates, key=lambda c: (c[0], c[1]))
        why = "the earliest failure that is a cause"
    elif symptoms:
        left = _left_first(results, symptoms[0][0])
        said = sorted({signature_label(e.data) for _, _, e in symptoms if e is not None})
        waited = ranks_word(sorted(r for _, r, _ in symptoms))
        if left is not None:
            rank, event = left.rank, None
            why = (
                f"no rank reported a cause; {waited} reported {', '.join(said)} (waiting on a peer that went away), "
                f"after rank {rank} ended on its own"
            )
        else:
            _, rank, event = symptoms[0]
            why = f"no rank reported a cause; {waited} reported {', '.join(said)} (symptoms of waiting on a peer)"
            why += elsewhere([e for _, _, e in symptoms if e is not None], hosts, [r.rank for r in results])
            why += "; this is the earliest symptom"
    elif hang is not None:
        return hang_root_cause(hang, events, results, lambda root: rank_groups(results, first, root))
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
            LEFT_HINT if result.state is RankState.SUCCEEDED else "see the rank's log",
            False,
            why + f" (rank {rank} {_exit_text(result)} at {clock_text(result.end_time)})",
            rank_groups(results, first, rank),
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
        f"{clock_text(data['line_time'])}, {data['line_time_source']}, in {data['source']})",
        rank_groups(results, first, rank),
        kind=str(data.get("signature_kind") or CAUSE),
        codes=tuple(data.get("codes") or ()),
        detail=str(data.get("detail") or ""),
        retryable_why=str(data.get("retryable_why") or ""),
        code_info=data.get("code_info"),
    )


def _left_first(results: Sequence[RankResult], first_symptom: float) -> Optional[RankResult]:
    """The rank that ended on its own (code 0: its loop ended early, a branch that returned) before the
    others reported losing a peer: who they lost."""
    ended = [
        r
        for r in results
        if r.state is RankState.SUCCEEDED and r.end_time is not None and r.end_time <= first_symptom + PEER_SLACK_S
    ]
    return min(ended, key=lambda r: (r.end_time or 0.0, r.rank)) if ended else None


LEFT_HINT = (
    "the rank left the job while the others still waited for it in a collective: it ran fewer steps or batches "
    "than they did (uneven data shards, a different stop condition, a branch that returns early)"
)
PEER_SLACK_S = 1.0  # a symptom read this soon after a peer's exit may have been printed before it was reaped
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
