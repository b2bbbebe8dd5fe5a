"""``status`` and ``stop`` tell a running launcher from a dead one (issue 15): launcher.json's pid,
start time and boot id against this host's processes. A real launcher, SIGKILLed."""

from __future__ import annotations

import json
import signal
import subprocess
import sys
import time
from pathlib import Path

from helpers import base_env, marked_pids, npulaunch_argv, run_cli, wait_until

# each rank starts a grandchild in a session of its own that outlives its rank: what a dead
# launcher can leave behind
CODE = """
import os, subprocess, sys, time
subprocess.Popen([sys.executable, '-c', 'import time; time.sleep(120)'], start_new_session=True)
print('ready', flush=True)
time.sleep(120)
"""


def test_status_and_stop_after_the_launcher_was_killed(tmp_path: Path) -> None:
    path = tmp_path / "job.yaml"
    path.write_text(
        f"version: 1\njob:\n  command: [{sys.executable}, -c, {json.dumps(CODE)}]\n  log_dir: {tmp_path / 'logs'}\n"
        "hosts: [{host: localhost, devices: 2}]\nrank_table: none\n"
    )
    job_dir = tmp_path / "logs" / "dead"
    launcher = subprocess.Popen(
        npulaunch_argv("run", str(path), "--job-id", "dead", "--no-live"),
        stdout=subprocess.DEVNULL,
        stderr=subprocess.DEVNULL,
        env=base_env(),
    )
    logs = [job_dir / f"rank-{r}" / "stdout.log" for r in (0, 1)]
    assert wait_until(lambda: all(p.exists() and "ready" in p.read_text() for p in logs), 30)
    running = run_cli("status", str(job_dir))
    assert running.returncode == 0, running.stderr
    assert f"running (launcher {launcher.pid})" in running.stdout.splitlines()[0]

    launcher.send_signal(signal.SIGKILL)
    launcher.wait(10)
    uuid = json.loads((job_dir / "plan.json").read_text())["job_uuid"]
    time.sleep(0.5)
    status = run_cli("status", str(job_dir))
    assert status.returncode == 0, status.stderr
    head = status.stdout.splitlines()[0]
    assert head.startswith(f"job dead: not finished, launcher {launcher.pid} gone since "), status.stdout
    assert "running" not in status.stdout  # never "running" forever
    assert "unknown" in status.stdout
    if marked_pids(uuid):  # the grandchildren outlived everything: status names them, stop stops them
        assert f"`npulaunch stop {job_dir}` stops them" in status.stdout
    stop = run_cli("stop", str(job_dir))
    assert stop.returncode == 0, stop.stderr
    assert f"launcher {launcher.pid} gone" in stop.stdout
    assert wait_until(lambda: not marked_pids(uuid), 10)
    assert "none of the job's processes is left on this host" in run_cli("status", str(job_dir)).stdout
