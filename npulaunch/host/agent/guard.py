"""The guard: a tiny process that outlives its agent only to kill the agent's ranks.

The agent starts it with a pipe on its stdin and tells it the job's uuid and each rank's process
group. If the pipe closes without ``exit`` (the agent died: crash, OOM, SIGKILL), the guard
SIGKILLs those groups and every process carrying the job's uuid, then exits. PR_SET_PDEATHSIG
already kills the ranks themselves; the guard also catches their descendants. Standard library
only, Python 3.7+; run as ``python3 -I -S -c <bootstrap>`` so it starts in milliseconds.
"""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import time
from typing import IO, Set

if __package__ in (None, ""):  # pragma: no cover - started by path
    sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))))

from npulaunch.host import procs  # noqa: E402

SWEEP_ROUNDS = 3  # a process may fork while we sweep; sweep until nothing is found


def sweep(job_uuid: str, pgids: Set[int]) -> int:
    """SIGKILL the groups and every marked process; returns how many processes were found."""
    found = 0
    for _ in range(SWEEP_ROUNDS):
        members = procs.live_members(pgids) if pgids else {}
        marked = procs.marked_processes(job_uuid) if job_uuid else []
        targets = set(members) | set(marked)
        if not targets:
            break
        found += len(targets)
        for pgid in set(members.values()):
            procs.kill_group(pgid, signal.SIGKILL)
        procs.kill_pids(targets, signal.SIGKILL)
        time.sleep(0.05)
    return found


def serve(stream: IO[str]) -> int:
    """Read orders until EOF; clean up unless told ``exit`` first."""
    job_uuid = ""
    pgids: Set[int] = set()
    for line in stream:
        word, _, arg = line.strip().partition(" ")
        if word == "uuid":
            job_uuid = arg
        elif word == "watch":
            pgids.add(int(arg))
        elif word == "forget":
            pgids.discard(int(arg))
        elif word == "exit":
            return 0
    sweep(job_uuid, pgids)
    return 0


def main() -> None:
    # The terminal's Ctrl-C and hang-up are for the agent; the guard must stay to clean up after it.
    signal.signal(signal.SIGINT, signal.SIG_IGN)
    signal.signal(signal.SIGHUP, signal.SIG_IGN)
    # no interpreter teardown: the agent's last write wakes us, and our exit should cost it nothing
    os._exit(serve(sys.stdin))


class Guard:
    """The agent's handle on its guard process."""

    def __init__(self, job_uuid: str) -> None:
        root = os.path.dirname(os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__)))))
        bootstrap = "import sys; sys.path.insert(0, %r); from npulaunch.host.agent.guard import main; main()" % root
        self._proc = subprocess.Popen(
            [sys.executable, "-I", "-S", "-c", bootstrap],
            stdin=subprocess.PIPE,
            stdout=subprocess.DEVNULL,
            start_new_session=True,
            universal_newlines=True,
            bufsize=1,
        )
        self.pid = self._proc.pid
        self._send("uuid " + job_uuid)

    def _send(self, line: str) -> None:
        try:
            assert self._proc.stdin is not None
            self._proc.stdin.write(line + "\n")
            self._proc.stdin.flush()
        except (BrokenPipeError, ValueError):  # the guard is gone; PDEATHSIG still protects ranks
            pass

    def watch(self, pgid: int) -> None:
        self._send("watch %d" % pgid)

    def forget(self, pgid: int) -> None:
        self._send("forget %d" % pgid)

    def release(self) -> None:
        """Normal end: the agent cleaned up itself; the guard exits without killing anything."""
        self._send("exit")
        try:
            assert self._proc.stdin is not None
            self._proc.stdin.close()
        except BrokenPipeError:
            pass

    def reaped(self, returncode: int) -> None:
        """The agent reaped the guard itself (it reaps every child): keep Popen consistent."""
        self._proc.returncode = returncode


if __name__ == "__main__":  # pragma: no cover
    main()
