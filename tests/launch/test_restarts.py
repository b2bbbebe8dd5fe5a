"""Restarts of a failed job through the real CLI: a retryable root cause restarts it with its own attempt
directories, the number of restarts is bounded; with restart_on: retryable (a YAML's default) a failure
that is not retryable is not restarted, and the console says why in one line; a job given by flags alone
(torchrun's form) restarts after any failure, as torchrun does."""

from __future__ import annotations

import json
import sys
from pathlib import Path

from helpers import RANKS, run_cli, run_local, run_restarted_job


def test_a_retryable_failure_restarts_the_job_with_its_own_attempt_directories(log_dir: Path, marker: str) -> None:
    result = run_restarted_job(log_dir, marker, 3, 3)
    assert result.returncode == 0, result.stderr
    summary = json.loads((log_dir / "m" / "summary.json").read_text())
    assert [(a["attempt"], a["status"]) for a in summary["attempts"]] == [
        (1, "failed"),
        (2, "failed"),
        (3, "succeeded"),
    ]
    assert summary["attempts"][0]["root_cause"] == {
        "rank": 0,
        "cls": "hccp_init_failed",
        "code": "EJ0001",
        "retryable": True,
    }
    for attempt in (1, 2, 3):
        assert (log_dir / "m" / f"attempt-{attempt}" / "rank-0" / "stdout.log").exists()
        assert (log_dir / "m" / f"attempt-{attempt}" / "events.jsonl").exists()
    assert "connected on attempt 3" in (log_dir / "m" / "attempt-3" / "rank-0" / "stdout.log").read_text()
    assert "restarting the job after EJ0001 (retryable): attempt 2 (restart 1 of 3)" in result.stderr


def test_restarts_are_bounded(log_dir: Path, marker: str) -> None:
    result = run_local(
        log_dir,
        marker,
        "--max-restarts",
        "1",
        "--",
        sys.executable,
        str(RANKS / "rank.py"),
        "0=hccp_fails_until:9",
        "*=hang",
        nproc=2,
    )
    assert result.returncode == 1
    summary = json.loads((log_dir / "m" / "summary.json").read_text())
    assert [a["status"] for a in summary["attempts"]] == ["failed", "failed"]
    assert summary["root_cause"]["code"] == "EJ0001"


def test_a_non_retryable_failure_is_not_restarted_under_restart_on_retryable(log_dir: Path, marker: str) -> None:
    result = run_local(
        log_dir,
        marker,
        "--max-restarts",
        "3",
        "--restart-on",
        "retryable",
        "--",
        sys.executable,
        str(RANKS / "cann.py"),
        "1",
        nproc=2,
    )
    assert result.returncode == 1
    summary = json.loads((log_dir / "m" / "summary.json").read_text())
    assert len(summary["attempts"]) == 1 and summary["root_cause"]["code"] == "EZ9999"
    last = result.stderr.strip().splitlines()[-1]
    assert last.startswith("npulaunch: not restarted: ") and "is not a failure a restart may cure" in last, last
    assert "job.restart_on: retryable" in last


def test_the_yaml_form_keeps_restarting_only_retryable_failures_and_says_so(tmp_path: Path, marker: str) -> None:
    config = tmp_path / "job.yaml"
    config.write_text(
        f"job:\n  command: [{sys.executable}, {RANKS / 'rank.py'}, '1=exit:3@0.2', '*=tick']\n"
        f"  log_dir: {tmp_path / 'logs'}\n  max_restarts: 2\n  grace_period_s: 1\n"
        f"hosts: [{{host: localhost, devices: 2}}]\nenv: {{NPLTEST_MARKER: {marker}}}\n"
    )
    planned = run_cli("plan", str(config))
    assert "restarts: up to 2 times, only after a failure whose root cause a restart may cure" in planned.stdout
    result = run_cli("run", str(config), "--job-id", "y", "--no-live", timeout=60)
    assert result.returncode == 1
    summary = json.loads((tmp_path / "logs" / "y" / "summary.json").read_text())
    assert len(summary["attempts"]) == 1
    assert "npulaunch: not restarted: " in result.stderr.strip().splitlines()[-1]


def test_the_flags_form_restarts_after_any_failure_as_torchrun(log_dir: Path, marker: str) -> None:
    """A rank killed by SIGKILL is not retryable; it is restarted, up to --max-restarts."""
    result = run_local(
        log_dir,
        marker,
        "--max-restarts",
        "1",
        "--",
        sys.executable,
        str(RANKS / "rank.py"),
        "1=sigkill@0.2",
        "*=tick",
        nproc=2,
    )
    assert result.returncode == 1
    summary = json.loads((log_dir / "m" / "summary.json").read_text())
    assert [a["status"] for a in summary["attempts"]] == ["failed"] * 2
    assert summary["attempts"][0]["then"] == "restarted"
    assert (
        "restarting the job after " in result.stderr
        and "(job.restart_on: any): attempt 2 (restart 1 of 1)" in result.stderr
    )
    assert (
        result.stderr.strip().splitlines()[-1]
        == "npulaunch: not restarted: the job has used its 1 restart (job.max_restarts)"
    )
