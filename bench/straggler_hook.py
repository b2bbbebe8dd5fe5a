"""The rank-side cost of npulaunch's step timing in isolation (bench/straggler.py runs it): one process, a
DDP model of one rank (gloo), and the timing switched on and off on that same model between single steps,
so that nothing but the timing differs. On: what the injection hook leaves in place once it has learned
which gradients come last (host/pace.py's ``time_ddp`` and ``DdpBackward``): DDP's ``forward`` wrapped, the
kept parameters' gradient-accumulated hooks, the callbacks queued behind DDP's at the end of backward, and a
pace line each step (written once a second). Off: the hooks removed and DDP's own ``forward`` back.

Steps alternate off on, on off, ... (ABBA: a steady drift cancels), each timed on its own in the thread's
CPU time (``time.thread_time``: time the machine gave to another process is not counted); the cost is the
median of the paired differences (on - off) over the median off step. On this shared 2-core machine a
step's own time varies by ±20 % or more, hence thousands of pairs.

Three models, from a short step to many parameters: tiny (64 -> 64, batch 32: 2 parameters and a step of
~0.6 ms, where the hooks' own microseconds show), the job's MLP (512 -> 1024 -> 1024 -> 10, batch 256: 6
parameters, ~40 ms) and deep (24 layers 128 wide, batch 64: 48 parameters, ~8 ms). Prints one JSON
object: {model: {"off": [s of each step], "on": [...], "params": N, "hooked": N}, "pace_lines": N}.

Usage: ``python3 bench/straggler_hook.py [--scale 1.0]`` (npulaunch importable: PYTHONPATH at the
repository); --scale multiplies each model's pairs of steps.
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
    "tiny": ([64, 64], 32, 4000),
    "mlp": ([512, 1024, 1024, 10], 256, 300),
    "deep": ([128] * 25, 64, 1500),
}


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--scale", type=float, default=1.0, help="multiplies each model's pairs of steps")
    args = parser.parse_args()
    with tempfile.TemporaryDirectory(prefix="npl-pace-") as rank_dir:
        json.dump(_measure(rank_dir, args.scale), sys.stdout)


def _measure(rank_dir: str, scale: float) -> dict:
    """Each model's step times, off and on, and how many pace lines the timing wrote into ``rank_dir``."""
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
        steps = max(1, int(steps * scale))
        torch.manual_seed(0)
        layers = []
        for a, b in zip(widths, widths[1:]):
            layers += [torch.nn.Linear(a, b), torch.nn.ReLU()]
        model = ddp(torch.nn.Sequential(*layers[:-1]))
        timer = pace.DdpBackward(found, model)
        model._npulaunch_timer = timer  # the wrapped forward calls it, as it does for the model it times
        timer.watch(model.module.parameters())
        opt = torch.optim.SGD(model.parameters(), lr=0.01)
        x = torch.randn(batch, widths[0])
        y = torch.randint(0, widths[-1], (batch,))
        times = {"off": [], "on": [], "params": sum(1 for p in model.parameters())}
        ddp.forward = timed_forward
        _steps(model, opt, x, y, timer.LEARN + 2)  # the timer learns which gradients come last
        kept = [p for p in model.module.parameters() if id(p) in timer._handles]
        times["hooked"] = len(kept)
        timer.unwatch()
        ddp.forward = own_forward
        for pair in range(steps):
            for mode in ("off", "on") if pair % 2 == 0 else ("on", "off"):  # ABBA: a steady drift cancels
                if mode == "on":  # the kept hooks, as they are once learned
                    timer._handles = {id(p): p.register_post_accumulate_grad_hook(timer._accumulated) for p in kept}
                    ddp.forward = timed_forward
                else:
                    timer.unwatch()
                    ddp.forward = own_forward
                times[mode].append(_timed_steps(model, opt, x, y, 1)[0])
        timer.unwatch()
        ddp.forward = own_forward
        results[name] = times
    with open(os.path.join(rank_dir, pace.PACE_FILE)) as lines:
        results["pace_lines"] = sum(1 for _ in lines)
    dist.destroy_process_group()
    return results


def _timed_steps(model, opt, x, y, n):
    """Each step's seconds."""
    import torch

    each = []
    for _ in range(n):
        start = time.thread_time()
        opt.zero_grad()
        torch.nn.functional.cross_entropy(model(x), y).backward()
        opt.step()
        each.append(time.thread_time() - start)
    return each


def _steps(model, opt, x, y, n) -> None:
    import torch

    for _ in range(n):
        opt.zero_grad()
        torch.nn.functional.cross_entropy(model(x), y).backward()
        opt.step()


if __name__ == "__main__":
    main()
