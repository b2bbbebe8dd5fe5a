"""Signals as messages: handlers only record the signal; the agent loop sleeps on a pipe that
the interpreter writes to when any signal arrives (``signal.set_wakeup_fd``), so a rank's exit
(SIGCHLD) or a Ctrl-C wakes the loop at once instead of at the next poll.

Handlers record instead of raising (as torchelastic's do) because the loop must react to
several signals in order: forward SIGUSR1, stop on the first SIGINT, kill on the second.
Standard library only, Python 3.7+; must be used from the main thread.
"""

from __future__ import annotations

import os
import select
import signal
from types import FrameType
from typing import Callable, Dict, List, Optional, Sequence, Tuple, Union

# what signal.signal returns: a Python handler, SIG_DFL / SIG_IGN (ints), or None (set outside Python)
Handler = Union[Callable[[int, Optional[FrameType]], object], int, None]

STOP_SIGNALS = (signal.SIGINT, signal.SIGTERM, signal.SIGHUP)


def stop_signals() -> Tuple[int, ...]:
    """The signals that stop the job: SIGINT, SIGTERM, and SIGHUP (a closed terminal) unless it is
    ignored when the job starts (``nohup npulaunch run``, or ``npulaunch run --nohup``): then a
    hang-up leaves the job running, as nohup promises, and the ranks inherit the ignored SIGHUP."""
    if signal.getsignal(signal.SIGHUP) is signal.SIG_IGN:
        return (signal.SIGINT, signal.SIGTERM)
    return STOP_SIGNALS


class SignalInbox:
    def __init__(self, signums: Sequence[int]) -> None:
        self._read_fd, self._write_fd = os.pipe()
        os.set_blocking(self._read_fd, False)
        os.set_blocking(self._write_fd, False)
        self._pending: List[int] = []
        self._previous: Dict[int, Handler] = {}
        self._previous_fd = signal.set_wakeup_fd(self._write_fd, warn_on_full_buffer=False)
        for signum in set(signums) | {signal.SIGCHLD}:
            self._previous[signum] = signal.signal(signum, self._record)

    def _record(self, signum: int, frame: Optional[FrameType]) -> None:
        if signum != signal.SIGCHLD:
            self._pending.append(signum)

    def wait(self, timeout_s: float, fds: Sequence[int] = ()) -> List[int]:
        """Sleep until a signal arrives, one of ``fds`` is readable, or ``timeout_s`` passes;
        return the readable ``fds``."""
        ready: List[int] = []
        if not self._pending:
            ready = select.select([self._read_fd, *fds], [], [], max(0.0, timeout_s))[0]
        try:
            while os.read(self._read_fd, 4096):
                pass
        except BlockingIOError:
            pass
        return [fd for fd in ready if fd != self._read_fd]

    def take(self) -> List[int]:
        """Signals received since the last call, oldest first (SIGCHLD is not listed)."""
        pending, self._pending = self._pending, []
        return pending

    def close(self) -> None:
        for signum, handler in self._previous.items():
            signal.signal(signum, handler if handler is not None else signal.SIG_DFL)
        signal.set_wakeup_fd(self._previous_fd)
        os.close(self._read_fd)
        os.close(self._write_fd)
