"""Real PyTorch jobs (the CPU build, gloo) under framework: pytorch: every rank forms its process
group from npulaunch's variables alone (init_process_group's env://), all-reduces and checks the sum;
the torchrun form of the command line; a failing rank stops every rank; restarts count in
TORCHELASTIC_RESTART_COUNT. And the shipped torch example, run as a user would."""

from __future__ import annotations

import importlib.util
import json
import sys
from pathlib import Path
from typing import Dict, List

import pytest
from helpers import RANKS, ROOT, marked_pids, require, run_cli

TORCH_RANK = RANKS / "torch_rank.py"


@pytest.fixture(autouse=True)
def _torch() -> None:
    require(importlib.util.find_spec("torch") is not None, "torch (pip install -e '.[torch]')")


def rank_lines(stdout: str) -> List[Dict]:
    """The JSON line every torch_rank.py rank prints, by rank."""
    found = [json.loads(line.split("] ", 1)[1]) for line in stdout.splitlines() if '] {"rank"' in line]
    return sorted(found, key=lambda entry: entry["rank"])


def write_job(tmp_path: Path, marker: str, body: str) -> Path:
    config = tmp_path / "job.yaml"
    config.write_text(
        f"framework: pytorch\njob:\n  log_dir: {tmp_path / 'logs'}\n  grace_period_s: 1\n"
        + body
        + f"env: {{NPLTEST_MARKER: {marker}, GLOO_SOCKET_IFNAME: lo}}\n"
    )
    return config


def test_four_ranks_form_their_group_from_the_environment_alone(tmp_path: Path, marker: str) -> None:
    config = write_job(
        tmp_path,
        marker,
        f"  command: [{sys.executable}, {TORCH_RANK}]\nhosts: [{{host: localhost, devices: [6, 2, 4, 0]}}]\n",
    )
    result = run_cli("run", str(config), "--job-id", "t4", timeout=120)
    assert result.returncode == 0, result.stderr
    ranks = rank_lines(result.stdout)
    assert [entry["rank"] for entry in ranks] == [0, 1, 2, 3]
    assert {entry["sum"] for entry in ranks} == {10.0}  # 1 + 2 + 3 + 4 on every rank
    devices = [6, 2, 4, 0]
    for entry in ranks:
        env = entry["env"]
        assert env["ASCEND_RT_VISIBLE_DEVICES"] == "0,2,4,6"
        # torch.npu.set_device(LOCAL_RANK) opens this rank's own NPU
        assert [0, 2, 4, 6][int(env["LOCAL_RANK"])] == devices[entry["rank"]]
        assert (env["WORLD_SIZE"], env["LOCAL_WORLD_SIZE"], env["GROUP_WORLD_SIZE"]) == ("4", "4", "1")
        assert env["MASTER_ADDR"] == "127.0.0.1" and env["TORCHELASTIC_RESTART_COUNT"] == "0"
        # every rank is a client of the store npulaunch's agent serves (rank 0 hosts none)
        assert env["TORCHELASTIC_USE_AGENT_STORE"] == "True"
        assert env["OMP_NUM_THREADS"] == "1" and env["RANK_ID"] is None
        assert env["TORCHELASTIC_ERROR_FILE"].endswith(f"/t4/rank-{entry['rank']}/error.json")
    summary = json.loads((tmp_path / "logs" / "t4" / "summary.json").read_text())
    assert [r["state"] for r in summary["ranks"]] == ["succeeded"] * 4


def test_the_torchrun_form_of_the_command_line(tmp_path: Path, marker: str) -> None:
    """``npulaunch run --nproc-per-node 2 script.py args``: the script runs with this Python, its
    arguments are its own, and its imports say it is a torch job."""
    result = run_cli(
        "run",
        "--nproc-per-node",
        "2",
        "--log-dir",
        str(tmp_path / "logs"),
        "--job-id",
        "form",
        "--no-live",
        str(ROOT / "examples" / "torch_train.py"),
        "--steps",
        "20",
        "--lr",
        "0.05",
        env={"NPLTEST_MARKER": marker, "GLOO_SOCKET_IFNAME": "lo"},
        timeout=120,
    )
    assert result.returncode == 0, result.stderr
    assert result.stdout.count("first all-reduce 3 ok") == 2
    assert result.stdout.count("weights identical across 2 ranks: True") == 2
    plan = json.loads((tmp_path / "logs" / "form" / "plan.json").read_text())
    assert plan["framework"] == "pytorch"
    assert "imports pytorch" in plan["sources"]["framework"]
    assert plan["ranks"][0]["argv"][:2] == [sys.executable, str(ROOT / "examples" / "torch_train.py")]
    assert plan["ranks"][0]["argv"][2:] == ["--steps", "20", "--lr", "0.05"]


def test_a_rank_that_raises_stops_every_rank_and_is_the_root_cause(tmp_path: Path, marker: str) -> None:
    config = write_job(
        tmp_path,
        marker,
        f"  command: [{sys.executable}, {TORCH_RANK}, --raise-at, '2']\nhosts: [{{host: localhost, devices: 4}}]\n",
    )
    result = run_cli("run", str(config), "--job-id", "bad", timeout=120)
    assert result.returncode == 1
    assert "root cause: rank 2 raised ValueError: bad batch on rank 2" in result.stderr
    assert "torch_rank.py" in result.stderr  # where it raised
    failure = json.loads((tmp_path / "logs" / "bad" / "failure.json").read_text())
    assert (failure["rank"], failure["raised"]["exception"]) == (2, "ValueError")
    assert failure["raised"]["where"].startswith("torch_rank.py:")
    assert not marked_pids(marker)


def test_a_retryable_failure_restarts_and_torchelastic_restart_count_counts(tmp_path: Path, marker: str) -> None:
    config = write_job(
        tmp_path,
        marker,
        f"  command: [{sys.executable}, {TORCH_RANK}, --retry-first]\n  max_restarts: 2\n"
        "hosts: [{host: localhost, devices: 2}]\n",
    )
    result = run_cli("run", str(config), "--job-id", "again", timeout=120)
    assert result.returncode == 0, result.stderr
    ranks = rank_lines(result.stdout)
    assert [entry["env"]["TORCHELASTIC_RESTART_COUNT"] for entry in ranks] == ["1", "1"]
    assert {entry["env"]["TORCHELASTIC_MAX_RESTARTS"] for entry in ranks} == {"2"}
    first = (tmp_path / "logs" / "again" / "attempt-1" / "rank-0" / "stdout.log").read_text()
    assert "EJ0001" in first


def test_the_shipped_torch_example_trains_as_the_readme_says(tmp_path: Path) -> None:
    result = run_cli(
        "run",
        "cluster_configs/local-4-torch.yaml",
        "--log-dir",
        str(tmp_path),
        "--job-id",
        "demo",
        "--no-live",
        timeout=180,
    )
    assert result.returncode == 0, result.stderr
    assert result.stdout.count("first all-reduce 10 ok") == 4
    assert result.stdout.count("weights identical across 4 ranks: True") == 4
    assert "succeeded" in result.stderr + result.stdout


def test_a_job_with_a_rank_table_gives_torch_npu_a_real_file_whose_rank_ids_are_the_ranks(
    tmp_path: Path, marker: str
) -> None:
    """torch_npu's rank-table start-up reads RANK_TABLE_FILE only when it is not a symlink
    (Ascend/pytorch @ 9e73e708 docs/zh/api/environment_variable/collective_communication/RANK_TABLE_FILE.md),
    and needs its rank_id to be the c10d RANK (ProcessGroupHCCL.cpp L2756-2804)."""
    config = write_job(
        tmp_path,
        marker,
        f"  command: [{sys.executable}, {TORCH_RANK}]\n"
        "hosts: [{host: localhost, devices: [1, 0], device_ips: [10.1.0.2, 10.1.0.1]}]\n",
    )
    result = run_cli("run", str(config), "--job-id", "table", timeout=120)
    assert result.returncode == 0, result.stderr
    for entry in rank_lines(result.stdout):
        path = Path(entry["env"]["RANK_TABLE_FILE"])
        assert path.is_file() and not path.is_symlink()
        table = json.loads(path.read_text())
        listed = {d["rank_id"]: d["device_id"] for s in table["server_list"] for d in s["device"]}
        assert listed[str(entry["rank"])] == ["1", "0"][entry["rank"]]
