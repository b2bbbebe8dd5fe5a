"""Diagnosis end to end through the real CLI: the root cause over the ranks that only waited for it,
hangs, the job's own patterns, and ``status``/``report`` reading the job directory back; and whether a
connect timeout may be retried, from real Ascend lines (tests/data/ascend_error_lines.jsonl) fed
through the agent's monitor."""

from __future__ import annotations

import json
import sys
import time
from pathlib import Path
from typing import Any, Dict, List, Tuple

import pytest
from helpers import RANKS, host_plan, py_spy_denied, run_cli, run_local

from npulaunch.diagnose.rootcause import pick
from npulaunch.host.agent.monitor import Monitor
from npulaunch.host.events import Event, EventKind
from npulaunch.host.records import RankResult, RankState

DATA = Path(__file__).resolve().parent.parent / "data" / "ascend_error_lines.jsonl"
IN_CONTEXT = [row for row in map(json.loads, DATA.read_text(encoding="utf-8").splitlines()) if row.get("context")]
# real lines (tests/data/ascend_error_lines.jsonl): a connect timeout (hiyouga/LlamaFactory#5071), and a port that
# another process holds (vllm-project/vllm-ascend#4725)
TIMEOUT = (
    "EI0006: 2024-08-05-18:15:21.270.506 Getting socket times out. Reason: Remote Rank did not send the data in "
    "time. Please check the reason for the rank being stuck"
)
LISTEN_FAIL = (
    "[ERROR] HCCL(60570,):2025-12-04-14:46:07.911.312 [hccl_socket.cc:106] [60570][HcclSocket][Listen] socket "
    "type[0], listen on ip[192.2.2.195] and specific port[16666] fail. Please check the port status and whether "
    "the port is being used by other process."
)


def test_a_device_fault_is_the_root_cause_not_the_ranks_that_timed_out(log_dir: Path, marker: str) -> None:
    # ranks 0-4, 6-7 print EI0002 (timestamped start+3 s) before npulaunch reads rank 5's plog
    # (EZ9999 timestamped start+1 s): the cause wins by its own timestamp, not by arrival
    result = run_local(log_dir, marker, "--", sys.executable, str(RANKS / "cann.py"), "5", nproc=8)
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
    result = run_local(
        log_dir,
        marker,
        "--hang-timeout",
        "1",
        "--",
        sys.executable,
        str(RANKS / "rank.py"),
        "1=silent",
        "*=tick",
        nproc=3,
    )
    assert result.returncode == 1
    # limit + 1 s to notice + every rank's stack read (py-spy, 0.5 s apart in the process table) + grace + start-up
    assert time.monotonic() - started < 1 + 1 + 2 + 1 + 3
    events = [json.loads(line) for line in (log_dir / "m" / "events.jsonl").read_text().splitlines()]
    hang = next(e for e in events if e["kind"] == "hang_detected")
    assert hang["ranks"] == [1] and hang["phase"] == "steady" and hang["whole_job"] is False
    assert 1.0 <= hang["silent_s"]["1"] < 2.0
    failure = json.loads((log_dir / "m" / "failure.json").read_text())
    assert failure["rank"] == 1 and failure["cls"] == "hang"
    assert "hang: rank 1 printed nothing for more than 1 s (steady); reading every rank's stack" in result.stderr


@pytest.mark.alone  # a hang judged by silence: a busy machine delays it
def test_a_whole_job_stall_is_detected(log_dir: Path, marker: str) -> None:
    result = run_local(
        log_dir, marker, "--hang-timeout", "1", "--", sys.executable, str(RANKS / "rank.py"), "*=silent", nproc=2
    )
    assert result.returncode == 1
    assert "hang: every rank printed nothing" in result.stderr
    failure = json.loads((log_dir / "m" / "failure.json").read_text())
    assert failure["cls"] == "hang" and "whole job stopped printing" in failure["why"]


def test_the_jobs_own_pattern_names_the_failure(tmp_path: Path, log_dir: Path, marker: str) -> None:
    config = tmp_path / "job.yaml"
    config.write_text(f"""job:
  command: [{sys.executable}, {RANKS / "rank.py"}, "0=say:loss-is-nan+exit:1@0.3", "*=hang"]
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
    config.write_text(
        "job: {command: [python3, x.py]}\nhosts: [{host: localhost, devices: 1}]\n"
        'monitor:\n  patterns:\n    - {name: bad, pattern: "(unclosed"}\n'
    )
    result = run_cli("check", str(config))
    assert result.returncode == 2
    assert ":5: monitor.patterns[0].pattern: found '(unclosed'" in result.stderr


def test_status_and_report_read_the_job_directory_back(log_dir: Path, marker: str) -> None:
    result = run_local(log_dir, marker, "--", sys.executable, str(RANKS / "rank.py"), "1=exit:4@0.3", "*=tick", nproc=3)
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


def test_a_heartbeat_is_progress_for_a_silent_rank(log_dir: Path, marker: str) -> None:
    result = run_local(
        log_dir, marker, "--hang-timeout", "1", "--", sys.executable, str(RANKS / "rank.py"), "*=beat:2.5", nproc=2
    )
    assert result.returncode == 0, result.stderr
    assert "hang" not in result.stderr


def write_config(tmp_path: Path, log_dir: Path, rank_args: str, monitor: str, extra: str = "") -> Path:
    config = tmp_path / "job.yaml"
    config.write_text(f"""job:
  command: [{sys.executable}, {RANKS / "rank.py"}, {rank_args}]
  log_dir: {log_dir}
  grace_period_s: 1
hosts: [{{host: localhost, devices: 2}}]
monitor: {monitor}
{extra}""")
    return config


def test_with_a_progress_regex_other_lines_are_not_progress(tmp_path: Path, log_dir: Path, marker: str) -> None:
    config = write_config(
        tmp_path, log_dir, '"*=noise"', '{hang_timeout_s: 1, startup_timeout_s: 1, progress_regex: "step \\\\d+"}'
    )
    result = run_cli("run", str(config), "--job-id", "m", env={"NPLTEST_MARKER": marker})
    assert result.returncode == 1
    assert json.loads((log_dir / "m" / "failure.json").read_text())["cls"] == "hang"


def test_a_hung_rank_leaves_its_python_stacks_by_its_own_signal_where_py_spy_cannot_attach(
    tmp_path: Path, log_dir: Path, marker: str
) -> None:
    config = write_config(
        tmp_path,
        log_dir,
        '"0=silent", "*=tick"',
        "{hang_timeout_s: 1}",
        "session_injection: auto\nsession_options: {hcom_parallel: true}\n",
    )
    result = run_cli("run", str(config), "--job-id", "m", env={"NPLTEST_MARKER": marker, **py_spy_denied(tmp_path)})
    assert result.returncode == 1
    stacks = sorted((log_dir / "m" / "rank-0").glob("stacks-[0-9]*.txt"))
    assert len(stacks) == 1, result.stderr
    text = stacks[0].read_text()
    assert "Current thread" in text and "in hang" in text  # faulthandler's dump of the rank's main thread
    assert f"stack dump: {stacks[0]}" in result.stderr
    assert "Permission Denied" in (log_dir / "m" / "rank-0" / "stacks-py-spy.txt").read_text()  # what py-spy said
    failure = json.loads((log_dir / "m" / "failure.json").read_text())
    assert failure["rank"] == 0 and failure["cls"] == "hang"
    assert "rank.py:" in failure["first_line"] and "in hang" in failure["first_line"], failure
    assert "evidence: stacks by faulthandler" in failure["why"]


def reported(tmp_path: Path, printed: Dict[int, Tuple[str, List[str]]]) -> List[Event]:
    """What the agent's monitor reports when each rank prints these lines: ``{rank: ("stdout" or "plog",
    lines)}``, plog lines written into the rank's plog directory as CANN does."""
    plan = host_plan(tmp_path, "m", ranks=len(printed))
    events: List[Event] = []

    def emit(kind: EventKind, rank: Any = None, **data: Any) -> None:
        events.append(Event(kind, "t", "localhost", rank, data))

    monitor = Monitor(plan, emit, time.monotonic)
    for rank, (where, lines) in printed.items():
        if where == "plog":
            plog_dir = tmp_path / f"rank-{rank}" / "ascend" / "plog"
            plog_dir.mkdir(parents=True)
            (plog_dir / "plog-100_20250101000000000.log").write_text("\n".join(lines) + "\n")
        else:
            monitor.lines(rank, "stdout", "".join(line + "\n" for line in lines).encode())
    monitor.close()
    return events


def failed(ranks: int) -> List[RankResult]:
    return [
        RankResult(rank, "localhost", rank, 100 + rank, RankState.FAILED, 1.0, 2.0, 1, None) for rank in range(ranks)
    ]


@pytest.mark.parametrize("row", IN_CONTEXT, ids=lambda row: row["source"].rsplit("/", 1)[-1])
def test_whether_a_timeout_may_be_retried_follows_the_lines_around_it(tmp_path: Path, row: Dict[str, Any]) -> None:
    events = reported(tmp_path, {0: (row["format"], row["context"] + [row["line"]])})
    own = next(e for e in events if e.data["line"] == row["line"])  # the timeout is still reported as what it is
    assert (own.data["code"], own.data["cls"], own.data["signature_kind"]) == (row["code"], row["cls"], row["kind"])
    root = pick(failed(1), events)
    assert root is not None and root.retryable is row["retryable"], root


def test_a_connect_timeout_is_not_retried_and_another_ranks_cause_explains_it(tmp_path: Path) -> None:
    # Huawei's texts for EI0006 say to find the peer that failed or started late, or to raise
    # HCCL_CONNECT_TIMEOUT (hicann/hccl param_link_stage.md): not to retry, so npulaunch does not
    alone = pick(failed(2), reported(tmp_path / "a", {0: ("stdout", [TIMEOUT]), 1: ("stdout", [TIMEOUT])}))
    assert alone is not None and alone.code == "EI0006" and not alone.retryable and alone.kind == "symptom"
    both = pick(failed(2), reported(tmp_path / "b", {0: ("stdout", [TIMEOUT]), 1: ("plog", [LISTEN_FAIL])}))
    assert both is not None and both.rank == 1 and both.cls == "hccl_listen_failed" and not both.retryable
    assert "rank 0 reported EI0006 (symptoms of waiting)" in both.why


def test_a_port_in_use_stops_the_job_and_is_not_retried(log_dir: Path, marker: str) -> None:
    # rank.py's say: prints its argument with dashes for spaces: the listen failure, then the timeout it causes
    listen = "say:[ERROR]-HCCL(1,python3):-socket-type[1],-listen-on-ip[192.168.20.160]-and-specific-port[16666]-fail."
    timeout = "say:EI0006:-Getting-socket-times-out."
    argv = [sys.executable, str(RANKS / "rank.py"), f"0={listen}+{timeout}+exit:1", f"*={timeout}+hang@0.5"]
    result = run_local(log_dir, marker, "--max-restarts", "2", "--restart-on", "retryable", "--", *argv, nproc=2)
    assert result.returncode == 1
    summary = json.loads((log_dir / "m" / "summary.json").read_text())
    assert [a["root_cause"] for a in summary["attempts"]] == [
        {"rank": 0, "cls": "hccl_listen_failed", "code": "hccl-listen-fail", "retryable": False}
    ]
    assert "restarting" not in result.stderr


def test_a_cause_read_after_its_rank_exited_counts_from_the_exit() -> None:
    # rank 0 printed EZ9999 and exited at t=5, but its line was read at t=10 (a backlog, read once the
    # job was being stopped); rank 1 failed on its own at t=7: rank 0 came first
    def matched(rank: int, line_time: float) -> Event:
        data = {"signature": "EZ9999-aicore", "code": "EZ9999", "cls": "device_kernel_fault", "line": "EZ9999"}
        data.update(signature_kind="cause", line_time=line_time, line_time_source="read time", hint="h")
        data.update(source="stdout", retryable=False)
        return Event(EventKind.SIGNATURE_MATCHED, "j", "localhost", rank, data, time=line_time)

    results = [
        RankResult(0, "localhost", 0, 100, RankState.FAILED, 1.0, 5.0, 1, None),
        RankResult(1, "localhost", 1, 101, RankState.FAILED, 1.0, 7.0, 1, None),
    ]
    root = pick(results, [matched(0, 10.0)])
    assert root is not None and root.rank == 0 and root.code == "EZ9999"
    # the line's own time still counts when it is the earlier one
    assert pick(results, [matched(0, 3.0)]).time == 3.0  # type: ignore[union-attr]


def test_a_ranks_last_coded_warning_names_its_death(tmp_path: Path, log_dir: Path, marker: str) -> None:
    # torch_npu prints "NPU warning, error code is N" and the process dies with nothing more specific: the warning's
    # code is the failure's; the same warning from a rank that goes on to succeed is no finding
    script = tmp_path / "warn.py"
    script.write_text(
        "import os, sys\nprint('step 1 loss 0.5', flush=True)\n"
        "sys.stderr.write('[W NPUStream.cpp:365] Warning: NPU warning, error code is 507035[Error]: .\\n')\n"
        "sys.stderr.flush()\nif os.environ['RANK_ID'] == '1':\n    os.kill(os.getpid(), 9)\n"
    )
    result = run_local(log_dir, marker, "--", sys.executable, str(script), nproc=2)
    assert result.returncode == 1
    failure = json.loads((log_dir / "m" / "failure.json").read_text())
    assert (failure["rank"], failure["code"]) == (1, "507035"), failure
    events = [json.loads(line) for line in (log_dir / "m" / "events.jsonl").read_text().splitlines()]
    assert [e["rank"] for e in events if e["kind"] == "signature_matched"] == [1]
