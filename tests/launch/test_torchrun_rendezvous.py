"""torchrun's multi-node recipe, pasted: ``--nnodes=2 --nproc-per-node=2 --rdzv-backend=c10d
--rdzv-endpoint=HEAD:PORT --rdzv-id=JOB train.py`` on every node, with no node rank and no job id, run as two
npulaunch processes on this host (two nodes meeting at 127.0.0.1), side by side with two torchrun agents on
the same command line and the same script. Both train tests/ranks/snapshot_train.py (DDP, gloo) to the same
weights; npulaunch's nodes agree on one job id (the rendezvous id), node 0 serving the rendezvous' store;
and with rank 1 failing once under --max-restarts=1, both nodes restart and resume from the script's own
snapshot to those weights. (A node joining at a restart, torchrun's re-formed world, is not built yet.)
And ``--nnodes 1:2`` on one node starts once the last call has passed, with a world of that node alone, as
torchrun's does."""

from __future__ import annotations

import importlib.util
import json
import os
import re
import signal
import subprocess
import sys
from pathlib import Path
from typing import Dict, List, Tuple

from helpers import RANKS, base_env, free_port_window, npulaunch_argv, require
from test_torch import rank_lines


def recipe(port: int, nodes: str = "2") -> List[str]:
    return [
        f"--nnodes={nodes}",
        "--nproc-per-node=2",
        "--rdzv-backend=c10d",
        f"--rdzv-endpoint=127.0.0.1:{port}",
        "--rdzv-id=recipe",
    ]


def launch_all(argvs: List[List[str]], env: Dict[str, str], timeout_s: float = 180) -> List[Tuple[int, str, str]]:
    """Start every command at once, each in a session of its own (killed whole if it outlives the timeout:
    torchrun's workers too); (exit code, stdout, stderr) of each."""
    procs = [
        subprocess.Popen(
            argv, env=env, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, start_new_session=True
        )
        for argv in argvs
    ]
    results = []
    try:
        for proc in procs:
            out, err = proc.communicate(timeout=timeout_s)
            results.append((proc.returncode, out, err))
    finally:
        for proc in procs:
            if proc.poll() is None:
                os.killpg(proc.pid, signal.SIGKILL)
                proc.wait()
    return results


def torchrun_argv(*args: str) -> List[str]:
    return [sys.executable, "-m", "torch.distributed.run", *args]


def json_lines(out: str) -> List[dict]:
    """Every rank's JSON object in torchrun's output, where its workers share one stdout and two lines may
    run together."""
    decoder, found = json.JSONDecoder(), []
    at = out.find('{"rank"')
    while at >= 0:
        entry, end = decoder.raw_decode(out, at)
        found.append(entry)
        at = out.find('{"rank"', end)
    return found


def weights(out: str) -> set:
    return set(re.findall(r"weights ([0-9a-f]{16})", out))


def test_the_c10d_recipe_on_two_nodes_trains_as_under_torchrun(tmp_path: Path, marker: str) -> None:
    require(importlib.util.find_spec("torch") is not None, "torch (pip install -e '.[torch]')")
    env = base_env({"NPLTEST_MARKER": marker, "GLOO_SOCKET_IFNAME": "lo"})
    port = free_port_window(1)
    script = [str(RANKS / "snapshot_train.py"), "3"]
    ours = launch_all(
        [
            npulaunch_argv(
                "run", *recipe(port), "--log-dir", str(tmp_path / "logs"), "--no-live", *script, str(tmp_path / "a.pt")
            )
            for _ in range(2)
        ],
        env,
    )
    assert [code for code, _, _ in ours] == [0, 0], [err[-3000:] for _, _, err in ours]
    said = [err for _, _, err in ours]
    assert sorted(re.search(r"node (\d) of 2 after", err).group(1) for err in said) == ["0", "1"]  # type: ignore[union-attr]
    assert sum("which serves the rendezvous' store" in err for err in said) == 1
    # one job, named by the rendezvous id, its two nodes' directories side by side
    assert sorted(p.name for p in (tmp_path / "logs" / "recipe").iterdir() if p.name.startswith("node-")) == [
        "node-0",
        "node-1",
    ]
    plan = json.loads((tmp_path / "logs" / "recipe" / "node-1" / "plan.json").read_text())
    assert plan["world_size"] == 4 and plan["sources"]["framework.node_rank"].startswith("the c10d rendezvous")

    port = free_port_window(1)
    theirs = launch_all([torchrun_argv(*recipe(port), *script, str(tmp_path / "b.pt")) for _ in range(2)], env)
    assert [code for code, _, _ in theirs] == [0, 0], [err[-3000:] for _, _, err in theirs]
    ours_out = "".join(out for _, out, _ in ours)
    assert len(weights(ours_out)) == 1
    assert weights(ours_out) == weights("".join(out for _, out, _ in theirs))

    # the DDP tutorial's multi-node flow: rank 1 fails at epoch 1, --max-restarts=1 restarts both nodes, and
    # every rank resumes from the script's snapshot to the same weights
    port = free_port_window(1)
    failing = dict(env, SNAPSHOT_FAIL_AT="1")
    flags = [*recipe(port), "--max-restarts=1", "--log-dir", str(tmp_path / "restarted"), "--no-live"]
    restarted = launch_all([npulaunch_argv("run", *flags, *script, str(tmp_path / "c.pt")) for _ in range(2)], failing)
    assert [code for code, _, _ in restarted] == [0, 0], [err[-3000:] for _, _, err in restarted]
    out = "".join(out for _, out, _ in restarted)
    assert out.count("Resuming training from snapshot at Epoch 1") == 4
    assert all("attempt 2 (restart 1 of 1)" in err for _, _, err in restarted)
    assert weights(out) == weights(ours_out)


def test_one_node_of_1_to_2_starts_after_the_last_call_alone_as_under_torchrun(tmp_path: Path, marker: str) -> None:
    require(importlib.util.find_spec("torch") is not None, "torch (pip install -e '.[torch]')")
    env = base_env({"NPLTEST_MARKER": marker, "GLOO_SOCKET_IFNAME": "lo"})
    flags = [*recipe(free_port_window(1), "1:2"), "--rdzv-conf=last_call_timeout=1"]
    ((code, out, err),) = launch_all(
        [npulaunch_argv("run", *flags, "--log-dir", str(tmp_path), "--no-live", str(RANKS / "torch_rank.py"))], env
    )
    assert code == 0, err
    assert "waiting at the c10d rendezvous 'recipe' at 127.0.0.1:" in err and "1 of 1 to 2 nodes" in err
    assert "node 0 of 1 after" in err
    mine = rank_lines(out)
    flags = [*recipe(free_port_window(1), "1:2"), "--rdzv-conf=last_call_timeout=1"]
    ((code, out, err),) = launch_all([torchrun_argv(*flags, str(RANKS / "torch_rank.py"))], env)
    assert code == 0, err[-3000:]
    ref = sorted(json_lines(out), key=lambda entry: entry["rank"])
    assert [(e["rank"], e["world"], e["sum"]) for e in mine] == [(e["rank"], e["world"], e["sum"]) for e in ref]
    assert [e["env"]["WORLD_SIZE"] for e in mine] == ["2", "2"] == [e["env"]["WORLD_SIZE"] for e in ref]
