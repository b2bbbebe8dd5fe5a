"""The attempts section of the HTML report (views/htmlreport.py): a restarted or recovered job's attempts
on one time axis, seconds since the job began, ticks on round values (views/timeaxis.py), then each attempt
in words. Pure rendering from the summary's attempts list.
"""

from __future__ import annotations

from typing import Any, Callable, Sequence

from npulaunch.diagnose.summary import AttemptRecord, JobSummary
from npulaunch.views.reporttext import attempt_lines
from npulaunch.views.timeaxis import time_ticks

# the layout of the attempts' axis (pixels)
LEFT = 130.0  # room for "attempt N: status"
WIDTH = 980.0  # the whole picture
NOTES = 330.0  # room right of the axis for the last bar's note
ROW = 30
TOP = 20  # above the first bar: the tick labels

Escape = Callable[[Any], str]  # the page's HTML escaping (htmlreport's: no import of html)


def render_attempts(summary: JobSummary, e: Escape) -> str:
    """The attempts of a restarted or recovered job on one time axis: a bar per attempt (its colour its
    end), what ended it and what it excluded, the gap to the next (stopping, re-planning, resuming), what
    the next resumed from; then each attempt in words. Empty for a job that ran once."""
    attempts = summary.attempts or ()
    if len(attempts) < 2:
        return ""
    timed = [a for a in attempts if a.start_time is not None and a.end_time is not None]
    svg = attempt_bars(timed, e) if timed else ""
    items = "".join(f"<li>{e(line)}</li>" for line in attempt_lines(attempts))
    return (
        "<section><h2>attempts</h2><p>restarts and recoveries on one time axis, seconds since the job began "
        f"(the timeline below shows the last attempt)</p>{svg}<ul class='attempt-lines'>{items}</ul></section>"
    )


def attempt_bars(timed: Sequence[AttemptRecord], e: Escape) -> str:
    """The bars as inline SVG, on an axis whose ticks fall on round values."""
    t0 = min(float(a.start_time or 0) for a in timed)
    span = max(max(float(a.end_time or 0) for a in timed) - t0, 1e-3)
    scale = (WIDTH - LEFT - NOTES) / span
    height = TOP + len(timed) * ROW + 6

    def x(t: float) -> float:
        return LEFT + (t - t0) * scale

    parts = []
    for offset, label in time_ticks(span, max_intervals=5):
        tx = x(t0 + offset)
        parts.append(f"<line x1='{tx:.1f}' y1='{TOP - 4}' x2='{tx:.1f}' y2='{height}' class='tick'/>")
        parts.append(f"<text x='{tx:.1f}' y='12' class='axis' text-anchor='middle'>{e(label)}</text>")
    for i, a in enumerate(timed):
        y = TOP + i * ROW
        start, end = float(a.start_time or 0), float(a.end_time or 0)
        colour = {"succeeded": "#2e7d32", "failed": "#c62828"}.get(a.status.value, "#9e9e9e")
        note = bar_note(a)
        parts.append(f"<text x='4' y='{y + 14}' class='lbl'>attempt {a.attempt}: {e(a.status.value)}</text>")
        parts.append(
            f"<rect x='{x(start):.1f}' y='{y}' width='{max((end - start) * scale, 2.0):.1f}' height='20' "
            f"fill='{colour}'><title>{e(note)}</title></rect>"
        )
        parts.append(f"<text x='{x(end) + 6:.1f}' y='{y + 14}' class='note'>{e(note)}</text>")
        following = timed[i + 1] if i + 1 < len(timed) else None
        if following is not None and following.start_time is not None:
            gap = float(following.start_time) - end
            parts.append(
                f"<line x1='{x(end):.1f}' y1='{y + 20}' x2='{x(float(following.start_time)):.1f}' "
                f"y2='{y + ROW}' class='gap'><title>{gap:.1f} s from the end of attempt {a.attempt} to the "
                f"start of attempt {following.attempt}</title></line>"
            )
    return (
        f"<svg class='attempts' width='{WIDTH:.0f}' height='{height}' role='img' "
        f"aria-label='attempts on one time axis'>{''.join(parts)}</svg>"
    )


def bar_note(a: AttemptRecord) -> str:
    """What ended an attempt and what followed, or what it resumed from, in a few words."""
    said = []
    step = (a.resumed or {}).get("step")
    if a.attempt > 1 and a.resumed is not None:
        if a.resumed.get("by") == "script":
            said.append("the script's own snapshot, if any")
        else:
            said.append("from the start" if step is None else f"resumed at step {step}")
    if a.root_cause is not None:
        said.append(f"{a.root_cause.label} on rank {a.root_cause.rank}")
    for excluded in a.excluded[:2]:
        what = f"NPU {excluded['device']}" if excluded.get("device") is not None else "host"
        said.append(f"excluded {excluded.get('host')} {what}")
    if a.then:
        said.append(a.then)
    if a.steps_lost:
        said.append(f"{a.steps_lost} step{'' if a.steps_lost == 1 else 's'} lost")
    return "; ".join(said)
