"""Start, signal and find the processes of a job (Linux; standard library only, Python 3.7+).

Every rank runs in its own session and process group, dies with its parent (PR_SET_PDEATHSIG),
and carries the job's uuid in its environment so stray descendants can be found even after they
leave the group. Nothing here decides *when* to stop anything: that is the agent's job.
"""

from __future__ import annotations

import ctypes
import errno
import os
import shutil
import signal
import subprocess
from typing import (
    Dict,
    Iterable,
    List,
    Mapping,
    NamedTuple,
    Optional,
    Sequence,
    Set,
    Tuple,
)

PR_SET_PDEATHSIG = 1
PR_SET_CHILD_SUBREAPER = 36
PR_GET_CHILD_SUBREAPER = 37

_libc = None


def _load_libc() -> Optional[ctypes.CDLL]:
    global _libc
    if _libc is None and os.path.exists("/proc/self"):
        _libc = ctypes.CDLL(None, use_errno=True)  # the interpreter's own libc; no ldconfig lookup
    return _libc


def _prctl(option: int, value: int) -> bool:
    libc = _load_libc()
    return libc is not None and libc.prctl(option, value, 0, 0, 0) == 0


def become_subreaper() -> bool:
    """Orphaned descendants of our ranks are re-parented to us (not to init), so we can reap
    them promptly and find them when cleaning up. Returns False where unsupported."""
    return _prctl(PR_SET_CHILD_SUBREAPER, 1)


def is_subreaper() -> bool:
    """Whether this process is a child subreaper now (False where that cannot be asked)."""
    libc = _load_libc()
    if libc is None:
        return False
    flag = ctypes.c_int(0)
    return libc.prctl(PR_GET_CHILD_SUBREAPER, ctypes.byref(flag), 0, 0, 0) == 0 and flag.value != 0


def stop_being_subreaper() -> bool:
    """Undo ``become_subreaper``: orphans go to init again. An agent embedded in a larger program (a
    test process, a notebook) calls it when it closes, or that program would collect zombies it never
    waits for. Returns False where unsupported."""
    return _prctl(PR_SET_CHILD_SUBREAPER, 0)


def signal_name(signum: int) -> str:
    try:
        return signal.Signals(signum).name
    except ValueError:
        return "signal %d" % signum


_setpriv_path: Optional[str] = None


def _setpriv() -> Optional[str]:
    """util-linux's setpriv, when present, sets PR_SET_PDEATHSIG and execs the rank. It keeps
    spawning on Python's fast vfork path: a Python ``preexec_fn`` forces fork() and costs
    several milliseconds per rank (measured: 8.5 ms instead of 3.7 ms on this 2-core machine)."""
    global _setpriv_path
    if _setpriv_path is None:
        _setpriv_path = shutil.which("setpriv") or ""
        if _setpriv_path and not _knows_pdeathsig(_setpriv_path):  # util-linux 2.33 on; older hosts use prctl
            _setpriv_path = ""
    return _setpriv_path or None


def _knows_pdeathsig(path: str) -> bool:
    """Whether this setpriv has --pdeathsig: its option table names it. Read from the binary (a
    fraction of a millisecond) rather than asked with ``setpriv --help`` (a process, 2-3 ms at each
    launch); a binary that cannot be read is asked."""
    try:
        with open(path, "rb") as binary:
            return b"pdeathsig" in binary.read(16 << 20)
    except OSError:
        usage = subprocess.run([path, "--help"], stdout=subprocess.PIPE, stderr=subprocess.DEVNULL)
        return b"--pdeathsig" in usage.stdout


def spawn(
    argv: Sequence[str],
    cwd: str,
    env: Mapping[str, str],
    stdout_path: str,
    stderr_path: str,
    cpus: Optional[Sequence[int]] = None,
) -> "subprocess.Popen[bytes]":
    """Start one rank in a new session, output appended to its log files, dying with us; bound to
    ``cpus`` when given (job.cpu_binding)."""
    if cpus:
        with _affinity(cpus):
            return _spawn(argv, cwd, env, stdout_path, stderr_path)
    return _spawn(argv, cwd, env, stdout_path, stderr_path)


class _affinity:
    """Run the block on ``cpus``: the calling thread's CPU affinity, which a child inherits when it is
    created (clone, fork, vfork), so the rank runs on them from its first instruction, before exec,
    with no taskset and no preexec_fn (which would cost the fast vfork path). On Linux
    sched_setaffinity(0) changes the calling thread only: the launcher's other threads keep theirs.
    The thread's own set is restored afterwards. OSError when the CPUs cannot be used."""

    def __init__(self, cpus: Sequence[int]) -> None:
        self.cpus = set(cpus)
        self.saved: Optional[Set[int]] = None

    def __enter__(self) -> None:
        self.saved = os.sched_getaffinity(0)
        try:
            os.sched_setaffinity(0, self.cpus)
        except OSError as exc:
            shown = ",".join(str(c) for c in sorted(self.cpus))
            raise OSError(exc.errno, "cannot bind to CPUs %s: %s" % (shown, exc.strerror)) from None

    def __exit__(self, *exc_info: object) -> None:
        if self.saved is not None:
            os.sched_setaffinity(0, self.saved)


def _spawn(
    argv: Sequence[str], cwd: str, env: Mapping[str, str], stdout_path: str, stderr_path: str
) -> "subprocess.Popen[bytes]":
    setpriv = _setpriv()
    preexec = None
    if setpriv is not None:
        argv = [setpriv, "--pdeathsig", "KILL", "--", *argv]
    else:
        parent = os.getpid()
        libc = _load_libc()  # before fork, not in the child

        def in_child() -> None:  # between fork and exec; safe because the agent is single-threaded
            assert libc is not None
            libc.prctl(PR_SET_PDEATHSIG, signal.SIGKILL, 0, 0, 0)
            if os.getppid() != parent:  # we died between fork and prctl
                os._exit(1)

        preexec = in_child if libc is not None else None
    out = os.open(stdout_path, os.O_WRONLY | os.O_CREAT | os.O_APPEND, 0o600)
    err = os.open(stderr_path, os.O_WRONLY | os.O_CREAT | os.O_APPEND, 0o600)
    try:
        return subprocess.Popen(
            list(argv),
            cwd=cwd,
            env=dict(env),
            stdin=subprocess.DEVNULL,
            stdout=out,
            stderr=err,
            start_new_session=True,
            preexec_fn=preexec,
        )
    finally:
        os.close(out)
        os.close(err)


def kill_group(pgid: int, signum: int) -> bool:
    """Signal a whole process group; False when it no longer exists."""
    try:
        os.killpg(pgid, signum)
        return True
    except ProcessLookupError:
        return False
    except PermissionError:
        return False


def kill_pids(pids: Iterable[int], signum: int) -> None:
    for pid in pids:
        try:
            os.kill(pid, signum)
        except (ProcessLookupError, PermissionError):
            pass


def _read_stat(pid: int) -> Optional[List[str]]:
    """Fields of /proc/<pid>/stat after the command name: [state, ppid, pgrp, session, ...]."""
    try:
        with open("/proc/%d/stat" % pid, "rb") as handle:
            data = handle.read()
    except OSError:
        return None
    return data[data.rfind(b")") + 2 :].decode("ascii", "replace").split()


def start_ticks(pid: int) -> Optional[int]:
    """When the process started (clock ticks since boot): with the pid, it names one process for
    good, since a pid can be reused but not with the same start time."""
    fields = _read_stat(pid)
    return int(fields[19]) if fields and len(fields) > 19 else None


def alive(pid: int) -> bool:
    """The process exists and has not exited (a zombie waiting to be reaped has)."""
    fields = _read_stat(pid)
    return fields is not None and bool(fields) and fields[0] not in ("Z", "X")


def boot_id() -> Optional[str]:
    """This machine's boot id (a new one at every boot), or None where there is none."""
    try:
        with open("/proc/sys/kernel/random/boot_id") as handle:
            return handle.read().strip() or None
    except OSError:
        return None


def _all_pids() -> List[int]:
    return [int(name) for name in os.listdir("/proc") if name.isdigit()]


class ProcInfo(NamedTuple):
    state: str
    ppid: int
    pgid: int


def snapshot() -> Dict[int, ProcInfo]:
    """Every live (not zombie) process: ``{pid: ProcInfo}``, from one pass over /proc."""
    table = {}
    for pid in _all_pids():
        stat = _read_stat(pid)
        if stat and stat[0] not in ("Z", "X"):
            table[pid] = ProcInfo(stat[0], int(stat[1]), int(stat[2]))
    return table


class ThreadSample(NamedTuple):
    """A process's main thread as the process table shows it: what a hung rank is doing without its stack."""

    state: str  # R running, S sleeping, D uninterruptible (a driver, a disk), T stopped, ...
    cpu_s: float  # CPU seconds it has used (user + system)
    wchan: str  # where in the kernel it sleeps ("futex_do_wait", "hrtimer_nanosleep", ...), "" when running


def sample_main_thread(pid: int) -> Optional[ThreadSample]:
    """The main thread (the thread whose id is the pid) of a live process, or None."""
    base = "/proc/%d/task/%d/" % (pid, pid)
    try:
        with open(base + "stat", "rb") as handle:
            data = handle.read()
    except OSError:
        return None
    fields = data[data.rfind(b")") + 2 :].decode("ascii", "replace").split()
    if len(fields) < 13 or fields[0] in ("Z", "X"):
        return None
    try:
        with open(base + "wchan") as handle:
            wchan = handle.read().strip()
    except OSError:
        wchan = ""
    ticks = os.sysconf("SC_CLK_TCK") if hasattr(os, "sysconf") else 100
    return ThreadSample(fields[0], (int(fields[11]) + int(fields[12])) / float(ticks), "" if wchan == "0" else wchan)


def python_process(pgid: int, table: Mapping[int, ProcInfo]) -> int:
    """The process of a rank's group that runs Python: the leader when it does (``python train.py``),
    else the group's first Python process (``bash run.sh`` that starts python), else the leader."""
    members = sorted(pid for pid, info in table.items() if info.pgid == pgid)
    for pid in [pgid] + [pid for pid in members if pid != pgid]:
        if _runs_python(pid):
            return pid
    return pgid


def _runs_python(pid: int) -> bool:
    try:
        with open("/proc/%d/comm" % pid) as handle:
            name = handle.read().strip()
    except OSError:
        return False
    return name.startswith(("python", "pypy"))


def live_members(pgids: Set[int], table: Optional[Dict[int, ProcInfo]] = None) -> Dict[int, int]:
    """``{pid: pgid}`` of live processes in the given process groups."""
    table = snapshot() if table is None else table
    return {pid: info.pgid for pid, info in table.items() if info.pgid in pgids}


def group_is_empty(pgid: int) -> bool:
    """Whether no live process is left in a process group. Asking the kernel first is cheap (no
    member at all, the usual case once a rank has exited); only when some member remains, which
    may be a zombie, is /proc read."""
    try:
        os.killpg(pgid, 0)
    except ProcessLookupError:
        return True
    except PermissionError:
        pass
    return not live_members({pgid})


def descendants(root: int, table: Dict[int, ProcInfo]) -> Set[int]:
    """Live descendants of ``root``. For a subreaper this is every live process it ever
    started, directly or not: an orphan is re-parented to the subreaper, never past it."""
    children: Dict[int, List[int]] = {}
    for pid, info in table.items():
        children.setdefault(info.ppid, []).append(pid)
    found: Set[int] = set()
    todo = list(children.get(root, ()))
    while todo:
        pid = todo.pop()
        if pid not in found:
            found.add(pid)
            todo.extend(children.get(pid, ()))
    return found


def marked_processes(job_uuid: str, variable: str = "NPULAUNCH_JOB_UUID") -> List[int]:
    """Live processes whose environment carries this job's uuid (ranks and all they started,
    even those that left the rank's process group)."""
    needle = ("%s=%s\0" % (variable, job_uuid)).encode()
    me = os.getpid()
    found = []
    for pid in _all_pids():
        if pid == me:
            continue
        try:
            with open("/proc/%d/environ" % pid, "rb") as handle:
                environ = handle.read() + b"\0"
        except OSError:
            continue
        if needle in environ:
            stat = _read_stat(pid)
            if stat and stat[0] not in ("Z", "X"):
                found.append(pid)
    return found


def reap_any() -> List[Tuple[int, int]]:
    """Reap every exited child without blocking: ``[(pid, status), ...]``."""
    reaped: List[Tuple[int, int]] = []
    while True:
        try:
            pid, status = os.waitpid(-1, os.WNOHANG)
        except ChildProcessError:
            return reaped
        except OSError as exc:  # pragma: no cover - EINTR is retried by Python 3.5+
            if exc.errno == errno.EINTR:
                continue
            raise
        if pid == 0:
            return reaped
        reaped.append((pid, status))


def decode_status(status: int) -> Tuple[Optional[int], Optional[str]]:
    """``(exit_code, signal_name)``: one of the two is None."""
    if os.WIFSIGNALED(status):
        return None, signal_name(os.WTERMSIG(status))
    return os.WEXITSTATUS(status), None
