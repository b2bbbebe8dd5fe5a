"""Monitoring that understands Ascend: error signatures in output and plogs, the root cause over
the ranks that only waited for it, hangs, the job's own patterns."""

from __future__ import annotations

import json
import sys
import time
from pathlib import Path

import pytest
from conftest import RANKS, run_cli

from npulaunch.host.signatures import CAUSE, SYMPTOM, Matcher, parse_plog_time
from npulaunch.host.watchdog import (
    STARTUP,
    STEADY,
    HangLimits,
    Progress,
    find_hangs,
    next_check_in,
)


def run(log_dir: Path, marker: str, *args: str, nproc: int = 4, timeout: float = 60):
    return run_cli("run", "--nproc-per-node", str(nproc), "--log-dir", str(log_dir), "--job-id", "m",
                   "--grace-period", "1", *args, env={"NPLTEST_MARKER": marker}, timeout=timeout)


def test_a_device_fault_is_the_root_cause_not_the_ranks_that_timed_out(log_dir: Path, marker: str) -> None:
    # ranks 0-4, 6-7 print EI0002 (timestamped start+3 s) before npulaunch reads rank 5's plog
    # (EZ9999 timestamped start+1 s): the cause wins by its own timestamp, not by arrival
    result = run(log_dir, marker, "--", sys.executable, str(RANKS / "cann.py"), "5", nproc=8)
    assert result.returncode == 1
    failure = json.loads((log_dir / "m" / "failure.json").read_text())
    assert failure["rank"] == 5 and failure["code"] == "EZ9999" and failure["cls"] == "device_kernel_fault"
    assert failure["time_source"] == "plog timestamp" and "aicore error" in failure["first_line"]
    assert failure["retryable"] is False and failure["hint"]
    # every other rank either printed its EI0002 or was stopped by npulaunch before it could
    groups = {g["what"]: g["ranks"] for g in failure["others"]}
    assert set(groups) <= {"EI0002, waiting on rank 5", "stopped by npulaunch"}
    assert sorted(r for ranks in groups.values() for r in ranks) == [0, 1, 2, 3, 4, 6, 7]
    waiting = groups["EI0002, waiting on rank 5"]
    assert len(waiting) >= 1 and "symptoms of waiting" in failure["why"]
    assert "root cause: rank 5 reported EZ9999 (device_kernel_fault)" in result.stderr
    assert ("rank" if len(waiting) == 1 else "ranks") + " " in result.stderr
    assert ": EI0002, waiting on rank 5" in result.stderr
    summary = json.loads((log_dir / "m" / "summary.json").read_text())
    assert summary["job"]["root_cause_rank"] == 5


def test_a_silent_rank_is_declared_hung_and_the_job_stopped(log_dir: Path, marker: str) -> None:
    started = time.monotonic()
    result = run(log_dir, marker, "--hang-timeout", "1", "--", sys.executable, str(RANKS / "rank.py"),
                 "1=silent", "*=tick", nproc=3)
    assert result.returncode == 1
    assert time.monotonic() - started < 1 + 1 + 1 + 3  # limit + 1 s to notice + grace + start-up
    events = [json.loads(line) for line in (log_dir / "m" / "events.jsonl").read_text().splitlines()]
    hang = next(e for e in events if e["kind"] == "hang_detected")
    assert hang["ranks"] == [1] and hang["phase"] == "steady" and hang["whole_job"] is False
    assert 1.0 <= hang["silent_s"]["1"] < 2.0
    failure = json.loads((log_dir / "m" / "failure.json").read_text())
    assert failure["rank"] == 1 and failure["cls"] == "hang"
    assert "hang: rank 1 printed nothing for more than 1 s (steady); stopping the job" in result.stderr


def test_a_whole_job_stall_is_detected(log_dir: Path, marker: str) -> None:
    result = run(log_dir, marker, "--hang-timeout", "1", "--", sys.executable, str(RANKS / "rank.py"),
                 "*=silent", nproc=2)
    assert result.returncode == 1
    assert "hang: every rank printed nothing" in result.stderr
    failure = json.loads((log_dir / "m" / "failure.json").read_text())
    assert failure["cls"] == "hang" and "whole job stopped printing" in failure["why"]


def test_the_jobs_own_pattern_names_the_failure(tmp_path: Path, log_dir: Path, marker: str) -> None:
    config = tmp_path / "job.yaml"
    config.write_text(f"""job:
  command: [{sys.executable}, {RANKS / 'rank.py'}, "0=say:loss-is-nan+exit:1@0.3", "*=hang"]
  log_dir: {log_dir}
  grace_period_s: 1
hosts: [{{host: localhost, devices: 2}}]
monitor:
  patterns:
    - {{name: nan-loss, pattern: "loss is nan", class: divergence, hint: "lower the learning rate"}}
""")
    result = run_cli("run", str(config), "--job-id", "m", env={"NPLTEST_MARKER": marker})
    assert result.returncode == 1
    failure = json.loads((log_dir / "m" / "failure.json").read_text())
    assert failure["rank"] == 0 and failure["code"] == "nan-loss" and failure["cls"] == "divergence"
    assert failure["hint"] == "lower the learning rate"


def test_a_bad_user_pattern_is_a_config_error(tmp_path: Path) -> None:
    config = tmp_path / "job.yaml"
    config.write_text("job: {command: [python3, x.py]}\nhosts: [{host: localhost, devices: 1}]\n"
                      "monitor:\n  patterns:\n    - {name: bad, pattern: \"(unclosed\"}\n")
    result = run_cli("check", str(config))
    assert result.returncode == 2
    assert ":5: monitor.patterns[0].pattern: found '(unclosed'" in result.stderr


@pytest.mark.parametrize("line, name, kind", [
    ("[ERROR] HCCL(1,python3):2024-01-02-03:04:05.678.901 [x.cc:1] EI0006: Getting socket times out.", "EI0006",
     SYMPTOM),
    ("EI0002: The wait operation for the notify timed out", "EI0002", SYMPTOM),
    ("EI0004: The ranktable is invalid", "EI0004", CAUSE),
    ("EZ9999: Inner Error! there is an aivec error exception", "EZ9999-aicore", CAUSE),
    ("rtStreamSynchronizeWithTimeout failed, error code 507046", "507046", SYMPTOM),
    ("EL0004: Failed to allocate memory.", "EL0004", CAUSE),
    ("Traceback (most recent call last):", "python-traceback", CAUSE),
    ("bash: line 1: 123 Segmentation fault (core dumped) python3 train.py", "segfault", CAUSE),
])
def test_signatures(line: str, name: str, kind: str) -> None:
    signature = Matcher().match(line)
    assert signature is not None and signature.name == name and signature.kind == kind


def test_ordinary_lines_match_nothing() -> None:
    matcher = Matcher()
    for line in ("step 100 loss 0.3", "EZ9999 mentioned without the kernel words", "  Traceback is not at the start"):
        assert matcher.match(line) is None


def test_plog_timestamps() -> None:
    t = parse_plog_time("[ERROR] HCCL(1,python3):2024-01-02-03:04:05.678.901 [x.cc:1] EI0006")
    assert t is not None and time.localtime(t)[:6] == (2024, 1, 2, 3, 4, 5) and abs(t % 1 - 0.678901) < 1e-5
    assert parse_plog_time("no stamp here") is None


def test_watchdog_is_exact_with_a_fake_clock() -> None:
    limits = HangLimits(startup_s=10, steady_s=3)
    progress = {0: Progress(started=0.0), 1: Progress(started=0.0)}
    assert find_hangs(progress, 10.0, limits) == []
    assert [h.rank for h in find_hangs(progress, 10.01, limits)] == [0, 1]
    assert {h.phase for h in find_hangs(progress, 10.01, limits)} == {STARTUP}
    limits = HangLimits(startup_s=100, steady_s=3)
    progress[0].saw(5.0)
    progress[0].saw(6.0)
    assert [h.rank for h in find_hangs(progress, 9.0, limits)] == []
    hangs = find_hangs(progress, 9.5, limits)
    assert [(h.rank, h.phase, h.silent_s) for h in hangs] == [(0, STEADY, 3.5)]
    assert next_check_in(progress, 7.0, limits) == 2.0  # rank 0 crosses at 9.0
    assert find_hangs(progress, 1000.0, HangLimits(0, 0)) == []


def test_ranks_that_fall_silent_together_stall_together() -> None:
    limits = HangLimits(startup_s=100, steady_s=10)
    progress = {r: Progress(started=0.0) for r in range(3)}
    for rank, last in ((0, 5.0), (1, 5.5), (2, 14.0)):
        progress[rank].saw(last)
    hangs = find_hangs(progress, 15.1, limits)  # rank 0 is past its limit, rank 1 at 96% of it
    assert [h.rank for h in hangs] == [0, 1]


def test_status_and_report_read_the_job_directory_back(log_dir: Path, marker: str) -> None:
    result = run(log_dir, marker, "--", sys.executable, str(RANKS / "rank.py"), "1=exit:4@0.3", "*=tick", nproc=3)
    assert result.returncode == 1
    job = str(log_dir / "m")
    status = run_cli("status", job)
    assert status.returncode == 0, status.stderr
    assert "job m: failed (exit code 1)" in status.stdout
    rows = {line.split()[0]: line for line in status.stdout.splitlines()[2:]}
    assert "failed (4)" in rows["1"] and "stopped (SIGTERM)" in rows["0"] and "tick" in rows["2"]
    report = run_cli("report", job)
    assert report.returncode == 0 and "root cause: rank 1 exited with code 4" in report.stdout
    as_json = json.loads(run_cli("report", job, "--json").stdout)
    assert as_json["job"]["root_cause_rank"] == 1
    missing = run_cli("report", str(log_dir))
    assert missing.returncode == 2 and "not an npulaunch job directory" in missing.stderr


def test_a_retryable_failure_restarts_the_job_with_its_own_attempt_directories(log_dir: Path, marker: str) -> None:
    result = run(log_dir, marker, "--max-restarts", "3", "--", sys.executable, str(RANKS / "rank.py"),
                 "0=connect_fails_until:3", "*=ok@0.2", nproc=2)
    assert result.returncode == 0, result.stderr
    summary = json.loads((log_dir / "m" / "summary.json").read_text())
    assert [(a["attempt"], a["status"]) for a in summary["attempts"]] == [(1, "failed"), (2, "failed"),
                                                                           (3, "succeeded")]
    assert summary["attempts"][0]["root_cause"] == {"rank": 0, "cls": "hccl_connect_timeout", "code": "EI0006",
                                                     "retryable": True}
    for attempt in (1, 2, 3):
        assert (log_dir / "m" / f"attempt-{attempt}" / "rank-0" / "stdout.log").exists()
        assert (log_dir / "m" / f"attempt-{attempt}" / "events.jsonl").exists()
    assert "connected on attempt 3" in (log_dir / "m" / "attempt-3" / "rank-0" / "stdout.log").read_text()
    assert "restarting the job, attempt 2 of 4" in result.stderr


def test_restarts_are_bounded(log_dir: Path, marker: str) -> None:
    result = run(log_dir, marker, "--max-restarts", "1", "--", sys.executable, str(RANKS / "rank.py"),
                 "0=connect_fails_until:9", "*=hang", nproc=2)
    assert result.returncode == 1
    summary = json.loads((log_dir / "m" / "summary.json").read_text())
    assert [a["status"] for a in summary["attempts"]] == ["failed", "failed"]
    assert summary["root_cause"]["code"] == "EI0006"


def test_a_non_retryable_failure_is_not_restarted(log_dir: Path, marker: str) -> None:
    result = run(log_dir, marker, "--max-restarts", "3", "--", sys.executable, str(RANKS / "cann.py"), "1",
                 nproc=2)
    assert result.returncode == 1
    summary = json.loads((log_dir / "m" / "summary.json").read_text())
    assert len(summary["attempts"]) == 1 and summary["root_cause"]["code"] == "EZ9999"


def test_a_heartbeat_is_progress_for_a_silent_rank(log_dir: Path, marker: str) -> None:
    result = run(log_dir, marker, "--hang-timeout", "1", "--", sys.executable, str(RANKS / "rank.py"),
                 "*=beat:2.5", nproc=2)
    assert result.returncode == 0, result.stderr
    assert "hang" not in result.stderr


def write_config(tmp_path: Path, log_dir: Path, rank_args: str, monitor: str, extra: str = "") -> Path:
    config = tmp_path / "job.yaml"
    config.write_text(f"""job:
  command: [{sys.executable}, {RANKS / 'rank.py'}, {rank_args}]
  log_dir: {log_dir}
  grace_period_s: 1
hosts: [{{host: localhost, devices: 2}}]
monitor: {monitor}
{extra}""")
    return config


def test_with_a_progress_regex_other_lines_are_not_progress(tmp_path: Path, log_dir: Path, marker: str) -> None:
    config = write_config(tmp_path, log_dir, '"*=noise"',
                          '{hang_timeout_s: 1, startup_timeout_s: 1, progress_regex: "step \\\\d+"}')
    result = run_cli("run", str(config), "--job-id", "m", env={"NPLTEST_MARKER": marker})
    assert result.returncode == 1
    assert json.loads((log_dir / "m" / "failure.json").read_text())["cls"] == "hang"


def test_a_hung_rank_leaves_its_python_stacks(tmp_path: Path, log_dir: Path, marker: str) -> None:
    config = write_config(tmp_path, log_dir, '"0=silent", "*=tick"', "{hang_timeout_s: 1}",
                          "session_injection: auto\nsession_options: {hcom_parallel: true}\n")
    result = run_cli("run", str(config), "--job-id", "m", env={"NPLTEST_MARKER": marker})
    assert result.returncode == 1
    stacks = list((log_dir / "m" / "rank-0").glob("stacks-*.txt"))
    assert len(stacks) == 1, result.stderr
    text = stacks[0].read_text()
    assert "Current thread" in text and "in hang" in text  # faulthandler's dump of the rank's main thread
    assert f"stack dump: {stacks[0]}" in result.stderr
