"""Where a hung rank's main thread stands, read from its stack: inside a collective or a store wait (it
waits for other ranks), inside a framework call that may hold a collective (backward under DDP, a TF
session step, a MindSpore graph step: waiting when idle, stalled when busy), or anywhere else (its own
code, a data loader, a device synchronize): stalled, the rank the others wait for.

The places are data (``PLACES``): a frame's file and function, and what it means. Pure, standard
library only, Python 3.7+ (the agent judges its own ranks' dumps).
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Optional, Pattern, Sequence, Tuple

from npulaunch.host.lazyre import lazy_re
from npulaunch.host.pystacks import Frame, user_frame

WAITING = "waiting"  # in a collective or a store wait: it waits for other ranks
MAY_WAIT = "may_wait"  # in a framework call that may hold a collective: waiting if idle
STALLED = "stalled"  # anywhere else: the rank the others wait for

# (file, function, kind, what): the first frame from the innermost outward whose file (with "/" separators)
# ends like ``file`` or holds ``file`` as a folder, and whose function ``function`` matches whole (None: any).
# ``what`` names the place; {func} is the frame's function. A user's frame ends the search first: the rank
# runs its own code (a model's forward inside DDP's forward is the user's, not DDP's).
_SYNC = lazy_re(r".*[Ss]ync.*|current_stream")
_NOT_FORWARD = lazy_re(r"(?!forward$|_run_ddp_forward$|__init__$).*")
_HOROVOD = lazy_re(r".*(?:synchronize|allreduce|allgather|broadcast|alltoall|barrier|join).*")
PLACES: Tuple[Tuple[str, Optional[Pattern[str]], str, str], ...] = (
    # torch.distributed (torch 2.x: torch/distributed/distributed_c10d.py; c10d_logger's wrappers are outer)
    ("torch/distributed/distributed_c10d.py", None, WAITING, "torch.distributed.{func}"),
    ("torch/distributed/rendezvous.py", None, WAITING, "the rendezvous's store ({func})"),
    ("torch/distributed/elastic/", None, WAITING, "torchelastic's store ({func})"),
    ("torch/distributed/c10d_logger.py", None, WAITING, "torch.distributed ({func})"),
    (
        "torch/nn/parallel/distributed.py",
        _NOT_FORWARD,
        WAITING,
        "DistributedDataParallel.{func}",
    ),
    ("torch_npu/distributed/", None, WAITING, "torch_npu's HCCL ({func})"),
    ("deepspeed/comm/", None, WAITING, "deepspeed.comm ({func})"),
    ("accelerate/utils/operations.py", None, WAITING, "accelerate's {func}"),
    ("horovod/", _HOROVOD, WAITING, "horovod's {func}"),
    ("torch/distributed/", None, WAITING, "torch.distributed ({func})"),
    # autograd's engine: under DDP the gradients' all-reduce runs inside backward
    ("torch/autograd/", None, MAY_WAIT, "backward (DDP's gradient all-reduce runs in it)"),
    # the rank's own work: importing (a slow file system), device synchronizes, data loaders
    ("importlib/", None, STALLED, "importing modules ({func})"),
    ("<frozen importlib._bootstrap", None, STALLED, "importing modules ({func})"),
    ("torch_npu/npu/", _SYNC, STALLED, "an NPU synchronize ({func})"),
    ("torch/npu/", _SYNC, STALLED, "an NPU synchronize ({func})"),
    ("torch/cuda/", _SYNC, STALLED, "a device synchronize ({func})"),
    ("torch/utils/data/", None, STALLED, "the data loader ({func})"),
    # TensorFlow: collectives wait; a session step may hold HCCL's or TF's own all-reduce
    ("tensorflow/python/ops/collective_ops.py", None, WAITING, "a TensorFlow collective ({func})"),
    ("tensorflow/python/distribute/", None, WAITING, "tf.distribute ({func})"),
    ("npu_bridge/hccl/", None, WAITING, "HCCL ({func})"),
    ("hccl/manage/", None, WAITING, "HCCL's set-up ({func})"),
    ("tensorflow/python/client/session.py", None, MAY_WAIT, "Session.run (a step may hold an all-reduce)"),
    ("tensorflow/python/eager/", None, MAY_WAIT, "a TensorFlow function (it may hold an all-reduce)"),
    ("tensorflow/python/data/", None, STALLED, "the tf.data pipeline ({func})"),
    # MindSpore
    ("mindspore/communication/", None, WAITING, "mindspore.communication ({func})"),
    ("mindspore/ops/operations/comm_ops.py", None, WAITING, "a MindSpore collective ({func})"),
    ("mindspore/dataset/", None, STALLED, "the MindSpore dataset pipeline ({func})"),
    ("mindspore/common/api.py", None, MAY_WAIT, "a MindSpore graph step (it may hold an all-reduce)"),
    ("mindspore/train/", None, MAY_WAIT, "a MindSpore training step (it may hold an all-reduce)"),
)


@dataclass(frozen=True)
class Place:
    kind: str  # WAITING, MAY_WAIT or STALLED
    what: str  # "torch.distributed.all_reduce", "its own code", "the data loader (_next_data)"
    frame: Optional[Frame]  # the frame that decided (None: an empty stack)
    user: Optional[Frame]  # the innermost frame of the user's own files

    def text(self) -> str:
        """``torch.distributed.all_reduce (train.py:41, in step)``: the place, and the user's line in it."""
        at = self.user or self.frame
        return self.what + (" (%s)" % at.text() if at is not None else "")


def place_of(frames: Sequence[Frame]) -> Place:
    """Where a thread stands (``frames`` innermost first)."""
    own = user_frame(frames)
    for frame in frames:
        if frame is own:
            return Place(STALLED, "its own code", frame, own)
        path = frame.path.replace("\\", "/")
        for fragment, function, kind, what in PLACES:
            if _in(path, fragment) and (function is None or function.fullmatch(frame.func.split(".")[-1])):
                return Place(kind, what.format(func=frame.func.split(".")[-1]), frame, own)
    first = frames[0] if frames else None
    return Place(STALLED, "%s in %s" % (first.func, first.path) if first else "an empty stack", first, own)


def _in(path: str, fragment: str) -> bool:
    if fragment.startswith("<"):  # a frozen module: "<frozen importlib._bootstrap_external>"
        return path.startswith(fragment)
    if fragment.endswith("/"):
        return "/" + fragment in path or path.startswith(fragment)
    return path.endswith("/" + fragment) or path == fragment
