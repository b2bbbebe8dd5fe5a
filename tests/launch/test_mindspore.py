"""Real MindSpore jobs (the CPU build, msrun's dynamic cluster) under framework: mindspore: npulaunch
starts the scheduler (MS_ROLE=MS_SCHED, the same script) beside the workers, every worker forms the
cluster from npulaunch's variables alone and all-reduces; the scheduler is watched and stopped like a
rank but is never counted as one; a worker that raises is the root cause, not the scheduler."""

from __future__ import annotations

import importlib.util
import json
import sys
from pathlib import Path

import pytest
from helpers import RANKS, marked_pids, require, run_cli
from test_torch import rank_lines

MS_RANK = RANKS / "mindspore_rank.py"


@pytest.fixture(autouse=True)
def _mindspore() -> None:
    require(importlib.util.find_spec("mindspore") is not None, "mindspore (pip install -e '.[mindspore]')")


def write_job(tmp_path: Path, marker: str, *args: str) -> Path:
    config = tmp_path / "job.yaml"
    config.write_text(f"""framework: mindspore
job:
  command: [{sys.executable}, {MS_RANK}{"".join(", " + json.dumps(a) for a in args)}]
  log_dir: {tmp_path / "logs"}
  grace_period_s: 1
hosts: [{{host: localhost, devices: [3, 1]}}]
env: {{NPLTEST_MARKER: {marker}}}
""")
    return config


def test_a_dynamic_cluster_of_two_workers_and_npulaunchs_scheduler(tmp_path: Path, marker: str) -> None:
    result = run_cli("run", str(write_job(tmp_path, marker)), "--job-id", "ms", timeout=240)
    assert result.returncode == 0, result.stderr
    ranks = rank_lines(result.stdout)
    assert [entry["rank"] for entry in ranks] == [0, 1]
    assert {entry["sum"] for entry in ranks} == {3.0}  # 1 + 2, MindSpore's own AllReduce on the CPU
    for entry in ranks:
        env = entry["env"]
        assert (env["MS_ROLE"], env["MS_WORKER_NUM"], env["RANK_SIZE"]) == ("MS_WORKER", "2", "2")
        assert env["MS_NODE_ID"] == env["RANK_ID"] == str(entry["rank"])
        assert [1, 3][int(env["DEVICE_ID"])] == [3, 1][entry["rank"]]  # the index opens the rank's NPU
    assert "job ms succeeded" in result.stderr and "(2 ranks)" in result.stderr
    job = tmp_path / "logs" / "ms"
    summary = json.loads((job / "summary.json").read_text())
    assert summary["job"]["world_size"] == 2
    states = {r["rank"]: r["state"] for r in summary["ranks"]}
    assert states == {0: "succeeded", 1: "succeeded", -1: "succeeded"}  # the scheduler ended by itself
    scheduler = (job / "scheduler" / "stdout.log").read_text() + (job / "scheduler" / "stderr.log").read_text()
    assert "meta_server" in scheduler  # MindSpore's scheduler served the cluster (meta_server_node.cc)
    plan = json.loads((job / "plan.json").read_text())
    assert plan["helpers"][0]["env"]["MS_ROLE"] == "MS_SCHED"


def test_a_worker_that_raises_is_the_root_cause_and_the_scheduler_is_stopped(tmp_path: Path, marker: str) -> None:
    result = run_cli("run", str(write_job(tmp_path, marker, "--raise-at", "1")), "--job-id", "bad", timeout=240)
    assert result.returncode == 1
    assert "root cause: rank 1 exited with code 1" in result.stderr
    assert "ValueError: bad batch on rank 1" in result.stderr
    assert "rank 0 and the scheduler: stopped by npulaunch" in result.stderr
    failure = json.loads((tmp_path / "logs" / "bad" / "failure.json").read_text())
    assert failure["rank"] == 1
    assert not marked_pids(marker)
