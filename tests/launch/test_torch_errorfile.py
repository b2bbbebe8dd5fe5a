"""torchrun's error files through a real npulaunch job: two ranks of real torch (gloo, on this host's
loopback), each given its own TORCHELASTIC_ERROR_FILE by the YAML's env; the rank whose ``@record`` main
raises is the root cause, named by its exception, its message and its line, in summary.json, failure.json
and the report; a CANN code the rank printed stays the failure's name, the exception beside it. Then the
same diagnosis by value: named by the exception, ordered by when each rank raised, shown once."""

from __future__ import annotations

import importlib.util
import json
import sys
import textwrap
from dataclasses import replace
from pathlib import Path
from typing import Any, Dict, List, Tuple

from helpers import free_port_window, require, run_cli

from npulaunch.diagnose.cause import RankGroup
from npulaunch.diagnose.failure import FailureReport
from npulaunch.diagnose.report import with_raised
from npulaunch.diagnose.rootcause import pick
from npulaunch.diagnose.summary import JobInfo, JobStatus, JobSummary
from npulaunch.host.events import Event, EventKind
from npulaunch.host.records import RankResult, RankState
from npulaunch.views.reporttext import render_report

SCRIPT = textwrap.dedent(
    """
    import sys
    import torch.distributed as dist
    from torch.distributed.elastic.multiprocessing.errors import record


    def step(batch):
        if dist.get_rank() == 1:
            if "--cann" in sys.argv:
                print("EZ9999: Inner Error!", file=sys.stderr)
                print("        The error from device(chipId:1, dieId:0), serial number is 8, there is an aicore "
                      "error exception, core id is 0, error code = 95", file=sys.stderr, flush=True)
                raise RuntimeError("the kernel failed")  # LINE cann
            raise ValueError(f"bad batch {batch}")  # LINE raise


    @record
    def main():
        dist.init_process_group("gloo")
        print(f"rank {dist.get_rank()} joined", flush=True)
        step(7)
        dist.barrier()  # rank 0 waits here for rank 1, which never comes


    if __name__ == "__main__":
        main()
    """
)


def line_of(marker: str) -> int:
    return next(n for n, line in enumerate(SCRIPT.splitlines(), 1) if line.endswith(f"# LINE {marker}"))


def run_torch_job(tmp_path: Path, log_dir: Path, marker: str, *args: str) -> Tuple[Any, Path]:
    """``npulaunch run`` of job "t": 2 local ranks of SCRIPT, torch's variables and each rank's error file
    from the YAML's env (placeholders expanded for each rank)."""
    require(importlib.util.find_spec("torch") is not None, "torch (the CPU build) for the PyTorch job tests")
    (tmp_path / "train.py").write_text(SCRIPT)
    env = {
        "TORCHELASTIC_ERROR_FILE": "{job_dir}/rank-{rank}/error.json",
        "RANK": "{rank}",
        "WORLD_SIZE": "2",
        "MASTER_ADDR": "127.0.0.1",
        "MASTER_PORT": str(free_port_window(4)),
        "OMP_NUM_THREADS": "1",
        "GLOO_SOCKET_IFNAME": "lo",
    }
    config = tmp_path / "job.yaml"
    config.write_text(
        "version: 1\n"
        "job:\n"
        "  name: torcherr\n"
        f"  command: {json.dumps([sys.executable, 'train.py', *args])}\n"
        f"  workdir: {json.dumps(str(tmp_path))}\n"
        "  grace_period_s: 5\n"
        "hosts:\n"
        "  - host: localhost\n"
        "    devices: 2\n"
        "env:\n" + "".join(f"  {name}: {json.dumps(value)}\n" for name, value in env.items())
    )
    result = run_cli(
        "run", str(config), "--log-dir", str(log_dir), "--job-id", "t", env={"NPLTEST_MARKER": marker}, timeout=120
    )
    return result, log_dir / "t"


def events_of(job: Path, rank: int) -> List[Dict[str, Any]]:
    lines = (job / "events.jsonl").read_text().splitlines()
    return [e for e in map(json.loads, lines) if e["rank"] == rank]


def test_the_rank_that_raised_is_the_root_cause_with_its_exception(tmp_path: Path, log_dir: Path, marker: str) -> None:
    result, job = run_torch_job(tmp_path, log_dir, marker)
    where = f"train.py:{line_of('raise')}, in step"
    assert result.returncode == 1, result.stderr
    summary = json.loads((job / "summary.json").read_text())
    assert summary["job"]["status"] == "failed" and summary["job"]["root_cause_rank"] == 1
    assert all(r["state"] in ("failed", "stopped") for r in summary["ranks"])  # every rank ended; no pid survives
    root = summary["root_cause"]
    assert root == json.loads((job / "failure.json").read_text())
    assert (root["rank"], root["cls"], root["code"]) == (1, "python_exception", "ValueError")
    raised = root["raised"]
    assert (raised["exception"], raised["message"], raised["where"]) == ("ValueError", "bad batch 7", where)
    assert raised["path"] == str(job / "rank-1" / "error.json")
    assert raised["traceback"].endswith("ValueError: bad batch 7\n")
    assert root["reason"] == f"rank 1 raised ValueError: bad batch 7 ({where}) and exited with code 1"
    said = f"root cause: rank 1 raised ValueError: bad batch 7 ({where})"
    assert said in result.stderr
    kinds = [e["kind"] for e in events_of(job, 1)]
    assert kinds.index("rank_error_file") == kinds.index("rank_exited") - 1
    report = run_cli("report", str(job))
    assert report.returncode == 0 and said in report.stdout, report.stdout
    assert 'raise ValueError(f"bad batch {batch}")' in report.stdout  # the traceback, from the file or the log


def test_a_cann_code_stays_the_name_and_the_exception_is_shown_beside_it(
    tmp_path: Path, log_dir: Path, marker: str
) -> None:
    result, job = run_torch_job(tmp_path, log_dir, marker, "--cann")
    assert result.returncode == 1, result.stderr
    root = json.loads((job / "failure.json").read_text())
    assert (root["rank"], root["code"]) == (1, "EZ9999")
    assert root["raised"]["exception"] == "RuntimeError"
    assert root["raised"]["where"] == f"train.py:{line_of('cann')}, in step"
    shown = f"RuntimeError: the kernel failed (train.py:{line_of('cann')}, in step)"
    assert "error: EZ9999" in result.stderr and shown in result.stderr, result.stderr


# --- the diagnosis of an error file, by value (no job) -------------------------------------------------------

TRACEBACK = (
    "Traceback (most recent call last):\n"
    '  File "/work/train.py", line 41, in step\n'
    '    raise ValueError("bad batch 3")\n'
    "ValueError: bad batch 3\n"
)
RAISED = {
    "exception": "ValueError",
    "message": "bad batch 3",
    "where": "train.py:41, in step",
    "traceback": TRACEBACK,
    "timestamp": 4,
    "path": "/j/rank-1/error.json",
    "written": 4.5,
}


def traceback_found(rank: int, line_time: float) -> Event:
    """The monitor's finding of a Python traceback in a rank's log (host/cann/phrases.py: python-traceback)."""
    data = {"signature": "python-traceback", "code": "", "cls": "python_exception", "line": "Traceback (most ..."}
    data.update(signature_kind="cause", line_time=line_time, line_time_source="read time", hint="h")
    data.update(source="stderr", retryable=False)
    return Event(EventKind.SIGNATURE_MATCHED, "j", "localhost", rank, data, time=line_time)


def result(rank: int, raised: Any = None, state: RankState = RankState.FAILED, end: float = 6.0) -> RankResult:
    return RankResult(rank, "localhost", rank, 100 + rank, state, 1.0, end, 1, None, raised=raised)


def test_a_failure_known_only_by_its_exit_is_named_by_the_exception() -> None:
    results = [result(0, state=RankState.STOPPED), result(1, RAISED)]
    cause = with_raised(pick(results, []), results)  # type: ignore[arg-type]
    assert (cause.rank, cause.cls, cause.code, cause.label) == (1, "python_exception", "ValueError", "ValueError")
    assert cause.first_line == "ValueError: bad batch 3 (train.py:41, in step)"
    assert (cause.time, cause.time_source) == (4.5, "error file") and cause.raised == RAISED
    assert "/j/rank-1/error.json" in cause.hint


def test_the_rank_that_raised_first_is_the_root_cause_whatever_order_its_traceback_was_read_in() -> None:
    # both tracebacks were read in one loop turn, rank 0's first; rank 1 raised a second before rank 0
    later = dict(RAISED, exception="RuntimeError", message="Connection closed by peer", written=5.5)
    results = [result(0, later), result(1, RAISED)]
    cause = pick(results, [traceback_found(0, 6.0), traceback_found(1, 6.01)])
    assert cause is not None and cause.rank == 1
    assert cause.others == (RankGroup((0,), "raised RuntimeError"),)
    assert with_raised(cause, results).code == "ValueError"  # a traceback is no name: the exception is


def test_a_cann_code_stays_the_name_with_the_exception_beside_it() -> None:
    data = {"signature": "EZ9999-aicore", "code": "EZ9999", "cls": "device_kernel_fault", "line": "EZ9999: ..."}
    data.update(signature_kind="cause", line_time=3.0, line_time_source="read time", hint="h")
    data.update(source="stderr", retryable=False)
    found = Event(EventKind.SIGNATURE_MATCHED, "j", "localhost", 1, data, time=3.0)
    results = [result(0, state=RankState.STOPPED), result(1, RAISED)]
    cause = with_raised(pick(results, [found]), results)  # type: ignore[arg-type]
    assert (cause.code, cause.cls, cause.first_line) == ("EZ9999", "device_kernel_fault", "EZ9999: ...")
    assert cause.raised == RAISED
    report = FailureReport(cause, 101, 1, None, 6.0, "rank 1 reported EZ9999 (device_kernel_fault)", "/j/e", ())
    assert FailureReport.from_json(json.loads(json.dumps(report.to_json()))) == report  # failure.json
    summary = JobSummary(
        JobInfo("j", "job", JobStatus.FAILED, 1, 1, 2, ("localhost",), "/j", 0.0, 6.0, None, (), 0.1), report, ()
    )
    text = render_report(summary)
    assert "  raised: ValueError: bad batch 3 (train.py:41, in step)\n" in text
    assert "  traceback (from /j/rank-1/error.json):\n    | Traceback (most recent call last):\n" in text


def test_a_traceback_the_logs_last_lines_show_is_not_shown_twice() -> None:
    results = [result(1, RAISED)]
    cause = with_raised(pick(results, []), results)  # type: ignore[arg-type]
    tail = tuple("[rank1]: " + line for line in TRACEBACK.splitlines()[1:])  # as torch prefixes a rank's lines
    reason = "rank 1 raised ValueError: bad batch 3 (train.py:41, in step) and exited with code 1"
    report = FailureReport(cause, 101, 1, None, 6.0, reason, "/j/rank-1/stderr.log", tail)
    summary = JobSummary(
        JobInfo("j", "job", JobStatus.FAILED, 1, 1, 1, ("localhost",), "/j", 0.0, 6.0, None, (), 0.1), report, ()
    )
    text = render_report(summary)
    assert "traceback (from" not in text and "  raised:" not in text  # the reason says it; the tail shows it
    assert text.count('raise ValueError("bad batch 3")') == 1
    assert "raised" not in FailureReport(replace(cause, raised=None), 1, 1, None, 6.0, "r", "l", ()).to_json()
