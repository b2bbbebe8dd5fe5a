"""Restarts of a failed job through the real CLI: a retryable root cause restarts it with its own attempt
directories, the number of restarts is bounded, a non-retryable failure is not restarted."""

from __future__ import annotations

import json
import sys
from pathlib import Path

from helpers import RANKS, run_local, run_restarted_job


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
    assert "restarting the job, attempt 2 (restart 1 of 3)" in result.stderr


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


def test_a_non_retryable_failure_is_not_restarted(log_dir: Path, marker: str) -> None:
    result = run_local(
        log_dir, marker, "--max-restarts", "3", "--", sys.executable, str(RANKS / "cann.py"), "1", nproc=2
    )
    assert result.returncode == 1
    summary = json.loads((log_dir / "m" / "summary.json").read_text())
    assert len(summary["attempts"]) == 1 and summary["root_cause"]["code"] == "EZ9999"
