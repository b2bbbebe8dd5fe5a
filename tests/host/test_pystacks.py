"""Reading Python stacks: py-spy's and faulthandler's dumps as real processes print them, the main thread, the
user's own frames, and where a main thread stands (host/waits.py): waiting in a collective, or stalled."""

from __future__ import annotations

import os
import shutil
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest
from helpers import require

from npulaunch.host.pystacks import Frame, main_thread, parse_dump, traceback_frames, user_frame, where_raised
from npulaunch.host.waits import MAY_WAIT, STALLED, WAITING, place_of

SITE = "/usr/lib/python3.11/site-packages"
PROGRAM = """
import threading, time
def worker():
    time.sleep(60)
def stuck_here():
    time.sleep(60)
threading.Thread(target=worker, name="loader", daemon=True).start()
print("ready", flush=True)
stuck_here()
"""


def start(tmp_path: Path, code: str) -> subprocess.Popen:
    script = tmp_path / "prog.py"
    script.write_text(code)
    proc = subprocess.Popen([sys.executable, str(script)], stdout=subprocess.PIPE, text=True)
    assert proc.stdout is not None and proc.stdout.readline().strip() == "ready"
    time.sleep(0.2)
    return proc


def test_a_real_py_spy_dump_gives_the_main_thread_and_its_own_line(tmp_path: Path) -> None:
    require(shutil.which("py-spy") is not None, "py-spy (pip install -e '.[test]')")
    proc = start(tmp_path, PROGRAM)
    try:
        text = subprocess.run(
            ["py-spy", "dump", "--full-filenames", "--pid", str(proc.pid)], capture_output=True, text=True, timeout=30
        ).stdout
    finally:
        proc.kill()
        proc.wait()
    threads = parse_dump(text)
    assert {t.name for t in threads} == {"MainThread", "loader"}
    main = main_thread(threads)
    assert main is not None and main.frames[0].func == "stuck_here" and main.frames[0].path.endswith("prog.py")
    assert main.frames[-1].func == "<module>" and main.active is False
    place = place_of(main.frames)
    assert (
        place.kind == STALLED
        and place.what == "its own code"
        and place.text() == "its own code (prog.py:6, in stuck_here)"
    )


def test_a_real_faulthandler_dump_gives_the_same(tmp_path: Path) -> None:
    dump = tmp_path / "stacks.txt"
    code = PROGRAM.replace(
        'print("ready"',
        f"import faulthandler, signal\nf = open({str(dump)!r}, 'w')\n"
        'faulthandler.register(signal.SIGUSR2, file=f, all_threads=True)\nprint("ready"',
    )
    proc = start(tmp_path, code)
    try:
        os.kill(proc.pid, signal.SIGUSR2)
        time.sleep(0.3)
    finally:
        proc.kill()
        proc.wait()
    threads = parse_dump(dump.read_text())
    assert len(threads) == 2 and all(t.active is None for t in threads)
    main = main_thread(threads)  # no names in faulthandler's dump: the thread that runs the module's top level
    assert main is not None and main.frames[0] == Frame("stuck_here", str(tmp_path / "prog.py"), 6)


@pytest.mark.parametrize(
    ("frames", "kind", "what"),
    [
        # innermost first, as the dumps print them
        (
            [("all_reduce", f"{SITE}/torch/distributed/distributed_c10d.py"), ("step", "/work/train.py")],
            WAITING,
            "torch.distributed.all_reduce",
        ),
        (
            [
                ("_exception_logger.<locals>.wrapper", f"{SITE}/torch/distributed/c10d_logger.py"),
                ("barrier", f"{SITE}/torch/distributed/distributed_c10d.py"),
            ],
            WAITING,
            "torch.distributed (wrapper)",
        ),
        (
            [("_engine_run_backward", f"{SITE}/torch/autograd/graph.py"), ("main", "/work/train.py")],
            MAY_WAIT,
            "backward (DDP's gradient all-reduce runs in it)",
        ),
        (
            [
                ("DistributedDataParallel._sync_buffers", f"{SITE}/torch/nn/parallel/distributed.py"),
                ("DistributedDataParallel.forward", f"{SITE}/torch/nn/parallel/distributed.py"),
            ],
            WAITING,
            "DistributedDataParallel._sync_buffers",
        ),
        # the user's forward inside DDP's forward is the user's own code, not DDP's
        (
            [
                ("Net.forward", "/work/model.py"),
                ("Module._call_impl", f"{SITE}/torch/nn/modules/module.py"),
                ("DistributedDataParallel.forward", f"{SITE}/torch/nn/parallel/distributed.py"),
            ],
            STALLED,
            "its own code",
        ),
        (
            [
                ("Condition.wait", "/usr/lib/python3.11/threading.py"),
                ("_MultiProcessingDataLoaderIter._try_get_data", f"{SITE}/torch/utils/data/dataloader.py"),
                ("main", "/work/train.py"),
            ],
            STALLED,
            "the data loader (_try_get_data)",
        ),
        ([("synchronize", f"{SITE}/torch_npu/npu/utils.py"), ("main", "/work/t.py")], STALLED, "an NPU synchronize"),
        (
            [("_path_isabs", "<frozen importlib._bootstrap_external>"), ("main", "/work/t.py")],
            STALLED,
            "importing modules",
        ),
        ([("BaseSession._call_tf_sessionrun", f"{SITE}/tensorflow/python/client/session.py")], MAY_WAIT, "Session.run"),
        ([("init", f"{SITE}/mindspore/communication/management.py")], WAITING, "mindspore.communication (init)"),
    ],
)
def test_where_a_main_thread_stands(frames, kind: str, what: str) -> None:
    place = place_of([Frame(func, path, 10) for func, path in frames])
    assert place.kind == kind and place.what.startswith(what), place


def test_a_failure_is_placed_at_the_users_innermost_frame_not_the_frameworks() -> None:
    lines = [
        "Traceback (most recent call last):",
        '  File "/work/train.py", line 213, in <module>',
        '  File "/work/train.py", line 120, in step',
        f'  File "{SITE}/torch/nn/parallel/distributed.py", line 1640, in forward',
        f'  File "{SITE}/torch/nn/modules/linear.py", line 125, in forward',
        "RuntimeError: mat1 and mat2 shapes cannot be multiplied (4x3 and 4x1)",
    ]
    frames = traceback_frames(lines)
    assert user_frame(frames) == Frame("step", "/work/train.py", 120)
    assert where_raised(frames) == Frame("step", "/work/train.py", 120)
    assert where_raised(frames[2:]) == frames[2]  # only the framework's frames: the innermost of them
