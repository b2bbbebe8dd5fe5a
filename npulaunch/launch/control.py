"""Control a running job from another terminal: ``npulaunch stop JOB_DIR`` asks the job's launcher
to stop it (the launcher then stops every rank on every host through their agents).
"""

from __future__ import annotations

import os
import signal
from typing import Tuple

from npulaunch.diagnose.liveness import launcher_state
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
    try:
        finished = read_json(layout.summary_path) is not None
    except UsageError:  # a damaged summary.json is still a finished job's
        finished = True
    if finished:
        return "the job has already finished"
    state = launcher_state(layout)
    if state.alive is None:
        return f"cannot stop it from here: {state.why}"
    if not state.alive:
        if not state.leftovers:
            return f"its {state.why}; none of the job's processes is left on this host"
        return f"its {state.why}; " + _stop_leftovers(state.leftovers)
    os.kill(record["pid"], signal.SIGTERM)
    return f"asked launcher {record['pid']} to stop the job (SIGTERM)"


def _stop_leftovers(pids: Tuple[int, ...], grace_s: float = 5.0) -> str:
    """SIGTERM what a dead launcher left behind, SIGKILL what is still there after ``grace_s``."""
    import time

    from npulaunch.host.procs import alive, kill_pids

    kill_pids(pids, signal.SIGTERM)
    deadline = time.monotonic() + grace_s
    left = [pid for pid in pids if alive(pid)]
    while left and time.monotonic() < deadline:
        time.sleep(0.1)
        left = [pid for pid in left if alive(pid)]
    if left:
        kill_pids(left, signal.SIGKILL)
    return f"stopped its {len(pids)} leftover process(es) ({len(left)} with SIGKILL after {grace_s:g} s)"
