"""The straggler detector (diagnose/stragglers.py) on windows of rank paces: who is named, when, and who
never is (noise, a slowdown of every rank, a rank that waits for the others, steps whose wait is unknown)."""

from __future__ import annotations

import random
from typing import Any, Dict, List, Optional, Sequence

from npulaunch.diagnose.stragglers import StragglerDetector, describe, stragglers_of
from npulaunch.host.events import Event, EventKind

WINDOW_S = 5.0
STEPS = 50  # steps a window


def window(busy: Sequence[float], step: int, waits: Optional[Sequence[Optional[float]]] = None) -> Dict[str, Any]:
    """A RANK_PACE event's data for ranks 0..n-1 with these busy times; in lockstep a rank's wait is the
    slowest rank's busy time less its own (plus 1 ms for the collective itself), unless given."""
    slowest = max(busy)
    ranks = {}
    for rank, mine in enumerate(busy):
        wait = (slowest - mine + 0.001) if waits is None else waits[rank]
        ranks[str(rank)] = {"steps": STEPS, "step": step, "busy_s": mine, "wait_s": wait}
    return {"ranks": ranks, "window_s": WINDOW_S, "load1": 1.5, "cpus": 8}


def run(detector: StragglerDetector, windows: List[Dict[str, Any]]) -> List[Dict[str, Any]]:
    """Feed the windows 5 s apart; every change, with the window it came in."""
    changes = []
    for index, data in enumerate(windows):
        for change in detector.feed("h1", data, 1000.0 + WINDOW_S * (index + 1)):
            changes.append(dict(change, window=index))
    return changes


def detector(ranks: int = 4, factor: float = 1.2) -> StragglerDetector:
    return StragglerDetector({rank: ("h1", rank) for rank in range(ranks)}, factor)


def noisy(rng: random.Random, base: float, spread: float) -> float:
    return base * (1.0 + rng.uniform(-spread, spread))


def test_a_rank_twice_as_slow_is_named_in_two_windows_with_where_it_began() -> None:
    clean = [window([0.1, 0.1, 0.1, 0.1], 50 * (i + 1)) for i in range(6)]
    slow = [window([0.1, 0.1, 0.2, 0.1], 300 + 50 * (i + 1)) for i in range(6)]
    changes = run(detector(), clean + slow)
    assert [(c["rank"], c["state"], c["window"]) for c in changes] == [(2, "slow", 7)]
    named = changes[0]
    assert named["factor"] == 2.0 and named["since_step"] == 301  # the first step of the first slow window
    assert named["since"] == 1000.0 + WINDOW_S * 7 - WINDOW_S  # that window's start
    text = describe(named)
    assert text.startswith("rank 2 (host h1, NPU 2) 2.0× slower than the median since step 301: ")
    assert "busy 0.200 s a step against 0.100 s" in text and "host h1 load 1.5 on 8 CPUs" in text


def test_a_rank_just_at_the_factor_is_named_within_a_minute_and_one_under_it_never() -> None:
    at = run(detector(), [window([0.1, 0.1, 0.121, 0.1], 50 * (i + 1)) for i in range(12)])
    assert [c["rank"] for c in at] == [2] and at[0]["window"] <= 11  # 12 windows: 60 s
    under = run(detector(), [window([0.1, 0.1, 0.112, 0.1], 50 * (i + 1)) for i in range(200)])
    assert under == []


def test_noise_of_15_percent_names_nobody_in_1000_windows() -> None:
    rng = random.Random(36)
    windows = [window([noisy(rng, 0.1, 0.15) for _ in range(8)], 50 * (i + 1)) for i in range(1000)]
    assert run(detector(8), windows) == []


def test_a_slowdown_of_every_rank_at_once_names_nobody() -> None:
    windows = [window([0.1] * 4, 50 * (i + 1)) for i in range(5)]
    windows += [window([0.25] * 4, 250 + 50 * (i + 1)) for i in range(20)]
    assert run(detector(), windows) == []


def test_a_rank_that_waits_longest_is_not_the_slow_one() -> None:
    # rank 2 is busy longer, but waits longest too: the others do not wait for it (its extra time is not on the
    # job's critical path), so nothing says it holds the job back
    waits = [0.01, 0.01, 0.2, 0.01]
    windows = [window([0.1, 0.1, 0.2, 0.1], 50 * (i + 1), waits) for i in range(20)]
    assert run(detector(), windows) == []


def test_steps_without_waits_in_lockstep_name_nobody_and_real_differences_do() -> None:
    # TensorFlow's and MindSpore's hooks time whole steps: in lockstep all are alike
    lockstep = [window([0.3] * 4, 50 * (i + 1), [None] * 4) for i in range(20)]
    assert run(detector(), lockstep) == []
    apart = [window([0.1, 0.1, 0.2, 0.1], 50 * (i + 1), [None] * 4) for i in range(4)]
    assert [c["rank"] for c in run(detector(), apart)] == [2]


def test_a_named_rank_is_released_when_it_keeps_pace_again() -> None:
    slow = [window([0.1, 0.1, 0.2, 0.1], 50 * (i + 1)) for i in range(4)]
    again = [window([0.1, 0.1, 0.1, 0.1], 200 + 50 * (i + 1)) for i in range(10)]
    det = detector()
    changes = run(det, slow + again)
    assert [(c["state"], c["rank"]) for c in changes] == [("slow", 2), ("recovered", 2)]
    released = changes[1]
    assert released["window"] - 4 <= 6 and released["until"] is not None
    assert det.stragglers[0]["until"] == released["until"]  # the record keeps when it ended


def test_two_ranks_compare_with_each_other_and_a_stale_host_drops_out() -> None:
    two = run(detector(2), [window([0.1, 0.3], 50 * (i + 1)) for i in range(3)])
    assert [c["rank"] for c in two] == [1]
    det = detector(4)
    det.feed("h1", window([0.1, 0.1, 0.1, 0.1], 50), 1000.0)
    # ranks 2 and 3 stop sending (their host is gone): 0 and 1 are compared with each other only
    lone = {"ranks": {k: v for k, v in window([0.1, 0.1], 100)["ranks"].items()}, "window_s": WINDOW_S}
    for index in range(10):
        assert det.feed("h1", lone, 1030.0 + WINDOW_S * index) == []
    assert det._peers(det.paces[0], 1080.0) == [det.paces[1].windows[-1]]


def test_stragglers_of_the_events_keep_the_last_word_of_each() -> None:
    record = {"device": 2, "factor": 1.5, "since_step": 30, "since": 10.0, "until": None, "evidence": {}}

    def event(state: str, **more: Any) -> Event:
        return Event(EventKind.RANK_SLOW, "j", "h1", 2, dict(record, state=state, **more))

    found = stragglers_of([event("slow"), Event(EventKind.PROGRESS, "j", "h1", 0, {}), event("recovered", until=40.0)])
    assert found == [dict(record, state="recovered", until=40.0, rank=2, host="h1")]


def test_the_last_window_of_an_attempt_is_not_judged() -> None:
    # sent when the ranks have ended: a few steps and whatever rank 0 does last (saving the model)
    windows = [window([0.1, 0.1, 0.1, 0.1], 50 * (i + 1)) for i in range(4)]
    windows += [dict(window([0.3, 0.1, 0.1, 0.1], 220), final=True)]
    det = detector()
    det.feed("h1", window([0.25, 0.1, 0.1, 0.1], 10), 990.0)  # a first slow window: the rise is already begun
    assert run(det, windows) == []
    assert len(det.paces[0].windows) == 6  # kept (the chart draws it), not judged
