"""Ctrl-C on the suite, as on a terminal: a suite run inside this test (pytest-xdist workers, the in-process
agent, the SSH test hosts, the Slurm cluster with a batch job's npulaunch) is interrupted once all of that is
running; it must stop within 15 s and leave no process it started, no network namespace or link, and no
Slurm or sshd daemon. Its names never meet this run's (NPULAUNCH_TEST_SLOT_BASE: tests/netns_hosts.py)."""

from __future__ import annotations

import os
import pty
import select
import signal
import subprocess
import time
from pathlib import Path
from typing import Callable, List

import psutil
import pytest
from helpers import ROOT, require, wait_until
from netns_hosts import available as netns_available
from slurm_cluster import available as slurm_available
from slurm_cluster import cluster_processes

INNER_SLOT_BASE = 60  # the inner suite's workers are slots 60, 61, ...: its hosts, subnets and ports
INNER_TESTS = (
    "tests/launch/test_slurm.py",  # the Slurm cluster, batch jobs whose npulaunch holds the allocation
    "tests/launch/test_ssh_run.py",  # the SSH test hosts (network namespaces, sshd), jobs over SSH
    "tests/launch/test_supervisor_loop.py",  # agents inside the worker: its signal handlers and subreaper
    "tests/host/test_agent.py",
)
STOP_LIMIT_S = 15.0


def netns_left(slots: List[str]) -> List[str]:
    """The inner suite's namespaces, bridges and veths: npl<tag><slot>[-<host>] for one of its slots."""
    names = [line.split()[0] for line in run_ip("netns", "list") if line.split()]
    names += [line.split(":")[1].strip().split("@")[0] for line in run_ip("-o", "link", "show") if ":" in line]
    return sorted({n for n in names if n.startswith("npl") and any(f"{s}-" in n or n.endswith(s) for s in slots)})


def run_ip(*args: str) -> List[str]:
    return subprocess.run(["ip", *args], capture_output=True, text=True).stdout.splitlines()


def processes_of(token: str, basetemp: Path) -> List[str]:
    """Live processes the inner suite started: its token in their environment, a cwd under its temporary
    directory (Slurm's step daemons clear their environment), or Slurm daemons and clients of its clusters."""
    found = []
    for proc in psutil.process_iter(["pid", "name", "environ", "cwd", "status", "cmdline"]):
        try:
            if proc.info["status"] == psutil.STATUS_ZOMBIE or proc.info["pid"] == os.getpid():
                continue
            marked = (proc.info["environ"] or {}).get("NPLTEST_SUITE") == token
            cwd = proc.info["cwd"] or ""
        except (psutil.Error, OSError):
            continue
        if marked or cwd.startswith(str(basetemp)):
            found.append(f"{proc.info['pid']} {proc.info['name']}: {' '.join(proc.info['cmdline'] or [])[:160]}")
    found += [f"{pid} (Slurm)" for pid, (_, root) in cluster_processes().items() if root.startswith(str(basetemp))]
    return sorted(set(found))


def ranks_of(token: str) -> List[int]:
    """The inner suite's ranks now running (they carry a test's marker, NPLTEST_MARKER)."""
    found = []
    for proc in psutil.process_iter(["pid", "environ"]):
        env = proc.info["environ"] or {}
        if env.get("NPLTEST_SUITE") == token and "NPLTEST_MARKER" in env and "RANK_ID" in env:
            found.append(proc.info["pid"])
    return found


def terminal_state(pid: int, master: int) -> str:
    """The suite's signal masks and the terminal's foreground process group, for a failure's message."""
    status = Path(f"/proc/{pid}/status").read_text().splitlines()
    masks = " ".join(line.replace("\t", " ") for line in status if line.startswith(("SigBlk", "SigIgn", "SigCgt")))
    return f"pid {pid}, pgrp {os.getpgid(pid)}, the terminal's foreground group {os.tcgetpgrp(master)}; {masks}"


def read_until(master: int, done: Callable[[], bool], timeout_s: float, seen: List[bytes]) -> bool:
    """Read the terminal (so the suite never blocks on a full pty) until ``done()`` or the deadline."""
    deadline = time.monotonic() + timeout_s
    master_open = True
    while time.monotonic() < deadline:
        if done():
            return True
        if master_open and select.select([master], [], [], 0.2)[0]:
            try:
                seen.append(os.read(master, 65536))
            except OSError:  # the other side closed: the suite is ending (done() says when it has)
                master_open = False
        elif not master_open:
            time.sleep(0.05)
    return done()


@pytest.mark.alone  # its limit is 15 s, and its own suite is three workers with a cluster and hosts
def test_ctrl_c_stops_the_suite_within_15_s_and_leaves_nothing(tmp_path_factory) -> None:
    missing = netns_available() or slurm_available()
    require(not missing, f"what the interrupted suite's hosts and cluster need: {missing}")
    pytest.importorskip("xdist", reason="pytest-xdist (the test extra)")
    token = f"interrupt{os.getpid()}"
    basetemp = Path(tmp_path_factory.getbasetemp()).parent / f"inner-{token}"  # not under this run's: its
    # job directories are not this run's to diagnose at the end
    env = {**os.environ, "NPULAUNCH_TEST_SLOT_BASE": str(INNER_SLOT_BASE), "NPLTEST_SUITE": token}
    env.pop("PYTEST_XDIST_WORKER", None)
    argv = [
        "python3",
        "-m",
        "pytest",
        "-p",
        "no:cacheprovider",
        "-n",
        "3",
        "--basetemp",
        str(basetemp),
        *INNER_TESTS,
    ]
    pid, master = pty.fork()
    if pid == 0:  # the child: a session of its own whose controlling terminal is the pty, as in a terminal
        os.chdir(ROOT)  # a terminal's shell starts its foreground job with every signal default and unblocked
        signal.pthread_sigmask(signal.SIG_SETMASK, [])
        for signum in (signal.SIGINT, signal.SIGTERM, signal.SIGHUP, signal.SIGQUIT):
            signal.signal(signum, signal.SIG_DFL)
        os.execvpe(argv[0], argv, env)
    seen: List[bytes] = []
    slots = [str(INNER_SLOT_BASE + i) for i in range(3)]
    ended: List[int] = []

    def suite_ended() -> bool:
        if not ended and os.waitpid(pid, os.WNOHANG)[0] == pid:
            ended.append(1)
        return bool(ended)

    try:

        def everything_runs() -> bool:  # its cluster's daemons, its hosts, and a job's ranks
            cluster = any(root.startswith(str(basetemp)) for _, root in cluster_processes().values())
            return cluster and bool(netns_left(slots)) and bool(ranks_of(token))

        running = read_until(master, everything_runs, 120, seen)
        assert running, (
            "the inner suite never had its cluster, a batch job and its hosts running:\n"
            + (b"".join(seen).decode(errors="replace")[-3000:])
        )
        before = processes_of(token, basetemp)
        said = terminal_state(pid, master)
        os.write(master, b"\x03")  # Ctrl-C: the terminal sends SIGINT to the suite's foreground process group
        interrupted = time.monotonic()
        stopped = read_until(master, suite_ended, 60, seen)
        took = time.monotonic() - interrupted
        output = b"".join(seen).decode(errors="replace")
        assert stopped and took <= STOP_LIMIT_S, (
            f"the suite stopped {took:.1f} s after Ctrl-C ({said}):\n{output[-3000:]}"
        )
        assert before, "the inner suite had started nothing to leave behind"
        # what the suite started is gone by the limit too (a remote host's ranks go when their agent sees its
        # channel close, a moment after the suite's process)
        wait_until(
            lambda: not processes_of(token, basetemp) and not netns_left(slots),
            interrupted + STOP_LIMIT_S - time.monotonic(),
        )
        left = processes_of(token, basetemp)
        assert not left, f"left running {time.monotonic() - interrupted:.1f} s after Ctrl-C: {left}\n{output[-3000:]}"
        assert not netns_left(slots), f"left after Ctrl-C: {netns_left(slots)}"
    finally:
        if not suite_ended():
            os.kill(pid, signal.SIGKILL)
            os.waitpid(pid, 0)
        os.close(master)
        for entry in processes_of(token, basetemp):
            try:
                os.kill(int(entry.split()[0]), signal.SIGKILL)
            except (OSError, ValueError):
                pass
        subprocess.run(["rm", "-rf", str(basetemp)], check=False)
