"""A torch (gloo) job for the hang and root-cause tests: ``torch_hang.py MODE RANK``. Every rank forms the process
group from npulaunch's variables, does one all-reduce, prints "ready", then:

- ``stall``: RANK is stuck in its own code (``load_batch``, the line marked STALL) while the others wait in the
  next all-reduce;
- ``ddp-stall``: the same in a DistributedDataParallel loop: the others wait in backward (DDP's all-reduce);
- ``mismatch``: RANK calls barrier where the others call all_reduce;
- ``exit``: RANK leaves with code 0 while the others all-reduce (they see the peer close its connection);
- ``bad-shape``: RANK feeds its DDP model a batch of the wrong shape (the line marked BAD-SHAPE): torch raises
  from inside DDP's forward, the others wait in the next all-reduce.

No ``@record``: what npulaunch knows of a failure comes from the rank's log. The lines the tests look for carry
a marker comment (STALL, BAD-SHAPE).
"""

import os
import sys
import time

import torch
import torch.distributed as dist
from torch.nn.parallel import DistributedDataParallel


def load_batch(rank, who):
    if rank == who:
        while True:
            time.sleep(0.05)  # STALL
    return torch.ones(4, 4)


def ddp_loop(model, rank, who, steps=50):
    optimizer = torch.optim.SGD(model.parameters(), lr=0.01)
    for step in range(steps):
        batch = load_batch(rank, who if step == 2 else -1)
        loss = model(batch).pow(2).mean()
        optimizer.zero_grad()
        loss.backward()
        optimizer.step()
        print("step %d loss %.4f" % (step, loss.item()), flush=True)


def bad_shape(model, rank, who):
    batch = torch.ones(4, 3) if rank == who else torch.ones(4, 4)
    model(batch).sum().backward()  # BAD-SHAPE
    dist.all_reduce(torch.ones(1))


def main():
    mode, who = sys.argv[1], int(sys.argv[2])
    dist.init_process_group("gloo")
    rank = dist.get_rank()
    total = torch.ones(1)
    dist.all_reduce(total)
    # DDP's first construction imports much of torch (seconds on a busy machine): before the first line, in the
    # start-up phase, so that only the stall itself is a hang
    model = DistributedDataParallel(torch.nn.Linear(4, 1)) if mode in ("ddp-stall", "bad-shape") else None
    print("ready", rank, flush=True)
    if mode == "stall":
        load_batch(rank, who)
        dist.all_reduce(total)
    elif mode == "ddp-stall":
        ddp_loop(model, rank, who)
    elif mode == "mismatch":
        if rank == who:
            dist.barrier()
        else:
            dist.all_reduce(total)
    elif mode == "exit":
        if rank == who:
            sys.stdout.flush()
            os._exit(0)
        time.sleep(0.5)  # the peer has left by now
        dist.all_reduce(total)
    elif mode == "bad-shape":
        bad_shape(model, rank, who)
    time.sleep(600)  # never reached by a rank of a failed job: npulaunch stops it


if __name__ == "__main__":
    main()
