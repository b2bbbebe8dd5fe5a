"""Each rank's pace as the injection hook measures it (host/pace.py), in real processes of real frameworks:
torch DDP over gloo (busy and wait split by the gradients' hooks, the script's own communication hook and a
built-in one left to DDP, no_sync steps folded into the next), a loop that marks its steps with session.step(),
TensorFlow's MonitoredSession and MindSpore's Model.train (whole steps); and the agent's reading of the files
(host/agent/paces.py)."""

from __future__ import annotations

import importlib.util
import os
import subprocess
import sys
from pathlib import Path
from typing import Dict, List, Optional, Tuple

import pytest
from helpers import PACKAGE, ROOT, free_port_window, require

from npulaunch.host.agent.paces import median, parse_pace, summarise

INJECT = PACKAGE / "host" / "inject"

DDP = """
import os, sys, time, torch, torch.distributed as dist
dist.init_process_group("gloo")
rank = dist.get_rank()
torch.manual_seed(0)
model = torch.nn.parallel.DistributedDataParallel(torch.nn.Sequential(torch.nn.Linear(64, 64), torch.nn.Linear(64, 4)))
mode = sys.argv[1]
calls = []
def own_hook(state, bucket):
    calls.append(bucket.index())
    from torch.distributed.algorithms.ddp_comm_hooks import default_hooks
    return default_hooks.allreduce_hook(state, bucket)
if mode == "own-before":
    model.register_comm_hook(None, own_hook)
if mode == "builtin":
    model._register_builtin_comm_hook(dist.BuiltinCommHookType.ALLREDUCE)
accumulate = 2 if mode == "no-sync" else 1
opt = torch.optim.SGD(model.parameters(), lr=0.01)
x = torch.randn(32, 64)
for step in range(40):
    if step == 1 and mode == "own-after":
        model.register_comm_hook(None, own_hook)  # after the first forward: npulaunch's hook calls it from then on
    if rank == 1:
        time.sleep(0.02)  # rank 1 is slow: its own work takes 20 ms more
    opt.zero_grad()
    for micro in range(accumulate):  # no-sync: gradient accumulation, the all-reduce on the last micro-step
        model.require_backward_grad_sync = micro == accumulate - 1
        model(x).sum().backward()
    opt.step()
flat = torch.cat([p.detach().reshape(-1) for p in model.parameters()])
low, high = flat.clone(), flat.clone()
dist.all_reduce(low, op=dist.ReduceOp.MIN); dist.all_reduce(high, op=dist.ReduceOp.MAX)
print("calls", len(calls), "spread", float((high - low).abs().max()), flush=True)
dist.destroy_process_group()  # gloo's pair torn down before the interpreter (left to exit, it aborted: -6)
"""


def rank_env(rank_dir: Path, hooks: str = "pace", **more: str) -> Dict[str, str]:
    env = dict(os.environ, NPULAUNCH_RANK_DIR=str(rank_dir), NPULAUNCH_HOOKS=hooks, **more)
    env["PYTHONPATH"] = os.pathsep.join([str(INJECT), str(ROOT)])
    return env


def run_rank(
    tmp_path: Path, code: str, hooks: str = "pace", timeout: float = 180
) -> Tuple[Path, "subprocess.CompletedProcess[str]"]:
    """``python -c code`` as rank 0 of a job (its rank directory made), with the hooks given."""
    rank_dir = tmp_path / "rank-0"
    rank_dir.mkdir()
    env = rank_env(rank_dir, hooks=hooks)
    return rank_dir, subprocess.run(
        [sys.executable, "-c", code], env=env, capture_output=True, text=True, timeout=timeout
    )


def pace_lines(rank_dir: Path) -> List[Tuple[int, float, Optional[float]]]:
    path = rank_dir / "pace"
    return parse_pace(path.read_bytes()) if path.exists() else []


def run_ddp(tmp_path: Path, mode: str) -> Tuple[List[str], List[List[Tuple[int, float, Optional[float]]]]]:
    require(importlib.util.find_spec("torch") is not None, "torch (pip install -e '.[torch]')")
    script = tmp_path / "ddp.py"
    script.write_text(DDP)
    port = free_port_window(1)
    procs = []
    for rank in range(2):
        rank_dir = tmp_path / f"rank-{rank}"
        rank_dir.mkdir()
        env = rank_env(
            rank_dir,
            MASTER_ADDR="127.0.0.1",
            MASTER_PORT=str(port),
            WORLD_SIZE="2",
            RANK=str(rank),
            GLOO_SOCKET_IFNAME="lo",
            OMP_NUM_THREADS="1",  # as torchrun and npulaunch give several ranks of one host: no threads spinning
        )
        procs.append(subprocess.Popen([sys.executable, str(script), mode], env=env, stdout=subprocess.PIPE, text=True))
    outs = [p.communicate(timeout=120)[0] for p in procs]
    assert [p.returncode for p in procs] == [0, 0], outs
    return outs, [pace_lines(tmp_path / f"rank-{rank}") for rank in range(2)]


@pytest.mark.alone  # busy and wait times in ms
def test_ddp_steps_are_split_into_busy_and_wait_and_the_slow_rank_is_busy_longer(tmp_path: Path) -> None:
    outs, (fast, slow) = run_ddp(tmp_path, "plain")
    assert all("spread 0.0" in out for out in outs)  # the hook all-reduced right: every rank has the same weights
    assert [s for s, _, _ in fast] == list(range(1, 40)) == [s for s, _, _ in slow]  # the first step is start-up
    busy_fast, busy_slow = median([b for _, b, _ in fast]), median([b for _, b, _ in slow])
    wait_fast, wait_slow = median([w or 0 for _, _, w in fast]), median([w or 0 for _, _, w in slow])
    assert busy_slow - busy_fast > 0.015, (busy_fast, busy_slow)  # the 20 ms of rank 1's own work
    assert wait_fast - wait_slow > 0.015, (wait_fast, wait_slow)  # that rank 0 waits for


SWITCH = """
import sys, torch, torch.distributed as dist
dist.init_process_group("gloo")
torch.manual_seed(0)
class Two(torch.nn.Module):
    def __init__(self):
        super().__init__()
        self.a = torch.nn.Sequential(*[torch.nn.Linear(16, 16) for _ in range(4)])
        self.b = torch.nn.Sequential(*[torch.nn.Linear(16, 16) for _ in range(4)])
    def forward(self, x, branch):
        return (self.a if branch == "a" else self.b)(x)
model = torch.nn.parallel.DistributedDataParallel(Two(), find_unused_parameters=True)
opt = torch.optim.SGD(model.parameters(), lr=0.01)
x = torch.randn(8, 16)
for step in range(40):
    opt.zero_grad()
    model(x, "a" if step < 20 else "b").sum().backward()  # from step 20 on, other parameters
    opt.step()
    if step in (15, 39):
        print("hooked", step, len(model._npulaunch_timer._handles))
"""


def test_once_learned_only_the_last_gradients_are_hooked_and_a_changed_graph_is_learned_again(tmp_path: Path) -> None:
    require(importlib.util.find_spec("torch") is not None, "torch (pip install -e '.[torch]')")
    script = tmp_path / "switch.py"
    script.write_text(SWITCH)
    rank_dir = tmp_path / "rank-0"
    rank_dir.mkdir()
    env = rank_env(rank_dir, MASTER_ADDR="127.0.0.1", MASTER_PORT=str(free_port_window(1)), WORLD_SIZE="1", RANK="0")
    done = subprocess.run([sys.executable, str(script)], env=env, capture_output=True, text=True, timeout=120)
    assert done.returncode == 0, done.stderr
    assert "hooked 15 3" in done.stdout  # of 16 parameters, the 3 whose gradients came last
    assert "hooked 39 3" in done.stdout  # branch b's last 3, learned again after the switch
    steps = [s for s, _, _ in pace_lines(rank_dir)]
    # every step timed but the first (start-up) and the one whose kept hooks did not fire (the switch)
    assert len(steps) == 38 and steps == list(range(1, 39)), steps


def test_the_scripts_own_hook_runs_whether_registered_before_or_after_the_first_forward(tmp_path: Path) -> None:
    for mode in ("own-before", "own-after"):
        (tmp_path / mode).mkdir()
        outs, paces = run_ddp(tmp_path / mode, mode)
        calls = [int(out.split()[1]) for out in outs]
        assert all(count >= 39 for count in calls), (mode, outs)  # one bucket a step
        assert all("spread 0.0" in out for out in outs)
        assert all(len(lines) == 39 for lines in paces), mode


def test_steps_under_no_sync_count_once_per_all_reduce(tmp_path: Path) -> None:
    outs, (fast, slow) = run_ddp(tmp_path, "no-sync")
    assert all("spread 0.0" in out for out in outs)
    assert [s for s, _, _ in fast] == list(range(1, 40)) == [s for s, _, _ in slow]  # one a step, not a backward
    assert median([b for _, b, _ in slow]) - median([b for _, b, _ in fast]) > 0.015


def test_a_builtin_hook_is_left_alone_and_still_timed(tmp_path: Path) -> None:
    # the steps are timed by the gradients' hooks, not a communication hook: DDP's C++ hooks stay as they are
    outs, paces = run_ddp(tmp_path, "builtin")
    assert all("spread 0.0" in out for out in outs)
    assert [len(lines) for lines in paces] == [39, 39]


def test_a_loop_marks_its_own_steps_and_collectives_are_its_wait(tmp_path: Path) -> None:
    require(importlib.util.find_spec("torch") is not None, "torch (pip install -e '.[torch]')")
    code = (
        "import time, torch, torch.distributed as dist\n"
        "from npulaunch import session\n"
        "dist.init_process_group('gloo', init_method='tcp://127.0.0.1:%d', rank=0, world_size=1)\n"
        "for step in range(6):\n"
        "    time.sleep(0.03)\n"
        "    dist.barrier()\n"
        "    session.step()\n" % free_port_window(1)
    )
    rank_dir, done = run_rank(tmp_path, code, timeout=60)
    assert done.returncode == 0, done.stderr
    lines = pace_lines(rank_dir)
    assert [s for s, _, _ in lines] == [1, 2, 3, 4, 5]  # the first call only starts the clock
    assert all(0.025 < busy < 0.2 and wait is not None for _, busy, wait in lines), lines
    # a one-rank barrier is its wait, shorter than the step's own 30 ms (but the first, where gloo sets itself up:
    # 45 ms on a busy machine)
    assert sorted(wait for _, _, wait in lines)[2] < 0.025, lines


def test_without_the_pace_hook_nothing_is_written(tmp_path: Path) -> None:
    code = "from npulaunch import session\nfor _ in range(3): session.step()\n"
    rank_dir, done = run_rank(tmp_path, code, hooks="session", timeout=60)
    assert done.returncode == 0 and not (rank_dir / "pace").exists()


def test_tensorflow_monitored_sessions_time_each_run(tmp_path: Path) -> None:
    require(importlib.util.find_spec("tensorflow") is not None, "tensorflow-cpu (pip install -e '.[tf]')")
    code = (
        "import tensorflow as tf\n"
        "tf.compat.v1.disable_eager_execution()\n"
        "step = tf.compat.v1.train.get_or_create_global_step()\n"
        "train = tf.compat.v1.assign_add(step, 1)\n"
        "with tf.compat.v1.train.MonitoredTrainingSession() as sess:\n"
        "    for _ in range(12):\n"
        "        sess.run(train)\n"
    )
    rank_dir, done = run_rank(tmp_path, code, timeout=180)
    assert done.returncode == 0, done.stderr[-2000:]
    lines = pace_lines(rank_dir)
    assert len(lines) == 11 and all(wait is None for _, _, wait in lines), lines


def test_mindspore_model_train_times_each_step(tmp_path: Path) -> None:
    require(importlib.util.find_spec("mindspore") is not None, "mindspore (scripts/setup-dev.sh)")
    code = (
        "import numpy as np, mindspore as ms\n"
        "from mindspore import nn, dataset as ds\n"
        "data = ds.NumpySlicesDataset({'x': np.random.rand(64, 4).astype(np.float32),"
        " 'y': np.random.rand(64, 1).astype(np.float32)}, shuffle=False).batch(8)\n"
        "net = nn.Dense(4, 1)\n"
        "model = ms.train.Model(net, nn.MSELoss(), nn.SGD(net.trainable_params(), 0.01))\n"
        "model.train(2, data, callbacks=[ms.train.LossMonitor(100)])\n"
    )
    rank_dir, done = run_rank(tmp_path, code, timeout=180)
    assert done.returncode == 0, done.stderr[-2000:]
    lines = pace_lines(rank_dir)
    assert len(lines) == 15 and all(wait is None for _, _, wait in lines), lines  # 2 epochs of 8 steps, less one


def test_the_agent_summarises_whole_lines_and_skips_what_does_not_parse() -> None:
    block = b"1.0 1 0.100000 0.010000\n2.0 2 0.300000 0.020000\ngarbage\n3.0 3 0.200000 -\n"
    steps = parse_pace(block)
    assert steps == [(1, 0.1, 0.01), (2, 0.3, 0.02), (3, 0.2, None)]
    assert summarise(steps) == {"steps": 3, "step": 3, "busy_s": 0.2, "wait_s": None}  # one wait unknown: none
    assert summarise(steps[:2]) == {"steps": 2, "step": 2, "busy_s": 0.2, "wait_s": 0.015}


def test_on_a_remote_host_the_hooks_load_from_inside_the_agents_zip_application(tmp_path: Path) -> None:
    # a remote rank's PYTHONPATH holds the injection directory inside agent.pyz (launch/fleet/ship.py): the hook
    # loads pace.py and configproto.py from the archive, patches torch and registers the stack dump, silently
    require(importlib.util.find_spec("torch") is not None, "torch (pip install -e '.[torch]')")
    from npulaunch.launch.fleet.ship import build_agent_zip

    archive = tmp_path / "agent.pyz"
    build_agent_zip(str(archive))
    rank_dir = tmp_path / "rank-0"
    rank_dir.mkdir()
    env = rank_env(rank_dir)
    env["PYTHONPATH"] = str(archive / "npulaunch" / "host" / "inject")
    code = (
        "import sys, torch.distributed as dist, torch.nn.parallel.distributed as ddp\n"
        "print(sys.modules['sitecustomize'].__file__.startswith(%r), dist.all_reduce._npulaunch, "
        "ddp.DistributedDataParallel.forward._npulaunch)\n" % str(archive)
    )
    done = subprocess.run([sys.executable, "-c", code], env=env, capture_output=True, text=True, timeout=120)
    assert done.returncode == 0 and done.stdout.split() == ["True", "True", "True"], done.stdout + done.stderr
    assert done.stderr == ""  # no "could not hook" warning
    assert sorted(p.name.split("-")[0] for p in rank_dir.iterdir()) == ["stack", "stacks"]  # the dump registered
