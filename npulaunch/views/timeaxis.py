"""The time axes of the HTML report (views/htmlreport.py): where the ticks go and what they say. Ticks
fall on round values: steps of 1, 2 or 5 times a power of ten below a second, then 1, 2, 5, 10, 20, 30 s,
the same in minutes, then hours. Pure: a span in seconds in, (seconds, label) pairs out.
"""

from __future__ import annotations

import math
from typing import List, Tuple

MINUTE = 60.0
HOUR = 3600.0
CLOCK_STEPS = (1.0, 2.0, 5.0, 10.0, 20.0, 30.0)  # of seconds, then of minutes: a clock's round values


def tick_step(span_s: float, max_intervals: int = 6) -> float:
    """The smallest round step that cuts ``span_s`` into at most ``max_intervals`` intervals."""
    raw = span_s / max(1, max_intervals)
    if raw <= 1.0:  # under a second: 1, 2, 5 times a power of ten
        power = 10.0 ** math.floor(math.log10(raw))
        return next(m * power for m in (1.0, 2.0, 5.0, 10.0) if m * power >= raw * (1 - 1e-9))
    for unit in (1.0, MINUTE):
        for step in CLOCK_STEPS:
            if step * unit >= raw * (1 - 1e-9):
                return step * unit
    power = 10.0 ** math.floor(math.log10(raw / HOUR))  # hours: 1, 2, 5 times a power of ten again
    return next(m * power * HOUR for m in (1.0, 2.0, 5.0, 10.0) if m * power * HOUR >= raw * (1 - 1e-9))


def time_ticks(span_s: float, max_intervals: int = 6) -> List[Tuple[float, str]]:
    """The ticks of an axis from 0 to ``span_s`` seconds: every multiple of the round step up to the
    span, each with its label ("0 s", "0.5 s", "1 s"; "2 min"; "1 h 30 min")."""
    if not span_s > 0 or math.isinf(span_s):
        return [(0.0, "0 s")]
    step = tick_step(span_s, max_intervals)
    count = int(math.floor(span_s / step + 1e-9))
    return [(round(i * step, 9), tick_label(i * step, step)) for i in range(count + 1)]


def tick_label(value_s: float, step_s: float) -> str:
    """A tick's label in the step's unit, with no more decimals than the step needs."""
    if step_s < MINUTE:
        decimals = max(0, -int(math.floor(math.log10(step_s) + 1e-9)))
        text = f"{value_s:.{decimals}f}"
        return (text.rstrip("0").rstrip(".") if "." in text else text) + " s"
    minutes = int(round(value_s / MINUTE))
    if step_s < HOUR and minutes < 60:
        return f"{minutes} min"
    hours, rest = divmod(minutes, 60)
    return f"{hours} h" + (f" {rest} min" if rest else "")
