"""Watching the processes a benchmark starts, from /proc: every run's ranks carry a marker; the
launcher's process tree is sampled for its peak memory; orphans are reaped (this process is a
subreaper) so CPU time is counted and nothing is left behind.
"""

from __future__ import annotations

import contextlib
import ctypes
import os
import resource
import signal
import subprocess
import threading
import time
from dataclasses import dataclass, field

RUN_TIMEOUT_S = 180  # a run that takes longer is killed (a hung launcher must not hang the benchmark)


def become_subreaper() -> None:
    """Orphans (a launcher's helpers it never waited for) become our children: we reap them, and
    their CPU time lands in RUSAGE_CHILDREN like everyone else's."""
    try:
        ctypes.CDLL(None, use_errno=True).prctl(36, 1, 0, 0, 0)  # PR_SET_CHILD_SUBREAPER
    except (OSError, AttributeError):
        pass


def reap_orphans() -> None:
    while True:
        try:
            pid, _ = os.waitpid(-1, os.WNOHANG)
        except ChildProcessError:
            return
        if not pid:
            return


def read_cmdline(pid: int) -> list[str]:
    try:
        with open(f"/proc/{pid}/cmdline", "rb") as f:
            return f.read().decode(errors="replace").split("\0")[:-1]
    except OSError:
        return []


def marked(marker: str) -> list[int]:
    """Live processes whose argv carries this run's marker (its ranks), zombies excluded."""
    found = []
    for name in os.listdir("/proc"):
        if name.isdigit() and int(name) != os.getpid() and marker in read_cmdline(int(name)):
            try:
                with open(f"/proc/{name}/stat", "rb") as f:
                    stat = f.read()
            except OSError:
                continue
            if stat[stat.rindex(b")") + 2 :][:1] != b"Z":
                found.append(int(name))
    return found


def parents() -> dict[int, int]:
    table = {}
    for name in os.listdir("/proc"):
        if name.isdigit():
            try:
                with open(f"/proc/{name}/stat", "rb") as f:
                    stat = f.read()
            except OSError:
                continue
            table[int(name)] = int(stat[stat.rindex(b")") + 2 :].split()[1])
    return table


def hwm_kb(pid: int) -> int | None:
    try:
        with open(f"/proc/{pid}/status") as f:
            for line in f:
                if line.startswith("VmHWM:"):
                    return int(line.split()[1])
    except OSError:
        pass
    return None


@dataclass
class Outcome:
    code: int | None
    wall_s: float
    end_time: float  # time.time() at the launcher's exit
    cpu_s: float  # RUSAGE_CHILDREN delta: launcher, its helpers and the ranks
    tree: dict[int, tuple] = field(default_factory=dict)  # pid -> (cmdline, VmHWM kB, ppid) at last sample


def launch(argv: list[str], env: dict[str, str], sample_ms: float = 0) -> Outcome:
    """Run one launcher, console to /dev/null; with sample_ms, sample its process tree.
    Waits in a blocking waitpid: Popen.wait(timeout) polls with sleeps of up to 50 ms."""
    usage = resource.getrusage(resource.RUSAGE_CHILDREN)
    start = time.perf_counter()
    proc = subprocess.Popen(
        argv,
        env=env,
        stdin=subprocess.DEVNULL,
        stdout=subprocess.DEVNULL,
        stderr=subprocess.DEVNULL,
        start_new_session=True,
    )
    timed_out = threading.Event()

    def kill() -> None:
        timed_out.set()
        with contextlib.suppress(ProcessLookupError):
            os.killpg(proc.pid, signal.SIGKILL)

    timer = threading.Timer(RUN_TIMEOUT_S, kill)
    timer.start()
    tree: dict[int, tuple] = {}
    try:
        if sample_ms:
            while proc.poll() is None:
                sample_tree(proc.pid, tree)
                time.sleep(sample_ms / 1000)
        code: int | None = proc.wait()
    finally:
        timer.cancel()
    wall, end = time.perf_counter() - start, time.time()
    reap_orphans()
    after = resource.getrusage(resource.RUSAGE_CHILDREN)
    cpu = after.ru_utime + after.ru_stime - usage.ru_utime - usage.ru_stime
    return Outcome(None if timed_out.is_set() else code, wall, end, cpu, tree)


def sample_tree(root: int, tree: dict[int, tuple]) -> None:
    children: dict[int, list[int]] = {}
    table = parents()
    for child, parent in table.items():
        children.setdefault(parent, []).append(child)
    members, todo = set(), [root]
    while todo:
        pid = todo.pop()
        members.add(pid)
        todo.extend(children.get(pid, ()))
    for pid in members:
        hwm, cmdline = hwm_kb(pid), read_cmdline(pid)
        if hwm is not None and cmdline:
            tree[pid] = (cmdline, hwm, table.get(pid, 0))


def stop_survivors(marker: str, wait_s: float) -> tuple:
    """(ranks alive at the launcher's exit, time.time() when the last was gone); kills what is
    still there after wait_s."""
    left = marked(marker)
    deadline = time.monotonic() + wait_s
    while marked(marker) and time.monotonic() < deadline:
        time.sleep(0.01)
    gone = time.time()
    for pid in marked(marker):
        os.kill(pid, signal.SIGKILL)
    time.sleep(0.05)
    reap_orphans()
    return len(left), gone


# ---- the four measurements --------------------------------------------------------------------
