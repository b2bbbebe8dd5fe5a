"""A torch rank for the tests: init_process_group("gloo") from the environment alone, one all-reduce
of rank + 1 checked against the known sum, then one JSON line with what the rank was given.

``--retry-first``: on the first attempt (TORCHELASTIC_RESTART_COUNT 0) rank 0 prints a retryable
CANN failure (EJ0001) and exits 1 before the process group forms, so npulaunch restarts the job.
``--raise-at RANK``: that rank raises ValueError inside a @record main after the all-reduce, the
others block in a second all-reduce until they are stopped.
"""

import argparse
import json
import os
import sys
import time

import torch
import torch.distributed as dist
from torch.distributed.elastic.multiprocessing.errors import record

SHOWN = (
    "RANK",
    "LOCAL_RANK",
    "WORLD_SIZE",
    "LOCAL_WORLD_SIZE",
    "GROUP_RANK",
    "GROUP_WORLD_SIZE",
    "ROLE_RANK",
    "ROLE_WORLD_SIZE",
    "ROLE_NAME",
    "MASTER_ADDR",
    "MASTER_PORT",
    "TORCHELASTIC_RESTART_COUNT",
    "TORCHELASTIC_MAX_RESTARTS",
    "TORCHELASTIC_RUN_ID",
    "TORCHELASTIC_ERROR_FILE",
    "OMP_NUM_THREADS",
    "ASCEND_RT_VISIBLE_DEVICES",
    "HCCL_IF_IP",
    "RANK_TABLE_FILE",
    "RANK_ID",
    "DEVICE_ID",
    "NPULAUNCH_HOST",
    "TORCHELASTIC_USE_AGENT_STORE",
)


@record
def main():
    parser = argparse.ArgumentParser()
    parser.add_argument("--retry-first", action="store_true")
    parser.add_argument("--raise-at", type=int, default=-1)
    args = parser.parse_args()
    if args.retry_first and os.environ["TORCHELASTIC_RESTART_COUNT"] == "0" and os.environ["RANK"] == "0":
        print(
            "EJ0001: [PID: %d] Failed to initialize the HCCP process. Reason: Maybe the last training "
            "process is running." % os.getpid(),
            flush=True,
        )
        return 1
    dist.init_process_group("gloo")
    rank, world = dist.get_rank(), dist.get_world_size()
    total = torch.tensor([float(rank + 1)])
    dist.all_reduce(total)
    given = {name: os.environ.get(name) for name in SHOWN}
    print(json.dumps({"rank": rank, "world": world, "sum": total.item(), "env": given}), flush=True)
    if args.raise_at >= 0:
        if rank == args.raise_at:
            time.sleep(0.5)
            raise ValueError(f"bad batch on rank {rank}")
        dist.all_reduce(total)  # blocks until the job is stopped
        time.sleep(600)
    dist.barrier()  # nobody tears its connections down while a peer still uses them
    dist.destroy_process_group()
    return 0


if __name__ == "__main__":
    code = main()
    sys.stdout.flush()
    sys.stderr.flush()
    os._exit(code)  # no interpreter teardown: torch 2.13's gloo may abort in it (examples/torch_train.py)
