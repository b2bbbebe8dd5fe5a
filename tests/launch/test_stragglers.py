"""Straggler detection end to end, with real torch (gloo) ranks slowed from outside: a test thread sends one
rank SIGSTOP and SIGCONT in a duty cycle (the rank's own code knows nothing of it). The slow rank is named
in ``npulaunch status`` while the job runs and in summary.json; a clean run names nobody; a pause of every
rank at once names nobody; with ``action: exclude`` the slow rank's NPU is excluded and the job resumes on
the spare from the newest checkpoint."""

from __future__ import annotations

import importlib.util
import json
import os
import signal
import sys
import threading
import time
from pathlib import Path
from typing import Any, Dict, List, Optional

import psutil
import pytest
from helpers import RANKS, require, run_cli

# a rank's pace against its peers': another test's load on this machine makes ranks look slow (load1 15 named
# a rank of a clean run, and rank 0 instead of the slowed rank 2), so these run with no other slow test at once
pytestmark = pytest.mark.alone

TRAIN = RANKS / "torch_train_ckpt.py"
PERIOD_S = 0.02  # a duty cycle much shorter than a step: the rank's work is slowed, not shifted
# 2 s windows, not the default 5 s (tests/host/test_timing.py proves that one), and a rest of 20 ms after each
# step: a run's windows are known from its steps (300 steps take at least 6 s: 3 windows) and four ranks on this
# machine's two cores are not so busy that its scheduler makes one look slow in a short window (1 s windows with
# no rest named a rank of a clean run)
TIMING = {"NPULAUNCH_TIMING": "pace_window_s=2"}


def job_yaml(tmp_path: Path, marker: str, final: int, extra: str = "", devices: str = "[0, 1, 2, 3]") -> Path:
    path = tmp_path / "job.yaml"
    path.write_text(
        "framework: pytorch\n"
        f"job:\n  command: [{sys.executable}, {TRAIN}, '{final}']\n  log_dir: {tmp_path / 'logs'}\n"
        "  id: slow\n  grace_period_s: 2\n"
        f"hosts:\n  - host: localhost\n    devices: {devices}\n"
        "env: {CKPT_DIR: 'ckpt/{device_id}', CKPT_EVERY: '25', TRAIN_STEP_S: '0.02', TRAIN_WORK: '20', "
        f"GLOO_SOCKET_IFNAME: lo, NPLTEST_MARKER: {marker}}}\n"
        "monitor: {health_interval_s: 0}\n" + extra
    )
    return path


def rank_pids(marker: str, ranks: List[int], attempt_dir: str) -> Dict[int, int]:
    """The pids of the job's ranks (by their RANK and their rank directory's attempt)."""
    found: Dict[int, int] = {}
    for proc in psutil.process_iter(["environ"]):
        env = proc.info.get("environ") or {}
        if env.get("NPLTEST_MARKER") == marker and attempt_dir in env.get("NPULAUNCH_RANK_DIR", ""):
            rank = int(env.get("RANK", "-1"))
            if rank in ranks:
                found[rank] = proc.pid
    return found


class SlowDown(threading.Thread):
    """Once the ranks are past ``after_step`` (rank 0's log), SIGSTOP/SIGCONT ``ranks`` together in a duty
    cycle (``stopped`` of every PERIOD_S) until they are gone or ``stop`` is set."""

    def __init__(self, tmp_path: Path, marker: str, ranks: List[int], stopped: float, after_step: int = 30) -> None:
        super().__init__(daemon=True)
        self.log = tmp_path / "logs" / "slow" / "rank-0" / "stdout.log"
        self.marker, self.ranks, self.stopped, self.after_step = marker, ranks, stopped, after_step
        self.attempt_dir = str(tmp_path / "logs" / "slow" / "rank-")
        self.stop = threading.Event()
        self.began: Optional[float] = None

    def run(self) -> None:
        deadline = time.monotonic() + 120
        while not self.stop.is_set() and time.monotonic() < deadline:
            text = self.log.read_text() if self.log.exists() else ""
            if f"step {self.after_step}/" in text:
                break
            time.sleep(0.05)
        pids = rank_pids(self.marker, self.ranks, self.attempt_dir)
        assert sorted(pids) == sorted(self.ranks), pids
        self.began = time.time()
        try:
            while not self.stop.is_set():
                for pid in pids.values():
                    os.kill(pid, signal.SIGSTOP)
                time.sleep(PERIOD_S * self.stopped)
                for pid in pids.values():
                    os.kill(pid, signal.SIGCONT)
                time.sleep(PERIOD_S * (1 - self.stopped))
        except ProcessLookupError:
            pass
        finally:
            for pid in pids.values():
                try:
                    os.kill(pid, signal.SIGCONT)
                except ProcessLookupError:
                    pass


def run_job(
    path: Path, slow: Optional[SlowDown] = None, watch_status: bool = False, env: Optional[Dict[str, str]] = None
) -> Dict[str, Any]:
    """Run the job (with the slow-down going); with ``watch_status``, poll `npulaunch status` while it runs
    and keep the first output that marks a rank SLOW."""
    require(importlib.util.find_spec("torch") is not None, "torch (pip install -e '.[torch]')")
    seen: List[str] = []
    done = threading.Event()
    job_dir = path.parent / "logs" / "slow"

    def poll() -> None:
        while not done.is_set():
            if (job_dir / "events.jsonl").exists():
                result = run_cli("status", str(job_dir), timeout=30)
                if "SLOW" in result.stdout:
                    seen.append(result.stdout)
                    return
            time.sleep(1.0)

    poller = threading.Thread(target=poll, daemon=True)
    if slow is not None:
        slow.start()
    if watch_status:
        poller.start()
    try:
        result = run_cli("run", "--no-live", str(path), timeout=300, env={**TIMING, **(env or {})}, standins=bool(env))
    finally:
        done.set()
        if slow is not None:
            slow.stop.set()
            slow.join(5)
    summary = json.loads((job_dir / "summary.json").read_text())
    logs = sorted(job_dir.glob("attempt-*/events.jsonl")) or [job_dir / "events.jsonl"]
    events = [json.loads(line) for log in logs for line in log.read_text().splitlines()]
    return {"result": result, "summary": summary, "events": events, "status": seen, "dir": job_dir}


def test_a_rank_slowed_from_outside_is_named_while_the_job_runs(tmp_path: Path, marker: str) -> None:
    # the npu-smi stand-in says NPU 2 runs at 800 MHz under load (others at their rated 1800): the evidence
    perf = tmp_path / "perf"
    perf.write_text("2 aicore_mhz=800 usage=90\n")
    path = job_yaml(tmp_path, marker, 220)
    path.write_text(path.read_text().replace("health_interval_s: 0", "health_interval_s: 1"))
    slow = SlowDown(tmp_path, marker, [2], stopped=0.75)
    job = run_job(path, slow, watch_status=True, env={"NPU_STANDIN_PERF": str(perf)})
    assert job["result"].returncode == 0, job["result"].stderr
    named = job["summary"]["stragglers"]
    assert [(s["rank"], s["device"], s["host"]) for s in named] == [(2, 2, "localhost")], named
    evidence = named[0]["evidence"]
    assert named[0]["factor"] >= 1.15 and evidence["wait_s"] < evidence["peers_wait_s"]
    assert evidence["npu"] == ["NPU 2 AI Core frequency 800 MHz, throttled below its rated 1800 MHz (others 1800)"]
    assert evidence["cpus"] >= 1 and evidence["load1"] is not None
    assert slow.began is not None and named[0]["since"] >= slow.began - 6.0  # where it began, give or take a window
    first = [e for e in job["events"] if e["kind"] == "rank_slow"][0]
    assert first["time"] - slow.began < 60, first  # named within a minute of the slow-down
    assert job["status"], "npulaunch status never marked a rank SLOW while the job ran"
    row = next(line for line in job["status"][0].splitlines() if " SLOW " in line)
    assert row.split()[0] == "2", job["status"][0]
    assert "slow: rank 2 (host localhost, NPU 2)" in job["status"][0]
    console = job["result"].stderr + job["result"].stdout
    assert "slow rank: rank 2 (host localhost, NPU 2)" in console and "throttled below its rated" in console
    report = run_cli("report", str(job["dir"]), timeout=30).stdout
    assert "slow rank: rank 2 (host localhost, NPU 2)" in report


def test_a_clean_run_names_nobody(tmp_path: Path, marker: str) -> None:
    job = run_job(job_yaml(tmp_path, marker, 300))
    assert job["result"].returncode == 0, job["result"].stderr
    paces = [e for e in job["events"] if e["kind"] == "rank_pace"]
    assert len(paces) >= 3 and all(len(e["ranks"]) == 4 for e in paces[:-1])  # the ranks were timed
    assert job["summary"]["stragglers"] == [], job["summary"]["stragglers"]


def test_a_pause_of_every_rank_at_once_names_nobody(tmp_path: Path, marker: str) -> None:
    slow = SlowDown(tmp_path, marker, [0, 1, 2, 3], stopped=0.5)
    job = run_job(job_yaml(tmp_path, marker, 160), slow)
    assert job["result"].returncode == 0, job["result"].stderr
    assert slow.began is not None
    assert job["summary"]["stragglers"] == [], job["summary"]["stragglers"]


def test_exclude_moves_the_slow_ranks_work_to_a_spare_and_resumes(tmp_path: Path, marker: str) -> None:
    final = 160
    extra = (
        "monitor: {health_interval_s: 0, stragglers: {action: exclude, exclude_after_s: 3}}\n"
        "recovery:\n  checkpoint_dir: ckpt/{device_id}\n"
    )
    path = job_yaml(tmp_path, marker, final, devices="[0, 1, 2, 3]\n    spare_devices: [4]")
    path.write_text(path.read_text().replace("monitor: {health_interval_s: 0}\n", extra))
    slow = SlowDown(tmp_path, marker, [2], stopped=0.75)
    slow.log = tmp_path / "logs" / "slow" / "attempt-1" / "rank-0" / "stdout.log"
    slow.attempt_dir = str(tmp_path / "logs" / "slow" / "attempt-1" / "rank-")
    job = run_job(path, slow)
    result = job["result"]
    assert result.returncode == 0, result.stderr
    summary = job["summary"]
    attempts = summary["attempts"]
    assert [a["status"] for a in attempts] == ["failed", "succeeded"], attempts
    assert attempts[0]["root_cause"]["cls"] == "slow_npu" and attempts[0]["root_cause"]["rank"] == 2
    assert [(e["host"], e["device"]) for e in attempts[0]["excluded"]] == [("localhost", 2)], attempts[0]
    excluded = [s for s in summary["stragglers"] if s["state"] == "excluded"]
    assert [(s["rank"], s["attempt"]) for s in excluded] == [(2, 1)], summary["stragglers"]
    assert attempts[1]["devices"] == {"localhost": [0, 1, 4, 3]}  # rank 2 on the spare
    second = tmp_path / "logs" / "slow" / "attempt-2"
    resumed = [(second / f"rank-{r}" / "stdout.log").read_text() for r in range(4)]
    assert all("resumed from" in text for text in resumed), resumed[0][:500]
    finals = {line.split(" w ")[1] for text in resumed for line in text.splitlines() if line.startswith("final step ")}
    assert len(finals) == 1  # every rank ended with the same weights
    weights = json.loads(finals.pop())
    assert weights == [2.5 * final * (final + 1) / 2] * 4 + [float(final)]  # an unbroken run's (torch_train_ckpt.py)
    assert "is excluded as a sub-health fault" in result.stdout + result.stderr
