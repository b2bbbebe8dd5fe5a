"""The hang watchdog (host/watchdog.py) with a fake clock: start-up and steady limits, and ranks that
fall silent together."""

from __future__ import annotations

from npulaunch.host.watchdog import STARTUP, STEADY, HangLimits, Progress, find_hangs, next_check_in


def test_watchdog_is_exact_with_a_fake_clock() -> None:
    limits = HangLimits(startup_s=10, steady_s=3)
    progress = {0: Progress(started=0.0), 1: Progress(started=0.0)}
    assert find_hangs(progress, 10.0, limits) == []
    assert [h.rank for h in find_hangs(progress, 10.01, limits)] == [0, 1]
    assert {h.phase for h in find_hangs(progress, 10.01, limits)} == {STARTUP}
    limits = HangLimits(startup_s=100, steady_s=3)
    progress[0].saw(5.0)
    progress[0].saw(6.0)
    assert [h.rank for h in find_hangs(progress, 9.0, limits)] == []
    hangs = find_hangs(progress, 9.5, limits)
    assert [(h.rank, h.phase, h.silent_s) for h in hangs] == [(0, STEADY, 3.5)]
    assert next_check_in(progress, 7.0, limits) == 2.0  # rank 0 crosses at 9.0
    assert find_hangs(progress, 1000.0, HangLimits(0, 0)) == []


def test_ranks_that_fall_silent_together_stall_together() -> None:
    limits = HangLimits(startup_s=100, steady_s=10)
    progress = {r: Progress(started=0.0) for r in range(3)}
    for rank, last in ((0, 5.0), (1, 5.5), (2, 14.0)):
        progress[rank].saw(last)
    hangs = find_hangs(progress, 15.1, limits)  # rank 0 is past its limit, rank 1 at 96% of it
    assert [h.rank for h in hangs] == [0, 1]
