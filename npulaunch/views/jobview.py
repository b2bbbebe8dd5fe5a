"""Read a job directory back: ``npulaunch report JOB_DIR`` (the final report again) and
``npulaunch status JOB_DIR`` (per rank: state, device, last line, lines, time since its last
output), for a running or a finished job. Reads files only; never touches the job's processes.
"""

from __future__ import annotations

import json
import os
import time
from typing import Any, Dict, List, Optional

from npulaunch.host.agent.tail import last_lines
from npulaunch.host.errors import UsageError
from npulaunch.diagnose.report import render_report


def _load(path: str) -> Optional[Any]:
    try:
        with open(path, encoding="utf-8") as handle:
            return json.load(handle)
    except FileNotFoundError:
        return None
    except (OSError, ValueError) as exc:
        raise UsageError(f"cannot read {path}: {exc}") from None


def _events(job_dir: str) -> List[Dict[str, Any]]:
    path = os.path.join(job_dir, "events.jsonl")
    if not os.path.exists(path):
        raise UsageError(f"{job_dir} is not an npulaunch job directory (no events.jsonl)")
    events = []
    with open(path, encoding="utf-8") as handle:
        for line in handle:
            try:
                events.append(json.loads(line))
            except ValueError:  # a line being written as we read
                break
    return events


def report_text(job_dir: str, as_json: bool) -> str:
    summary = _load(os.path.join(job_dir, "summary.json"))
    if summary is None:
        _events(job_dir)  # says whether this is a job directory at all
        raise UsageError(f"{job_dir} has no summary.json yet: the job is still running (or its launcher "
                         "was killed); see npulaunch status")
    return json.dumps(summary, indent=2) + "\n" if as_json else render_report(summary)


def _count_lines(path: str) -> int:
    try:
        with open(path, "rb") as handle:
            return sum(chunk.count(b"\n") for chunk in iter(lambda: handle.read(1 << 20), b""))
    except OSError:
        return 0


def status_rows(job_dir: str, now: Optional[float] = None) -> List[Dict[str, Any]]:
    """One row per rank from the events and the log files."""
    now = time.time() if now is None else now
    rows: Dict[int, Dict[str, Any]] = {}
    for event in _events(job_dir):
        rank = event.get("rank")
        if not isinstance(rank, int):
            continue
        if event["kind"] == "rank_started":
            rows[rank] = {"rank": rank, "device_id": event.get("device_id"), "pid": event.get("pid"),
                          "state": "running", "started": event["time"], "stdout": event.get("stdout"),
                          "stderr": event.get("stderr")}
        elif event["kind"] == "rank_exited" and rank in rows:
            rows[rank]["state"] = event["state"]
            rows[rank]["exit"] = event.get("signal") or event.get("exit_code")
        elif event["kind"] == "signature_matched" and rank in rows:
            rows[rank].setdefault("signatures", []).append(event.get("code") or event.get("signature"))
    for row in rows.values():
        logs = [p for p in (row.get("stdout"), row.get("stderr")) if p and os.path.exists(p)]
        row["lines"] = sum(_count_lines(p) for p in logs)
        last_write = max((os.path.getmtime(p) for p in logs), default=row["started"])
        row["silent_s"] = round(max(0.0, now - last_write), 1)
        row["last_line"] = (last_lines(row["stdout"], 1) or [""])[-1] if row.get("stdout") else ""
    return [rows[r] for r in sorted(rows)]


def status_text(job_dir: str) -> str:
    events = _events(job_dir)
    finished = next((e for e in events if e["kind"] == "job_finished"), None)
    head = f"job {os.path.basename(os.path.normpath(job_dir))}: " + (
        f"{finished['status']} (exit code {finished['exit_code']})" if finished else "running")
    lines = [head, f"{'rank':>4}  {'device':>6}  {'state':<20} {'lines':>8}  {'silent':>7}  last line"]
    for row in status_rows(job_dir):
        state = row["state"] + (f" ({row['exit']})" if row.get("exit") not in (None, 0) else "")
        if row.get("signatures"):
            state += " " + ",".join(row["signatures"])
        lines.append(f"{row['rank']:>4}  {row['device_id']:>6}  {state:<20} {row['lines']:>8}  "
                     f"{row['silent_s']:>6}s  {row['last_line'][:80]}")
    return "\n".join(lines) + "\n"


def stop_job(job_dir: str) -> str:
    """Ask the launcher of a running job to stop it (SIGTERM: it stops every rank on every host
    through their agents). Only that job's launcher is signalled: its pid and start time must
    match what it recorded."""
    import signal

    from npulaunch.host.agent.procs import start_ticks

    record = _load(os.path.join(job_dir, "launcher.json"))
    if record is None:
        _events(job_dir)
        raise UsageError(f"{job_dir} has no launcher.json: not started by this npulaunch, or not yet")
    if _load(os.path.join(job_dir, "summary.json")) is not None:
        return "the job has already finished"
    ticks = record.get("start_ticks")
    if ticks is None or start_ticks(record["pid"]) != ticks:
        return "its launcher is gone; its agents stop their ranks by themselves"
    os.kill(record["pid"], signal.SIGTERM)
    return f"asked launcher {record['pid']} to stop the job (SIGTERM)"
