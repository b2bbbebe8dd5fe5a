"""Recovery of a real PyTorch job (the CPU build, gloo, DDP) from an NPU fault, with the npu-smi stand-in:
mid-run the stand-in reports a fault code on NPU 2; npulaunch stops every rank, excludes the NPU, puts its
rank on the spare NPU 4, gives every rank's checkpoint directory (keyed by device id) the newest complete
file torch.save wrote, passing over a newer one cut short, and every rank loads it
(NPULAUNCH_RESUME_CHECKPOINT) and ends at the final step with the weights an unbroken run has. And
``recovery.checkpoint_dir`` is taken with framework: pytorch, refused with mindspore."""

from __future__ import annotations

import importlib.util
import json
import os
import sys
import threading
import time
from pathlib import Path
from typing import Dict, List, Tuple

import pytest
from helpers import RANKS, require, run_cli

from npulaunch.config.load import parse_config
from npulaunch.config.yamlsource import parse_yaml
from npulaunch.host.errors import ConfigError
from npulaunch.plan.build import build_plan
from npulaunch.plan.launchplan import Discovery

TRAIN = RANKS / "torch_train_ckpt.py"
FINAL = 40
DEVICES = [0, 1, 4, 3]  # the second attempt's: rank 2 on the spare


def job(tmp_path: Path, marker: str, save_ranks: str) -> Path:
    path = tmp_path / "job.yaml"
    path.write_text(
        "framework: pytorch\n"
        f"job:\n  command: [{sys.executable}, {TRAIN}, '{FINAL}']\n  log_dir: {tmp_path / 'logs'}\n"
        "  id: rec\n  grace_period_s: 2\n"
        "hosts:\n  - host: localhost\n    devices: [0, 1, 2, 3]\n    spare_devices: [4]\n"
        "env: {CKPT_DIR: 'ckpt/{device_id}', CKPT_EVERY: '5', TRAIN_STEP_S: '0.1', "
        f"SAVE_RANKS: '{save_ranks}', GLOO_SOCKET_IFNAME: lo, NPLTEST_MARKER: {marker}}}\n"
        "monitor: {health_interval_s: 1}\n"
        "recovery:\n  checkpoint_dir: ckpt/{device_id}\n"
    )
    return path


def fault_at(tmp_path: Path, faults: Path, step: int, also: Tuple[Path, bytes]) -> threading.Thread:
    """Once rank 0 of the first attempt printed ``step``: NPU 2 reports 80E01801, and ``also`` is written
    (a checkpoint cut short, newer than any whole one)."""
    log = tmp_path / "logs" / "rec" / "attempt-1" / "rank-0" / "stdout.log"

    def wait() -> None:
        deadline = time.monotonic() + 120
        while time.monotonic() < deadline:
            if log.exists() and f"step {step}/{FINAL}\n" in log.read_text():
                also[0].parent.mkdir(parents=True, exist_ok=True)
                also[0].write_bytes(also[1])
                faults.write_text("2 Alarm 80E01801\n")
                return
            time.sleep(0.05)

    thread = threading.Thread(target=wait, daemon=True)
    thread.start()
    return thread


def finals(tmp_path: Path) -> Dict[int, Tuple[int, List[float]]]:
    found = {}
    for rank_dir in sorted((tmp_path / "logs" / "rec" / "attempt-2").glob("rank-*")):
        text = (rank_dir / "stdout.log").read_text()
        line = next((x for x in text.splitlines() if x.startswith("final step ")), None)
        if line is not None:
            found[int(rank_dir.name[5:])] = (int(line.split()[2]), json.loads(line.split(" w ", 1)[1]))
    return found


def recover(tmp_path: Path, marker: str, save_ranks: str):
    require(importlib.util.find_spec("torch") is not None, "torch (pip install -e '.[torch]')")
    faults = tmp_path / "faults"
    faults.write_text("")
    cut = tmp_path / "ckpt" / "1" / "ckpt_35.pt"
    fault_at(tmp_path, faults, 12, (cut, b"PK\x03\x04" + bytes(200)))  # a save killed mid-write
    result = run_cli(
        "run",
        str(job(tmp_path, marker, save_ranks)),
        standins=True,
        cwd=tmp_path,
        env={"NPLTEST_MARKER": marker, "NPU_STANDIN_FAULTS": str(faults)},
        timeout=240,
    )
    out = result.stdout + result.stderr
    assert result.returncode == 0, out
    assert "NPU fault on localhost NPU 2" in out and "excluded localhost NPU 2" in out
    first, second = json.loads((tmp_path / "logs" / "rec" / "summary.json").read_text())["attempts"]
    assert first["then"] == "recovered" and first["root_cause"]["code"] == "80E01801"
    assert second["devices"] == {"localhost": DEVICES} and second["status"] == "succeeded"
    resumed = second["resumed"]
    step = resumed["step"]
    assert step is not None and step >= 10 and step % 5 == 0
    assert resumed["skipped"] == [
        [
            str(cut),
            "ckpt_35.pt is cut short or damaged (its zip central directory, "
            "which torch writes last: File is not a zip file)",
        ]
    ]
    assert first["steps_lost"] == first["last_step"] - step
    assert f"every rank resumes from step {step}" in out and f"skipped checkpoint {cut}" in out
    weights = [2.5 * FINAL * (FINAL + 1) / 2] * 4 + [float(FINAL)]  # what an unbroken run ends with
    assert finals(tmp_path) == {rank: (FINAL, weights) for rank in range(4)}
    for rank, device in enumerate(DEVICES):
        text = (tmp_path / "logs" / "rec" / "attempt-2" / f"rank-{rank}" / "stdout.log").read_text()
        placed = tmp_path / "ckpt" / str(device) / f"ckpt_{step}.pt"
        assert f"rank {rank} resumed from {placed} at step {step}\n" in text
        assert f"step {step + 1}/{FINAL}\n" in text and f"step {step}/{FINAL}\n" not in text
    return step, resumed


def test_a_torch_job_recovers_onto_the_spare_and_every_rank_resumes(tmp_path: Path, marker: str) -> None:
    """Rank 0 saves: the found file is rank 0's, copied (never linked) into the other ranks' directories."""
    step, resumed = recover(tmp_path, marker, "0")
    source = tmp_path / "ckpt" / "0" / f"ckpt_{step}.pt"
    assert resumed["checkpoint"] == str(source) and resumed["placed"] == 3
    cut = tmp_path / "ckpt" / "1" / "ckpt_35.pt"
    assert cut.read_bytes() == b"PK\x03\x04" + bytes(200)  # the script's files stay as they were
    for device in (1, 4, 3):
        placed = tmp_path / "ckpt" / str(device) / f"ckpt_{step}.pt"
        assert placed.read_bytes() == source.read_bytes() and not os.path.samefile(source, placed)


def test_every_rank_saving_keeps_its_own_and_only_the_spare_is_given_one(tmp_path: Path, marker: str) -> None:
    """Every rank saves the same weights, so the same bytes: each keeps its own file; only the spare's
    empty directory is given the checkpoint."""
    step, resumed = recover(tmp_path, marker, "all")
    assert resumed["placed"] == 1
    names = {device: tmp_path / "ckpt" / str(device) / f"ckpt_{step}.pt" for device in (0, 1, 2, 3, 4)}
    assert len({os.stat(path).st_ino for path in names.values()}) == 5  # five files, none shared
    assert names[4].read_bytes() == names[0].read_bytes()


# --- the setting, by framework

HOSTS = "hosts: [{host: localhost, devices: [0, 1], spare_devices: [2]}]\nrecovery: {checkpoint_dir: 'ckpt/{rank}'}\n"
NO_TOOLS = Discovery(devices=lambda: [], device_ips=lambda ids: None, free_ports=lambda n: (41000,) * n)


def plan_of(framework: str):
    text = f"version: 1\nframework: {framework}\njob: {{command: [python3, train.py], log_dir: /srv/logs}}\n" + HOSTS
    config = parse_config(parse_yaml(text, "cluster.yaml"), base_dir="/srv")
    return build_plan(config, "job-1", "uuid-1", NO_TOOLS)


def test_checkpoint_dir_is_taken_with_pytorch_and_refused_with_mindspore() -> None:
    assert plan_of("pytorch").recovery["checkpoint_dir"] == "ckpt/{rank}"
    assert plan_of("tensorflow").recovery["checkpoint_dir"] == "ckpt/{rank}"
    with pytest.raises(ConfigError) as refused:
        plan_of("mindspore")
    said = str(refused.value)
    assert "cluster.yaml" in said and "checkpoint_dir with framework: mindspore" in said
    assert "framework: tensorflow and pytorch" in said
