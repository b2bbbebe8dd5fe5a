"""Evidence of where each rank of a hung job stands, taken off the agent's loop before it is stopped: every
rank's Python stack (``py-spy dump`` as a child process where py-spy is installed, else the signal the
rank-side helper registered, whose faulthandler writes from the rank's own signal handler) and its main
thread in the process table twice, stack_sample_s apart (host/timing.py): state, CPU used, the kernel
wait. The loop only starts them and polls; a dump still running at its time limit is killed, so no dump
ever delays stopping the job.
What the evidence means per rank is host/waits.py's; which rank the others wait for, diagnose/hang.py's.
Standard library only, Python 3.7+.
"""

from __future__ import annotations

import os
import shutil
import subprocess
from dataclasses import dataclass, field
from typing import IO, Any, Callable, Dict, List, Optional, Sequence, Set, Tuple

from npulaunch.host import procs, timing
from npulaunch.host.configproto import STACK_SIGNAL_FILE
from npulaunch.host.pystacks import main_thread, parse_dump, render
from npulaunch.host.trace import debug
from npulaunch.host.waits import MAY_WAIT, STALLED, WAITING, place_of

FAULTHANDLER_SETTLE_S = 0.3  # faulthandler writes from the rank's signal handler: give it a moment
BUSY = 0.5  # a main thread that used half a CPU or more between the two readings is busy
MAX_DUMP_BYTES = 1 << 20  # a dump is read up to here (a thousand threads' stacks)
PY_SPY = "py-spy"
FAULTHANDLER = "faulthandler"
PROCESS_TABLE = "process table"


def registered_signal(rank_dir: str) -> Tuple[int, int]:
    """``(pid, signal)`` a rank registered for stack dumps (session.register_stack_dump), or zeros."""
    try:
        with open(os.path.join(rank_dir, STACK_SIGNAL_FILE)) as handle:
            pid, signum = (int(word) for word in handle.read().split()[:2])
        return pid, signum
    except (OSError, ValueError):
        return 0, 0


@dataclass
class _Target:
    rank: int
    pid: int  # the rank's Python process
    evidence: str  # PY_SPY, FAULTHANDLER or PROCESS_TABLE
    path: str = ""  # its dump
    signum: int = 0  # the signal it registered (0: none)
    before: Optional[procs.ThreadSample] = None
    note: str = ""  # why a way of dumping gave nothing


@dataclass
class _Batch:
    targets: List[_Target]
    started: float
    settle_at: float  # not finished before this (the second reading; faulthandler's writes)
    deadline: float
    dumpers: Dict[int, Tuple["subprocess.Popen[bytes]", IO[bytes]]] = field(default_factory=dict)  # by rank
    timed_out: List[str] = field(default_factory=list)


class StackDumps:
    """The dumps in progress; ``poll`` says when they are all written (or out of time)."""

    def __init__(
        self, clock: Callable[[], float], limit_s: Optional[float] = None, py_spy: Optional[str] = None
    ) -> None:
        self._clock = clock
        self._limit_s = timing.seconds("stack_dump_limit_s") if limit_s is None else limit_s
        self._py_spy = py_spy  # its path; None: looked up when first needed ("" turns it off)
        self._batch: Optional[_Batch] = None
        self.asked: Set[int] = set()  # ranks dumped in this attempt: each once

    def start(self, targets: Sequence[Tuple[int, str, int]]) -> None:
        """``targets``: (rank, rank_dir, process group) of each running rank to dump."""
        now = self._clock()
        if self._batch is None:
            self._batch = _Batch([], now, now + timing.seconds("stack_sample_s"), now + self._limit_s)
        batch = self._batch
        table = procs.snapshot()
        for rank, rank_dir, pgid in targets:
            if rank in self.asked:
                continue
            self.asked.add(rank)
            pid, signum = registered_signal(rank_dir)
            if not (pid and table.get(pid) is not None and table[pid].pgid == pgid):
                pid, signum = procs.python_process(pgid, table), 0
            target = _Target(rank, pid, PROCESS_TABLE, signum=signum, before=procs.sample_main_thread(pid))
            batch.targets.append(target)
            if self._spy():
                self._start_py_spy(batch, target, rank_dir)
            elif signum:
                self._signal(batch, target, rank_dir, now)

    def _spy(self) -> str:
        if self._py_spy is None:
            self._py_spy = shutil.which(PY_SPY) or ""
        return self._py_spy

    def _start_py_spy(self, batch: _Batch, target: _Target, rank_dir: str) -> None:
        target.evidence, target.path = PY_SPY, os.path.join(rank_dir, "stacks-py-spy.txt")
        out = os.fdopen(os.open(target.path, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o600), "wb")
        dumper = subprocess.Popen(
            [self._spy(), "dump", "--full-filenames", "--pid", str(target.pid)],
            stdout=out,
            stderr=subprocess.STDOUT,
            stdin=subprocess.DEVNULL,
        )
        debug(__name__, "stack dump of rank %d: py-spy pid %d on pid %d", target.rank, dumper.pid, target.pid)
        batch.dumpers[target.rank] = (dumper, out)

    def _signal(self, batch: _Batch, target: _Target, rank_dir: str, now: float) -> None:
        debug(__name__, "stack dump of rank %d: signal %d to pid %d", target.rank, target.signum, target.pid)
        target.evidence, target.path = FAULTHANDLER, os.path.join(rank_dir, "stacks-%d.txt" % target.pid)
        procs.kill_pids([target.pid], target.signum)
        batch.settle_at = max(batch.settle_at, now + FAULTHANDLER_SETTLE_S)

    def pids(self) -> Set[int]:
        """The dumpers' pids: children of the agent that are not the job's strays."""
        return {dumper.pid for dumper, _ in self._batch.dumpers.values()} if self._batch else set()

    def timeout_s(self) -> Optional[float]:
        """How long the loop may sleep before the next poll is due."""
        if self._batch is None:
            return None
        now = self._clock()
        wait = 0.05 if self._batch.dumpers else self._batch.settle_at - now
        return max(0.0, min(wait, self._batch.deadline - now))

    def poll(self) -> Optional[Dict[str, Any]]:
        """``{"files", "timed_out", "ranks"}`` once every dump has ended or run out of time: the files that
        hold a stack, the dumpers killed at the limit, and what each rank's evidence says (``read``)."""
        batch = self._batch
        if batch is None:
            return None
        now = self._clock()
        for rank, (dumper, out) in list(batch.dumpers.items()):
            if dumper.poll() is None and now < batch.deadline:
                continue
            if dumper.poll() is None:
                dumper.kill()
                dumper.wait()
                batch.timed_out.append(" ".join(dumper.args))  # type: ignore[arg-type]
            out.close()
            del batch.dumpers[rank]
            self._after_py_spy(batch, next(t for t in batch.targets if t.rank == rank), now)
        if batch.dumpers or now < min(batch.settle_at, batch.deadline):
            return None
        self.close()
        ranks = {str(t.rank): read(t, procs.sample_main_thread(t.pid), now - batch.started) for t in batch.targets}
        files = [str(said["file"]) for said in ranks.values() if said.get("file")]
        return {"files": files, "timed_out": batch.timed_out, "ranks": ranks}

    def _after_py_spy(self, batch: _Batch, target: _Target, now: float) -> None:
        """py-spy ended: when it gave no stack (no ptrace permission, not a Python it knows), the rank's
        own signal, where it registered one."""
        if _stack_of(target.path) is not None:
            return
        target.note = "py-spy: " + _first_line(target.path)
        if target.signum and now < batch.deadline:
            self._signal(batch, target, os.path.dirname(target.path), now)
        else:
            target.evidence = PROCESS_TABLE

    def close(self) -> None:
        """Kill what is still running (the job is being torn down) and forget the batch."""
        batch, self._batch = self._batch, None
        for dumper, out in batch.dumpers.values() if batch else ():
            if dumper.poll() is None:
                dumper.kill()
                dumper.wait()
            out.close()


def read(target: _Target, after: Optional[procs.ThreadSample], elapsed_s: float) -> Dict[str, Any]:
    """What one rank's evidence says: where its main thread stands (``kind``: waiting, stalled, or ""
    when only the process table is known), what the table says of it, and which evidence decided."""
    said: Dict[str, Any] = {"evidence": target.evidence, "pid": target.pid}
    if target.note:
        said["note"] = target.note
    before = target.before
    if after is not None:
        said.update(state=after.state, wchan=after.wchan)
        if before is not None and elapsed_s > 0:
            said["cpu"] = round(max(0.0, after.cpu_s - before.cpu_s) / elapsed_s, 2)
    thread = _stack_of(target.path) if target.evidence != PROCESS_TABLE else None
    if thread is None:
        said.update(evidence=PROCESS_TABLE, kind="")
        return said
    place = place_of(thread.frames)
    # on a CPU between the readings, runnable now (a crowded machine shares its CPUs), or running as py-spy saw it
    busy = said.get("cpu", 0.0) >= BUSY or said.get("state") == "R" or bool(thread.active)
    kind = place.kind
    if kind == MAY_WAIT:
        kind = STALLED if busy else WAITING
    said.update(file=target.path, kind=kind, place=place.kind, what=place.what, at=place.text(), busy=busy)
    said["stack"] = render(thread) if kind == STALLED else render(thread, 3)
    return said


def _stack_of(path: str) -> Any:
    """The main thread of a dump file, or None when it holds no stack."""
    if not path:
        return None
    try:
        with open(path, "rb") as handle:
            text = handle.read(MAX_DUMP_BYTES).decode("utf-8", "replace")
    except OSError:
        return None
    return main_thread(parse_dump(text))


def _first_line(path: str) -> str:
    try:
        with open(path, "rb") as handle:
            lines = handle.read(4096).decode("utf-8", "replace").strip().splitlines()
    except OSError:
        return "no output"
    return lines[0][:200] if lines else "no output"


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
