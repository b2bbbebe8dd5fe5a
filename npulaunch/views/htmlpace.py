"""The step-time chart of the HTML report (views/htmlreport.py): each rank's busy time per step over the
attempt, from the agents' RANK_PACE windows (host/agent/paces.py), on the timeline's time axis
(views/timeaxis.py); the ranks named slow (diagnose/stragglers.py) in a strong colour, labelled, their
slow span shaded; a big job as the median and the min–max band of all ranks plus the named ones. Pure.
"""

from __future__ import annotations

import math
from typing import Any, Callable, Dict, List, NamedTuple, Optional, Sequence, Tuple

from npulaunch.diagnose.stragglers import median, stragglers_of
from npulaunch.diagnose.summary import JobSummary
from npulaunch.host.events import Event, EventKind
from npulaunch.views.timeaxis import time_ticks

# the layout (pixels): LEFT and WIDTH are the timeline's, so the two time axes line up on the page
LEFT = 150
WIDTH = 900
TOP = 40  # above the first panel: the axis labels and the slow ranks' labels
BUSY_HEIGHT = 220  # the busy panel
WAIT_HEIGHT = 90  # the wait panel, under it (when the ranks' hooks see their waits)
GAP = 34  # between the panels
MAX_LINES = 16  # ranks drawn one line each; a bigger job: the median and the band, plus the named ranks
MAX_NAMED = 6  # slow ranks drawn and labelled at most (the others are counted)
PEER_COLOUR = "#a0a0a0"
MEDIAN_COLOUR = "#555555"
BAND_COLOUR = "#d9d9d9"
SLOW_COLOURS = ("#e8590c", "#c2255c", "#6741d9", "#1971c2", "#2b8a3e", "#5c940d")  # never the failure's red

Escape = Callable[[Any], str]  # the page's HTML escaping (htmlreport's: no import of html)


class Point(NamedTuple):
    """One rank's window: at the window's middle, its median busy and wait time per step."""

    time: float
    busy_s: float
    wait_s: Optional[float]


class Panel(NamedTuple):
    """One panel of the chart: which figure, where, and its scale."""

    field: str  # "busy_s" or "wait_s"
    title: str
    top: float
    height: float
    scale_s: float  # the value at the panel's top: a multiple of step_s
    step_s: float  # between the value axis's labels
    highest_s: float  # the highest value drawn (above scale_s: drawn on the top edge)


class Chart(NamedTuple):
    start: float
    span: float
    window_s: float
    panels: Tuple[Panel, ...]

    def x(self, t: float) -> float:
        return LEFT + WIDTH * (min(max(t, self.start), self.start + self.span) - self.start) / self.span

    def y(self, panel: Panel, value: float) -> float:
        return panel.top + panel.height * (1.0 - min(max(value, 0.0), panel.scale_s) / panel.scale_s)


Spread = Tuple[int, float, float, float]  # a window's index from the start, its fastest, median, slowest rank


class Paces(NamedTuple):
    """What the chart draws: the ranks drawn one line each and, for a big job, every window's spread."""

    ranks: int  # the ranks that reported steps
    window_s: float
    lines: Dict[int, List[Point]]  # rank -> its windows in time order
    spread: Dict[str, List[Spread]]  # field -> the windows' spread, in order (a big job's; else empty)
    waits: bool  # some rank's waits are known


def pace_ranks(events: Sequence[Event]) -> Dict[str, int]:
    """The ranks that reported steps in RANK_PACE windows, by the text the windows name them with."""
    keys = set()
    for event in events:
        if event.kind is EventKind.RANK_PACE and isinstance(event.data.get("ranks"), dict):
            keys.update(event.data["ranks"])
    return {key: int(key) for key in keys if isinstance(key, str) and key.isdigit()}


def read_paces(events: Sequence[Event], start: float, ranks: Dict[str, int], only: Optional[Sequence[int]]) -> Paces:
    """Each rank's windows at the middle of their window (a host's last window, sent as its ranks ended, may
    be shorter: it begins where the one before ended). ``only``: a big job's ranks drawn one line each;
    every rank's window then goes into its window's spread instead."""
    lines: Dict[int, List[Point]] = {}
    binned: Dict[str, Dict[int, List[float]]] = {"busy_s": {}, "wait_s": {}}
    own = None if only is None else {key for key, rank in ranks.items() if rank in only}
    sent: Dict[str, float] = {}
    window_s = 5.0
    for event in events:
        if event.kind is not EventKind.RANK_PACE or not isinstance(event.data.get("ranks"), dict):
            continue
        try:
            window_s = float(event.data.get("window_s") or window_s)
        except (TypeError, ValueError):
            pass
        opened = max(event.time - window_s, sent.get(event.host, -math.inf))
        sent[event.host] = event.time
        middle = (opened + event.time) / 2.0
        index = int((middle - start) // window_s)
        for key, seen in event.data["ranks"].items():
            if key not in ranks:
                continue
            try:
                busy, wait = float(seen["busy_s"]), seen.get("wait_s")
                wait = None if wait is None else float(wait)
            except (AttributeError, KeyError, TypeError, ValueError):  # a damaged window: left out
                continue
            if own is not None:
                binned["busy_s"].setdefault(index, []).append(busy)
                if wait is not None:
                    binned["wait_s"].setdefault(index, []).append(wait)
                if key not in own:
                    continue
            lines.setdefault(ranks[key], []).append(Point(middle, busy, wait))
    for points in lines.values():
        points.sort()
    spread = {
        field: [(i, min(bins[i]), median(bins[i]), max(bins[i])) for i in sorted(bins)]
        for field, bins in binned.items()
        if bins
    }
    waits = bool(spread.get("wait_s")) or any(p.wait_s is not None for points in lines.values() for p in points)
    return Paces(len(ranks), window_s, lines, spread, waits)


def slow_records(summary: JobSummary, events: Sequence[Event]) -> List[Dict[str, Any]]:
    """The ranks named slow in this attempt, as last said: its RANK_SLOW events, and summary.json's
    stragglers of this attempt (the job's summary keeps every attempt's)."""
    found = {(r["rank"], r.get("since")): r for r in stragglers_of(events)}
    attempt = len(summary.attempts or ()) or 1
    for record in summary.stragglers:
        if isinstance(record.get("rank"), int) and record.get("attempt", attempt) == attempt:
            found.setdefault((record["rank"], record.get("since")), dict(record))
    return sorted(found.values(), key=lambda r: (float(r.get("since") or 0.0), r["rank"]))


def render_pace(summary: JobSummary, events: Sequence[Event], plan: Optional[Dict[str, Any]], e: Escape) -> str:
    """The "step time" section: the chart and its legend. When no rank reported a timed step: one line
    saying so if straggler detection was on, nothing if it was off (or the plan is unknown)."""
    ranks = pace_ranks(events)
    if not ranks:
        if plan and plan.get("stragglers"):
            return (
                "<section class='pace'><h2>step time</h2><p class='legend'>no rank reported a timed step (steps are "
                "timed for torch DDP, torch's collectives with npulaunch.session.step(), TensorFlow's "
                "MonitoredSession and Estimator, MindSpore's Model.train, and any loop that calls "
                "npulaunch.session.step())</p></section>"
            )
        return ""
    job = summary.job
    named = slow_records(summary, events)
    shown: Dict[int, str] = {}  # rank -> its colour, for the first MAX_NAMED ranks named
    for record in named:
        if record["rank"] in ranks.values() and record["rank"] not in shown and len(shown) < MAX_NAMED:
            shown[record["rank"]] = SLOW_COLOURS[len(shown) % len(SLOW_COLOURS)]
    big = len(ranks) > MAX_LINES
    paces = read_paces(events, job.start_time, ranks, list(shown) if big else None)
    panels = [Panel("busy_s", "busy", TOP, BUSY_HEIGHT, *_scale(paces, "busy_s", 5))]
    if paces.waits:
        panels.append(Panel("wait_s", "wait", TOP + BUSY_HEIGHT + GAP, WAIT_HEIGHT, *_scale(paces, "wait_s", 3)))
    chart = Chart(job.start_time, max(job.end_time - job.start_time, 0.001), paces.window_s, tuple(panels))
    height = int(panels[-1].top + panels[-1].height + 24)
    svg = [
        f"<svg xmlns='http://www.w3.org/2000/svg' class='pace' width='{LEFT + WIDTH + 20}' height='{height}' "
        f"viewBox='0 0 {LEFT + WIDTH + 20} {height}' data-ranks='{paces.ranks}'>",
        f"<rect x='0' y='0' width='{LEFT + WIDTH + 20}' height='{height}' fill='#ffffff'/>",
    ]
    svg.extend(_time_axis(chart, e))
    svg.extend(_slow_spans(chart, named, shown, job.end_time))
    for panel in chart.panels:
        svg.extend(_value_axis(chart, panel, e))
        if big:
            svg.extend(_band(chart, panel, paces.spread.get(panel.field, [])))
        for rank in sorted(r for r in paces.lines if r not in shown):
            svg.extend(_line(chart, panel, rank, paces.lines[rank], PEER_COLOUR, False, e))
        for rank, colour in shown.items():
            svg.extend(_line(chart, panel, rank, paces.lines.get(rank, []), colour, True, e))
    svg.extend(_labels(chart, named, shown, e))
    svg.append("</svg>")
    return (
        "<section class='pace'><h2>step time</h2>"
        + _intro(summary, named, shown, paces.window_s, e)
        + "\n".join(svg)
        + _legend(big, paces.ranks, len(chart.panels) > 1, shown, e)
        + "</section>"
    )


def _intro(summary: JobSummary, named: List[Dict[str, Any]], shown: Dict[int, str], window_s: float, e: Escape) -> str:
    attempts = len(summary.attempts or ())
    which = f"attempt {attempts}, the last: seconds since it began" if attempts > 1 else "seconds since the job began"
    said = f"{which}; each point is the median of a {window_s:g} s window of steps. "
    labels = [slow_label(record) for record in named if record["rank"] in shown]
    if labels:
        said += "; ".join(labels) + "."
    elif not named:
        said += "No rank was named slower than its peers."
    left_out = len({r["rank"] for r in named} - set(shown))
    if left_out:
        said += f" ({left_out} more named slow rank{'s are' if left_out != 1 else ' is'} not drawn.)"
    return f"<p class='legend'>{e(said)}</p>"


def slow_label(record: Dict[str, Any]) -> str:
    """A slow rank's label: "rank 2: 1.3× slower since step 31", and how it ended when it did."""
    text = f"rank {record['rank']}: {float(record.get('factor') or 0):.1f}× slower"
    if record.get("since_step") is not None:
        text += f" since step {record['since_step']}"
    state = record.get("state")
    if state == "excluded":
        text += ", its NPU excluded"
    elif state == "recovered" or record.get("until") is not None:
        text += ", then recovered"
    return text


def _legend(big: bool, ranks: int, waits: bool, shown: Dict[int, str], e: Escape) -> str:
    said = [
        "busy time per step: the rank's own work, without the wait for the others (in lockstep every rank's "
        "whole step takes as long as the slowest's)"
    ]
    if waits:
        said.append("wait: its time in the collectives, waiting for the others (the slow rank waits least)")
    if shown:
        said.append("in colour, shaded while slow: a rank npulaunch named slower than its peers")
    if big:
        said.append(f"grey band: the fastest to the slowest of the {ranks} ranks in each window; dark line: the median")
    else:
        said.append("grey: the other ranks (a line's tooltip names its rank)")
    return f"<p class='legend'>{e('; '.join(said))}</p>"


def _scale(paces: Paces, field: str, intervals: int) -> Tuple[float, float, float]:
    """A panel's top (a round value above what is drawn, cut in about ``intervals`` round steps), the step,
    and the highest value drawn. The top leaves out
    each rank's first window when it has three or more (the first steps compile and warm up): a higher
    value is drawn on the top edge."""
    values: List[float] = []
    highest = 0.0
    spread = [high for _, _, _, high in paces.spread.get(field, [])]
    for points in [spread] + [_values(points, field) for points in paces.lines.values()]:
        values.extend(points[1:] if len(points) >= 3 else points)
        highest = max([highest] + points)
    top = max(values, default=0.0)
    if top <= 0:
        return 0.001, 0.001, highest
    step = round_step(top / intervals)
    return math.ceil(top * 1.05 / step) * step, step, highest


def round_step(raw: float) -> float:
    """The smallest of 1, 2, 5 times a power of ten that is at least ``raw``."""
    power = 10.0 ** math.floor(math.log10(raw))
    return next(m * power for m in (1.0, 2.0, 5.0, 10.0) if m * power >= raw * (1 - 1e-9))


def value_text(seconds: float, step_s: float = 0.0, top_s: float = 0.0) -> str:
    """A time per step: "128 ms", "0.4 ms", "1.5 s". An axis label is in the unit of the panel's top
    (``top_s``) with the decimals its step needs; a lone value in its own unit, with three figures."""
    in_ms = (top_s or seconds) < 1.0
    value = seconds * 1000.0 if in_ms else seconds
    step = (step_s * 1000.0 if in_ms else step_s) if step_s else value / 100.0
    decimals = max(0, -int(math.floor(math.log10(step) + 1e-9))) if step > 0 else 0
    return f"{value:.{decimals}f} {'ms' if in_ms else 's'}"


def _time_axis(chart: Chart, e: Escape) -> List[str]:
    bottom = chart.panels[-1].top + chart.panels[-1].height
    parts = []
    for offset, label in time_ticks(chart.span, max_intervals=8):
        tx = LEFT + WIDTH * offset / chart.span
        anchor = "end" if tx > LEFT + WIDTH - 24 else "middle"
        parts.append(f"<line x1='{tx:.1f}' y1='{TOP - 8}' x2='{tx:.1f}' y2='{bottom:.0f}' stroke='#eeeeee'/>")
        parts.append(f"<text x='{tx:.1f}' y='{TOP - 14}' class='axis' text-anchor='{anchor}'>{e(label)}</text>")
    return parts


def _value_axis(chart: Chart, panel: Panel, e: Escape) -> List[str]:
    """The panel's title, its round values on the left with light lines across, and a note when a value is
    off the top."""
    step = panel.step_s
    parts = [
        f"<text x='6' y='{panel.top + 12:.0f}' class='label'>{e(panel.title)}</text>",
        f"<text x='6' y='{panel.top + 26:.0f}' class='axis'>per step</text>",
    ]
    count = int(round(panel.scale_s / step))
    for i in range(count + 1):
        ty = chart.y(panel, i * step)
        parts.append(f"<line x1='{LEFT}' y1='{ty:.1f}' x2='{LEFT + WIDTH}' y2='{ty:.1f}' stroke='#eeeeee'/>")
        label = e(value_text(i * step, step, panel.scale_s))
        parts.append(f"<text x='{LEFT - 6}' y='{ty + 4:.1f}' class='axis' text-anchor='end'>{label}</text>")
    if panel.highest_s > panel.scale_s:
        parts.append(
            f"<text x='{LEFT + 4}' y='{panel.top + 11:.0f}' class='axis'>↑ off the scale: up to "
            f"{e(value_text(panel.highest_s))} (the first steps)</text>"
        )
    return parts


def _values(points: Sequence[Point], field: str) -> List[float]:
    """A rank's figures of one field, the unknown ones left out."""
    return [v for v in (getattr(p, field) for p in points) if v is not None]


def _segments(chart: Chart, points: Sequence[Point], field: str) -> List[List[Point]]:
    """A rank's windows cut where a window is missing (it reported no step then) or the figure is unknown."""
    runs: List[List[Point]] = [[]]
    for point in points:
        if getattr(point, field) is None:
            runs.append([])
            continue
        if runs[-1] and point.time - runs[-1][-1].time > 1.6 * chart.window_s:
            runs.append([])
        runs[-1].append(point)
    return [run for run in runs if run]


def _line(
    chart: Chart, panel: Panel, rank: int, points: Sequence[Point], colour: str, slow: bool, e: Escape
) -> List[str]:
    """One rank's line in one panel (a dot for a lone window)."""
    runs = _segments(chart, points, panel.field)
    if not runs:
        return []
    values = _values(points, panel.field)
    tip = f"rank {rank}: {panel.title} {value_text(median(values))} a step (median of its windows)"
    width = "2.5" if slow else "1.2"
    kind = " slow" if slow else ""
    svg = [f"<g class='pace-rank{kind}' data-rank='{rank}' data-panel='{panel.title}'><title>{e(tip)}</title>"]
    for run in runs:
        coords = " ".join(f"{chart.x(p.time):.1f},{chart.y(panel, getattr(p, panel.field)):.1f}" for p in run)
        if len(run) == 1:
            cx, cy = coords.split(",")
            svg.append(f"<circle cx='{cx}' cy='{cy}' r='2' fill='{colour}'/>")
        else:
            svg.append(
                f"<polyline points='{coords}' fill='none' stroke='{colour}' stroke-width='{width}' "
                "stroke-linejoin='round'/>"
            )
    svg.append("</g>")
    return svg


def _band(chart: Chart, panel: Panel, spread: Sequence[Spread]) -> List[str]:
    """A big job: every window's fastest to slowest rank as a grey band, and the median rank as a line (each
    host sends its own windows: they are binned by time); cut where no rank reported a step."""
    runs: List[List[Spread]] = [[]]
    for window in spread:
        if runs[-1] and window[0] - runs[-1][-1][0] > 1:
            runs.append([])
        runs[-1].append(window)
    tip = "the fastest to the slowest rank in each window; the median"
    svg = [f"<g class='pace-band' data-panel='{panel.title}'><title>{tip}</title>"]
    for run in (r for r in runs if r):
        xs = [chart.x(chart.start + (index + 0.5) * chart.window_s) for index, _, _, _ in run]
        upper = [f"{x:.1f},{chart.y(panel, high):.1f}" for x, (_, _, _, high) in zip(xs, run)]
        lower = [f"{x:.1f},{chart.y(panel, low):.1f}" for x, (_, low, _, _) in reversed(list(zip(xs, run)))]
        middle = " ".join(f"{x:.1f},{chart.y(panel, mid):.1f}" for x, (_, _, mid, _) in zip(xs, run))
        svg.append(f"<polygon points='{' '.join(upper + lower)}' fill='{BAND_COLOUR}' stroke='{BAND_COLOUR}'/>")
        svg.append(f"<polyline points='{middle}' fill='none' stroke='{MEDIAN_COLOUR}' stroke-width='1.5'/>")
    svg.append("</g>")
    return svg


def _slow_spans(chart: Chart, named: List[Dict[str, Any]], shown: Dict[int, str], end: float) -> List[str]:
    """Each drawn slow rank's span shaded in every panel: from where its slowness began until it recovered
    or its NPU was excluded, else to the attempt's end."""
    svg = []
    for record in named:
        colour = shown.get(record["rank"])
        if colour is None or record.get("since") is None:
            continue
        x0 = chart.x(float(record["since"]))
        x1 = chart.x(float(record["until"]) if record.get("until") is not None else end)
        for panel in chart.panels:
            svg.append(
                f"<rect class='slow-span' data-rank='{record['rank']}' data-panel='{panel.title}' x='{x0:.1f}' "
                f"y='{panel.top:.0f}' width='{max(x1 - x0, 1.0):.1f}' height='{panel.height:.0f}' fill='{colour}' "
                "opacity='0.1'/>"
            )
    return svg


def _labels(chart: Chart, named: List[Dict[str, Any]], shown: Dict[int, str], e: Escape) -> List[str]:
    """Each drawn slow rank's label at the top of its span, one under the other, kept inside the picture."""
    svg = []
    row = 0
    for record in named:
        colour = shown.get(record["rank"])
        if colour is None:
            continue
        tx = chart.x(float(record.get("since") or chart.start)) + 4
        anchor = "start"
        if tx > LEFT + WIDTH - 260:  # near the right edge: the text ends there instead
            tx, anchor = LEFT + WIDTH - 4, "end"
        ty = TOP + 14 + 15 * row
        svg.append(
            f"<text class='slow-label' data-rank='{record['rank']}' x='{tx:.1f}' y='{ty}' text-anchor='{anchor}' "
            f"fill='{colour}' stroke='#ffffff' stroke-width='3' paint-order='stroke'>{e(slow_label(record))}</text>"
        )
        row += 1
    return svg
