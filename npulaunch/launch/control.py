"""Control a running job from another terminal: ``npulaunch stop JOB_DIR`` asks the job's launcher
to stop it (the launcher then stops every rank on every host through their agents).
"""

from __future__ import annotations

import os
import signal

from npulaunch.host.agent.procs import start_ticks
from npulaunch.host.errors import UsageError
from npulaunch.host.files import read_json
from npulaunch.plan.layout import JobLayout


def stop_job(job_dir: str) -> str:
    """Ask the launcher of a running job to stop it (SIGTERM: it stops every rank on every host
    through their agents). Only that job's launcher is signalled: its pid and start time must
    match what it recorded."""
    layout = JobLayout.open(job_dir)
    record = read_json(layout.launcher_path)
    if record is None:
        if not os.path.exists(layout.events_path):
            raise UsageError(f"{job_dir} is not an npulaunch job directory (no events.jsonl)")
        raise UsageError(f"{job_dir} has no launcher.json: not started by this npulaunch, or not yet")
    if read_json(layout.summary_path) is not None:
        return "the job has already finished"
    ticks = record.get("start_ticks")
    if ticks is None or start_ticks(record["pid"]) != ticks:
        return "its launcher is gone; its agents stop their ranks by themselves"
    os.kill(record["pid"], signal.SIGTERM)
    return f"asked launcher {record['pid']} to stop the job (SIGTERM)"
