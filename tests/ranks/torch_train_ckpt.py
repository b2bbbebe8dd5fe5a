"""A torch training rank that checkpoints and resumes, for the recovery tests: DDP (gloo) on a linear
model whose weights are exact in float32, so every rank's final weights can be checked by value.

Each step every rank feeds ``x = step * (rank + 1)`` (four features) and minimises ``-model(x)``; DDP
averages the gradients (``-2.5 * step`` for four ranks, and -1 for the bias) and SGD with lr 1 adds them,
so after FINAL steps from zero every weight is ``2.5 * FINAL * (FINAL + 1) / 2`` and the bias FINAL,
whichever step the job resumed from. Prints ``step N/FINAL``, then ``final step N w [...]``.

Arguments: FINAL. Environment: CKPT_DIR (the rank's checkpoint directory), CKPT_EVERY (save
``ckpt_<step>.pt`` every so many steps, with torch.save straight to its name as scripts do), SAVE_RANKS
("0": rank 0 saves, the default; "all": every rank saves in its own directory), TRAIN_STEP_S (sleep
per step), TRAIN_WORK (matrix products of a fixed size per step, on one thread: work a rank slowed from
outside takes longer to do, for the straggler tests). With NPULAUNCH_RESUME_CHECKPOINT set, loads it
and goes on after NPULAUNCH_RESUME_STEP.
"""

import json
import os
import sys
import time

import torch
import torch.distributed as dist
from torch.nn.parallel import DistributedDataParallel


def main() -> int:
    final = int(sys.argv[1])
    every = int(os.environ.get("CKPT_EVERY", "5"))
    pause = float(os.environ.get("TRAIN_STEP_S", "0.05"))
    work = int(os.environ.get("TRAIN_WORK", "0"))
    if work:
        torch.set_num_threads(1)
    matrix = torch.full((192, 192), 1.0 / 192)
    directory = os.environ["CKPT_DIR"]
    dist.init_process_group("gloo")
    rank = dist.get_rank()
    saves = os.environ.get("SAVE_RANKS", "0") == "all" or rank == 0
    model = torch.nn.Linear(4, 1)
    with torch.no_grad():
        model.weight.zero_()
        model.bias.zero_()
    optimizer = torch.optim.SGD(model.parameters(), lr=1.0)
    start = 0
    resume = os.environ.get("NPULAUNCH_RESUME_CHECKPOINT")
    if resume:
        state = torch.load(resume, weights_only=True)
        model.load_state_dict(state["model"])
        optimizer.load_state_dict(state["optimizer"])
        start = int(os.environ["NPULAUNCH_RESUME_STEP"])
        assert state["step"] == start, (state["step"], start)
        print("rank %d resumed from %s at step %d" % (rank, resume, start), flush=True)
    ddp = DistributedDataParallel(model)
    os.makedirs(directory, exist_ok=True)
    for step in range(start + 1, final + 1):
        optimizer.zero_grad()
        product = matrix
        for _ in range(work):
            product = torch.tanh(product @ matrix)
        x = torch.full((1, 4), float(step * (rank + 1)))
        loss = -ddp(x).sum()
        loss.backward()
        optimizer.step()
        print("step %d/%d" % (step, final), flush=True)
        if saves and step % every == 0:
            state = {"model": model.state_dict(), "optimizer": optimizer.state_dict(), "step": step}
            torch.save(state, os.path.join(directory, "ckpt_%d.pt" % step))
        time.sleep(pause)
    weights = model.weight.detach().flatten().tolist() + model.bias.detach().tolist()
    print("final step %d w %s" % (final, json.dumps(weights)), flush=True)
    dist.barrier()  # nobody tears its connections down while a peer still uses them
    dist.destroy_process_group()
    return 0


if __name__ == "__main__":
    code = main()
    sys.stdout.flush()
    sys.stderr.flush()
    os._exit(code)  # no interpreter teardown: torch 2.13's gloo may abort in it (examples/torch_train.py)
