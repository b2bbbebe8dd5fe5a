"""Read a job directory back: ``npulaunch report JOB_DIR`` (the final report again) and
``npulaunch status JOB_DIR`` (per rank: host, device, state, lines, time since its last output, last
line, in columns fitted to the terminal; with restarts, of the latest attempt), for a running or a
finished job. Reads files only, through JobLayout; never touches the job's processes.
"""

from __future__ import annotations

import json
import os
import re
import sys
import time
from typing import Any, Dict, List, Optional, Tuple

from npulaunch.diagnose.jsonfields import SummaryError
from npulaunch.diagnose.liveness import launcher_state
from npulaunch.diagnose.records import load_events
from npulaunch.diagnose.stragglers import describe as describe_straggler
from npulaunch.diagnose.summary import AttemptRecord, JobSummary
from npulaunch.host.errors import UsageError
from npulaunch.host.events import Event, EventKind, signature_label
from npulaunch.host.files import read_json
from npulaunch.host.spec import HELPER_RANK
from npulaunch.host.tail import last_lines
from npulaunch.plan.layout import JobLayout
from npulaunch.views.columns import Column, fit_table, terminal_width
from npulaunch.views.reporttext import render_report

HTML_REPORT = "report.html"


def report_html(job_dir: str, summary: Optional[JobSummary] = None) -> str:
    """The job's report as a self-contained HTML page (views/htmlreport.py): its summary, its
    latest attempt's events, its plan."""
    from npulaunch.views.htmlreport import render_html

    layout = JobLayout.open(job_dir)
    if summary is None:
        document = read_json(layout.summary_path)
        if document is None:
            raise UsageError(f"{job_dir} has no summary.json yet: the job is still running; see npulaunch status")
        summary = JobSummary.from_json(document, layout.summary_path)
    try:
        plan = read_json(layout.plan_path)
    except UsageError:
        plan = None
    return render_html(summary, load_events(layout, job_dir), plan if isinstance(plan, dict) else None)


def write_html_report(summary: JobSummary, directory: str) -> Optional[str]:
    """Write report.html beside summary.json (mode 0600, whole or not at all); the path, or None
    with the reason printed when it cannot be written (the job's own record is already there)."""
    from npulaunch.host.files import write_private

    path = os.path.join(directory, HTML_REPORT)
    try:
        write_private(path, report_html(directory, summary))
    except (OSError, UsageError) as exc:
        sys.stderr.write(f"npulaunch: warning: cannot write {path}: {exc}\n")
        return None
    return path


def report_text(job_dir: str, as_json: bool) -> str:
    """The finished job's report (with restarts: the last attempt's, listing every attempt), or
    its summary.json as it is."""
    layout = JobLayout.open(job_dir)
    try:
        document = read_json(layout.summary_path)
    except UsageError as exc:  # not JSON (truncated, invalid UTF-8, ...)
        return f"damaged: {exc}; the job as its events.jsonl tells it:\n" + status_text(job_dir)
    if document is None:
        load_events(layout, job_dir)  # says whether this is a job directory at all
        raise UsageError(
            f"{job_dir} has no summary.json yet: the job is still running (or its launcher "
            "was killed); see npulaunch status"
        )
    try:
        summary = JobSummary.from_json(document, layout.summary_path)
    except SummaryError as exc:  # damaged: what the events still tell, and one line on the damage
        return f"damaged: {exc}; the job as its events.jsonl tells it:\n" + status_text(job_dir)
    return json.dumps(document, indent=2) + "\n" if as_json else render_report(summary)


def _count_lines(path: str) -> int:
    try:
        with open(path, "rb") as handle:
            return sum(chunk.count(b"\n") for chunk in iter(lambda: handle.read(1 << 20), b""))
    except OSError:
        return 0


def _mtime(path: str) -> Optional[float]:
    try:
        return os.path.getmtime(path)
    except OSError:
        return None


def status_rows(events: List[Event], now: float, ended: bool = False) -> List[Dict[str, Any]]:
    """One row per rank from an attempt's events and the log files they name. ``now``: the time
    silences are measured to (a finished job's end: they stop counting). ``ended``: the launcher is
    gone, so a rank it never saw exit is "unknown", not "running"."""
    rows: Dict[int, Dict[str, Any]] = {}
    for event in events:
        try:
            _status_row(rows, event)
        except (KeyError, TypeError, ValueError, AttributeError):  # an event of the right kind, the wrong shape
            continue
    return _finish_rows(rows, now, ended)


def _status_row(rows: Dict[int, Dict[str, Any]], event: Event) -> None:
    rank, data = event.rank, event.data
    if not isinstance(rank, int):
        return
    if event.kind is EventKind.RANK_STARTED:
        rows[rank] = {
            "rank": rank,
            "device_id": data.get("device_id"),
            "pid": data.get("pid"),
            "host": event.host,
            "state": "running",
            "started": float(event.time),
            "stdout": _text(data.get("stdout")),
            "stderr": _text(data.get("stderr")),
        }
    elif event.kind is EventKind.RANK_EXITED and rank in rows:
        rows[rank]["state"] = str(data["state"])
        rows[rank]["exit"] = data.get("signal") or data.get("exit_code")
    elif event.kind is EventKind.SIGNATURE_MATCHED and rank in rows:
        rows[rank].setdefault("signatures", []).append(signature_label(data))
    elif event.kind is EventKind.RANK_SLOW and rank in rows:
        if data["state"] == "recovered":
            rows[rank].pop("slow", None)
        else:  # slow, excluded: diagnose/stragglers.py's record
            rows[rank]["slow"] = {k: data.get(k) for k in ("factor", "since_step", "since", "state")}


def slow_now(events: List[Event]) -> List[Dict[str, Any]]:
    """The stragglers named and not released, as their last RANK_SLOW event says."""
    last: Dict[int, Dict[str, Any]] = {}
    for event in events:
        if event.kind is EventKind.RANK_SLOW and isinstance(event.rank, int):
            last[event.rank] = dict(event.data, rank=event.rank, host=event.host)
    return [data for _, data in sorted(last.items()) if data.get("state") != "recovered"]


def _text(value: Any) -> Optional[str]:
    return value if isinstance(value, str) else None


def _finish_rows(rows: Dict[int, Dict[str, Any]], now: float, ended: bool) -> List[Dict[str, Any]]:
    for row in rows.values():
        if ended and row["state"] == "running":
            row["state"] = "unknown"
        logs = [p for p in (row.get("stdout"), row.get("stderr")) if p and os.path.exists(p)]
        row["lines"] = sum(_count_lines(p) for p in logs)
        last_write = max((os.path.getmtime(p) for p in logs), default=row["started"])
        row["silent_s"] = round(max(0.0, now - last_write), 1)
        row["last_line"] = (last_lines(row["stdout"], 1) or [""])[-1] if row.get("stdout") else ""
    return [rows[r] for r in sorted(rows, key=lambda r: (r == HELPER_RANK, r))]  # the scheduler last


def _earlier_attempts(layout: JobLayout) -> List[str]:
    """The attempts of a restarted or recovered job: from the job's summary.json once it has ended (where
    they ran, what they resumed from, what was excluded), else from each earlier attempt's own summary. A
    file that cannot be read is left out: the damage is said elsewhere."""
    from dataclasses import replace

    from npulaunch.views.reporttext import attempt_lines

    if not layout.attempt:
        return []
    records: List[AttemptRecord] = []
    whole = _summary_or_none(layout.summary_path)
    if whole is not None and whole.attempts:
        records = list(whole.attempts)
    else:
        for number in layout.attempts_found():
            path = replace(layout, attempt=number).attempt_summary_path
            own = _summary_or_none(path) if number < layout.attempt else None
            if own is not None:
                records.append(own.attempt_record(number, os.path.dirname(path)))
    if not records or (len(records) == 1 and records[0].attempt == layout.attempt):
        return []
    return ["attempts:"] + ["  " + line for line in attempt_lines(records)]


def _summary_or_none(path: str) -> Optional[JobSummary]:
    try:
        document = read_json(path)
        return JobSummary.from_json(document, path) if isinstance(document, dict) else None
    except (UsageError, SummaryError):
        return None


# npulaunch status's columns: as wide as their content; on a narrow terminal the host and the last line
# are cut with an ellipsis (the wider first), then the state; never the numbers
STATUS_COLUMNS = (
    Column("rank", right=True),
    Column("host", min_width=8),
    Column("device", right=True),
    Column("state", min_width=12, keep=1),
    Column("lines", right=True),
    Column("silent", right=True),
    Column("last line", min_width=10),
)
LAST_LINE_CHARS = 400  # of a rank's last line, at most, before the table cuts it to its column


def status_text(job_dir: str, width: Optional[int] = None) -> str:
    """``npulaunch status``: the job's state, then a row per rank fitted to ``width`` columns (the
    terminal's, or 80 off one), then its earlier attempts."""
    layout = JobLayout.open(job_dir)
    damage: List[str] = []
    events = load_events(layout, job_dir, damage)
    head, end = _status_head(layout, job_dir, events)
    rows = status_rows(events, time.time() if end is None else end, ended=end is not None)
    lines = head + [f"damaged: {d}" for d in damage]
    lines += status_table(rows, width or terminal_width())
    lines += [f"slow: {describe_straggler(record)}" for record in slow_now(events)]
    lines += _earlier_attempts(layout)
    return "\n".join(lines) + "\n"


def _status_head(layout: JobLayout, job_dir: str, events: List[Event]) -> Tuple[List[str], Optional[float]]:
    """The job's state in a line (and notes on a launcher that is gone), and the time its ranks'
    silences are measured to: the job's end, the last write of a job whose launcher is gone, or None (now)."""
    finished = next((e for e in events if e.kind is EventKind.JOB_FINISHED), None)
    attempt = f" (attempt {layout.attempt})" if layout.attempt else ""
    name = f"job {os.path.basename(os.path.normpath(job_dir))}{attempt}"
    if finished is not None:
        when = time.strftime("%Y-%m-%d %H:%M:%S", time.localtime(finished.time))
        data = finished.data
        return [f"{name}: {data['status']} (exit code {data['exit_code']}), finished {when}"], finished.time
    state = launcher_state(layout)
    if state.alive is not False:
        return [f"{name}: running ({state.why})"], None
    if state.leftovers:
        note = (
            f"processes of the job still alive on this host: {', '.join(map(str, state.leftovers[:10]))}"
            f"{' ...' if len(state.leftovers) > 10 else ''}; `npulaunch stop {job_dir}` stops them"
        )
    else:
        note = "none of the job's processes is left on this host"
    return [f"{name}: not finished, {state.why}", note], _mtime(layout.events_path)


def status_table(rows: List[Dict[str, Any]], width: int) -> List[str]:
    """The ranks' rows (status_rows) as a table in ``width`` columns: the heading, then a line a rank."""
    cells = []
    for row in rows:
        state = row["state"] + (f" ({row['exit']})" if row.get("exit") not in (None, 0) else "")
        if row.get("signatures"):
            state += " " + ",".join(row["signatures"])
        if row.get("slow"):
            state += f" SLOW {float(row['slow']['factor']):.1f}×"
        helper = row["rank"] == HELPER_RANK  # a framework's scheduler: no rank, no NPU
        device = row.get("device_id")
        cells.append(
            (
                "sched" if helper else str(row["rank"]),
                str(row.get("host") or "-"),
                "-" if helper or device is None else str(device),
                state,
                str(row["lines"]),
                f"{row['silent_s']}s",
                _one_line(str(row["last_line"])),
            )
        )
    return fit_table(STATUS_COLUMNS, cells, width)


def _one_line(text: str) -> str:
    """A log line as one table cell: what a terminal shows of a progress line (after its last ``\\r``),
    tabs and other control characters as blanks (they would break the columns up)."""
    shown = text.rstrip("\r").rsplit("\r", 1)[-1][:LAST_LINE_CHARS]
    return re.sub(r"[\x00-\x1f\x7f]", " ", shown).strip()
