"""The command line torch users already type: torchrun's form (a script and its own arguments after
npulaunch's flags, or -m module), the framework read from the script's imports, and torchrun's node
flags (--nnodes, --node-rank, --master-addr, --master-port) for one npulaunch per node. The last is run
for real: two npulaunch processes as two nodes of one torch job on this machine."""

from __future__ import annotations

import importlib.util
import json
import socket
import subprocess
import sys
import time
from pathlib import Path

import pytest
from helpers import RANKS, base_env, free_port_window, npulaunch_argv, require, run_cli, wait_until
from test_torch import rank_lines

from npulaunch.cliargs import build_parser, split_script
from npulaunch.config.cluster import Framework
from npulaunch.config.overrides import detect_framework


@pytest.mark.parametrize(
    "words, ours, script",
    [
        (["run", "--nproc-per-node", "8", "train.py", "--lr", "0.1"], 4, ["train.py", "--lr", "0.1"]),
        (["run", "--nproc_per_node=2", "train.py", "-m", "x"], 3, ["train.py", "-m", "x"]),
        (["plan", "-m", "pkg.train", "--epochs", "3"], 3, ["pkg.train", "--epochs", "3"]),
        (["run", "--master-addr", "a.py", "b.py"], 4, ["b.py"]),  # a flag's value is never the script
        (["run", "cluster.yaml"], 2, None),
        (["run", "--log-dir", "x.py"], 3, None),
        (["status", "train.py"], 2, None),
    ],
)
def test_the_script_and_its_arguments_are_split_from_npulaunchs_flags(words, ours, script) -> None:
    mine, theirs = split_script(build_parser(), list(words))
    assert mine == words[:ours] and theirs == script


@pytest.mark.parametrize(
    "source, framework",
    [
        ("import torch\nimport torch_npu\n", Framework.PYTORCH),
        ("from mindspore import nn\n", Framework.MINDSPORE),
        ("import tensorflow as tf\nfrom npu_bridge.npu_init import *\n", Framework.TENSORFLOW),
        ("import os\n", Framework.PYTORCH),  # torchrun's form, nothing imported: torchrun's contract
        ("import torch\nimport tensorflow\n", Framework.PYTORCH),
    ],
)
def test_the_framework_of_torchruns_form_comes_from_the_scripts_imports(
    tmp_path: Path, source: str, framework: Framework
) -> None:
    (tmp_path / "train.py").write_text(source)
    found, why = detect_framework("train.py", str(tmp_path))
    assert found is framework and why


@pytest.mark.parametrize(
    "args, said",
    [
        (["--nnodes", "2", "--node-rank", "1"], "--nnodes with --master-addr"),
        (["--nnodes", "2", "--master-addr", "h0"], "--nnodes with --node-rank"),
        (["--node-rank", "1"], "--node-rank with --nnodes"),
        (["--nnodes", "2", "--node-rank", "2", "--master-addr", "h0"], "0 to 1 (--nnodes 2)"),
        (["--master-port", "70000"], "a port from 1 to 65535"),
        (["--framework", "tensorflow", "--master-port", "2000"], "framework pytorch, or mindspore in msrun"),
    ],
)
def test_node_flags_that_do_not_fit_are_refused_before_anything_starts(tmp_path: Path, args, said) -> None:
    (tmp_path / "train.py").write_text("import torch\n")
    result = run_cli("plan", "--nproc-per-node", "2", *args, "train.py", cwd=tmp_path)
    assert result.returncode == 2 and said in result.stderr
    assert "Traceback" not in result.stderr


@pytest.mark.parametrize("first", [0, 1])
def test_two_npulaunch_processes_are_two_nodes_of_one_torch_job(tmp_path: Path, marker: str, first: int) -> None:
    """torchrun's way under a scheduler: the same command on each node, with its --node-rank. Either node
    may come first: node 1 arriving after node 0's agent serves the store at the master port is not "the
    port is in use" (that was a race CI met: node 1's preflight checked node 0's port here)."""
    require(importlib.util.find_spec("torch") is not None, "torch (pip install -e '.[torch]')")
    port = free_port_window(1)

    def start(node: int) -> subprocess.Popen:
        return subprocess.Popen(
            npulaunch_argv(
                "run",
                "--nnodes",
                "2",
                "--node-rank",
                str(node),
                "--master-addr",
                "127.0.0.1",
                "--master-port",
                str(port),
                "--nproc-per-node",
                "2",
                "--job-id",
                "nodes",
                "--log-dir",
                str(tmp_path / f"node{node}"),
                "--grace-period",
                "1",
                str(RANKS / "torch_rank.py"),
            ),
            env=base_env({"NPLTEST_MARKER": marker, "GLOO_SOCKET_IFNAME": "lo"}),
            stdout=subprocess.PIPE,
            stderr=subprocess.PIPE,
            text=True,
        )

    early = start(first)
    if first == 0:  # node 0's agent serves the store before its ranks start: wait for it
        assert wait_until(lambda: listening(port), 60), "node 0's agent never served the store"
    else:
        time.sleep(1)
    late = start(1 - first)
    nodes = [early, late] if first == 0 else [late, early]
    outputs = [node.communicate(timeout=180) for node in nodes]
    assert [node.returncode for node in nodes] == [0, 0], [err for _, err in outputs]
    ranks = rank_lines(outputs[0][0] + outputs[1][0])
    assert [entry["rank"] for entry in ranks] == [0, 1, 2, 3]
    assert {entry["sum"] for entry in ranks} == {10.0}
    for entry in ranks:
        env = entry["env"]
        assert (env["WORLD_SIZE"], env["GROUP_WORLD_SIZE"]) == ("4", "2")
        assert env["GROUP_RANK"] == str(entry["rank"] // 2) and env["LOCAL_RANK"] == str(entry["rank"] % 2)
        assert (env["MASTER_ADDR"], env["MASTER_PORT"]) == ("127.0.0.1", str(port))
    plan = json.loads((tmp_path / "node1" / "nodes" / "node-1" / "plan.json").read_text())
    assert plan["sources"]["scheduler"].startswith("--nnodes")
    assert plan["rank_table"] is None  # no device IPs to swap: the nodes start at once, sharing nothing
    assert sys.executable in plan["ranks"][0]["argv"][0]


def listening(port: int) -> bool:
    with socket.socket() as sock:
        return sock.connect_ex(("127.0.0.1", port)) == 0
