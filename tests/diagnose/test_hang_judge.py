"""Which rank a hung job waits for, judged from each rank's evidence (diagnose/hang.py), by value: stacks first,
collectives that do not match, a rank that already left, the process table's odd one out, and silence only
when nothing tells the ranks apart; a rank still printing is never blamed. Each verdict names its evidence."""

from __future__ import annotations

from typing import Any, Dict, List, Optional

from npulaunch.diagnose.hang import hang_root_cause, judge_hang
from npulaunch.host.events import Event, EventKind
from npulaunch.host.records import RankResult, RankState


def hang(ranks: List[int], host: str = "h1", whole: bool = True) -> Event:
    silent = {str(r): 30.0 + r for r in ranks}
    data = {"ranks": ranks, "phase": "steady", "whole_job": whole, "silent_s": silent, "limit_s": 30.0}
    return Event(EventKind.HANG_DETECTED, "j", host, None, data, time=100.0)


def waiting(what: str = "torch.distributed.all_reduce", **more: Any) -> Dict[str, Any]:
    said = {
        "evidence": "py-spy",
        "kind": "waiting",
        "place": "waiting",
        "what": what,
        "at": f"{what} (t.py:9, in step)",
    }
    return {**said, "host": "h1", **more}


def stalled(at: str = "its own code (t.py:5, in load)", **more: Any) -> Dict[str, Any]:
    said = {"evidence": "py-spy", "kind": "stalled", "place": "stalled", "what": "its own code", "at": at}
    return {
        **said,
        "host": "h1",
        "stack": ["main (t.py:20)", "load (t.py:5)"],
        "file": "rank-x/stacks-py-spy.txt",
        **more,
    }


def table(state: str = "S", wchan: str = "futex_do_wait", cpu: float = 0.0) -> Dict[str, Any]:
    return {"evidence": "process table", "kind": "", "state": state, "wchan": wchan, "cpu": cpu, "host": "h1"}


def results(n: int, succeeded: Optional[Dict[int, float]] = None) -> List[RankResult]:
    done = succeeded or {}
    return [
        RankResult(
            r,
            "h1",
            r,
            100 + r,
            RankState.SUCCEEDED if r in done else RankState.STOPPED,
            1.0,
            done.get(r, 101.0),
            0,
            None,
        )
        for r in range(n)
    ]


def test_the_rank_outside_any_collective_is_the_cause_not_the_one_silent_longest() -> None:
    stood = {0: waiting(), 1: stalled(), 2: waiting(), 3: waiting()}
    verdict = judge_hang([hang([0, 1, 2, 3])], stood, results(4))
    assert verdict.rank == 1  # rank 3 was silent longest
    assert verdict.line == "hung in its own code at t.py:5, in load"
    assert (
        "ranks 0, 2-3 wait in torch.distributed.all_reduce" in verdict.why
        and "evidence: stacks by py-spy" in verdict.why
    )
    assert verdict.excerpt == ("main (t.py:20)", "load (t.py:5)")
    assert [(g.ranks, g.what) for g in verdict.others] == [
        ((0, 2, 3), "waiting in torch.distributed.all_reduce, for rank 1")
    ]


def test_a_rank_busy_inside_backward_is_stalled_and_an_idle_one_waits() -> None:
    stood = {0: waiting("backward"), 1: stalled(place="may_wait", at="backward (t.py:30, in step)", cpu=0.97)}
    verdict = judge_hang([hang([0, 1])], stood, results(2))
    assert verdict.rank == 1 and "busy in backward (t.py:30, in step) (a CPU 97% used)" in verdict.why


def test_a_rank_in_its_own_code_goes_before_one_busy_in_a_framework_call() -> None:
    stood = {0: stalled(place="may_wait", at="backward (t.py:30, in step)", cpu=0.9), 2: stalled()}
    assert judge_hang([hang([0, 2])], stood, results(3)).rank == 2


def test_collectives_that_do_not_match_name_the_odd_one() -> None:
    stood = {0: waiting(), 1: waiting("torch.distributed.barrier"), 2: waiting(), 3: waiting()}
    verdict = judge_hang([hang([0, 1, 2, 3])], stood, results(4))
    assert verdict.rank == 1 and "the ranks called different collectives" in verdict.why


def test_when_all_wait_the_rank_that_already_left_is_named() -> None:
    stood = {0: waiting(), 1: waiting(), 3: waiting()}
    verdict = judge_hang([hang([0, 1, 3])], stood, results(4, succeeded={2: 50.0}))
    assert verdict.rank == 2 and verdict.line == "exited with code 0 while the others wait for it"


def test_without_stacks_a_stopped_rank_or_the_odd_kernel_wait_is_named() -> None:
    stood = {0: table(), 1: table(), 2: table("T", ""), 3: table()}
    verdict = judge_hang([hang([0, 1, 2, 3])], stood, results(4))
    assert verdict.rank == 2 and "stopped (SIGSTOP or a debugger)" in verdict.why
    assert "the process table" in verdict.why
    stood = {0: table(), 1: table(wchan="hrtimer_nanosleep"), 2: table(), 3: table()}
    assert judge_hang([hang([0, 1, 2, 3])], stood, results(4)).rank == 1
    stood = {0: table(), 1: table(), 2: table(cpu=0.99, state="R", wchan=""), 3: table()}
    verdict = judge_hang([hang([0, 1, 2, 3])], stood, results(4))
    assert verdict.rank == 2 and "busy on a CPU" in verdict.why


def test_when_nothing_tells_the_ranks_apart_the_silence_is_named_and_said() -> None:
    stood = {0: table(), 1: table(), 2: table(), 3: table()}
    verdict = judge_hang([hang([0, 1, 2, 3])], stood, results(4))
    assert verdict.rank == 3 and "do not tell the ranks apart" in verdict.why and "silent longest" in verdict.why
    verdict = judge_hang([hang([0, 1])], {0: waiting(), 1: waiting()}, results(2))
    assert "the rank they wait for is not among them" in verdict.why


def test_a_rank_still_printing_is_neither_the_stall_nor_waiting() -> None:
    # rank 1 is silent; ranks 0 and 2 print (their stacks are in their own code, between two prints)
    stood = {0: stalled(), 1: stalled(at="its own code (t.py:7, in hang)"), 2: stalled()}
    verdict = judge_hang([hang([1], whole=False)], stood, results(3))
    assert verdict.rank == 1 and "t.py:7" in verdict.line


def test_the_hang_as_the_root_cause_carries_the_verdict() -> None:
    stacks = Event(EventKind.STACKS_DUMPED, "j", "h1", None, {"files": [], "ranks": {"0": waiting(), "1": stalled()}})
    cause = hang_root_cause(hang([0, 1]), [stacks], results(2), lambda root: ())
    assert (cause.rank, cause.cls, cause.first_line) == (1, "hang", "hung in its own code at t.py:5, in load")


def test_a_peers_closed_connection_after_the_hang_is_the_stops_doing_not_the_cause() -> None:
    # rank 1 stalls; the hang is seen at t=100 and the job stopped: rank 1 goes first, and rank 0's gloo then
    # prints "Connection closed by peer" (a symptom) at t=101. Read before the hang, it would be the earliest
    # symptom; after it, it is what the stop did, and the hang names rank 1
    from npulaunch.diagnose.rootcause import pick

    def closed(line_time: float) -> Event:
        data = {"signature": "gloo-peer-closed", "cls": "peer_gone", "line": "Connection closed by peer"}
        data.update(signature_kind="symptom", line_time=line_time, line_time_source="read time", hint="h")
        data.update(source="stdout", retryable=False)
        return Event(EventKind.SIGNATURE_MATCHED, "j", "h1", 0, data, time=line_time)

    stacks = Event(EventKind.STACKS_DUMPED, "j", "h1", None, {"files": [], "ranks": {"0": waiting(), "1": stalled()}})
    after = pick(results(2), [hang([0, 1]), stacks, closed(101.0)])
    assert after is not None and (after.rank, after.cls) == (1, "hang"), after
    before = pick(results(2), [hang([0, 1]), stacks, closed(99.0)])  # printed before the hang was seen: evidence
    assert before is not None and (before.rank, before.cls) == (0, "peer_gone"), before
