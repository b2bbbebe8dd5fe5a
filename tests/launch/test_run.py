"""End to end through the real CLI with real rank processes: exits, signals, fail-fast timing,
logs, the job directory, and that no process of the job survives any scenario."""

from __future__ import annotations

import json
import os
import re
import stat
from pathlib import Path
from typing import Any, Dict, List

import pytest
from helpers import rank_cmd, run_cli


def run_job(
    log_dir: Path,
    marker: str,
    *rank_args: str,
    nproc: int = 4,
    grace: float = 1.0,
    extra: tuple = (),
    timeout: float = 60,
):
    result = run_cli(
        "run",
        "--nproc-per-node",
        str(nproc),
        "--log-dir",
        str(log_dir),
        "--job-id",
        "t",
        "--grace-period",
        str(grace),
        *extra,
        *rank_cmd("rank.py", *rank_args),
        env={"NPLTEST_MARKER": marker},
        timeout=timeout,
    )
    return result, log_dir / "t"


def events(job_dir: Path) -> List[Dict[str, Any]]:
    return [json.loads(line) for line in (job_dir / "events.jsonl").read_text().splitlines()]


def summary(job_dir: Path) -> Dict[str, Any]:
    return json.loads((job_dir / "summary.json").read_text())


def test_every_rank_gets_its_environment_and_the_job_dir_is_private(log_dir: Path, marker: str) -> None:
    result, job = run_job(log_dir, marker, "*=env")
    assert result.returncode == 0, result.stderr
    for rank in range(4):
        lines = (job / f"rank-{rank}" / "stdout.log").read_text().splitlines()
        env = json.loads(lines[1])
        assert env["RANK_ID"] == str(rank)
        assert env["RANK_SIZE"] == "4"
        assert env["DEVICE_ID"] == env["ASCEND_DEVICE_ID"] == str(rank)
        assert env["JOB_ID"] == "t"
        assert env["HCCL_CONNECT_TIMEOUT"] == "600" and "HCCL_EXEC_TIMEOUT" not in env  # CANN's own default
        assert env["ASCEND_PROCESS_LOG_PATH"] == str(job / f"rank-{rank}" / "ascend")
        assert os.path.isdir(env["ASCEND_PROCESS_LOG_PATH"])
        assert "RANK_TABLE_FILE" not in env
        assert json.loads(env["NPULAUNCH_SESSION_OPTIONS"]) == {}
        assert env["NPLTEST_MARKER"] == marker  # the launcher's environment passes through
    assert stat.S_IMODE(job.stat().st_mode) == 0o700
    for name in ("plan.json", "events.jsonl", "summary.json", "rank-0/stdout.log", "rank-0/stderr.log"):
        assert stat.S_IMODE((job / name).stat().st_mode) == 0o600, name
    report = summary(job)
    assert report["job"]["status"] == "succeeded" and report["job"]["exit_code"] == 0
    assert [r["state"] for r in report["ranks"]] == ["succeeded"] * 4
    assert all(r["pid"] and r["end_time"] >= r["start_time"] for r in report["ranks"])
    kinds = [e["kind"] for e in events(job)]
    assert kinds[0] == "job_started" and kinds[-1] == "job_finished"
    assert kinds.count("rank_started") == 4 and kinds.count("rank_exited") == 4


@pytest.mark.parametrize(
    "action, expected",
    [
        ("exit:7", "exited with code 7"),
        ("segfault", "was killed by SIGSEGV"),
        ("sigkill", "was killed by SIGKILL"),
    ],
)
def test_first_failure_stops_every_rank_and_is_the_root_cause(
    log_dir: Path, marker: str, action: str, expected: str
) -> None:
    result, job = run_job(log_dir, marker, f"2={action}@0.5", "*=hang")
    assert result.returncode == 1
    assert f"root cause: rank 2 {expected}" in result.stderr
    assert "ranks 0-1, 3: stopped by npulaunch" in result.stderr
    assert "Traceback" not in result.stderr.split("root cause")[0].replace("[r", "")  # ours, not a rank's
    report = summary(job)
    assert report["job"]["root_cause_rank"] == 2
    assert report["root_cause"]["host"] == "localhost" and report["root_cause"]["device_id"] == 2
    assert [r["state"] for r in report["ranks"]] == ["stopped", "stopped", "failed", "stopped"]
    log = events(job)
    failed_at = next(e["time"] for e in log if e["kind"] == "rank_exited" and e["rank"] == 2)
    finished_at = log[-1]["time"]
    assert finished_at - failed_at < 1.0 + 1.0  # grace + 1 s (ranks die on SIGTERM: much less)


def test_rank_ignoring_sigterm_is_killed_after_the_grace_period(log_dir: Path, marker: str) -> None:
    result, job = run_job(log_dir, marker, "0=exit:3@0.5", "*=ignore_term", grace=1.0)
    assert result.returncode == 1
    log = events(job)
    failed_at = next(e["time"] for e in log if e["kind"] == "rank_exited" and e["rank"] == 0)
    escalation = [e for e in log if e["kind"] == "kill_escalated"]
    assert escalation and sorted(escalation[0]["ranks"]) == [1, 2, 3]
    assert 0.9 <= escalation[0]["time"] - failed_at < 1.5
    assert log[-1]["time"] - failed_at < 1.0 + 1.0
    assert [r["signal"] for r in summary(job)["ranks"][1:]] == ["SIGKILL"] * 3


def test_ranks_that_finish_early_do_not_stop_the_others(log_dir: Path, marker: str) -> None:
    result, job = run_job(log_dir, marker, "0=ok", "*=ok@1.0", nproc=3)
    assert result.returncode == 0, result.stderr
    ranks = summary(job)["ranks"]
    assert [r["state"] for r in ranks] == ["succeeded"] * 3
    assert ranks[1]["end_time"] - ranks[0]["end_time"] > 0.7


def test_grandchildren_are_stopped_when_the_job_ends(log_dir: Path, marker: str) -> None:
    # rank 0 leaves a grandchild in its group; rank 1 leaves a daemon in a new session.
    result, job = run_job(log_dir, marker, "0=grandchild", "1=escape", nproc=2)
    assert result.returncode == 0, result.stderr
    pids = [int(m) for m in re.findall(r"grandchild (\d+)", result.stdout)]
    assert len(pids) == 2
    assert sorted(summary(job)["job"]["strays_killed"]) == sorted(pids)
    # the marker fixture asserts that nothing with our environment is left


def test_every_line_is_logged_even_when_the_rank_dies_mid_stream(log_dir: Path, marker: str) -> None:
    count = 100_000
    result, job = run_job(log_dir, marker, f"0=spam_crash:{count}", "*=hang", nproc=2, timeout=120)
    assert result.returncode == 1
    assert "root cause: rank 0 was killed by SIGKILL" in result.stderr
    lines = (job / "rank-0" / "stdout.log").read_text().splitlines()
    assert lines[0].startswith("ready ")
    assert lines[1 : count + 1] == ["line %07d %s" % (i, "x" * 60) for i in range(count)]
    assert lines[-1] == "partial last line without newline"
    shown = [line for line in result.stdout.splitlines() if line.startswith("[r0 d0] line ")]
    assert len(shown) == count  # the console got every line too, prefixed
    assert "[r0 d0] partial last line without newline" in result.stdout


def test_split_utf8_and_progress_lines(log_dir: Path, marker: str) -> None:
    result, job = run_job(log_dir, marker, "*=utf8", nproc=1)
    assert result.returncode == 0
    assert "[r0 d0] héllo wörld ✓ 中文" in result.stdout
    assert "[r0 d0] progress 100%" in result.stdout
    assert "[r0 d0] done" in result.stdout
    raw = (job / "rank-0" / "stdout.log").read_bytes()
    assert "héllo wörld ✓ 中文\n".encode() in raw and b"progress 10%\rprogress 50%\r" in raw


def test_a_missing_command_or_script_starts_nothing(log_dir: Path, marker: str) -> None:
    result = run_cli(
        "run",
        "--nproc-per-node",
        "2",
        "--log-dir",
        str(log_dir),
        "--",
        "no-such-program-xyz",
        env={"NPLTEST_MARKER": marker},
    )
    assert result.returncode == 2
    assert "'no-such-program-xyz' is not found" in result.stderr
    result = run_cli(
        "run",
        "--nproc-per-node",
        "2",
        "--log-dir",
        str(log_dir),
        "--",
        "python3",
        "missing_script.py",
        env={"NPLTEST_MARKER": marker},
    )
    assert result.returncode == 2
    assert "script missing_script.py does not exist" in result.stderr
    assert not log_dir.exists() or not any(log_dir.iterdir())


def test_an_existing_job_directory_is_refused(log_dir: Path, marker: str) -> None:
    result, job = run_job(log_dir, marker, "*=ok", nproc=1)
    assert result.returncode == 0
    again, _ = run_job(log_dir, marker, "*=ok", nproc=1)
    assert again.returncode == 2 and "already exists" in again.stderr


def test_the_quick_example_runs_end_to_end(log_dir: Path, marker: str) -> None:
    result = run_cli(
        "run",
        "cluster_configs/local-4-quick.yaml",
        "--log-dir",
        str(log_dir),
        "--job-id",
        "demo",
        env={"NPLTEST_MARKER": marker},
    )
    assert result.returncode == 0, result.stderr
    for rank in range(4):
        assert f"[r{rank} d{rank}] rank {rank} done:" in result.stdout
        assert f"rank {rank} step 20/20 loss" in (log_dir / "demo" / f"rank-{rank}" / "stdout.log").read_text()
    assert "job demo succeeded" in result.stderr


def test_the_example_failure_names_the_rank_that_broke(log_dir: Path, marker: str) -> None:
    result = run_cli(
        "run",
        "cluster_configs/local-4-quick.yaml",
        "--log-dir",
        str(log_dir),
        "--job-id",
        "demo",
        "--",
        "python3",
        "examples/train.py",
        "--fail-rank",
        "2",
        "--fail-step",
        "3",
        "--step-time",
        "0.5",
        env={"NPLTEST_MARKER": marker},
    )
    assert result.returncode == 1
    assert "root cause: rank 2 exited with code 1 (host localhost, device 2" in result.stderr
    assert "RuntimeError: simulated device fault on rank 2" in result.stderr
    assert "ranks 0-1, 3: stopped by npulaunch" in result.stderr
