"""Recovery from an NPU fault on this host, with real rank processes and the npu-smi stand-in: mid-run the
stand-in reports a fault code on one NPU; the health watch sees it, npulaunch stops every rank, excludes
the NPU, puts its rank on the spare NPU, gives every rank's checkpoint directory (keyed by device id, as
ModelZoo's scripts key it) the newest complete checkpoint, and the job ends with every rank at the final
step with the same weights. Without a spare the job stops with a report of what was excluded and what
would have fitted; with ``recovery.shrink`` it goes on smaller. A fault on an NPU the job does not use,
and a NotHandleFault code, change nothing."""

from __future__ import annotations

import importlib.util
import json
import subprocess
import sys
import threading
import time
from pathlib import Path
from typing import Callable, Dict, List, Optional

import pytest
from helpers import ROOT, TESTS, require, run_cli

RANK = TESTS / "ranks" / "rank.py"
FINAL = 40


def job(tmp_path: Path, devices: str, extra: str = "", final: int = FINAL) -> Path:
    path = tmp_path / "job.yaml"
    path.write_text(
        f"job:\n  command: [{sys.executable}, {RANK}, '*=train:{final}']\n  log_dir: {tmp_path / 'logs'}\n"
        f"  id: rec\n  grace_period_s: 2\n"
        f"rank_table: none\n"
        f"hosts:\n  - host: localhost\n    {devices}\n"
        "env: {CKPT_DIR: 'out/{device_id}/ckpt', CKPT_EVERY: '5', TRAIN_STEP_S: '0.05'}\n"
        "monitor: {health_interval_s: 0.3}\n"
        f"recovery:\n  checkpoint_dir: out/{{device_id}}/ckpt\n{extra}"
    )
    return path


def fault_when(tmp_path: Path, faults: Path, line: str, step: int = 12) -> threading.Thread:
    """Write ``line`` to the stand-in's faults file once rank 0 of the first attempt printed ``step`` (a job
    without spares is not planned for recovery: its ranks' directories are not in attempt-1/)."""
    logs = [tmp_path / "logs" / "rec" / where / "rank-0" / "stdout.log" for where in ("attempt-1", "")]

    def wait() -> None:
        deadline = time.monotonic() + 30
        while time.monotonic() < deadline:
            if any(log.exists() and f"step {step}\n" in log.read_text() for log in logs):
                faults.write_text(line + "\n")
                return
            time.sleep(0.05)

    thread = threading.Thread(target=wait, daemon=True)
    thread.start()
    return thread


def run(tmp_path: Path, marker: str, yaml: Path, faults: Path, timeout: float = 90):
    return run_cli(
        "run",
        str(yaml),
        standins=True,
        cwd=tmp_path,
        env={"NPLTEST_MARKER": marker, "NPU_STANDIN_FAULTS": str(faults)},
        timeout=timeout,
    )


def recover(
    tmp_path: Path,
    marker: str,
    spares: str,
    fault: str,
    extra: str = "",
    final: int = FINAL,
    step: int = 12,
    edit: Callable[[str], str] = lambda text: text,
) -> "subprocess.CompletedProcess[str]":
    """A 4-rank job on NPUs 0-3 with ``spares`` (``spare_devices: [...]``) whose stand-in npu-smi reports
    ``fault`` (none when empty) once rank 0 printed ``step``; ``edit``: a change to the YAML's text."""
    faults = tmp_path / "faults"
    faults.write_text("")
    yaml = job(tmp_path, f"devices: [0, 1, 2, 3]\n    spare_devices: {spares}", extra, final)
    yaml.write_text(edit(yaml.read_text()))
    if fault:
        fault_when(tmp_path, faults, fault, step)
    return run(tmp_path, marker, yaml, faults)


def summary(tmp_path: Path) -> Dict:
    return json.loads((tmp_path / "logs" / "rec" / "summary.json").read_text())


def finals(tmp_path: Path, attempt: int) -> Dict[int, List[float]]:
    found = {}
    for rank_dir in sorted((tmp_path / "logs" / "rec" / f"attempt-{attempt}").glob("rank-*")):
        text = (rank_dir / "stdout.log").read_text()
        line = next((x for x in text.splitlines() if x.startswith("final step ")), None)
        if line is not None:
            found[int(rank_dir.name[5:])] = (int(line.split()[2]), json.loads(line.split(" w ", 1)[1]))
    return found


def test_an_npu_fault_moves_its_rank_to_the_spare_and_every_rank_resumes(tmp_path: Path, marker: str) -> None:
    result = recover(tmp_path, marker, "[4]", "2 Alarm 80E01801")
    assert result.returncode == 0, result.stdout + result.stderr
    out = result.stdout + result.stderr
    assert "NPU fault on localhost NPU 2" in out and "80E01801" in out
    assert "excluded localhost NPU 2" in out
    data = summary(tmp_path)
    first, second = data["attempts"]
    assert first["status"] == "failed" and first["then"] == "recovered"
    assert first["root_cause"]["cls"] == "npu_fault" and first["root_cause"]["code"] == "80E01801"
    assert first["excluded"][0]["device"] == 2 and first["excluded"][0]["level"] == "RestartBusiness"
    assert first["devices"] == {"localhost": [0, 1, 2, 3]}
    assert second["devices"] == {"localhost": [0, 1, 4, 3]}  # rank 2 on the spare, the others where they were
    assert second["status"] == "succeeded"
    step = second["resumed"]["step"]
    assert step is not None and step >= 10 and step % 5 == 0
    assert first["steps_lost"] == first["last_step"] - step
    ended = finals(tmp_path, 2)
    assert sorted(ended) == [0, 1, 2, 3]
    assert {s for s, _ in ended.values()} == {FINAL}
    assert len({json.dumps(w) for _, w in ended.values()}) == 1  # the same weights on every rank
    assert ended[0][1] == [float(sum(range(1, FINAL + 1)))] * 4
    resumed = (tmp_path / "logs" / "rec" / "attempt-2" / "rank-2" / "stdout.log").read_text()
    assert f"resumed from {tmp_path}/out/4/ckpt/" in resumed  # the spare's directory was given the checkpoint
    assert f"every rank resumes from step {step}" in out


def test_without_a_spare_the_job_stops_with_what_was_excluded_and_what_would_fit(tmp_path: Path, marker: str) -> None:
    result = recover(tmp_path, marker, "[]", "1 Critical 80E01801")
    assert result.returncode == 1, result.stdout + result.stderr
    out = result.stdout + result.stderr
    assert "no spare fits in place of what was excluded" in out
    assert "excluded: localhost NPU 1: NPU fault 80E01801 (RestartBusiness)" in out
    assert "would have fitted: a spare NPU in spare_devices of this host" in out
    assert "with recovery.shrink: {min_ranks: 3}" in out
    assert not (tmp_path / "logs" / "rec" / "attempt-2").exists()
    assert summary(tmp_path)["root_cause"]["cls"] == "npu_fault"


def test_shrink_goes_on_with_the_ranks_left(tmp_path: Path, marker: str) -> None:
    result = recover(tmp_path, marker, "[]", "3 Alarm 80E01801", "  shrink: {min_ranks: 2}\n")
    assert result.returncode == 0, result.stdout + result.stderr
    second = summary(tmp_path)["attempts"][1]
    assert second["devices"] == {"localhost": [0, 1, 2]}
    ended = finals(tmp_path, 2)
    assert sorted(ended) == [0, 1, 2] and {s for s, _ in ended.values()} == {FINAL}


@pytest.mark.parametrize(
    "line, why",
    [("6 Critical 80E01801", "an NPU the job does not use"), ("1 OK 80B18009", "a NotHandleFault code")],
)
def test_faults_that_change_nothing(tmp_path: Path, marker: str, line: str, why: str) -> None:
    result = recover(tmp_path, marker, "[4]", line, final=20, step=5)
    assert result.returncode == 0, result.stdout + result.stderr
    assert not (tmp_path / "logs" / "rec" / "attempt-2").exists(), why
    assert "NPU fault" not in result.stdout + result.stderr
    ended: Optional[Dict] = finals(tmp_path, 1)
    assert ended and {s for s, _ in ended.values()} == {20}


def test_real_tensorflow_training_recovers_to_identical_weights(tmp_path: Path, marker: str) -> None:
    """The main job's kind (examples/tf_train.py, TensorFlow collectives on the CPU) with the recovery
    example's settings: a fault on NPU 2 mid-run, the job ends on NPUs 0, 1, 4, 3 with every rank at the
    final step, resumed from the same checkpoint, with identical weights."""
    require(importlib.util.find_spec("tensorflow") is not None, "tensorflow-cpu (pip install -e '.[tf]')")
    config = (ROOT / "cluster_configs" / "local-4-recovery.yaml").read_text()
    config = config.replace("workdir: ..", f"workdir: {tmp_path}").replace(
        "log_dir: ../npulaunch-logs", f"log_dir: {tmp_path / 'logs'}"
    )
    config = config.replace("examples/tf_train.py", str(ROOT / "examples" / "tf_train.py")).replace(
        "python3,", f"{sys.executable},"
    )
    config = config.replace('"300"', '"120"').replace("health_interval_s: 1 ", "health_interval_s: 0.3 ")
    yaml = tmp_path / "recover.yaml"
    yaml.write_text(config)
    faults = tmp_path / "faults"
    faults.write_text("")
    log = tmp_path / "logs" / "rec" / "attempt-1" / "rank-0" / "stdout.log"

    def inject() -> None:
        deadline = time.monotonic() + 120
        while time.monotonic() < deadline:
            if log.exists() and "step 50/120" in log.read_text():
                faults.write_text("2 Alarm 80E01801\n")
                return
            time.sleep(0.05)

    threading.Thread(target=inject, daemon=True).start()
    result = run_cli(
        "run",
        str(yaml),
        "--job-id",
        "rec",
        standins=True,
        env={"NPLTEST_MARKER": marker, "NPU_STANDIN_FAULTS": str(faults)},
        timeout=300,
    )
    assert result.returncode == 0, result.stdout + result.stderr
    data = summary(tmp_path)
    first, second = data["attempts"]
    assert first["then"] == "recovered" and first["excluded"][0]["device"] == 2
    assert second["devices"] == {"localhost": [0, 1, 4, 3]}
    step = second["resumed"]["step"]
    assert step in (40, 60, 80, 100)
    weights = []
    for rank in range(4):
        assert f"rank {rank}: weights identical on all 4 ranks: yes" in result.stdout
        rank_dir = tmp_path / "logs" / "rec" / "attempt-2" / f"rank-{rank}"
        text = (rank_dir / "stdout.log").read_text()
        assert f"rank {rank} resumed from " in text and f"at step {step}" in text
        assert "step 120/120" in text
        weights.append(json.loads((rank_dir / "weights.json").read_text()))
    assert weights[1:] == weights[:1] * 3
    assert (tmp_path / "output" / "rec" / "4" / "ckpt" / "checkpoint").exists()  # the spare's, given the checkpoint


def test_a_rank_that_dies_as_its_npu_fails_has_the_npu_fault_as_root_cause(tmp_path: Path, marker: str) -> None:
    """Rank 1 exits 1 at the moment its NPU starts reporting 80E01801; the health watch's next round is 30 s
    away, but the agent takes a last look at a failed rank's NPU: the root cause is the NPU fault, and the
    job recovers on the spare."""
    result = recover(
        tmp_path,
        marker,
        "[4]",
        "",  # the rank writes the fault itself, as it dies
        final=30,
        edit=lambda text: text.replace("health_interval_s: 0.3", "health_interval_s: 30").replace(
            "TRAIN_STEP_S: '0.05'}", "TRAIN_STEP_S: '0.05', FAULT_AT: '1:12:1 Alarm 80E01801'}"
        ),
    )
    assert result.returncode == 0, result.stdout + result.stderr
    first, second = summary(tmp_path)["attempts"]
    assert first["root_cause"] == {"rank": 1, "cls": "npu_fault", "code": "80E01801", "retryable": False}
    assert second["devices"] == {"localhost": [0, 4, 2, 3]}
    step = second["resumed"]["step"]  # 10, or 15 when the others wrote it before they were stopped
    assert step is not None and step >= 10 and step % 5 == 0 and first["steps_lost"] == first["last_step"] - step
    assert {s for s, _ in finals(tmp_path, 2).values()} == {30}


def test_the_recovered_attempt_has_its_own_rank_table(tmp_path: Path, marker: str) -> None:
    """HCCL reads the rank table: the attempt after a recovery has its own, naming the spare NPU for the moved
    rank (device IPs from the hccn_tool stand-in), and its ranks' RANK_TABLE_FILE names it."""
    result = recover(
        tmp_path,
        marker,
        "[4]",
        "2 Alarm 80E01801",
        final=30,
        edit=lambda t: t.replace("rank_table: none", "rank_table: required"),
    )
    assert result.returncode == 0, result.stdout + result.stderr
    job_dir = tmp_path / "logs" / "rec"
    first = json.loads((job_dir / "rank_table.json").read_text())
    second = json.loads((job_dir / "attempt-2" / "rank_table.json").read_text())
    devices = [(d["rank_id"], d["device_id"]) for d in first["server_list"][0]["device"]]
    assert devices == [("0", "0"), ("1", "1"), ("2", "2"), ("3", "3")]
    devices = [(d["rank_id"], d["device_id"]) for d in second["server_list"][0]["device"]]
    assert devices == [("0", "0"), ("1", "1"), ("2", "4"), ("3", "3")]
    plan = json.loads((job_dir / "attempt-2" / "plan.json").read_text())
    assert str(job_dir / "attempt-2" / "rank_table.json") in json.dumps(plan)


@pytest.mark.parametrize(
    "event, recovered",
    [("0x80e01801", True), ("0x80B18009", False)],  # RestartBusiness; NotHandleFault: nothing to recover from
)
def test_a_device_fault_a_rank_prints_is_recovered_from_unless_its_level_asks_nothing(
    tmp_path: Path, marker: str, event: str, recovered: bool
) -> None:
    """Rank 1 prints the driver's RAS line with a fault code and exits 1; npu-smi says nothing (its next round
    is 30 s away, and the last look finds the NPU healthy): the diagnosis files the line under a device
    fault, and the job recovers on the spare, unless MindCluster's level of the code asks for nothing."""
    line = (
        "[ERROR] DRV(1234,python):2026-11-26-05:00:00.000.000 [ras] Fault RAS occurs in the system: "
        f"[event_id:{event}] Uncorrectable ECC / other uncorrectable memory error"
    )
    result = recover(
        tmp_path,
        marker,
        "[4]",
        "",
        final=30,
        edit=lambda text: text.replace("health_interval_s: 0.3", "health_interval_s: 30").replace(
            "TRAIN_STEP_S: '0.05'}", f"TRAIN_STEP_S: '0.05', FAULT_PRINT: '1:12:{line}'}}"
        ),
    )
    first = summary(tmp_path)["attempts"][0]
    assert first["root_cause"]["cls"] == "npu_hardware_fault" and first["root_cause"]["code"] == event[2:].upper()
    if recovered:
        assert result.returncode == 0, result.stdout + result.stderr
        assert [(e["host"], e["device"]) for e in first["excluded"]] == [("localhost", 1)]
        assert summary(tmp_path)["attempts"][1]["devices"] == {"localhost": [0, 4, 2, 3]}
    else:
        assert result.returncode == 1 and first["excluded"] == [] and first["then"] == ""
