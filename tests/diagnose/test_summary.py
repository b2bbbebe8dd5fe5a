"""The job summary as values: summary.json and failure.json to and from JobSummary (the files' keys in
their order), documents of another shape refused with the file and the field named, the report text
rendered from it, and ``status`` / ``report`` on a real job with restarts."""

from __future__ import annotations

import copy
import json
import sys
import time
from pathlib import Path
from typing import Any, Callable, Dict

import pytest
from helpers import RANKS, run_cli, run_local, run_restarted_job

from npulaunch.diagnose.cause import RankGroup, RootCause
from npulaunch.diagnose.jsonfields import SummaryError
from npulaunch.diagnose.summary import (
    AttemptCause,
    AttemptRecord,
    FailureReport,
    JobInfo,
    JobStatus,
    JobSummary,
    RankSummary,
)
from npulaunch.host.errors import NpulaunchError
from npulaunch.host.events import signature_label
from npulaunch.host.records import RankResult, RankState
from npulaunch.views.reporttext import render_report

J = "/logs/m"


def rank(n: int, state: RankState, exit_code: int | None = 0, signal: str | None = None) -> RankSummary:
    result = RankResult(n, "localhost", n, 100 + n, state, 10.0, 12.5, exit_code, signal)
    return RankSummary(result, f"{J}/rank-{n}/stdout.log", f"{J}/rank-{n}/stderr.log", ("ready", f"line {n}"), ())


CAUSE = RootCause(
    1,
    "localhost",
    1,
    "device_kernel_fault",
    "EZ9999",
    11.25,
    "plog timestamp",
    "EZ9999: Inner Error!",
    ("run graph 1", "EZ9999: Inner Error!"),
    "look at the operator",
    False,
    "the earliest failure that is a cause",
    (RankGroup((0, 2), "EI0002, waiting on rank 1"), RankGroup((3,), "stopped by npulaunch")),
)
FAILED = JobSummary(
    JobInfo("m", "job", JobStatus.FAILED, 1, 1, 4, ("localhost",), J, 10.0, 13.25, None, (), 0.125),
    FailureReport(
        CAUSE,
        101,
        None,
        "SIGTERM",
        12.5,
        "rank 1 reported EZ9999 (device_kernel_fault)",
        f"{J}/rank-1/stdout.log",
        ("ready", "line 1"),
    ),
    (
        rank(0, RankState.STOPPED, None, "SIGTERM"),
        rank(1, RankState.FAILED, None, "SIGTERM"),
        rank(2, RankState.STOPPED, None, "SIGTERM"),
        rank(3, RankState.STOPPED, None, "SIGTERM"),
    ),
)


def test_failed_summary_to_json_has_the_files_keys_in_order() -> None:
    data = FAILED.to_json()
    assert list(data) == ["job", "root_cause", "ranks", "stragglers"]  # no attempts: an attempt's own summary
    assert list(data["job"]) == [
        "job_id",
        "name",
        "status",
        "exit_code",
        "root_cause_rank",
        "world_size",
        "hosts",
        "job_dir",
        "start_time",
        "end_time",
        "duration_s",
        "stop_signal",
        "strays_killed",
        "launcher_cpu_s",
    ]
    assert data["job"]["duration_s"] == 3.25 and data["job"]["status"] == "failed"
    assert list(data["root_cause"]) == [
        "rank",
        "host",
        "device_id",
        "cls",
        "code",
        "kind",
        "codes",
        "detail",
        "time",
        "time_source",
        "first_line",
        "excerpt",
        "hint",
        "retryable",
        "retryable_why",
        "code_info",
        "why",
        "others",
        "pid",
        "exit_code",
        "signal",
        "end_time",
        "reason",
        "log",
        "last_lines",
    ]
    assert data["root_cause"]["others"] == [
        {"ranks": [0, 2], "what": "EI0002, waiting on rank 1"},
        {"ranks": [3], "what": "stopped by npulaunch"},
    ]
    assert data["ranks"][1] == {
        "rank": 1,
        "host": "localhost",
        "device_id": 1,
        "pid": 101,
        "state": "failed",
        "start_time": 10.0,
        "end_time": 12.5,
        "duration_s": 2.5,
        "exit_code": None,
        "signal": "SIGTERM",
        "error": None,
        "stdout": f"{J}/rank-1/stdout.log",
        "stderr": f"{J}/rank-1/stderr.log",
        "last_lines": {"stdout": ["ready", "line 1"], "stderr": []},
    }


@pytest.mark.parametrize(
    "summary",
    [
        FAILED,
        FAILED.with_attempts(
            [
                AttemptRecord(
                    1, f"{J}/attempt-1", JobStatus.FAILED, 1, AttemptCause(0, "hccp_init_failed", "EJ0001", True)
                ),
                FAILED.attempt_record(2, f"{J}/attempt-2"),
            ]
        ),
        JobSummary(
            JobInfo("ok", "job", JobStatus.SUCCEEDED, 0, None, 1, ("localhost",), J, 1.0, 2.0, None, (7, 8), None),
            None,
            (rank(0, RankState.SUCCEEDED),),
            (),
        ),
    ],
    ids=["failed", "with-attempts", "succeeded"],
)
def test_round_trip(summary: JobSummary) -> None:
    document = json.loads(json.dumps(summary.to_json()))
    assert JobSummary.from_json(document, "summary.json") == summary
    assert JobSummary.from_json(document).to_json() == document
    if summary.root_cause is not None:
        failure = json.loads(json.dumps(summary.root_cause.to_json()))
        assert FailureReport.from_json(failure) == summary.root_cause


def test_what_an_attempt_keeps_and_the_exit_code() -> None:
    assert FAILED.exit_code == 1 and FAILED.status is JobStatus.FAILED and not FAILED.retryable
    record = FAILED.attempt_record(2, f"{J}/attempt-2")
    assert record.to_json() == {
        "attempt": 2,
        "dir": f"{J}/attempt-2",
        "status": "failed",
        "exit_code": 1,
        "root_cause": {"rank": 1, "cls": "device_kernel_fault", "code": "EZ9999", "retryable": False},
        "hosts": [],
        "devices": {},
        "changes": [],
        "excluded": [],
        "resumed": None,
        "last_step": None,
        "steps_lost": None,
        "then": "",
        "start_time": FAILED.job.start_time,
        "end_time": FAILED.job.end_time,
    }
    assert AttemptRecord.from_json(record.to_json()) == record
    hang = AttemptCause(1, "hang", "", False)
    assert (record.root_cause is not None and record.root_cause.label == "EZ9999") and hang.label == "hang"


def test_a_summary_older_than_launcher_cpu_s_is_read() -> None:
    document = FAILED.to_json()
    del document["job"]["launcher_cpu_s"]
    assert JobSummary.from_json(document).job.launcher_cpu_s is None


def _set(path: str, value: Any) -> Callable[[Dict[str, Any]], None]:
    def change(document: Dict[str, Any]) -> None:
        *parents, last = path.split(".")
        here: Any = document
        for key in parents:
            here = here[int(key)] if key.isdigit() else here[key]
        if value is KeyError:
            del here[last]
        else:
            here[int(last) if last.isdigit() else last] = value

    return change


@pytest.mark.parametrize(
    "change, message",
    [
        (_set("job", KeyError), "summary.json: job: found nothing; expected an object"),
        (_set("job.exit_code", "1"), "summary.json: job.exit_code: found str '1'; expected an integer"),
        (_set("job.exit_code", True), "summary.json: job.exit_code: found bool True; expected an integer"),
        (
            _set("job.status", "done"),
            "summary.json: job.status: found str 'done'; expected one of succeeded, failed, stopped",
        ),
        (_set("job.hosts", "localhost"), "summary.json: job.hosts: found str 'localhost'; expected a list of strings"),
        (
            _set("ranks.1.state", "runing"),
            "summary.json: ranks[1].state: found str 'runing'; expected one of pending, "
            "running, succeeded, failed, stopped, spawn_failed",
        ),
        (
            _set("ranks.0.last_lines.stdout.1", 3),
            "summary.json: ranks[0].last_lines.stdout[1]: found int 3; expected strings",
        ),
        (
            _set("root_cause.others.0.ranks.0", "0"),
            "summary.json: root_cause.others[0].ranks[0]: found str '0'; expected integers",
        ),
        (_set("root_cause.pid", "101"), "summary.json: root_cause.pid: found str '101'; expected an integer or null"),
        (_set("root_cause.retryable", 0), "summary.json: root_cause.retryable: found int 0; expected true or false"),
        (_set("ranks", {}), "summary.json: ranks: found dict {}; expected a list of objects"),
        (_set("attempts", [{"attempt": 1}]), "summary.json: attempts[0].dir: found nothing; expected a string"),
    ],
)
def test_a_document_of_another_shape_is_refused_naming_the_file_and_field(
    change: Callable[[Dict[str, Any]], None], message: str
) -> None:
    document = copy.deepcopy(FAILED.to_json())
    change(document)
    with pytest.raises(SummaryError) as err:
        JobSummary.from_json(document, "summary.json")
    assert str(err.value).startswith(message), str(err.value)
    assert isinstance(err.value, NpulaunchError) and err.value.exit_code == 2


def test_not_an_object_at_all() -> None:
    with pytest.raises(SummaryError, match=r"^/x/failure.json: the top level: found list \[\]; expected an object"):
        FailureReport.from_json([], "/x/failure.json")


def test_the_report_text() -> None:
    assert (
        render_report(FAILED)
        == f"""\
npulaunch: job m failed after 3.2 s (4 ranks)
  root cause: rank 1 reported EZ9999 (device_kernel_fault) (host localhost, device 1, pid 101)
  error: EZ9999 (device_kernel_fault): EZ9999: Inner Error!
  excerpt:
    | run graph 1
    | EZ9999: Inner Error!
  why this rank: the earliest failure that is a cause
  hint: look at the operator
  last lines of {J}/rank-1/stdout.log:
    | ready
    | line 1
  log: {J}/rank-1/stdout.log
  ranks 0, 2: EI0002, waiting on rank 1
  rank 3: stopped by npulaunch
  job directory: {J}
"""
    )
    stopped = JobSummary(
        JobInfo("m", "job", JobStatus.STOPPED, 143, None, 2, ("localhost",), J, 0.0, 1.0, "SIGTERM", (55,), 0.1),
        None,
        (rank(0, RankState.STOPPED, None, "SIGTERM"), rank(1, RankState.SUCCEEDED)),
    )
    assert (
        render_report(stopped)
        == f"""\
npulaunch: job m stopped after 1.0 s (2 ranks)
  stopped because npulaunch received SIGTERM
  ranks 0: stopped by npulaunch
  killed 1 leftover process(es) of the job
  job directory: {J}
"""
    )


@pytest.mark.parametrize(
    "data, label",
    [
        ({"signature": "EZ9999-aicore", "code": "EZ9999"}, "EZ9999"),
        ({"signature": "nan-loss", "code": ""}, "nan-loss"),  # a job's own pattern without a code
        ({"signature": "oom"}, "oom"),
    ],
)
def test_a_signatures_label(data: Dict[str, Any], label: str) -> None:
    assert signature_label(data) == label


def test_report_of_a_summary_of_another_shape_names_the_damage_not_a_traceback(tmp_path: Path) -> None:
    job = tmp_path / "m"
    job.mkdir()
    (job / "events.jsonl").write_text("")
    document = FAILED.to_json()
    document["ranks"][0]["state"] = "gone"
    (job / "summary.json").write_text(json.dumps(document))
    result = run_cli("report", str(job))
    assert result.returncode == 0 and "Traceback" not in result.stderr
    # one line on the damage, then what the events still tell
    assert result.stdout.startswith(f"damaged: {job / 'summary.json'}: ranks[0].state: found str 'gone'")


def test_status_and_report_of_a_job_with_restarts(log_dir: Path, marker: str) -> None:
    result = run_restarted_job(log_dir, marker, 2, 3)
    assert result.returncode == 0, result.stderr
    job = log_dir / "m"
    document = json.loads((job / "summary.json").read_text())
    summary = JobSummary.from_json(document, str(job / "summary.json"))
    assert summary.to_json() == document and summary.exit_code == 0
    assert summary.attempts is not None and [(a.attempt, a.status) for a in summary.attempts] == [
        (1, JobStatus.FAILED),
        (2, JobStatus.FAILED),
        (3, JobStatus.SUCCEEDED),
    ]
    for attempt in (1, 2):  # each attempt's own summary and failure report read back too
        own = json.loads((job / f"attempt-{attempt}" / "summary.json").read_text())
        assert "attempts" not in own and JobSummary.from_json(own).to_json() == own
        failure = json.loads((job / f"attempt-{attempt}" / "failure.json").read_text())
        assert FailureReport.from_json(failure).label == "EJ0001"

    status = run_cli("status", str(job))
    assert status.returncode == 0, status.stderr
    assert status.stdout.startswith("job m (attempt 3): succeeded (exit code 0), finished 20")
    rows = {line.split()[0]: line for line in status.stdout.splitlines()[2:]}
    assert "succeeded" in rows["0"] and "connected on attempt 3" in rows["0"] and "ok" in rows["1"]
    report = run_cli("report", str(job))
    assert report.returncode == 0 and report.stdout == render_report(summary)
    assert report.stdout in result.stderr  # what the run printed at its end
    as_json = run_cli("report", str(job), "--json")
    assert json.loads(as_json.stdout) == document

    (job / "summary.json").unlink()  # as while attempt 3 runs
    running = run_cli("report", str(job))
    assert running.returncode == 2 and "has no summary.json yet" in running.stderr
    assert run_cli("status", str(job)).returncode == 0


def test_status_and_report_of_a_failed_job(log_dir: Path, marker: str) -> None:
    result = run_local(log_dir, marker, "--", sys.executable, str(RANKS / "rank.py"), "1=exit:4", "*=hang", nproc=2)
    assert result.returncode == 1
    job = log_dir / "m"
    summary = JobSummary.from_json(json.loads((job / "summary.json").read_text()))
    failure = FailureReport.from_json(json.loads((job / "failure.json").read_text()))
    assert summary.root_cause == failure and failure.cause.rank == 1 and failure.label == "exit 4"
    assert summary.attempts is not None and len(summary.attempts) == 1
    report = run_cli("report", str(job))
    assert report.stdout in result.stderr and "root cause: rank 1 exited with code 4" in report.stdout
    status = run_cli("status", str(job))
    assert status.stdout.startswith("job m: failed (exit code 1), finished 20")
    time.sleep(1.2)  # a finished job's silences are measured to its end: they do not grow
    assert run_cli("status", str(job)).stdout == status.stdout
