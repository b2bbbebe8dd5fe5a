"""``npulaunch explain`` (what a code is) and ``npulaunch diagnose`` (the root cause in any job's logs),
through the real command line."""

from __future__ import annotations

import json
import os
import sys
import time
from pathlib import Path

from helpers import RANKS, run_cli, run_local


def plog_time(epoch: float) -> str:
    return time.strftime("%Y-%m-%d-%H:%M:%S", time.localtime(epoch)) + ".%03d.000" % (int(epoch * 1000) % 1000)


def test_explain_a_known_code_in_text_and_json() -> None:
    done = run_cli("explain", "ei0002")
    assert done.returncode == 0, done.stderr
    text = done.stdout
    assert text.startswith("EI0002  HCCL  Communication_Error_Timeout\n")
    assert "user error, communication (HCCL Errors)" in text and "symptom:" in text
    assert "retryable: no" in text and "failure class: hccl_exec_timeout" in text and "HCCL_EXEC_TIMEOUT" in text
    assert "listed in: xiaobingling93-pixel/cann-hcomm@" in text
    (answer,) = json.loads(run_cli("explain", "--json", "EL0005").stdout)
    assert answer["retryable"] and "Wait for a while and try again" in answer["retryable_why"]
    assert answer["kind"] == "cause" and answer["title"] == "Resource_Busy" and answer["shape"] is None


def test_explain_cites_huaweis_hcomm_where_it_holds_the_text() -> None:
    """HcclResult: hicann/hcomm's include/hccl/hccl_types.h holds the same enum (names, values, comments) as
    the mirror's, so Huawei's repository is cited. HCCL's E-code registry (error_code.cc) could not be read
    in Huawei's repository to compare: the mirror stays cited for it (issue 34)."""
    done = run_cli("explain", "HCCL_E_AGAIN", "EI0013")
    assert done.returncode == 0, done.stderr
    again, cqe = done.stdout.split("\n\n")
    assert "listed in: hicann/hcomm@2b912e7d2b10:include/hccl/hccl_types.h" in again
    page = "https://github.com/hicann/hcomm/blob/2b912e7d2b105735579276a63a51364890c56788/include/hccl/hccl_types.h"
    assert f"CANN's page: {page}" in again
    assert "retryable: yes: 'try again', says hicann/hcomm include/hccl/hccl_types.h @ 2b912e7d" in again
    assert "xiaobingling93" not in again
    assert "listed in: xiaobingling93-pixel/cann-hcomm@b5f3e5be094a:src/common/error_code/error_code.cc" in cqe


def test_explain_each_family_as_people_type_it() -> None:
    done = run_cli("explain", "--json", "507035", "hccl:9", "drv:6", "ERR02200", "0x80e18402")
    assert done.returncode == 0, done.stderr
    answers = {a["code"]: a for a in json.loads(done.stdout)}
    assert answers["507035"]["title"] == "ACL_ERROR_RT_VECTOR_CORE_EXCEPTION"
    assert answers["507035"]["cls"] == "device_kernel_fault" and answers["507035"]["scope"] == "internal"
    assert answers["HCCL_E_TIMEOUT"]["kind"] == "symptom"
    assert answers["DRV_ERROR_OUT_OF_MEMORY"]["cls"] == "device_out_of_memory"
    assert answers["ERR02200"]["cls"] == "hccl_call_failed" and answers["ERR02200"]["module"] == "torch_npu DIST"
    assert answers["80E18402"]["level"] == "SeparateNPU"


def test_explain_an_unknown_code_by_its_shape_and_refuse_what_is_no_code() -> None:
    done = run_cli("explain", "EI7777", "8FFFFFFF")
    assert done.returncode == 0
    assert (
        "EI7777  HCCL\n  not in the catalog of the CANN versions npulaunch knows; its shape says: "
        "level error, module HCCL" in done.stdout
    )
    assert "MindCluster handles unknown codes as SeparateNPU" in done.stdout
    refused = run_cli("explain", "loss=0.3")
    assert refused.returncode == 2 and "'loss=0.3' is not a code npulaunch can read" in refused.stderr
    assert "Traceback" not in refused.stderr


def test_diagnose_several_ranks_and_a_plog_names_the_earliest_cause(tmp_path: Path) -> None:
    base = time.time()
    for rank, offset in ((0, 6.0), (2, 7.0)):  # they waited: EI0002 some seconds after rank 1's fault
        (tmp_path / f"rank_{rank}.log").write_text(
            f"step 10 loss 0.3\nEI0002: [PID: {100 + rank}] {plog_time(base + offset)} "
            "The wait execution of the Notify "
            "register times out. Reason: no record from remote rank: [1].\n"
            "        TraceBack (most recent call last):\n        Notify wait execute failed, device_id=0\n"
        )
    (tmp_path / "rank_1.log").write_text(
        'step 10 loss 0.3\nTraceback (most recent call last):\n  File "t.py"\nRuntimeError: boom\n'
    )
    plogs = tmp_path / "plog"
    plogs.mkdir()
    (plogs / "plog-101_20250101000000000.log").write_text(
        f"[INFO] GE(101,python):{plog_time(base)} [g.cc:1] run graph\n"
        f"[ERROR] RUNTIME(101,python):{plog_time(base + 1)} [device_error_proc.cc:713] EZ9999: Inner Error! there "
        "is an aicore error exception, core id is 12, error code = 0x800000\n"
    )
    done = run_cli("diagnose", str(tmp_path))
    assert done.returncode == 0, done.stderr
    lines = done.stdout.splitlines()
    assert lines[0] == "npulaunch diagnose: 4 files, 4 findings"
    assert lines[1].startswith(
        f"  root cause: EZ9999 (device_kernel_fault, cause) in {plogs}/plog-101_20250101000000000.log:2 at "
    )
    assert "by the lines' own time stamps" in done.stdout and "symptoms it explains:" in done.stdout
    assert f"rank 0, {tmp_path}/rank_0.log:2: EI0002 (hccl_exec_timeout, symptom)" in done.stdout
    as_json = json.loads(run_cli("diagnose", "--json", str(tmp_path)).stdout)
    assert as_json["root_cause"]["code"] == "EZ9999" and as_json["root_cause"]["line_no"] == 2
    assert sorted(x["rank"] for x in as_json["explained"]) == [0, 2]
    assert [x["name"] for x in as_json["others"]] == ["python-traceback"]


def test_diagnose_reads_an_npulaunch_job_directory_as_the_run_did(log_dir: Path, marker: str) -> None:
    result = run_local(log_dir, marker, "--", sys.executable, str(RANKS / "cann.py"), "2", nproc=4)
    assert result.returncode == 1
    failure = json.loads((log_dir / "m" / "failure.json").read_text())
    found = json.loads(run_cli("diagnose", "--json", str(log_dir / "m")).stdout)
    assert found["job_dir"] == str(log_dir / "m")
    assert found["failure"] == failure  # from the job's records, told as report tells it
    shown = run_cli("diagnose", str(log_dir / "m")).stdout
    report = run_cli("report", str(log_dir / "m")).stdout
    said = [line for line in shown.splitlines() if line.startswith("  root cause:")]
    assert said and said[0] in report.splitlines()
    root = found["root_cause"]  # and the findings of its files agree
    assert (
        (root["rank"], root["code"], root["cls"])
        == (failure["rank"], failure["code"], failure["cls"])
        == (
            2,
            "EZ9999",
            "device_kernel_fault",
        )
    )
    assert all(x["code"] == "EI0002" for x in found["explained"])


def test_log_files_without_time_stamps_are_ordered_by_when_each_was_last_written(tmp_path: Path) -> None:
    # rank 1 failed first and stopped writing; rank 0 went on, then failed on the lost peer, then raised
    # itself; read in name order, rank 0's file comes first
    traceback = 'Traceback (most recent call last):\n  File "t.py", line 3, in <module>\nRuntimeError: {}\n'
    (tmp_path / "rank_1.log").write_text("step 1\n" + traceback.format("bad batch"))
    (tmp_path / "rank_0.log").write_text("step 1\nstep 2\n" + traceback.format("disk quota exceeded"))
    os.utime(tmp_path / "rank_1.log", (time.time() - 60, time.time() - 60))
    found = json.loads(run_cli("diagnose", "--json", str(tmp_path)).stdout)
    assert found["root_cause"]["rank"] == 1, found
    assert "its lines carry no time stamp: by when each file was last written" in found["why"]


def test_diagnose_of_nothing_and_of_a_missing_path(tmp_path: Path) -> None:
    (tmp_path / "ok.log").write_text("step 1\nstep 2\n")
    done = run_cli("diagnose", str(tmp_path))
    assert done.returncode == 0 and "no code or failure phrase in these files" in done.stdout
    missing = run_cli("diagnose", str(tmp_path / "nope"))
    assert missing.returncode == 2 and "no such file or directory" in missing.stderr
