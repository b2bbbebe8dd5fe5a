"""A training-shaped script that runs anywhere: no NPU, no TensorFlow needed.

It prints the Ascend environment npulaunch gave this rank, "trains" a tiny linear model with
plain Python for a few steps, and exits 0. ``--fail-rank R --fail-step S`` makes rank R crash at
step S, to see npulaunch stop the job and report the root cause.
"""

import argparse
import json
import os
import random
import sys
import time

RANK_VARS = (
    "RANK_ID",
    "RANK_SIZE",
    "DEVICE_ID",
    "ASCEND_DEVICE_ID",
    "JOB_ID",
    "RANK_TABLE_FILE",
    "HCCL_CONNECT_TIMEOUT",
    "HCCL_EXEC_TIMEOUT",
    "ASCEND_PROCESS_LOG_PATH",
)


def main() -> int:
    parser = argparse.ArgumentParser()
    parser.add_argument("--steps", type=int, default=20)
    parser.add_argument("--step-time", type=float, default=0.05, help="seconds per step")
    parser.add_argument("--fail-rank", type=int, default=-1)
    parser.add_argument("--fail-step", type=int, default=5)
    args = parser.parse_args()

    rank = int(os.environ.get("RANK_ID", "0"))
    size = int(os.environ.get("RANK_SIZE", "1"))
    print("rank %d/%d environment: %s" % (rank, size, json.dumps({k: os.environ.get(k) for k in RANK_VARS})))
    options = json.loads(os.environ.get("NPULAUNCH_SESSION_OPTIONS", "{}"))
    print("rank %d session options: %s" % (rank, json.dumps(options, sort_keys=True)))

    rng = random.Random(rank)
    data = [(x, 3.0 * x + 1.0 + rng.gauss(0, 0.1)) for x in (rng.uniform(-1, 1) for _ in range(256))]
    w, b, lr = 0.0, 0.0, 0.1
    for step in range(1, args.steps + 1):
        if rank == args.fail_rank and step == args.fail_step:
            print("rank %d: simulated fault at step %d" % (rank, step), file=sys.stderr)
            raise RuntimeError("simulated device fault on rank %d" % rank)
        grad_w = sum(2 * (w * x + b - y) * x for x, y in data) / len(data)
        grad_b = sum(2 * (w * x + b - y) for x, y in data) / len(data)
        w, b = w - lr * grad_w, b - lr * grad_b
        loss = sum((w * x + b - y) ** 2 for x, y in data) / len(data)
        print("rank %d step %d/%d loss %.5f" % (rank, step, args.steps, loss))
        time.sleep(args.step_time)
    print("rank %d done: w=%.3f b=%.3f" % (rank, w, b))
    return 0


if __name__ == "__main__":
    sys.exit(main())
