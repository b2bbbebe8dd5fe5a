"""The rank-side cost of npulaunch's step timing in isolation (bench/straggler.py runs it): one process, a
DDP model of one rank (gloo), and the timing switched on and off on that same model between blocks of
steps, so that nothing but the timing differs. On: what the injection hook installs at import on torch 2.1
and later (host/pace.py's ``time_ddp``): DDP's ``forward`` wrapped, each parameter's gradient-accumulated
hook, the callbacks queued behind DDP's at the end of backward, and a pace line written each step. Off: the
hooks' handles removed and DDP's own ``forward`` back. Blocks alternate off on on off ... (ABBA: a steady
drift cancels); the cost is the median over the pairs of (on - off) / off, each pair two adjacent blocks.

Three models, from a short step to many parameters: tiny (64 -> 64, batch 32: 2 parameters and a step of
~1 ms, where the hooks' own microseconds show), the job's MLP (512 -> 1024 -> 1024 -> 10, batch 256: 6
parameters, ~50 ms) and deep (24 layers 128 wide, batch 64: 48 parameters, a hook each). Prints one JSON
object: {model: {"off": [s a step of each block], "on": [...], "params": N}, "pace_lines": N}.

Usage: ``python3 bench/straggler_hook.py [--blocks 16] [--scale 1.0]`` (npulaunch importable: PYTHONPATH at
the repository); --scale multiplies each block's steps.
"""

import argparse
import json
import os
import socket
import sys
import tempfile
import time

# name: (layer widths, batch, steps a block)
MODELS = {
    "tiny": ([64, 64], 32, 2000),
    "mlp": ([512, 1024, 1024, 10], 256, 30),
    "deep": ([128] * 25, 64, 300),
}


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--blocks", type=int, default=16, help="blocks per model, half on, half off")
    parser.add_argument("--scale", type=float, default=1.0, help="multiplies each block's steps")
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

    from npulaunch.host import pace

    torch.set_num_threads(1)
    dist.init_process_group("gloo")
    ddp = ddp_module.DistributedDataParallel
    own_forward = ddp.forward
    pace.time_ddp(ddp_module)  # wraps DDP's forward, as the injection hook does at import
    timed_forward = ddp.forward
    found = pace.recorder()
    results = {}
    for name, (widths, batch, steps) in MODELS.items():
        steps = max(1, int(steps * args.scale))
        torch.manual_seed(0)
        layers = []
        for a, b in zip(widths, widths[1:]):
            layers += [torch.nn.Linear(a, b), torch.nn.ReLU()]
        model = ddp(torch.nn.Sequential(*layers[:-1]))
        model._npulaunch_seen = True  # the timer below is this model's: the wrapped forward adds none
        timer = pace.DdpBackward(found, model)
        opt = torch.optim.SGD(model.parameters(), lr=0.01)
        x = torch.randn(batch, widths[0])
        y = torch.randint(0, widths[-1], (batch,))
        times = {"off": [], "on": [], "params": sum(1 for p in model.parameters())}
        handles = []
        _steps(model, opt, x, y, 5)
        for block in range(args.blocks):
            mode = ("off", "on", "on", "off")[block % 4]
            if mode == "on" and not handles:
                handles = timer.watch(model.module.parameters())
                ddp.forward = timed_forward
                timer._previous_end = None  # the first step after a gap is not a step's time
            elif mode == "off" and handles:
                for handle in handles:
                    handle.remove()
                handles = []
                ddp.forward = own_forward
            _steps(model, opt, x, y, 2)  # settle after the switch
            start = time.perf_counter()
            _steps(model, opt, x, y, steps)
            times[mode].append((time.perf_counter() - start) / steps)
        for handle in handles:
            handle.remove()
        ddp.forward = own_forward
        results[name] = times
    with open(os.path.join(rank_dir, pace.PACE_FILE)) as lines:
        results["pace_lines"] = sum(1 for _ in lines)
    dist.destroy_process_group()
    json.dump(results, sys.stdout)


def _steps(model, opt, x, y, n) -> None:
    import torch

    for _ in range(n):
        opt.zero_grad()
        torch.nn.functional.cross_entropy(model(x), y).backward()
        opt.step()


if __name__ == "__main__":
    main()
