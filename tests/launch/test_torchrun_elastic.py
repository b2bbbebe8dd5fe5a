"""torchrun's elastic start, side by side with torchrun on the same command line and script: ``--nnodes
1:2`` on one node starts after the last call with that node alone (WORLD_SIZE 2); a second node started
later with the same line waits, the running node sees it, stops its ranks and the two re-form the world
(WORLD_SIZE 4), as torchrun's agents do when ``num_nodes_waiting`` > 0. The DDP loop of
tests/ranks/snapshot_train.py resumes from its own snapshot in the bigger world, and every rank ends with
the same weights. torchrun 2.13 needs TORCH_DISABLE_SHARE_RDZV_TCP_STORE=1 for this on this machine: with
the store it shares by default, the re-formed round waits for a MASTER_ADDR key its node 0 never writes
again (``DistStoreError: wait timeout ... /torch.rendezvous.<id>.1/MASTER_ADDR``), and both agents fail."""

from __future__ import annotations

import importlib.util
import os
import re
import signal
import subprocess
import sys
import time
from pathlib import Path
from typing import Dict, List, Tuple

import pytest
from helpers import RANKS, base_env, free_port_window, npulaunch_argv, require


def elastic(port: int, run_id: str) -> List[str]:
    return [
        "--nnodes=1:2",
        "--nproc-per-node=2",
        "--rdzv-backend=c10d",
        f"--rdzv-endpoint=127.0.0.1:{port}",
        f"--rdzv-id={run_id}",
        "--rdzv-conf=last_call_timeout=1",
    ]


def first_then_second(argv: List[str], env: Dict[str, str], out: Path) -> List[Tuple[int, str, str]]:
    """Start ``argv`` as the first node; once its ranks have trained an epoch, the same line as the second;
    (exit code, stdout, stderr) of each."""
    procs = []
    files = []
    try:
        for node in (0, 1):
            stdout, stderr = out / f"node{node}.out", out / f"node{node}.err"
            files.append((stdout, stderr))
            with open(stdout, "w") as o, open(stderr, "w") as e:
                procs.append(subprocess.Popen(argv, env=env, stdout=o, stderr=e, start_new_session=True))
            if node == 0:
                deadline = time.monotonic() + 120
                while "Epoch 0 done" not in stdout.read_text() and time.monotonic() < deadline:
                    assert procs[0].poll() is None, stderr.read_text()[-3000:]
                    time.sleep(0.2)
        for proc in procs:
            proc.wait(timeout=240)
    finally:
        for proc in procs:
            if proc.poll() is None:
                os.killpg(proc.pid, signal.SIGKILL)
                proc.wait()
    return [(proc.returncode, o.read_text(), e.read_text()) for proc, (o, e) in zip(procs, files)]


def worlds(out: str) -> List[int]:
    return [int(w) for w in re.findall(r"Epoch \d+ done \(world (\d+)\)", out)]


@pytest.mark.alone  # torchrun's own rendezvous gives up on a busy machine
def test_a_second_node_joins_a_running_one_and_the_world_re_forms_as_under_torchrun(
    tmp_path: Path, marker: str
) -> None:
    require(importlib.util.find_spec("torch") is not None, "torch (pip install -e '.[torch]')")
    env = base_env({"NPLTEST_MARKER": marker, "GLOO_SOCKET_IFNAME": "lo", "SNAPSHOT_EPOCH_PAUSE_S": "1"})
    script = [str(RANKS / "snapshot_train.py"), "6"]
    runs = {}
    for name in ("ours", "torchrun"):
        (tmp_path / name).mkdir()
        flags = elastic(free_port_window(1), name)
        snapshot = str(tmp_path / name / "snapshot.pt")
        if name == "ours":
            argv = npulaunch_argv("run", *flags, "--log-dir", str(tmp_path / "logs"), "--no-live", *script, snapshot)
            runs[name] = first_then_second(argv, env, tmp_path / name)
        else:
            argv = [sys.executable, "-m", "torch.distributed.run", *flags, "--monitor-interval=1", *script, snapshot]
            theirs = dict(env, TORCH_DISABLE_SHARE_RDZV_TCP_STORE="1")
            runs[name] = first_then_second(argv, theirs, tmp_path / name)
    for name, nodes in runs.items():
        assert [code for code, _, _ in nodes] == [0, 0], (name, [err[-3000:] for _, _, err in nodes])
        first, second = nodes[0][1], nodes[1][1]
        # the first node trained alone, then in the world of both; the second only in that
        assert worlds(first)[0] == 2 and worlds(first)[-1] == 4 and set(worlds(second)) == {4}, name
        assert second.count("Resuming training from snapshot at Epoch") == 2, name  # from the first's snapshot
        assert len(set(re.findall(r"weights ([0-9a-f]{16})", first + second))) == 1, name
    said = runs["ours"][0][2]
    assert "the world re-forms (1 node waits to join)" in said and "(not counted as a restart)" in said
    assert "this node joins when the world is re-formed" in runs["ours"][1][2]
    assert "node 1 of 2" in runs["ours"][1][2]


def test_a_node_lost_from_a_1_to_2_world_leaves_the_other_to_go_on_alone(tmp_path: Path, marker: str) -> None:
    """The second node's npulaunch is killed mid-run (a lost node: its guard takes its ranks down). The first
    node's ranks lose their peers; --max-restarts=1 restarts it, the new round waits the last call for the
    lost node and closes with the one left (MIN 1), and the job ends on one node, resumed from the script's
    snapshot (torchrun's meaning: a membership change at a restart)."""
    require(importlib.util.find_spec("torch") is not None, "torch (pip install -e '.[torch]')")
    env = base_env({"NPLTEST_MARKER": marker, "GLOO_SOCKET_IFNAME": "lo", "SNAPSHOT_EPOCH_PAUSE_S": "1"})
    flags = [*elastic(free_port_window(1), "lost"), "--max-restarts=1", "--log-dir", str(tmp_path / "logs")]
    argv = npulaunch_argv("run", *flags, "--no-live", str(RANKS / "snapshot_train.py"), "6", str(tmp_path / "s.pt"))
    outs = [(tmp_path / f"node{n}.out", tmp_path / f"node{n}.err") for n in (0, 1)]
    procs = []
    try:
        for out, err in outs:
            with open(out, "w") as o, open(err, "w") as e:
                procs.append(subprocess.Popen(argv, env=env, stdout=o, stderr=e, start_new_session=True))
            time.sleep(0.3)
        deadline = time.monotonic() + 120
        while "Epoch 1 done (world 4)" not in outs[1][0].read_text() and time.monotonic() < deadline:
            time.sleep(0.2)
        os.kill(procs[1].pid, signal.SIGKILL)
        procs[0].wait(timeout=240)
    finally:
        for proc in procs:
            if proc.poll() is None:
                os.killpg(proc.pid, signal.SIGKILL)
                proc.wait()
    first, said = outs[0][0].read_text(), outs[0][1].read_text()
    assert procs[0].returncode == 0, said[-3000:]
    assert worlds(first)[0] == 4 and worlds(first)[-1] == 2
    assert "restarting the job after" in said and "(round 1): node 0 of 1" in said
    assert first.count("Resuming training from snapshot at Epoch") == 2
