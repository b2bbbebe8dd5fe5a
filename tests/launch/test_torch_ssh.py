"""Real PyTorch over real SSH: 2 test hosts (network namespaces with their own sshd) x 2 gloo ranks.
The ranks meet at the first host's address as the others reach it (MASTER_ADDR), each host gets its
own address toward it (HCCL_IF_IP), and a rank that raises on the second host stops every rank of
both hosts, its exception carried back from that host's error file."""

from __future__ import annotations

import importlib.util
import json
import sys
from pathlib import Path

import pytest
from helpers import RANKS, marked_pids, require, run_cli
from test_torch import rank_lines

TORCH_RANK = RANKS / "torch_rank.py"


@pytest.fixture(autouse=True)
def _torch() -> None:
    require(importlib.util.find_spec("torch") is not None, "torch (pip install -e '.[torch]')")


def write_job(tmp_path: Path, netns_hosts, marker: str, *args: str) -> Path:
    config = tmp_path / "job.yaml"
    config.write_text(f"""framework: pytorch
job:
  command: [{sys.executable}, {TORCH_RANK}{"".join(", " + json.dumps(a) for a in args)}]
  log_dir: {tmp_path / "logs"}
  grace_period_s: 1
hosts:
  - {{host: h1, devices: 2}}
  - {{host: h2, devices: [3, 1]}}
ssh: {{user: root, identity_file: {netns_hosts.client_key}, known_hosts: {netns_hosts.known_hosts},
       config: {netns_hosts.ssh_config}}}
env:
  NPLTEST_MARKER: {marker}
  GLOO_SOCKET_IFNAME: eth0
""")
    return config


def test_two_hosts_of_two_ranks_all_reduce_from_the_environment_alone(netns_hosts, tmp_path: Path, marker: str) -> None:
    config = write_job(tmp_path, netns_hosts, marker)
    result = run_cli("run", str(config), "--job-id", "t22", env={"NPLTEST_MARKER": marker}, timeout=180)
    assert result.returncode == 0, result.stderr
    address = {host.name: host.address for host in netns_hosts.hosts}
    ranks = rank_lines(result.stdout)
    assert [entry["rank"] for entry in ranks] == [0, 1, 2, 3]
    assert {entry["sum"] for entry in ranks} == {10.0}
    for entry in ranks:
        env, host = entry["env"], f"h{entry['rank'] // 2 + 1}"
        assert env["NPULAUNCH_HOST"] == host
        assert env["MASTER_ADDR"] == address["h1"]  # the first host, as the launcher reached it
        assert env["HCCL_IF_IP"] == address[host]
        assert (env["GROUP_RANK"], env["GROUP_WORLD_SIZE"]) == (str(entry["rank"] // 2), "2")
        assert env["MASTER_PORT"] == "29500"
    on_h2 = {entry["rank"]: entry["env"] for entry in ranks if entry["rank"] >= 2}
    assert on_h2[2]["ASCEND_RT_VISIBLE_DEVICES"] == "1,3"
    assert (on_h2[2]["LOCAL_RANK"], on_h2[3]["LOCAL_RANK"]) == ("1", "0")  # rank 2 holds NPU 3


def test_a_rank_raising_on_one_host_stops_every_rank_on_every_host(netns_hosts, tmp_path: Path, marker: str) -> None:
    config = write_job(tmp_path, netns_hosts, marker, "--raise-at", "3")
    result = run_cli("run", str(config), "--job-id", "bad", env={"NPLTEST_MARKER": marker}, timeout=180)
    assert result.returncode == 1
    assert "root cause: rank 3 raised ValueError: bad batch on rank 3" in result.stderr
    failure = json.loads((tmp_path / "logs" / "bad" / "failure.json").read_text())
    assert (failure["rank"], failure["host"], failure["raised"]["exception"]) == (3, "h2", "ValueError")
    summary = json.loads((tmp_path / "logs" / "bad" / "summary.json").read_text())
    assert {r["state"] for r in summary["ranks"] if r["rank"] != 3} <= {"stopped", "failed"}
    assert not marked_pids(marker)


def test_a_rank_stuck_on_the_second_host_is_named_from_every_hosts_evidence(
    netns_hosts, tmp_path: Path, marker: str
) -> None:
    # rank 3 (on h2) is stuck in its own code, the others wait for it in an all-reduce: both hosts' agents read
    # their ranks (py-spy where the host has it on PATH, else the process table) before the job is stopped
    config = write_job(tmp_path, netns_hosts, marker)
    config.write_text(config.read_text().replace(str(TORCH_RANK), f'{RANKS / "torch_hang.py"}, stall, "3"'))
    result = run_cli(
        "run", str(config), "--job-id", "hang", "--hang-timeout", "3", env={"NPLTEST_MARKER": marker}, timeout=180
    )
    assert result.returncode == 1, result.stderr
    job = tmp_path / "logs" / "hang"
    failure = json.loads((job / "failure.json").read_text())
    assert (failure["rank"], failure["host"], failure["cls"]) == (3, "h2", "hang"), failure
    events = [json.loads(line) for line in (job / "events.jsonl").read_text().splitlines()]
    dumped = [e for e in events if e["kind"] == "stacks_dumped"]
    assert sorted(e["host"] for e in dumped) == ["h1", "h2"]  # the job was stopped once both had answered
    assert sorted(rank for e in dumped for rank in e["ranks"]) == ["0", "1", "2", "3"]
    assert not marked_pids(marker)
