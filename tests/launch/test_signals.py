"""Signals to the launcher (SIGINT, SIGTERM, SIGHUP, SIGUSR1, Ctrl-C twice) and the launcher's
own death by SIGKILL: every rank and everything it started must be gone afterwards."""

from __future__ import annotations

import json
import os
import shutil
import signal
import subprocess
import sys
import time
from pathlib import Path
from typing import Dict, Optional

import psutil
import pytest
from helpers import (
    ROOT,
    base_env,
    live_pids,
    marked_pids,
    npulaunch_argv,
    rank_cmd,
    require,
    wait_until,
)


def start_job(
    log_dir: Path,
    marker: str,
    *rank_args: str,
    nproc: int = 3,
    grace: float = 1.0,
    env: Optional[Dict[str, str]] = None,
):
    argv = npulaunch_argv(
        "run",
        "--nproc-per-node",
        str(nproc),
        "--log-dir",
        str(log_dir),
        "--job-id",
        "t",
        "--grace-period",
        str(grace),
        *rank_cmd("rank.py", *rank_args),
    )
    proc = subprocess.Popen(
        argv,
        cwd=str(ROOT),
        env=base_env({"NPLTEST_MARKER": marker, **(env or {})}),
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
    )
    return proc, log_dir / "t"


def wait_ready(job: Path, count: int, timeout_s: float = 20) -> None:
    """Until every rank has printed its first line (so its signal handlers are installed)."""

    def ready() -> bool:
        return all(
            (job / f"rank-{r}" / "stdout.log").exists() and "ready" in (job / f"rank-{r}" / "stdout.log").read_text()
            for r in range(count)
        )

    assert wait_until(ready, timeout_s), "ranks did not start"


def finish(proc: subprocess.Popen, timeout: float = 20):
    out, err = proc.communicate(timeout=timeout)
    return proc.returncode, out, err


@pytest.mark.parametrize("signum", [signal.SIGINT, signal.SIGTERM, signal.SIGHUP])
def test_a_stop_signal_stops_every_rank_and_exits_128_plus_n(log_dir: Path, marker: str, signum: int) -> None:
    proc, job = start_job(log_dir, marker, "*=hang")
    wait_ready(job, 3)
    proc.send_signal(signum)
    code, out, err = finish(proc)
    assert code == 128 + signum, err
    report = json.loads((job / "summary.json").read_text())
    assert report["job"]["status"] == "stopped"
    assert report["job"]["stop_signal"] == signal.Signals(signum).name
    assert [r["state"] for r in report["ranks"]] == ["stopped"] * 3


def test_ctrl_c_twice_kills_at_once(log_dir: Path, marker: str) -> None:
    proc, job = start_job(log_dir, marker, "*=ignore_term", grace=60)
    wait_ready(job, 3)
    wait_until(lambda: all("ignoring" in (job / f"rank-{r}" / "stdout.log").read_text() for r in range(3)), 10)
    proc.send_signal(signal.SIGINT)
    time.sleep(0.3)
    assert proc.poll() is None  # the ranks ignore SIGTERM; a 60 s grace period is running
    started = time.monotonic()
    proc.send_signal(signal.SIGINT)
    code, out, err = finish(proc)
    assert time.monotonic() - started < 2.0
    assert code == 130
    report = json.loads((job / "summary.json").read_text())
    assert [r["signal"] for r in report["ranks"]] == ["SIGKILL"] * 3


def test_sigusr1_is_forwarded_to_every_rank(log_dir: Path, marker: str) -> None:
    proc, job = start_job(log_dir, marker, "*=usr1", nproc=2)
    wait_until(
        lambda: all(
            (job / f"rank-{r}" / "stdout.log").exists() and "waiting" in (job / f"rank-{r}" / "stdout.log").read_text()
            for r in range(2)
        ),
        20,
    )
    proc.send_signal(signal.SIGUSR1)
    code, out, err = finish(proc)
    assert code == 0, err
    assert out.count("got SIGUSR1") == 2
    assert "forwarded SIGUSR1" in err


def test_sigkill_of_the_launcher_leaves_no_process_behind(log_dir: Path, marker: str) -> None:
    # ranks with grandchildren in their group and daemons in their own session
    proc, job = start_job(log_dir, marker, "0=grandchild:hang", "1=escape:hang", "*=hang")
    wait_ready(job, 3)
    assert wait_until(lambda: len(marked_pids(marker)) >= 1 + 3 + 2 + 1, 10)  # launcher, ranks, 2 kids, guard?
    rank_pids = [
        e["pid"]
        for e in map(json.loads, (job / "events.jsonl").read_text().splitlines())
        if e["kind"] == "rank_started"
    ]
    proc.kill()
    proc.communicate(timeout=10)
    assert wait_until(lambda: not marked_pids(marker) and not live_pids(rank_pids), 5.0), marked_pids(marker)


@pytest.mark.parametrize("how", ["setpriv", "prctl"])
def test_ranks_die_with_the_launcher_even_without_the_guard(log_dir: Path, marker: str, how: str) -> None:
    """Even the guard can die: PR_SET_PDEATHSIG alone still takes the ranks down, whether set by
    util-linux setpriv or (where setpriv is missing, as with PATH below) by prctl before exec."""
    if how == "setpriv":
        require(shutil.which("setpriv") is not None, "util-linux setpriv")
    env = {"PATH": os.path.dirname(sys.executable)} if how == "prctl" else None
    proc, job = start_job(log_dir, marker, "*=hang", nproc=2, env=env)
    wait_ready(job, 2)
    rank_pids = [
        e["pid"]
        for e in map(json.loads, (job / "events.jsonl").read_text().splitlines())
        if e["kind"] == "rank_started"
    ]
    guard = [p for p in marked_pids(marker) if p not in rank_pids and p != proc.pid]
    if how == "prctl":
        cmdlines = [" ".join(psutil.Process(pid).cmdline()) for pid in rank_pids]
        assert not any("setpriv" in line for line in cmdlines)
    for pid in guard:  # everything of the job that is neither the launcher nor a rank
        try:
            os.kill(pid, signal.SIGKILL)
        except OSError:
            pass
    proc.kill()
    proc.communicate(timeout=10)
    assert wait_until(lambda: not live_pids(rank_pids), 5.0)
