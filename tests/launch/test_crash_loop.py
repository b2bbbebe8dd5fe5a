"""The crash-loop breaker through the real CLI (launch/crashloop.py): a script that fails the same way at step
0 on every attempt stops after job.crash_loop_limit attempts with exit code 93 (do not requeue), however many
restarts remain, and the report and summary.json say why; a job that gets further on every attempt is not
stopped by it."""

from __future__ import annotations

import json
import sys
from pathlib import Path
from typing import List, Optional, Tuple

import pytest
from helpers import RANKS, run_cli, run_local

from npulaunch.diagnose.summary import AttemptCause, AttemptRecord, JobStatus
from npulaunch.launch.crashloop import CRASH_LOOP_EXIT, crash_loop

Tried = Tuple[str, Optional[int], int]  # (code or "ok", last step, rank)


def attempts(*tried: Tried) -> List[AttemptRecord]:
    found = []
    for number, (code, step, rank) in enumerate(tried, 1):
        failed = code != "ok"
        cause = AttemptCause(rank, "cls-" + code, code, True) if failed else None
        status = JobStatus.FAILED if failed else JobStatus.SUCCEEDED
        found.append(AttemptRecord(number, f"a{number}", status, int(failed), cause, last_step=step))
    return found


@pytest.mark.parametrize(
    "tried, limit, loop",
    [
        ([("E1", None, 0)] * 3, 3, (1, 2, 3)),  # no step printed: no progress
        ([("E1", 0, 0), ("E1", 0, 1), ("E1", 0, 0)], 3, (1, 2, 3)),  # whichever rank fails first
        ([("E1", None, 0)] * 2, 3, None),
        ([("E1", None, 0)] * 2, 2, (1, 2)),
        ([("E1", None, 0)] * 5, 0, None),  # off
        ([("E1", 500, 0), ("E1", 500, 0), ("E1", 500, 0)], 3, None),  # the first got to step 500
        ([("E1", 500, 0), ("E1", 500, 0), ("E1", 500, 0), ("E1", 480, 0)], 3, (2, 3, 4)),
        ([("E1", 10, 0), ("E1", 20, 0), ("E1", 30, 0)], 3, None),  # progress every time
        ([("E1", None, 0), ("E2", None, 0), ("E1", None, 0)], 3, None),  # not the same way
        ([("E2", None, 0), ("E1", None, 0), ("E1", None, 0), ("E1", None, 0)], 3, (2, 3, 4)),
        ([("E1", None, 0), ("ok", None, 0)], 2, None),
    ],
)
def test_what_makes_a_crash_loop(tried: List[Tried], limit: int, loop: Optional[Tuple[int, ...]]) -> None:
    found = crash_loop(attempts(*tried), limit)
    assert (None if found is None else found.attempts) == loop


def test_the_same_failure_at_step_0_stops_after_the_bound_with_its_own_exit_code(log_dir: Path, marker: str) -> None:
    argv = [sys.executable, str(RANKS / "rank.py"), "0=say:step-0+hccp_fails_until:99", "*=hang"]
    result = run_local(log_dir, marker, "--max-restarts", "5", "--", *argv, nproc=2)
    assert result.returncode == CRASH_LOOP_EXIT == 93, result.stderr
    summary = json.loads((log_dir / "m" / "summary.json").read_text())
    assert [a["status"] for a in summary["attempts"]] == ["failed"] * 3  # not 6: the restarts left are not used
    assert [a["last_step"] for a in summary["attempts"]] == [0, 0, 0]
    assert summary["job"]["exit_code"] == 93 and summary["job"]["status"] == "failed"
    loop = summary["crash_loop"]
    assert (loop["attempts"], loop["cls"], loop["code"], loop["limit"]) == ([1, 2, 3], "hccp_init_failed", "EJ0001", 3)
    assert loop["furthest_step"] == 0 and loop["exit_code"] == 93
    assert summary["attempts"][-1]["then"] == "stopped: a crash loop (exit code 93: do not requeue)"
    said = "a crash loop: attempts 1-3 failed the same way (EJ0001) and none got past step 0"
    assert said in result.stderr and "exit code 93 (do not requeue)" in result.stderr
    report = run_cli("report", str(log_dir / "m"))
    assert report.returncode == 0 and f"stopped as {said}" in report.stdout
    assert "then stopped: a crash loop" in report.stdout


def test_a_job_that_gets_further_on_every_attempt_is_not_stopped(log_dir: Path, marker: str) -> None:
    argv = [sys.executable, str(RANKS / "rank.py"), "0=attempt_step+hccp_fails_until:5", "*=ok"]
    result = run_local(log_dir, marker, "--max-restarts", "5", "--", *argv, nproc=2)
    assert result.returncode == 0, result.stderr
    summary = json.loads((log_dir / "m" / "summary.json").read_text())
    assert [a["last_step"] for a in summary["attempts"]] == [10, 20, 30, 40, 50]
    assert [a["status"] for a in summary["attempts"]] == ["failed"] * 4 + ["succeeded"]
    assert "crash_loop" not in summary and "crash loop" not in result.stderr


def test_the_breaker_can_be_turned_off(tmp_path: Path, marker: str) -> None:
    yaml = tmp_path / "job.yaml"
    yaml.write_text(
        f"job:\n  command: [{sys.executable}, {RANKS / 'rank.py'}, '0=hccp_fails_until:4', '*=ok']\n"
        f"  log_dir: {tmp_path / 'logs'}\n  id: loops\n  grace_period_s: 1\n  max_restarts: 2\n  crash_loop_limit: 0\n"
        "hosts: [{host: localhost, devices: 2}]\n"
    )
    result = run_cli("run", str(yaml), env={"NPLTEST_MARKER": marker})
    assert result.returncode == 1, result.stderr  # restarts ran out: exit 1, as before
    summary = json.loads((tmp_path / "logs" / "loops" / "summary.json").read_text())
    assert len(summary["attempts"]) == 3 and "crash_loop" not in summary
