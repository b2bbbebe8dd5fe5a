"""The rank-side cost of npulaunch's step timing in isolation (bench/straggler.py runs it): one process,
a DDP model of one rank (gloo), the same model three times: with DDP's own (C++) all-reduce ("off"),
with DDP's all-reduce as a Python communication hook (``default_hooks.allreduce_hook``, "python": what
npulaunch's communication hook calls on torch before 2.1) and timed by npulaunch (host/pace.py's
``time_ddp``, what the injection hook installs at import: on torch 2.1 and later the gradients' hooks with
DDP's C++ all-reduce left alone, writing its pace file: "on"); blocks of steps alternate
(A B C C B A ...). Two sizes: the job's
MLP (batch 256) and a tiny one (64 -> 64, batch 32), where a step is short enough to show the hook's own
microseconds. Prints one JSON object: {size: {"off": [s per step of each block], "python": [...], "on": [...]}}.

Usage: ``python3 bench/straggler_hook.py [--blocks 8] [--mlp-steps 30] [--tiny-steps 2000]``
(npulaunch importable: PYTHONPATH at the repository).
"""

import argparse
import json
import os
import socket
import sys
import tempfile
import time

MODES = ("off", "python", "on")  # DDP's C++ all-reduce, DDP's Python all-reduce hook, npulaunch's hook


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--blocks", type=int, default=8, help="blocks per model and size")
    parser.add_argument("--mlp-steps", type=int, default=30)
    parser.add_argument("--tiny-steps", type=int, default=2000)
    args = parser.parse_args()
    rank_dir = tempfile.mkdtemp(prefix="npl-pace-")
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
    os.environ.update(
        NPULAUNCH_HOOKS="pace",
        NPULAUNCH_RANK_DIR=rank_dir,
        MASTER_ADDR="127.0.0.1",
        MASTER_PORT=str(port),
        RANK="0",
        WORLD_SIZE="1",
        GLOO_SOCKET_IFNAME="lo",
    )
    import torch
    import torch.distributed as dist
    import torch.nn.parallel.distributed as ddp_module
    from torch.distributed.algorithms.ddp_comm_hooks import default_hooks

    from npulaunch.host import pace

    torch.set_num_threads(1)
    dist.init_process_group("gloo")
    ddp = ddp_module.DistributedDataParallel
    original = (ddp.forward, ddp.register_comm_hook)
    sizes = {
        "mlp": ([512, 1024, 1024, 10], 256, args.mlp_steps),
        "tiny": ([64, 64], 32, args.tiny_steps),
    }
    results = {}
    for name, (widths, batch, steps) in sizes.items():
        torch.manual_seed(0)
        layers = []
        for a, b in zip(widths, widths[1:]):
            layers += [torch.nn.Linear(a, b), torch.nn.ReLU()]
        x = torch.randn(batch, widths[0])
        y = torch.randint(0, widths[-1], (batch,))
        models = {}
        for mode in MODES:
            if mode == "on":
                pace.time_ddp(ddp_module)  # the class's forward attaches the hook at a model's first forward
            model = ddp(torch.nn.Sequential(*[_copy(layer) for layer in layers[:-1]]))
            if mode == "python":  # DDP's own all-reduce as a Python hook (what npulaunch's hook calls on torch < 2.1)
                model.register_comm_hook(None, default_hooks.allreduce_hook)
            opt = torch.optim.SGD(model.parameters(), lr=0.01)
            models[mode] = (model, opt)
            _steps(model, opt, x, y, 5)
            ddp.forward, ddp.register_comm_hook = original  # the "on" model keeps its hook; later ones get none
        on = models["on"][0]  # timed by its gradients' hooks (torch 2.1+) or, before, by a communication hook
        assert getattr(on, "_npulaunch_seen", False) or getattr(on, "_npulaunch_attached", False), "not timed"
        times = {mode: [] for mode in MODES}
        for block in range(args.blocks):
            for mode in MODES if block % 2 == 0 else MODES[::-1]:  # ABC CBA: a steady drift cancels
                model, opt = models[mode]
                start = time.perf_counter()
                _steps(model, opt, x, y, steps)
                times[mode].append((time.perf_counter() - start) / steps)
        results[name] = times
    paced = sum(1 for _ in open(os.path.join(rank_dir, pace.PACE_FILE)))
    results["pace_lines"] = paced
    dist.destroy_process_group()
    json.dump(results, sys.stdout)


def _copy(layer):
    import copy

    return copy.deepcopy(layer)


def _steps(model, opt, x, y, n) -> None:
    import torch

    for _ in range(n):
        opt.zero_grad()
        torch.nn.functional.cross_entropy(model(x), y).backward()
        opt.step()


if __name__ == "__main__":
    main()
