"""A rank's live instance on this host: ``RankProcess``, what the agent knows of one rank's process,
and what a failed start or a reaped exit makes of it. Plain bookkeeping: it starts, signals and
reads nothing (host/agent/agent.py does). Standard library only, Python 3.7+.
"""

from __future__ import annotations

import subprocess
import time
from dataclasses import dataclass
from typing import Dict, Optional, Tuple

from npulaunch.host import procs
from npulaunch.host.errorfile import RankErrorFile
from npulaunch.host.records import RankResult, RankState
from npulaunch.host.spec import RankSpec
from npulaunch.host.tail import FileTail

SPAWN_FAILED_EXIT_CODE = 127


@dataclass
class RankProcess:
    """A rank's live instance (mutable; owned by the agent)."""

    spec: RankSpec
    state: RankState = RankState.PENDING
    pid: Optional[int] = None
    start_time: Optional[float] = None
    end_time: Optional[float] = None
    exit_code: Optional[int] = None
    signal: Optional[str] = None
    error: Optional[str] = None
    error_file: Optional[RankErrorFile] = None  # TORCHELASTIC_ERROR_FILE, cleared before the start
    raised: Optional[Dict[str, object]] = None  # what it wrote there when it failed
    tails: Tuple[FileTail, ...] = ()
    # Kept referenced until we reap it ourselves: an unreferenced Popen may be polled by the
    # subprocess module's own clean-up, which would steal the exit status from our waitpid(-1).
    popen: Optional["subprocess.Popen[bytes]"] = None

    def result(self) -> RankResult:
        return RankResult(
            rank=self.spec.rank,
            host=self.spec.host,
            device_id=self.spec.device_id,
            pid=self.pid,
            state=self.state,
            start_time=self.start_time,
            end_time=self.end_time,
            exit_code=self.exit_code,
            signal=self.signal,
            error=self.error,
            raised=self.raised,
        )

    def spawn_failed(self, error: str) -> None:
        """It could not be started (its directory, its program): it ends as ``SPAWN_FAILED``, 127."""
        self.state, self.end_time = RankState.SPAWN_FAILED, time.time()
        self.exit_code = SPAWN_FAILED_EXIT_CODE
        self.error = error

    def started(self, popen: "subprocess.Popen[bytes]") -> None:
        self.popen, self.pid, self.state = popen, popen.pid, RankState.RUNNING

    def exited(self, status: int, stopping: bool) -> None:
        """Its wait status reaped: exit code or signal name, and its end state (a rank that fails
        while the agent is stopping the job was stopped, not failed). A failed rank's error file is
        read here."""
        self.exit_code, self.signal = procs.decode_status(status)
        if self.popen is not None:
            self.popen.returncode = self.exit_code if self.signal is None else -1
        self.end_time = time.time()
        if self.exit_code == 0:
            self.state = RankState.SUCCEEDED
            return
        self.state = RankState.STOPPED if stopping else RankState.FAILED
        self.raised = self.error_file.read() if self.error_file is not None else None

    def duration_s(self) -> float:
        end = self.end_time if self.end_time is not None else time.time()
        return round(end - (self.start_time or end), 3)
