"""The HTML report's time axes (issue 34): ticks on round values, 1-2-5 steps below a minute's steps,
minutes then hours for long jobs, never more intervals than asked for, labels without stray decimals."""

from __future__ import annotations

import math

import pytest

from npulaunch.views.timeaxis import tick_label, tick_step, time_ticks


@pytest.mark.parametrize(
    "span_s, intervals, labels",
    [
        # the spans of the screenshots: 0.9 s, 1.9 s, 2.8 s ticks before
        (1.4, 6, ["0 s", "0.5 s", "1 s"]),
        (1.4, 8, ["0 s", "0.2 s", "0.4 s", "0.6 s", "0.8 s", "1 s", "1.2 s", "1.4 s"]),
        (1.6, 6, ["0 s", "0.5 s", "1 s", "1.5 s"]),
        (4.7, 5, ["0 s", "1 s", "2 s", "3 s", "4 s"]),
        (21.4, 5, ["0 s", "5 s", "10 s", "15 s", "20 s"]),
        (13.0, 6, ["0 s", "5 s", "10 s"]),
        (0.004, 6, ["0 s", "0.001 s", "0.002 s", "0.003 s", "0.004 s"]),
        (0.35, 8, ["0 s", "0.05 s", "0.1 s", "0.15 s", "0.2 s", "0.25 s", "0.3 s", "0.35 s"]),
        (100.0, 6, ["0 s", "20 s", "40 s", "60 s", "80 s", "100 s"]),
        (150.0, 6, ["0 s", "30 s", "60 s", "90 s", "120 s", "150 s"]),
        (400.0, 6, ["0 min", "2 min", "4 min", "6 min"]),
        (1000.0, 6, ["0 min", "5 min", "10 min", "15 min"]),
        (5400.0, 6, ["0 min", "20 min", "40 min", "1 h", "1 h 20 min"]),
        (3 * 3600.0, 6, ["0 min", "30 min", "1 h", "1 h 30 min", "2 h", "2 h 30 min", "3 h"]),
        (30 * 3600.0, 6, ["0 h", "5 h", "10 h", "15 h", "20 h", "25 h", "30 h"]),
    ],
)
def test_ticks_fall_on_round_values(span_s: float, intervals: int, labels: list) -> None:
    ticks = time_ticks(span_s, intervals)
    assert [label for _, label in ticks] == labels
    assert len(ticks) - 1 <= intervals and ticks[0][0] == 0 and ticks[-1][0] <= span_s


@pytest.mark.parametrize("span_s", [1e-4, 0.03, 0.9, 1.9, 2.8, 7.7, 59.0, 61.0, 599.0, 7201.0, 86400.0 * 9])
def test_every_step_is_one_two_or_five_times_a_power_of_ten_or_a_clocks_round_value(span_s: float) -> None:
    step = tick_step(span_s)
    clock = {1, 2, 5, 10, 20, 30}
    if step < 1:
        mantissa = step / 10 ** math.floor(math.log10(step))
        assert round(mantissa, 6) in (1, 2, 5)
    elif step < 3600:
        assert step in clock or step / 60 in clock
    else:
        mantissa = (step / 3600) / 10 ** math.floor(math.log10(step / 3600))
        assert round(mantissa, 6) in (1, 2, 5)
    assert 6 / 2.5 < span_s / step <= 6 + 1e-9  # at most 6 intervals, and no coarser than the ladder needs


@pytest.mark.parametrize("span_s", [0.0, -1.0, float("nan"), float("inf")])
def test_a_span_of_nothing_has_the_one_tick(span_s: float) -> None:
    assert time_ticks(span_s) == [(0.0, "0 s")]


@pytest.mark.parametrize(
    "value, step, label",
    [(0.0, 0.5, "0 s"), (1.5, 0.5, "1.5 s"), (3.0, 1.0, "3 s"), (0.25, 0.05, "0.25 s"), (7200.0, 1800.0, "2 h")],
)
def test_labels(value: float, step: float, label: str) -> None:
    assert tick_label(value, step) == label
