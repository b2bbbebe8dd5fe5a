"""A MindSpore rank for the tests (the CPU build, msrun's dynamic cluster): init() from the MS_*
variables npulaunch sets, one AllReduce of rank + 1 checked against the known sum, then one JSON line
with what the worker was given. The scheduler (MS_ROLE=MS_SCHED) runs the same script: its init()
serves the cluster until every worker has left, and the process ends inside it.

``--raise-at RANK``: that worker raises after the AllReduce; the others wait in a second one.
"""

import argparse
import json
import os
import sys
import time

import mindspore
import numpy as np
from mindspore import Tensor, nn, ops
from mindspore.communication import get_group_size, get_rank, init

SHOWN = (
    "MS_ROLE",
    "MS_WORKER_NUM",
    "MS_SCHED_HOST",
    "MS_SCHED_PORT",
    "MS_NODE_ID",
    "MS_TOPO_TIMEOUT",
    "RANK_ID",
    "RANK_SIZE",
    "DEVICE_ID",
    "ASCEND_RT_VISIBLE_DEVICES",
)


class Sum(nn.Cell):
    def __init__(self):
        super().__init__()
        self.all_reduce = ops.AllReduce()

    def construct(self, x):
        return self.all_reduce(x)


def main():
    parser = argparse.ArgumentParser()
    parser.add_argument("--raise-at", type=int, default=-1)
    args = parser.parse_args()
    given = {name: os.environ.get(name) for name in SHOWN}
    mindspore.set_context(mode=mindspore.GRAPH_MODE, device_target="CPU")
    init()  # the scheduler serves the cluster here and never returns
    rank, size = get_rank(), get_group_size()
    total = Sum()(Tensor(np.array([rank + 1], dtype=np.float32)))
    print(json.dumps({"rank": rank, "world": size, "sum": float(total.asnumpy()[0]), "env": given}), flush=True)
    if args.raise_at >= 0:
        if rank == args.raise_at:
            time.sleep(0.5)
            raise ValueError(f"bad batch on rank {rank}")
        time.sleep(600)
    return 0


if __name__ == "__main__":
    sys.exit(main())
