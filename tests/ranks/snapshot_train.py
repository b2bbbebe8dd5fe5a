"""A torch DDP training loop that keeps its own snapshot, as pytorch/examples' DDP tutorial does
(distributed/ddp-tutorial-series/multigpu_torchrun.py): it saves the model and the epochs run after every
epoch, and at start resumes from the snapshot when there is one. Under a launcher's restarts it goes on
from there. SNAPSHOT_FAIL_AT=E: on the first attempt (TORCHELASTIC_RESTART_COUNT 0) rank 1 raises at the
start of epoch E. SNAPSHOT_EPOCH_PAUSE_S=S: a pause after each epoch. Prints "Resuming training from
snapshot at Epoch N", each epoch, and at the end a digest of the weights, identical on every rank. In
float64, rounded to 9 decimals: with more than 2 ranks gloo's ring all-reduce sums each gradient in an
order set by its place in DDP's buckets, and a fresh DDP (a restart) uses its first bucket layout for one
step where an unbroken run has rebuilt it; in float32 that changes the last bits (measured: 4 ranks resumed
at epoch 1 ended with other weights).

Usage: python snapshot_train.py EPOCHS SNAPSHOT_PATH
"""

import hashlib
import os
import sys
import time

import torch
import torch.distributed as dist
from torch.nn.parallel import DistributedDataParallel as DDP


def main():
    epochs, path = int(sys.argv[1]), sys.argv[2]
    dist.init_process_group("gloo")
    rank = dist.get_rank()
    torch.manual_seed(0)
    model = torch.nn.Sequential(torch.nn.Linear(16, 32), torch.nn.ReLU(), torch.nn.Linear(32, 1)).double()
    optimizer = torch.optim.SGD(model.parameters(), lr=0.05)
    start = 0
    if os.path.exists(path):
        snapshot = torch.load(path)
        model.load_state_dict(snapshot["MODEL_STATE"])
        optimizer.load_state_dict(snapshot["OPTIMIZER_STATE"])
        start = snapshot["EPOCHS_RUN"]
        print("Resuming training from snapshot at Epoch %d" % start, flush=True)
    ddp = DDP(model)
    fail_at = int(os.environ.get("SNAPSHOT_FAIL_AT", "-1"))
    pause = float(os.environ.get("SNAPSHOT_EPOCH_PAUSE_S", "0"))  # time for a node to join between epochs
    first = os.environ.get("TORCHELASTIC_RESTART_COUNT", "0") == "0"
    for epoch in range(start, epochs):
        if epoch == fail_at and first and rank == 1:
            raise RuntimeError("rank 1 fails at epoch %d" % epoch)
        generator = torch.Generator().manual_seed(1000 * epoch + rank)
        for _ in range(5):
            x = torch.randn(32, 16, generator=generator, dtype=torch.float64)
            y = x.sum(dim=1, keepdim=True)
            optimizer.zero_grad()
            torch.nn.functional.mse_loss(ddp(x), y).backward()
            optimizer.step()
        dist.barrier()
        if rank == 0:
            state = {"MODEL_STATE": model.state_dict(), "OPTIMIZER_STATE": optimizer.state_dict()}
            state["EPOCHS_RUN"] = epoch + 1
            torch.save(state, path + ".tmp")
            os.replace(path + ".tmp", path)
        dist.barrier()
        print("Epoch %d done (world %d)" % (epoch, dist.get_world_size()), flush=True)
        time.sleep(pause)
    flat = [round(v, 9) for v in torch.cat([p.detach().reshape(-1) for p in model.parameters()]).tolist()]
    print("weights %s" % hashlib.sha256(repr(flat).encode()).hexdigest()[:16], flush=True)
    dist.destroy_process_group()


if __name__ == "__main__":
    main()
