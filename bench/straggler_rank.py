"""A clean torch DDP job for bench/straggler.py: gloo on CPU, a 3-layer MLP (512 -> 1024 -> 1024 -> 10,
batch 256, one thread), with no line of npulaunch in it. It times itself, the same way whether npulaunch
times its steps or not: after ``--warmup`` steps, the wall time of the next ``--steps`` (each rank writes
``rank<N>.json`` to STAMPS), and every 10 steps a line ``<time.time()> <step>`` to ``rank<N>.steps``
(the step rate before and after a slowdown). ``rank<N>.started`` is written once the warm-up is done.
With ``--steps 0`` it trains until it is stopped (SIGTERM from the launcher).

Usage (under a launcher that sets RANK, WORLD_SIZE, MASTER_ADDR, MASTER_PORT):
``python3 bench/straggler_rank.py STAMPS [--warmup 20] [--steps 300]``
"""

import argparse
import json
import os
import time

import torch
import torch.distributed as dist


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("stamps")
    parser.add_argument("--warmup", type=int, default=20)
    parser.add_argument("--steps", type=int, default=300, help="timed steps after the warm-up (0: until stopped)")
    args = parser.parse_args()
    dist.init_process_group("gloo")
    rank = dist.get_rank()
    torch.set_num_threads(1)
    torch.manual_seed(0)
    layers = [torch.nn.Linear(512, 1024), torch.nn.ReLU(), torch.nn.Linear(1024, 1024), torch.nn.ReLU()]
    model = torch.nn.parallel.DistributedDataParallel(torch.nn.Sequential(*layers, torch.nn.Linear(1024, 10)))
    opt = torch.optim.SGD(model.parameters(), lr=0.01)
    g = torch.Generator().manual_seed(rank)
    x = torch.randn(256, 512, generator=g)
    y = torch.randint(0, 10, (256,), generator=g)
    base = os.path.join(args.stamps, "rank%d" % rank)

    def step() -> None:
        opt.zero_grad()
        torch.nn.functional.cross_entropy(model(x), y).backward()
        opt.step()

    for _ in range(args.warmup):
        step()
    with open(base + ".started", "w") as f:
        f.write("%r\n" % time.time())
    log = open(base + ".steps", "w", buffering=1)
    start, done = time.perf_counter(), 0
    while args.steps == 0 or done < args.steps:
        step()
        done += 1
        if done % 10 == 0:
            log.write("%.6f %d\n" % (time.time(), done))
    elapsed = time.perf_counter() - start
    with open(base + ".json", "w") as f:
        json.dump({"rank": rank, "steps": done, "seconds": elapsed, "step_s": elapsed / done}, f)
    dist.destroy_process_group()


if __name__ == "__main__":
    main()
