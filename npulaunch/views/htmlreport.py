"""The job report as one self-contained HTML file (``report.html`` in the job directory, and
``npulaunch report JOB_DIR --html``): the job in brief, the root cause with its excerpt, the other
ranks grouped, and a per-rank timeline drawn as inline SVG (start, first output, step rate over time,
signatures, hangs, the failure, teardown), on time axes whose ticks fall on round values
(views/timeaxis.py). A framework's extra process (MindSpore's scheduler) has its row, named as what it is.
No network, no external file; the one small script only counts what was drawn. Pure rendering from the
summary and the events.
"""

from __future__ import annotations

import time
from typing import Any, Dict, List, NamedTuple, Optional, Sequence, Tuple

from npulaunch.diagnose.cause import ranks_word
from npulaunch.diagnose.summary import JobStatus, JobSummary, RankSummary
from npulaunch.host.errorfile import raised_text
from npulaunch.host.events import Event, EventKind, signature_label
from npulaunch.host.records import RankResult, RankState
from npulaunch.host.spec import HELPER_RANK, process_name
from npulaunch.views.htmlattempts import render_attempts
from npulaunch.views.htmlpace import render_pace
from npulaunch.views.reporttext import code_lines
from npulaunch.views.timeaxis import time_ticks

# the layout of the timeline (pixels); tests read the picture by these numbers
LEFT = 150  # room for the rank labels
WIDTH = 900  # the time axis
TOP = 40  # above the first row: the axis labels
ROW = 28  # one rank's row
BAR = 14  # the bar's height inside its row
MAX_ROWS = 256  # ranks drawn at most (the others are counted)
AXIS_INTERVALS = 8  # at most, between the time axis's ticks (each at least 110 px apart)
STATE_COLOURS = {
    RankState.SUCCEEDED: "#3a9d5d",
    RankState.FAILED: "#d62728",
    RankState.SPAWN_FAILED: "#d62728",
    RankState.STOPPED: "#9e9e9e",
    RankState.RUNNING: "#1f77b4",
    RankState.PENDING: "#c7c7c7",
}
FAILURE_COLOUR = "#ff0000"  # the root cause's marker: pure red, nowhere else in the picture
SYMPTOM_COLOUR = "#ff9f1c"
HANG_COLOUR = "#8e44ad"
TEARDOWN_COLOUR = "#555555"


def _e(value: Any) -> str:
    """``html.escape(str(value))``: the same five replacements, without importing ``html`` (which loads
    its table of 2,000 entities, 1.5 ms of every run that writes report.html)."""
    text = str(value).replace("&", "&amp;").replace("<", "&lt;").replace(">", "&gt;")
    return text.replace('"', "&quot;").replace("'", "&#x27;")


def render_html(summary: JobSummary, events: Sequence[Event], plan: Optional[Dict[str, Any]] = None) -> str:
    job = summary.job
    title = f"npulaunch: job {job.job_id} {job.status.value}"
    parts = [
        "<!DOCTYPE html>",
        '<html lang="en"><head><meta charset="utf-8">',
        f"<title>{_e(title)}</title>",
        f"<style>{_CSS}</style></head><body>",
        f"<h1>job {_e(job.job_id)} <span class='status {_e(job.status.value)}'>{_e(job.status.value)}</span></h1>",
        _brief(summary, plan),
        render_attempts(summary, _e),
        _timeline(summary, events),
        render_pace(summary, events, plan, _e),
        _root_cause(summary),
        _warnings(plan),
        f"<script>{_SCRIPT}</script>",
        "</body></html>",
    ]
    return "\n".join(p for p in parts if p) + "\n"


def _brief(summary: JobSummary, plan: Optional[Dict[str, Any]]) -> str:
    """The job in brief: the whole job's start and duration (over every attempt: ``job`` holds the last
    attempt's), its ranks and hosts, where its files are."""
    job = summary.job
    start, end = summary.span
    helpers = sum(1 for r in summary.ranks if r.result.rank == HELPER_RANK)
    ranks = f"{job.world_size} on {len(job.hosts)} host{'s' if len(job.hosts) != 1 else ''}"
    rows = [
        ("exit code", job.exit_code),
        ("ranks", ranks + (f", and {process_name(HELPER_RANK)}" if helpers else "")),
        ("hosts", ", ".join(job.hosts)),
        ("started", time.strftime("%Y-%m-%d %H:%M:%S", time.localtime(start))),
        ("duration", _duration(end - start, summary)),
        ("job directory", job.job_dir),
    ]
    if job.stop_signal:
        rows.append(("stopped by", job.stop_signal))
    if plan and plan.get("ranks"):
        rows.insert(2, ("command", " ".join(plan["ranks"][0].get("argv", []))))
    cells = "".join(f"<tr><th>{_e(k)}</th><td>{_e(v)}</td></tr>" for k, v in rows)
    return f"<table class='brief'>{cells}</table>"


def _duration(whole_s: float, summary: JobSummary) -> str:
    """The job's duration, and with restarts how many attempts it took and how long the last one ran."""
    attempts = len(summary.attempts or ())
    if attempts < 2:
        return f"{whole_s:.1f} s"
    return f"{whole_s:.1f} s, {attempts} attempts (the last {summary.job.duration_s:.1f} s)"


def _root_cause(summary: JobSummary) -> str:
    root = summary.root_cause
    if root is None:
        return "<p class='ok'>every rank ended as it should</p>" if summary.job.status is JobStatus.SUCCEEDED else ""
    cause = root.cause
    device = "" if cause.rank == HELPER_RANK else f", device {_e(cause.device_id)}"  # the scheduler holds none
    lines = [
        "<section class='cause'><h2>root cause</h2>",
        f"<p class='reason'>{_e(root.reason)} <span class='where'>(host {_e(cause.host)}{device}, "
        f"pid {_e(root.pid)})</span></p>",
    ]
    if cause.first_line and cause.cls not in ("exit", "signal", "hang"):
        lines.append(f"<p class='error'>{_e(cause.label)} ({_e(cause.cls)}): {_e(cause.first_line)}</p>")
        lines.extend(f"<p class='detail'>{_e(text.strip())}</p>" for text in code_lines(cause))
    raised = cause.raised or {}
    if raised:  # the rank's error file (torch's @record): the exception and its traceback
        lines.append(f"<p class='detail'>raised: {_e(raised_text(raised))}</p>")
        if raised.get("traceback"):
            lines.append(f"<p class='label'>traceback (from {_e(raised.get('path'))})</p>")
            lines.append(f"<pre>{_e(str(raised['traceback']).rstrip())}</pre>")
    lines.append(f"<p class='why'>{_e(cause.why)}</p>")
    lines.append(f"<p class='hint'>{_e(cause.hint)}{' (a restart may help)' if cause.retryable else ''}</p>")
    shown = cause.excerpt if len(cause.excerpt) > 1 else root.last_lines
    if shown:
        label = "excerpt" if shown is cause.excerpt else f"last lines of {root.log}"
        lines.append(f"<p class='label'>{_e(label)}</p><pre>{_e(chr(10).join(shown))}</pre>")
    page = (cause.code_info or {}).get("page")
    if page:  # as text, not a link: the page loads nothing from outside
        lines.append(f"<p class='page'>CANN's page for {_e(cause.code)}: {_e(page)}</p>")
    if cause.others:
        lines.append("<ul class='others'>")
        lines.extend(f"<li>{_e(ranks_word(group.ranks))}: {_e(group.what)}</li>" for group in cause.others)
        lines.append("</ul>")
    lines.append("</section>")
    return "\n".join(lines)


class _Marks(NamedTuple):
    """What the rows mark beyond each rank's own events: hangs, the root cause, the attempt's end."""

    by_rank: Dict[int, List[Event]]
    hangs: Dict[int, float]  # rank -> when a hang was reported for it
    root_rank: Optional[int]
    cause_time: Optional[float]
    end: float


def _timeline(summary: JobSummary, events: Sequence[Event]) -> str:
    """One row per rank: its life as a bar coloured by how it ended, a line of its step rate (or
    lines per second) over time, and markers for its first output, signatures, hangs and the
    failure; a dashed line where npulaunch began to stop the job. With restarts, the last attempt's."""
    job = summary.job
    start, end = job.start_time, max(job.end_time, job.start_time + 0.001)
    span = end - start

    def x(t: Optional[float]) -> float:
        return LEFT + WIDTH * (min(max(t if t is not None else start, start), end) - start) / span

    ranks, left_out = _drawn(summary, events)
    height = TOP + ROW * len(ranks) + 20
    svg = [
        f"<svg xmlns='http://www.w3.org/2000/svg' class='timeline' width='{LEFT + WIDTH + 20}' "
        f"height='{height}' viewBox='0 0 {LEFT + WIDTH + 20} {height}'>",
        f"<rect x='0' y='0' width='{LEFT + WIDTH + 20}' height='{height}' fill='#ffffff'/>",
    ]
    svg.extend(_axis(span, height))
    by_rank: Dict[int, List[Event]] = {}
    hangs: Dict[int, float] = {}
    for event in events:
        if isinstance(event.rank, int):
            by_rank.setdefault(event.rank, []).append(event)
        if event.kind is EventKind.HANG_DETECTED:
            for hung in event.data.get("ranks", []):
                hangs.setdefault(int(hung), event.time)
    root = summary.root_cause
    marks = _Marks(by_rank, hangs, root.cause.rank if root else None, root.cause.time if root else None, end)
    for row, rank in enumerate(ranks):
        svg.extend(_rank_row(rank.result, TOP + ROW * row, marks, x))
    svg.extend(_teardown_line(_teardown_time(events), x, height))
    svg.append("</svg>")
    if left_out:
        svg.append(
            f"<p class='legend'>{left_out} more ranks are not drawn (at most {MAX_ROWS} rows: the root cause, "
            "the ranks that failed or reported a signature or a hang, then the first of the others)</p>"
        )
    legend = (
        "<p class='legend'>bar: a rank's life (green succeeded, red failed, grey stopped by npulaunch); "
        "line: its steps per second (lines per second when no step is printed); ● first output; "
        "▲ signature (red a cause, orange a symptom); ◆ hang; ✕ the root cause; dashed: teardown</p>"
    )
    attempts = len(summary.attempts or ())
    which = f"attempt {attempts}, the last: seconds since it began" if attempts > 1 else "seconds since the job began"
    return f"<section><h2>timeline</h2><p class='legend'>{which}</p>" + "\n".join(svg) + legend + "</section>"


def _teardown_line(teardown: Optional[float], x: Any, height: int) -> List[str]:
    """A dashed line where npulaunch began to stop the job (nothing when it ended by itself)."""
    if teardown is None:
        return []
    tx = x(teardown)
    return [
        f"<g class='teardown'><title>npulaunch began to stop the job</title><line x1='{tx:.1f}' y1='{TOP - 6}' "
        f"x2='{tx:.1f}' y2='{height - 20}' stroke='{TEARDOWN_COLOUR}' stroke-dasharray='4 3'/>"
        f"<text x='{tx - 3:.1f}' y='{height - 6}' class='axis' text-anchor='end'>teardown</text></g>"
    ]


def _axis(span: float, height: int) -> List[str]:
    """The time axis: a tick and a grid line on each round value (views/timeaxis.py)."""
    parts = []
    for offset, label in time_ticks(span, max_intervals=AXIS_INTERVALS):
        tx = LEFT + WIDTH * offset / span
        anchor = "end" if tx > LEFT + WIDTH - 24 else "middle"  # the last label stays inside the picture
        parts.append(f"<line x1='{tx:.1f}' y1='{TOP - 8}' x2='{tx:.1f}' y2='{height - 20}' stroke='#eeeeee'/>")
        parts.append(f"<text x='{tx:.1f}' y='{TOP - 14}' class='axis' text-anchor='{anchor}'>{_e(label)}</text>")
    return parts


def row_names(r: RankResult) -> Tuple[str, str]:
    """A row's label and the name its tooltip gives: ``r3 d3 host`` and ``rank 3, device 3 on host``; a
    framework's extra process (MindSpore's scheduler: no rank, no NPU) as what it is, as the console's
    ``sched`` prefix and the text report's "the scheduler" name it."""
    if r.rank == HELPER_RANK:
        return f"scheduler {r.host}", f"{process_name(r.rank)} on {r.host} (not a rank: it holds no NPU)"
    return f"r{r.rank} d{r.device_id} {r.host}", f"rank {r.rank}, device {r.device_id} on {r.host}"


def _rank_row(r: RankResult, y: int, marks: _Marks, x: Any) -> List[str]:
    """One rank's row: its label, its life, its rate, its markers."""
    mid = y + ROW / 2
    colour = STATE_COLOURS.get(r.state, "#c7c7c7")
    ended = r.end_time if r.end_time is not None else marks.end
    state = r.state.value + (f" ({r.signal or r.exit_code})" if r.state is not RankState.SUCCEEDED else "")
    label, name = row_names(r)
    helper = " helper" if r.rank == HELPER_RANK else ""
    own = marks.by_rank.get(r.rank, [])
    svg = [
        f"<g class='rank{helper}' data-rank='{r.rank}' data-state='{_e(r.state.value)}'>",
        f"<title>{_e(name)}: {_e(state)}</title>",
        f"<text x='6' y='{mid + 4:.1f}' class='label'>{_e(label)}</text>",
        f"<rect class='life' x='{x(r.start_time):.1f}' y='{mid - BAR / 2:.1f}' "
        f"width='{max(1.0, x(ended) - x(r.start_time)):.1f}' height='{BAR}' rx='3' fill='{colour}' opacity='0.35'/>",
    ]
    svg.extend(_rate_line(own, x, mid))
    for event in own:
        svg.extend(_marker(event, x, mid))
    if r.rank in marks.hangs:
        hx = x(marks.hangs[r.rank])
        svg.append(
            f"<path class='marker hang' d='M {hx:.1f} {mid - 7:.1f} l 7 7 l -7 7 l -7 -7 z' fill='{HANG_COLOUR}'>"
            "<title>hang reported</title></path>"
        )
    if r.rank == marks.root_rank:
        cx = x(r.end_time if r.end_time is not None else marks.cause_time)
        svg.append(
            f"<g class='marker failure' data-rank='{r.rank}'><title>root cause: {_e(state)}</title>"
            f"<line x1='{cx - 7:.1f}' y1='{mid - 7:.1f}' x2='{cx + 7:.1f}' y2='{mid + 7:.1f}' "
            f"stroke='{FAILURE_COLOUR}' stroke-width='4'/>"
            f"<line x1='{cx - 7:.1f}' y1='{mid + 7:.1f}' x2='{cx + 7:.1f}' y2='{mid - 7:.1f}' "
            f"stroke='{FAILURE_COLOUR}' stroke-width='4'/></g>"
        )
    svg.append("</g>")
    return svg


def _row_order(rank: RankSummary) -> Tuple[bool, int]:
    return rank.result.rank == HELPER_RANK, rank.result.rank  # the ranks, then the scheduler


def _drawn(summary: JobSummary, events: Sequence[Event]) -> Tuple[List[RankSummary], int]:
    """The ranks the timeline draws, in rank order (the scheduler after them), and how many it leaves
    out: every rank when there are at most MAX_ROWS, else the root cause, the ranks that failed or
    reported a signature or a hang, then the first of the others (a 32k-rank job's page stays a page)."""
    ranks = sorted(summary.ranks, key=_row_order)
    if len(ranks) <= MAX_ROWS:
        return ranks, 0
    marked = {e.rank for e in events if e.kind is EventKind.SIGNATURE_MATCHED}
    for event in events:
        if event.kind is EventKind.HANG_DETECTED:
            marked.update(int(r) for r in event.data.get("ranks", []))
    if summary.root_cause is not None:
        marked.add(summary.root_cause.cause.rank)
    marked.update(r.result.rank for r in ranks if r.result.state in (RankState.FAILED, RankState.SPAWN_FAILED))
    chosen = [r for r in ranks if r.result.rank in marked][:MAX_ROWS]
    for rank in ranks:
        if len(chosen) >= MAX_ROWS:
            break
        if rank.result.rank not in marked:
            chosen.append(rank)
    chosen.sort(key=_row_order)
    return chosen, len(ranks) - len(chosen)


def _rate_line(events: Sequence[Event], x: Any, mid: float) -> List[str]:
    """The rank's rate over time from its PROGRESS samples: steps per second when it prints steps,
    else lines per second; drawn inside its row, scaled to the row's own peak."""
    samples = [e for e in events if e.kind is EventKind.PROGRESS]
    if len(samples) < 2:
        return []
    use_steps = all(s.data.get("step") is not None for s in samples)
    key = "step" if use_steps else "lines"
    points: List[Tuple[float, float]] = []  # a step chart: each interval's rate, held across it
    for before, after in zip(samples, samples[1:]):
        dt = after.time - before.time
        if dt > 0:
            rate = max(0.0, (after.data[key] - before.data[key]) / dt)
            points.extend(((before.time, rate), (after.time, rate)))
    if not points:
        return []
    peak = max(rate for _, rate in points) or 1.0
    coords = " ".join(f"{x(t):.1f},{mid + BAR / 2 - (BAR * rate / peak):.1f}" for t, rate in points)
    unit = "steps/s" if use_steps else "lines/s"
    return [
        f"<polyline class='rate' points='{coords}' fill='none' stroke='#1f77b4' stroke-width='1.5'>"
        f"<title>{unit}, peak {peak:.1f}</title></polyline>"
    ]


def _marker(event: Event, x: Any, mid: float) -> List[str]:
    data = event.data
    if event.kind is EventKind.PROGRESS and data.get("first"):
        return [
            f"<circle class='marker first' cx='{x(event.time):.1f}' cy='{mid:.1f}' r='3' fill='#1f77b4'>"
            "<title>first output</title></circle>"
        ]
    if event.kind is EventKind.SIGNATURE_MATCHED:
        tx = x(data.get("line_time", event.time))
        colour = "#b03030" if data.get("signature_kind") == "cause" else SYMPTOM_COLOUR
        return [
            f"<path class='marker signature' d='M {tx:.1f} {mid - 8:.1f} l 6 11 l -12 0 z' fill='{colour}'>"
            f"<title>{_e(signature_label(data))} ({_e(data.get('cls'))}): {_e(str(data.get('line'))[:200])}"
            "</title></path>"
        ]
    return []


def _teardown_time(events: Sequence[Event]) -> Optional[float]:
    """When npulaunch began to stop the job: a failed rank, a fatal signature, a hang, a signal."""
    for event in events:
        failed = event.kind is EventKind.RANK_EXITED and event.data.get("state") == RankState.FAILED.value
        fatal = event.kind is EventKind.SIGNATURE_MATCHED and event.data.get("fatal")
        if failed or fatal or event.kind in (EventKind.HANG_DETECTED, EventKind.SIGNAL_RECEIVED):
            return event.time
    return None


def _warnings(plan: Optional[Dict[str, Any]]) -> str:
    warnings = (plan or {}).get("warnings") or []
    if not warnings:
        return ""
    return "<section><h2>warnings</h2><ul>" + "".join(f"<li>{_e(w)}</li>" for w in warnings) + "</ul></section>"


_CSS = """
body { font: 14px/1.4 system-ui, sans-serif; margin: 24px; color: #222; max-width: 1100px; }
h1 { font-size: 20px; } h2 { font-size: 16px; margin-top: 24px; }
.status { padding: 2px 8px; border-radius: 4px; color: #fff; background: #777; }
.status.succeeded { background: #3a9d5d; } .status.failed { background: #d62728; }
table.brief th { text-align: left; padding-right: 16px; color: #555; font-weight: normal; }
.cause { border-left: 4px solid #d62728; padding: 4px 12px; background: #fff5f5; }
.reason { font-weight: 600; } .where { color: #666; font-weight: normal; }
.attempts .lbl { font: 12px sans-serif; } .attempts .note { font: 11px sans-serif; fill: #444; }
.attempts .axis { font: 11px sans-serif; fill: #777; } .attempts line.gap { stroke: #777; stroke-dasharray: 3 2; }
.attempts line.tick { stroke: #eeeeee; }
.attempt-lines { font: 12px monospace; list-style: none; padding-left: 0; white-space: pre; }
pre { background: #f6f6f6; padding: 8px; overflow-x: auto; }
svg text.axis { font-size: 11px; fill: #777; } svg text.label { font-size: 12px; fill: #222; }
.legend { color: #555; font-size: 12px; }
"""

# Counts what was drawn into the page's data (a test reads it back through the browser).
_SCRIPT = (
    "document.body.dataset.ranksDrawn = document.querySelectorAll('svg.timeline g.rank:not(.helper)').length;"
    "document.body.dataset.failureMarkers = document.querySelectorAll('svg.timeline g.marker.failure').length;"
    "document.body.dataset.paceLines = document.querySelectorAll('svg.pace g.pace-rank[data-panel=busy]').length;"
    "document.body.dataset.paceSlow = document.querySelectorAll('svg.pace g.pace-rank.slow[data-panel=busy]').length;"
    "document.body.dataset.paceBands = document.querySelectorAll('svg.pace g.pace-band').length;"
)
