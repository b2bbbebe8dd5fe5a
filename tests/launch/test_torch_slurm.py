"""A real torch job under real Slurm (n1-n2 here): one npulaunch per node (srun --ntasks-per-node=1), each
starting its node's ranks with torchrun's variables, the job id Slurm's, the nodes meeting at the first
node's TCPStore. The test nodes share this machine, and their names resolve nowhere: the YAML names the
meeting address, as a site whose node names do not resolve would."""

from __future__ import annotations

import importlib.util
import sys
from pathlib import Path

from helpers import RANKS, free_port_window, require
from test_slurm import NPULAUNCH, srun
from test_torch import rank_lines


def test_a_torch_job_on_two_slurm_nodes(slurm_cluster, tmp_path: Path, marker: str) -> None:
    require(importlib.util.find_spec("torch") is not None, "torch (pip install -e '.[torch]')")
    config = tmp_path / "job.yaml"
    config.write_text(f"""framework: {{name: pytorch, master_addr: 127.0.0.1}}
job:
  command: [{sys.executable}, {RANKS / "torch_rank.py"}]
  log_dir: {tmp_path / "logs"}
  grace_period_s: 1
hosts:
  - {{host: any-node, devices: 2}}
env:
  NPLTEST_MARKER: {marker}
  GLOO_SOCKET_IFNAME: lo
""")
    result = srun(slurm_cluster, marker, "-N", "2", "--ntasks-per-node=1", *NPULAUNCH, "run", str(config), timeout=180)
    assert result.returncode == 0, result.stdout + result.stderr
    jobs = list((tmp_path / "logs").iterdir())
    assert len(jobs) == 1 and jobs[0].name.isdigit()  # every node took Slurm's job id
    ranks = rank_lines(result.stdout)
    assert [entry["rank"] for entry in ranks] == [0, 1, 2, 3]
    assert {entry["sum"] for entry in ranks} == {10.0}
    for entry in ranks:
        env = entry["env"]
        assert (env["NPULAUNCH_HOST"], env["GROUP_RANK"]) == (f"n{entry['rank'] // 2 + 1}", str(entry["rank"] // 2))
        assert (env["WORLD_SIZE"], env["MASTER_PORT"], env["TORCHELASTIC_RUN_ID"]) == ("4", "29500", jobs[0].name)


def test_the_c10d_recipe_under_srun(slurm_cluster, tmp_path: Path, marker: str) -> None:
    """torchrun's Slurm recipe with npulaunch in torchrun's place: ``srun -N2 --ntasks-per-node=1 npulaunch run
    --nnodes 2 --nproc-per-node 2 --rdzv-backend c10d --rdzv-endpoint HEAD:PORT --rdzv-id $SLURM_JOB_ID
    train.py``, one line for every node, no node rank, no YAML."""
    require(importlib.util.find_spec("torch") is not None, "torch (pip install -e '.[torch]')")
    port = free_port_window(1)
    line = " ".join(
        [
            *NPULAUNCH,
            "run",
            "--nnodes 2 --nproc-per-node 2 --rdzv-backend c10d",
            f"--rdzv-endpoint 127.0.0.1:{port} --rdzv-id $SLURM_JOB_ID",
            f"--log-dir {tmp_path / 'logs'} --no-live",
            str(RANKS / "torch_rank.py"),
        ]
    )
    env = f"NPLTEST_MARKER={marker} GLOO_SOCKET_IFNAME=lo"
    result = srun(slurm_cluster, marker, "-N", "2", "--ntasks-per-node=1", "bash", "-c", f"{env} {line}", timeout=180)
    assert result.returncode == 0, result.stdout + result.stderr
    jobs = list((tmp_path / "logs").iterdir())
    assert len(jobs) == 1 and jobs[0].name.isdigit()  # the rendezvous id, Slurm's job id, names the job
    assert sorted(p.name for p in jobs[0].glob("node-*")) == ["node-0", "node-1"]
    ranks = rank_lines(result.stdout)
    assert [entry["rank"] for entry in ranks] == [0, 1, 2, 3]
    assert {entry["sum"] for entry in ranks} == {10.0}
    assert {entry["env"]["WORLD_SIZE"] for entry in ranks} == {"4"}
    assert result.stderr.count("node 0 of 2 after") == result.stderr.count("node 1 of 2 after") == 1


def test_the_c10d_recipe_on_network_namespace_nodes(slurm_nodes, tmp_path: Path, marker: str) -> None:
    """The same line on Slurm nodes that are hosts of their own (an address each, tests/netns_hosts.py): the
    endpoint is n1's address, so n1's npulaunch serves the rendezvous and is node 0; n2 reaches it over the
    test network, and the ranks' gloo meets across it."""
    require(importlib.util.find_spec("torch") is not None, "torch (pip install -e '.[torch]')")
    head = slurm_nodes.netns.hosts[0]
    line = " ".join(
        [
            *NPULAUNCH,
            "run",
            "--nnodes 2 --nproc-per-node 2 --rdzv-backend c10d",
            f"--rdzv-endpoint {head.address}:29400 --rdzv-id $SLURM_JOB_ID",
            f"--log-dir {tmp_path / 'logs'} --no-live",
            str(RANKS / "torch_rank.py"),
        ]
    )
    env = f"NPLTEST_MARKER={marker} GLOO_SOCKET_IFNAME=eth0"
    where = ["-p", slurm_nodes.partition, "-w", f"{head.name},{slurm_nodes.netns.hosts[1].name}"]
    argv = ["-N", "2", "--ntasks-per-node=1", *where, "bash", "-c", f"{env} {line}"]
    result = srun(slurm_nodes, marker, *argv, timeout=180)
    assert result.returncode == 0, result.stdout + result.stderr
    ranks = rank_lines(result.stdout)
    assert [entry["rank"] for entry in ranks] == [0, 1, 2, 3] and {entry["sum"] for entry in ranks} == {10.0}
    assert {entry["env"]["MASTER_ADDR"] for entry in ranks} == {head.address}  # node 0 is the endpoint's host
    assert [entry["env"]["NPULAUNCH_HOST"] for entry in ranks][:2] == [head.address] * 2
    assert f"node 0 is {head.address}" in result.stderr and "which serves the rendezvous' store" in result.stderr
