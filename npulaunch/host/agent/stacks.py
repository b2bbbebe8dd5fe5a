"""Stack dumps of hung ranks, taken off the agent's loop: the signal the rank-side helper registered
(faulthandler writes from the rank's own signal handler), else ``py-spy dump`` as a child process.
The loop only starts them and polls; a dump still running at its time limit is killed, so no dump
ever delays stopping the job. Standard library only, Python 3.7+.
"""

from __future__ import annotations

import os
import shutil
import subprocess
from dataclasses import dataclass, field
from typing import IO, Callable, Dict, List, Optional, Sequence, Set, Tuple

from npulaunch.host import procs
from npulaunch.host.configproto import STACK_SIGNAL_FILE
from npulaunch.host.trace import debug

STACK_DUMP_LIMIT_S = 10.0  # py-spy attaches in well under a second; a wedged one is killed
FAULTHANDLER_SETTLE_S = 0.3  # faulthandler writes from the rank's signal handler: give it a moment


def registered_signal(rank_dir: str) -> Tuple[int, int]:
    """``(pid, signal)`` a rank registered for stack dumps (session.register_stack_dump), or zeros."""
    try:
        with open(os.path.join(rank_dir, STACK_SIGNAL_FILE)) as handle:
            pid, signum = (int(word) for word in handle.read().split()[:2])
        return pid, signum
    except (OSError, ValueError):
        return 0, 0


@dataclass
class _Batch:
    files: List[str]
    settle_at: float  # not finished before this (faulthandler's writes)
    deadline: float
    dumpers: List[Tuple["subprocess.Popen[bytes]", IO[bytes]]] = field(default_factory=list)
    timed_out: List[str] = field(default_factory=list)


class StackDumps:
    """The dumps in progress; ``poll`` says when they are all written (or out of time)."""

    def __init__(self, clock: Callable[[], float], limit_s: float = STACK_DUMP_LIMIT_S) -> None:
        self._clock = clock
        self._limit_s = limit_s
        self._batch: Optional[_Batch] = None

    def start(self, targets: Sequence[Tuple[int, str, int]]) -> None:
        """``targets``: (rank, rank_dir, process group) of each running rank to dump."""
        now = self._clock()
        if self._batch is None:
            self._batch = _Batch([], now, now + self._limit_s)
        batch = self._batch
        table = procs.snapshot()
        for rank, rank_dir, pgid in targets:
            pid, signum = registered_signal(rank_dir)
            if pid and table.get(pid) is not None and table[pid].pgid == pgid:
                debug(__name__, "stack dump of rank %d: signal %d to pid %d", rank, signum, pid)
                procs.kill_pids([pid], signum)
                batch.files.append(os.path.join(rank_dir, "stacks-%d.txt" % pid))
                batch.settle_at = max(batch.settle_at, now + FAULTHANDLER_SETTLE_S)
            elif shutil.which("py-spy"):
                path = os.path.join(rank_dir, "stacks-py-spy.txt")
                out = os.fdopen(os.open(path, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o600), "wb")
                dumper = subprocess.Popen(
                    ["py-spy", "dump", "--pid", str(pgid)],
                    stdout=out,
                    stderr=subprocess.STDOUT,
                    stdin=subprocess.DEVNULL,
                )
                debug(__name__, "stack dump of rank %d: py-spy pid %d", rank, dumper.pid)
                batch.dumpers.append((dumper, out))
                batch.files.append(path)

    def pids(self) -> Set[int]:
        """The dumpers' pids: children of the agent that are not the job's strays."""
        return {dumper.pid for dumper, _ in self._batch.dumpers} if self._batch else set()

    def timeout_s(self) -> Optional[float]:
        """How long the loop may sleep before the next poll is due."""
        if self._batch is None:
            return None
        return max(
            0.0,
            min(
                0.05 if self._batch.dumpers else self._batch.settle_at - self._clock(),
                self._batch.deadline - self._clock(),
            ),
        )

    def poll(self) -> Optional[Dict[str, List[str]]]:
        """``{"files": [...], "timed_out": [...]}`` once every dump has ended or run out of time."""
        batch = self._batch
        if batch is None:
            return None
        now = self._clock()
        running = [(d, out) for d, out in batch.dumpers if d.poll() is None]
        if now >= batch.deadline:
            for dumper, _ in running:
                dumper.kill()
                dumper.wait()
                batch.timed_out.append(" ".join(dumper.args))  # type: ignore[arg-type]
            running = []
        if running or now < batch.settle_at:
            return None
        self.close()
        return {"files": batch.files, "timed_out": batch.timed_out}

    def close(self) -> None:
        """Kill what is still running (the job is being torn down) and forget the batch."""
        batch, self._batch = self._batch, None
        for dumper, out in batch.dumpers if batch else ():
            if dumper.poll() is None:
                dumper.kill()
                dumper.wait()
            out.close()


def remove_unused(rank_dirs: List[str]) -> None:
    """After the job: the stack files no dump was written to (every rank that registered the
    handler opened one, empty until asked), and the registration markers. A dump is kept."""
    import glob

    for rank_dir in rank_dirs:
        for path in glob.glob(os.path.join(rank_dir, "stacks-*.txt")) + [os.path.join(rank_dir, STACK_SIGNAL_FILE)]:
            try:
                if path.endswith(STACK_SIGNAL_FILE) or os.path.getsize(path) == 0:
                    os.unlink(path)
            except OSError:
                pass
