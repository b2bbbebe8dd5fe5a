"""Which rank a hung job waits for, from evidence, not silence. Every rank of a synchronous job goes
silent in a hang; the ones in a collective or a store wait are waiting for someone, and the rank
anywhere else (its own code, a data loader, a device synchronize) is the stall (host/waits.py reads each
rank's stack where it is taken). Without stacks, the process table decides where it can: a stopped rank,
one stuck in the kernel, or the one rank whose main thread does something different from all the
others. Only when nothing tells them apart is the rank silent longest named, and the report says so.
Pure: the hang's events in, a RootCause out.
"""

from __future__ import annotations

from collections import Counter
from dataclasses import dataclass
from typing import Any, Callable, Dict, List, Mapping, Optional, Sequence, Tuple

from npulaunch.diagnose.cause import RankGroup, RootCause, ranks_word
from npulaunch.host.events import Event, EventKind
from npulaunch.host.records import RankResult, RankState
from npulaunch.host.spec import process_name

HANG_HINT = "monitor.hang_timeout_s sets how long a silence is a hang"


@dataclass(frozen=True)
class Verdict:
    rank: int
    line: str  # what the rank is doing, for the report's first line
    why: str  # how it was decided, with the evidence named
    hint: str
    excerpt: Tuple[str, ...]  # its stack, where one was taken
    others: Tuple[RankGroup, ...]


def where_ranks_stood(events: Sequence[Event]) -> Dict[int, Dict[str, Any]]:
    """Each dumped rank's evidence (host/agent/stacks.py's ``read``), from every host's STACKS_DUMPED."""
    found: Dict[int, Dict[str, Any]] = {}
    for event in events:
        if event.kind is EventKind.STACKS_DUMPED:
            for rank, said in (event.data.get("ranks") or {}).items():
                found[int(rank)] = dict(said, host=event.host)
    return found


def judge_hang(hangs: Sequence[Event], stood: Mapping[int, Dict[str, Any]], results: Sequence[RankResult]) -> Verdict:
    """The rank the others wait for, and why (``hangs``: every host's HANG_DETECTED, the first one first)."""
    hang = hangs[0]
    silent = {int(k): float(v) for k, v in (hang.data.get("silent_s") or {}).items()}
    scope = (
        "the whole job stopped printing"
        if hang.data.get("whole_job")
        else f"{ranks_word(sorted(silent))} stopped printing"
    )
    limit = f"({hang.data.get('phase')} phase, limit {hang.data.get('limit_s')} s)"
    lead = f"no rank failed or reported an error; {scope} {limit}"
    stood = _silent_only(stood, hangs)
    for decide in (_by_stacks, _by_mismatch, _by_early_exit, _by_process_table):
        verdict = decide(stood, results, lead)
        if verdict is not None:
            return verdict
    return _by_silence(stood, results, lead, silent)


def _silent_only(stood: Mapping[int, Dict[str, Any]], hangs: Sequence[Event]) -> Dict[int, Dict[str, Any]]:
    """The ranks the hang is about: those a host's watchdog found silent; a rank still printing is neither the
    stall nor waiting for it (a host that reported no hang is not known to have any printing rank)."""
    listed = {int(rank) for hang in hangs for rank in hang.data.get("ranks") or ()}
    watched = {hang.host for hang in hangs}
    return {r: said for r, said in stood.items() if r in listed or said.get("host") not in watched}


def _by_stacks(stood: Mapping[int, Dict[str, Any]], results: Sequence[RankResult], lead: str) -> Optional[Verdict]:
    """A rank whose stack is outside any collective, while the others wait in one."""
    stalled = [r for r in sorted(stood) if stood[r].get("kind") == "stalled"]
    if not stalled:
        return None
    # a rank in its own code, a data loader, a device sync before one busy inside a framework call
    rank = min(stalled, key=lambda r: (stood[r].get("place") != "stalled", r))
    said = stood[rank]
    waiting = [r for r in sorted(stood) if stood[r].get("kind") == "waiting"]
    why = f"{lead}; {process_name(rank)} is {_doing(said)}"
    if waiting:
        why += (
            f", while {ranks_word(waiting)} wait{'s' if len(waiting) == 1 else ''} in {_common_place(stood, waiting)}"
        )
    also = [r for r in stalled if r != rank]
    if also:
        why += f"; {ranks_word(also)} {'is' if len(also) == 1 else 'are'} outside any collective too"
    why += f" ({_evidence(stood, [rank] + waiting)})"
    hint = (
        f"{process_name(rank)} stopped making progress {_doing(said)}; the others wait for it. Its stack: "
        f"{said.get('file') or 'not taken'}; {HANG_HINT}"
    )
    excerpt = tuple(said.get("stack") or ())
    return Verdict(rank, f"hung {_doing(said)}", why, hint, excerpt, _groups(stood, rank))


def _by_mismatch(stood: Mapping[int, Dict[str, Any]], results: Sequence[RankResult], lead: str) -> Optional[Verdict]:
    """Every rank waits, but not in the same collective: the few in another one called it out of turn."""
    waiting = {r: str(stood[r].get("what")) for r in stood if stood[r].get("kind") == "waiting"}
    if len(waiting) < 3 or len(waiting) < len(stood):
        return None
    counts = Counter(waiting.values())
    if len(counts) < 2:
        return None
    (most, n_most), *rest = counts.most_common()
    fewest = min(n for _, n in rest)
    odd = [what for what, n in rest if n == fewest]
    if len(odd) != 1 or fewest >= n_most:
        return None
    ranks = sorted(r for r, what in waiting.items() if what == odd[0])
    rank = ranks[0]
    majority = sorted(r for r, what in waiting.items() if what == most)
    why = (
        f"{lead}; {ranks_word(ranks)} wait{'s' if len(ranks) == 1 else ''} in {odd[0]} while "
        f"{ranks_word(majority)} wait in {most}: the ranks called different collectives "
        f"({_evidence(stood, ranks + majority)})"
    )
    hint = (
        f"{process_name(rank)} called {odd[0]} where the others called {most} ({stood[rank].get('at')}): a branch "
        f"that not every rank takes, or a different number of steps; {HANG_HINT}"
    )
    excerpt = tuple(stood[rank].get("stack") or ())
    line = f"hung in {odd[0]} ({stood[rank].get('at')}), where the others wait in {most}"
    return Verdict(rank, line, why, hint, excerpt, _groups(stood, rank))


def _by_early_exit(stood: Mapping[int, Dict[str, Any]], results: Sequence[RankResult], lead: str) -> Optional[Verdict]:
    """Every rank still running waits; a rank that already ended (with code 0) is who they wait for."""
    if not stood or any(said.get("kind") != "waiting" for said in stood.values()):
        return None
    ended = sorted(
        (r for r in results if r.state is RankState.SUCCEEDED and r.rank not in stood and r.end_time is not None),
        key=lambda r: (r.end_time, r.rank),
    )
    if not ended:
        return None
    first = ended[0]
    waiting = sorted(stood)
    why = (
        f"{lead}; {process_name(first.rank)} exited with code 0 while {ranks_word(waiting)} still wait in "
        f"{_common_place(stood, waiting)} ({_evidence(stood, waiting)})"
    )
    hint = (
        f"{process_name(first.rank)} left the job before the others: it ran fewer steps or batches than they "
        f"did (uneven data, a different stop condition); {HANG_HINT}"
    )
    line = "exited with code 0 while the others wait for it"
    return Verdict(first.rank, line, why, hint, (), _groups(stood, first.rank))


def _by_process_table(
    stood: Mapping[int, Dict[str, Any]], results: Sequence[RankResult], lead: str
) -> Optional[Verdict]:
    """Among the ranks without a stack: one stopped (T) or stuck in the kernel (D), else the one whose main
    thread does what none of the others does (busy while they sleep, another kernel wait), else the only
    one without a stack when every rank with one waits."""
    unknown = {r: said for r, said in stood.items() if not said.get("kind")}
    if not unknown or any(said.get("kind") == "stalled" for said in stood.values()):
        return None
    marks = {r: _mark(said) for r, said in unknown.items() if said.get("state")}
    odd = sorted(r for r, mark in marks.items() if mark.startswith(("stopped", "in uninterruptible")))
    if not odd and len(marks) >= 3:
        (common, n_common), *rest = Counter(marks.values()).most_common()
        lonely = [mark for mark, n in rest if n == 1]
        if len(lonely) == 1 and n_common >= 2:
            odd = [r for r, mark in marks.items() if mark == lonely[0]]
    waiting = sorted(r for r in stood if stood[r].get("kind") == "waiting")
    if not odd and waiting and len(marks) == 1:
        odd = list(marks)
    if not odd:
        return None
    rank = odd[0]
    why = f"{lead}; {process_name(rank)}'s main thread is {marks[rank]}"
    others = sorted(r for r in marks if r != rank)
    if others:
        common = Counter(marks[r] for r in others).most_common(1)[0][0]
        why += f", {ranks_word(others)}'s {'is' if len(others) == 1 else 'are'} {common}"
    if waiting:
        why += f"; {ranks_word(waiting)} wait in {_common_place(stood, waiting)} ({_evidence(stood, waiting)})"
    why += f" (the process table for {ranks_word(sorted(marks))}: no Python stack could be taken)"
    hint = (
        f"{process_name(rank)} is the odd one out of the job; with py-spy on the hosts (pip install py-spy) every "
        f"rank's stack is read; {HANG_HINT}"
    )
    return Verdict(rank, f"hung: its main thread is {marks[rank]}", why, hint, (), _groups(stood, rank))


def _by_silence(
    stood: Mapping[int, Dict[str, Any]], results: Sequence[RankResult], lead: str, silent: Mapping[int, float]
) -> Verdict:
    ranks = sorted(silent) or sorted(r.rank for r in results)
    rank = max(ranks, key=lambda r: (silent.get(r, 0.0), -r))
    if stood and all(said.get("kind") == "waiting" for said in stood.values()):
        what = (
            f"every rank dumped waits in {_common_place(stood, sorted(stood))}: the rank they wait for is not among "
            f"them (on a host that did not answer, or the network between them); {process_name(rank)} has been "
            f"silent longest ({silent.get(rank, 0.0):.1f} s)"
        )
    elif stood:
        what = (
            f"the stacks and the process table do not tell the ranks apart; {process_name(rank)} has been silent "
            f"longest ({silent.get(rank, 0.0):.1f} s)"
        )
    else:
        what = (
            f"no rank's stack or process could be read; {process_name(rank)} has been silent longest "
            f"({silent.get(rank, 0.0):.1f} s)"
        )
    hint = "the job made no progress: look at the last lines of the silent ranks"
    files = [str(said["file"]) for said in stood.values() if said.get("file")]
    hint += f" and their stacks ({', '.join(files[:4])}{', ...' if len(files) > 4 else ''})" if files else ""
    return Verdict(rank, "", f"{lead}; {what}", f"{hint}; {HANG_HINT}", (), _groups(stood, rank))


def _doing(said: Mapping[str, Any]) -> str:
    if said.get("place") == "may_wait":
        return f"busy in {said.get('at')} (a CPU {float(said.get('cpu') or 0):.0%} used)"
    if said.get("what") == "its own code":
        return f"in its own code at {_frame_of(said)}"
    return f"in {said.get('at')}"


def _frame_of(said: Mapping[str, Any]) -> str:
    at = str(said.get("at") or "")
    return at[at.find("(") + 1 : -1] if at.endswith(")") and "(" in at else at


def _common_place(stood: Mapping[int, Dict[str, Any]], ranks: Sequence[int]) -> str:
    places = Counter(str(stood[r].get("what") or "a collective") for r in ranks)
    if len(places) == 1:
        return next(iter(places))
    return " / ".join(what for what, _ in places.most_common(3))


def _evidence(stood: Mapping[int, Dict[str, Any]], ranks: Sequence[int]) -> str:
    """Which evidence decided: ``stacks by py-spy``, ``stacks by faulthandler and py-spy``."""
    kinds = sorted({str(stood[r].get("evidence")) for r in ranks if r in stood})
    stacks = [kind for kind in kinds if kind != "process table"]
    text = "stacks by " + " and ".join(stacks) if stacks else "the process table"
    if stacks and "process table" in kinds:
        text += "; the process table for ranks without a stack"
    return "evidence: " + text


def _mark(said: Mapping[str, Any]) -> str:
    """What the process table says of a rank's main thread, in words."""
    state = said.get("state")
    wchan = said.get("wchan") or ""
    if state == "T" or state == "t":
        return "stopped (SIGSTOP or a debugger)"
    if state == "D":
        return f"in uninterruptible sleep ({wchan or 'in the kernel'}: a driver, a device, a file system)"
    if float(said.get("cpu") or 0.0) >= 0.5:
        return "busy on a CPU"
    return f"asleep in {wchan}" if wchan else "asleep"


def _groups(stood: Mapping[int, Dict[str, Any]], root: int) -> Tuple[RankGroup, ...]:
    groups: Dict[str, List[int]] = {}
    for rank, said in sorted(stood.items()):
        if rank == root:
            continue
        if said.get("kind") == "waiting":
            what = f"waiting in {said.get('what')}, for {process_name(root)}"
        elif said.get("kind") == "stalled":
            what = f"also stalled in {said.get('what')}"
        else:
            what = f"main thread {_mark(said)}"
        groups.setdefault(what, []).append(rank)
    return tuple(RankGroup(tuple(ranks), what) for what, ranks in sorted(groups.items(), key=lambda g: g[1][0]))


def hang_root_cause(
    hang: Event, events: Sequence[Event], results: Sequence[RankResult], groups: Callable[[int], Tuple[RankGroup, ...]]
) -> RootCause:
    """The hang as the job's root cause; ``groups``: the other ranks' groups when no stack was read."""
    by_rank = {r.rank: r for r in results}
    hangs = [hang] + [e for e in events if e.kind is EventKind.HANG_DETECTED and e is not hang]
    verdict = judge_hang(hangs, where_ranks_stood(events), results)
    result = by_rank.get(verdict.rank) or next(iter(by_rank.values()))
    others = verdict.others or groups(verdict.rank)
    return RootCause(
        verdict.rank,
        result.host,
        result.device_id,
        "hang",
        "",
        hang.time,
        "watchdog",
        verdict.line,
        verdict.excerpt,
        verdict.hint,
        False,
        verdict.why,
        others,
    )
