"""The job report as one self-contained HTML file (``report.html`` in the job directory, and
``npulaunch report JOB_DIR --html``): the job in brief, the root cause with its excerpt, the other
ranks grouped, and a per-rank timeline drawn as inline SVG (start, first output, step rate over time,
signatures, hangs, the failure, teardown). No network, no external file; the one small script only
counts what was drawn. Pure rendering from the summary and the events.
"""

from __future__ import annotations

import time
from typing import Any, Dict, List, Optional, Sequence, Tuple

from npulaunch.diagnose.cause import ranks_word
from npulaunch.diagnose.summary import AttemptRecord, JobStatus, JobSummary
from npulaunch.host.errorfile import raised_text
from npulaunch.host.events import Event, EventKind, signature_label
from npulaunch.host.records import RankState
from npulaunch.views.reporttext import code_lines

# the layout of the timeline (pixels); tests read the picture by these numbers
LEFT = 150  # room for the rank labels
WIDTH = 900  # the time axis
TOP = 40  # above the first row: the axis labels
ROW = 28  # one rank's row
BAR = 14  # the bar's height inside its row
MAX_ROWS = 256  # ranks drawn at most (the others are counted)
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


def _clock(epoch: Optional[float]) -> str:
    return "-" if epoch is None else time.strftime("%H:%M:%S", time.localtime(epoch))


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
        _attempts(summary),
        _timeline(summary, events),
        _root_cause(summary),
        _warnings(plan),
        f"<script>{_SCRIPT}</script>",
        "</body></html>",
    ]
    return "\n".join(p for p in parts if p) + "\n"


def _brief(summary: JobSummary, plan: Optional[Dict[str, Any]]) -> str:
    job = summary.job
    rows = [
        ("exit code", job.exit_code),
        ("ranks", f"{job.world_size} on {len(job.hosts)} host{'s' if len(job.hosts) != 1 else ''}"),
        ("hosts", ", ".join(job.hosts)),
        ("started", time.strftime("%Y-%m-%d %H:%M:%S", time.localtime(job.start_time))),
        ("duration", f"{job.duration_s:.1f} s"),
        ("job directory", job.job_dir),
    ]
    if job.stop_signal:
        rows.append(("stopped by", job.stop_signal))
    if plan and plan.get("ranks"):
        rows.insert(2, ("command", " ".join(plan["ranks"][0].get("argv", []))))
    cells = "".join(f"<tr><th>{_e(k)}</th><td>{_e(v)}</td></tr>" for k, v in rows)
    return f"<table class='brief'>{cells}</table>"


def _root_cause(summary: JobSummary) -> str:
    root = summary.root_cause
    if root is None:
        return "<p class='ok'>every rank ended as it should</p>" if summary.job.status is JobStatus.SUCCEEDED else ""
    cause = root.cause
    lines = [
        "<section class='cause'><h2>root cause</h2>",
        f"<p class='reason'>{_e(root.reason)} <span class='where'>(host {_e(cause.host)}, device "
        f"{_e(cause.device_id)}, pid {_e(root.pid)})</span></p>",
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


def _timeline(summary: JobSummary, events: Sequence[Event]) -> str:
    """One row per rank: its life as a bar coloured by how it ended, a line of its step rate (or
    lines per second) over time, and markers for its first output, signatures, hangs and the
    failure; a dashed line where npulaunch began to stop the job."""
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
    for tick in range(6):  # the time axis, seconds since the job started
        tx = LEFT + WIDTH * tick / 5
        svg.append(f"<line x1='{tx:.1f}' y1='{TOP - 8}' x2='{tx:.1f}' y2='{height - 20}' stroke='#eeeeee'/>")
        svg.append(f"<text x='{tx:.1f}' y='{TOP - 14}' class='axis'>{span * tick / 5:.1f} s</text>")
    by_rank: Dict[int, List[Event]] = {}
    for event in events:
        if isinstance(event.rank, int):
            by_rank.setdefault(event.rank, []).append(event)
    root_rank = summary.root_cause.cause.rank if summary.root_cause else None
    hangs: Dict[int, float] = {}  # rank -> when a hang was reported for it
    for event in events:
        if event.kind is EventKind.HANG_DETECTED:
            for hung in event.data.get("ranks", []):
                hangs.setdefault(int(hung), event.time)
    for row, rank in enumerate(ranks):
        r = rank.result
        y = TOP + ROW * row
        mid = y + ROW / 2
        colour = STATE_COLOURS.get(r.state, "#c7c7c7")
        ended = r.end_time if r.end_time is not None else end
        state = r.state.value + (f" ({r.signal or r.exit_code})" if r.state is not RankState.SUCCEEDED else "")
        svg.append(f"<g class='rank' data-rank='{r.rank}' data-state='{_e(r.state.value)}'>")
        svg.append(f"<title>rank {r.rank}, device {r.device_id} on {_e(r.host)}: {_e(state)}</title>")
        svg.append(f"<text x='6' y='{mid + 4:.1f}' class='label'>r{r.rank} d{r.device_id} {_e(r.host)}</text>")
        svg.append(
            f"<rect class='life' x='{x(r.start_time):.1f}' y='{mid - BAR / 2:.1f}' "
            f"width='{max(1.0, x(ended) - x(r.start_time)):.1f}' height='{BAR}' rx='3' fill='{colour}' opacity='0.35'/>"
        )
        svg.extend(_rate_line(by_rank.get(r.rank, []), x, mid))
        for event in by_rank.get(r.rank, []):
            svg.extend(_marker(event, x, mid))
        if r.rank in hangs:
            hx = x(hangs[r.rank])
            svg.append(
                f"<path class='marker hang' d='M {hx:.1f} {mid - 7:.1f} l 7 7 l -7 7 l -7 -7 z' fill='{HANG_COLOUR}'>"
                "<title>hang reported</title></path>"
            )
        if r.rank == root_rank:
            cause_time = summary.root_cause.cause.time if summary.root_cause else None
            cx = x(r.end_time if r.end_time is not None else cause_time)
            svg.append(
                f"<g class='marker failure' data-rank='{r.rank}'><title>root cause: {_e(state)}</title>"
                f"<line x1='{cx - 7:.1f}' y1='{mid - 7:.1f}' x2='{cx + 7:.1f}' y2='{mid + 7:.1f}' "
                f"stroke='{FAILURE_COLOUR}' stroke-width='4'/>"
                f"<line x1='{cx - 7:.1f}' y1='{mid + 7:.1f}' x2='{cx + 7:.1f}' y2='{mid - 7:.1f}' "
                f"stroke='{FAILURE_COLOUR}' stroke-width='4'/></g>"
            )
        svg.append("</g>")
    teardown = _teardown_time(events)
    if teardown is not None:
        tx = x(teardown)
        svg.append(
            f"<g class='teardown'><title>npulaunch began to stop the job</title><line x1='{tx:.1f}' y1='{TOP - 6}' "
            f"x2='{tx:.1f}' y2='{height - 20}' stroke='{TEARDOWN_COLOUR}' stroke-dasharray='4 3'/>"
            f"<text x='{tx - 3:.1f}' y='{height - 6}' class='axis' text-anchor='end'>teardown</text></g>"
        )
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
    return "<section><h2>timeline</h2>" + "\n".join(svg) + legend + "</section>"


def _drawn(summary: JobSummary, events: Sequence[Event]) -> Tuple[List[Any], int]:
    """The ranks the timeline draws, in rank order, and how many it leaves out: every rank when
    there are at most MAX_ROWS, else the root cause, the ranks that failed or reported a signature
    or a hang, then the first of the others (a 32k-rank job's page stays a page)."""
    ranks = sorted(summary.ranks, key=lambda r: r.result.rank)
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
    chosen.sort(key=lambda r: r.result.rank)
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


def _attempts(summary: JobSummary) -> str:
    """The attempts of a restarted or recovered job on one time axis: a bar per attempt (its colour its
    end), what ended it and what it excluded, the gap to the next (stopping, re-planning, resuming), what
    the next resumed from; then each attempt in words. The timeline below is the last attempt's."""
    attempts = summary.attempts or ()
    if len(attempts) < 2:
        return ""
    from npulaunch.views.reporttext import attempt_lines

    timed = [a for a in attempts if a.start_time is not None and a.end_time is not None]
    svg = _attempt_bars(timed) if timed else ""
    items = "".join(f"<li>{_e(line)}</li>" for line in attempt_lines(attempts))
    return (
        "<section><h2>attempts</h2><p>restarts and recoveries on one time axis (the timeline below shows the "
        f"last attempt)</p>{svg}<ul class='attempt-lines'>{items}</ul></section>"
    )


def _attempt_bars(timed: Sequence[AttemptRecord]) -> str:
    t0 = min(float(a.start_time or 0) for a in timed)
    span = max(max(float(a.end_time or 0) for a in timed) - t0, 1e-3)
    left, width, row = 130.0, 980.0, 30
    scale = (width - left - 330) / span

    def x(t: float) -> float:
        return left + (t - t0) * scale

    parts = [f"<text x='{left:.0f}' y='12' class='axis'>0 s</text>"]
    parts.append(f"<text x='{x(t0 + span):.0f}' y='12' class='axis' text-anchor='end'>{span:.1f} s</text>")
    for i, a in enumerate(timed):
        y = 20 + i * row
        start, end = float(a.start_time or 0), float(a.end_time or 0)
        colour = {"succeeded": "#2e7d32", "failed": "#c62828"}.get(a.status.value, "#9e9e9e")
        note = _bar_note(a)
        parts.append(f"<text x='4' y='{y + 14}' class='lbl'>attempt {a.attempt}: {_e(a.status.value)}</text>")
        parts.append(
            f"<rect x='{x(start):.1f}' y='{y}' width='{max((end - start) * scale, 2.0):.1f}' height='20' "
            f"fill='{colour}'><title>{_e(note)}</title></rect>"
        )
        parts.append(f"<text x='{x(end) + 6:.1f}' y='{y + 14}' class='note'>{_e(note)}</text>")
        following = timed[i + 1] if i + 1 < len(timed) else None
        if following is not None and following.start_time is not None:
            gap = float(following.start_time) - end
            parts.append(
                f"<line x1='{x(end):.1f}' y1='{y + 20}' x2='{x(float(following.start_time)):.1f}' "
                f"y2='{y + row}' class='gap'><title>{gap:.1f} s from the end of attempt {a.attempt} to the "
                f"start of attempt {following.attempt}</title></line>"
            )
    height = 20 + len(timed) * row + 6
    return (
        f"<svg class='attempts' width='{width:.0f}' height='{height}' role='img' "
        f"aria-label='attempts on one time axis'>{''.join(parts)}</svg>"
    )


def _bar_note(a: AttemptRecord) -> str:
    """What ended an attempt and what followed, or what it resumed from, in a few words."""
    said = []
    step = (a.resumed or {}).get("step")
    if a.attempt > 1 and a.resumed is not None:
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
.attempt-lines { font: 12px monospace; list-style: none; padding-left: 0; white-space: pre; }
pre { background: #f6f6f6; padding: 8px; overflow-x: auto; }
svg text.axis { font-size: 11px; fill: #777; } svg text.label { font-size: 12px; fill: #222; }
.legend { color: #555; font-size: 12px; }
"""

# Counts what was drawn into the page's data (a test reads it back through the browser).
_SCRIPT = (
    "document.body.dataset.ranksDrawn = document.querySelectorAll('svg.timeline g.rank').length;"
    "document.body.dataset.failureMarkers = document.querySelectorAll('svg.timeline g.marker.failure').length;"
)
