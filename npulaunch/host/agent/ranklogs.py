"""Following every rank's two logs: each block of whole lines goes to the output sink (the console,
or the channel to the launcher) and to the monitor (signatures, progress), in turns small enough
that a flood never keeps the agent's loop from reaping and acting on signals. Reads files only:
it starts and signals nothing. Standard library only, Python 3.7+.
"""

from __future__ import annotations

from typing import Callable, Iterable

from npulaunch.host.agent.monitor import Monitor
from npulaunch.host.agent.rankproc import RankProcess
from npulaunch.host.records import RankState
from npulaunch.host.spec import RankSpec
from npulaunch.host.tail import Block, FileTail

# What one loop turn reads of each log: small enough that a flood never keeps the loop from reaping
# exits and acting on signals for long (8 ranks x 2 streams x 256 KB: a turn of about 15 ms); the loop
# does not sleep while any log has more.
TURN_READ_BYTES = 256 << 10
FAST_DRAIN_BYTES = 8 << 20  # a stopped rank's unread output beyond this is drained without the console

OutputSink = Callable[[RankSpec, str, Block], None]  # a block of whole lines (host/tail.py)

STREAMS = ("stdout", "stderr")


class RankLogs:
    """Reads the ranks' logs for the agent; ``backlog`` says a log had more than one turn's read."""

    def __init__(self, output: OutputSink, monitor: Monitor) -> None:
        self._output = output
        self._monitor = monitor
        self.backlog = False  # the next loop turn does not wait

    def turn(self, ranks: Iterable[RankProcess]) -> None:
        """One loop turn's read of every rank's logs."""
        self.backlog = False
        for proc in ranks:
            self.read(proc)

    def read(self, proc: RankProcess) -> None:
        """At most one turn's read of each of this rank's logs (all of it when it fits)."""
        for tail, stream in zip(proc.tails, STREAMS):
            block = tail.read(TURN_READ_BYTES)
            if tail.last_read >= TURN_READ_BYTES:
                self.backlog = True
            if block:
                self._pass_on(proc, stream, block)

    def drain(self, proc: RankProcess) -> None:
        """Read this rank's logs to their last byte, in blocks (a rank may exit with 200 MB not yet
        read); a big backlog of a rank npulaunch stopped is drained without the console."""
        for tail, stream in zip(proc.tails, STREAMS):
            if proc.state is RankState.STOPPED and tail.unread_bytes() > FAST_DRAIN_BYTES:
                self._drain_fast(proc, tail, stream)
                continue
            for block in tail.drain():
                self._pass_on(proc, stream, block)

    def _pass_on(self, proc: RankProcess, stream: str, block: Block) -> None:
        self._output(proc.spec, stream, block)
        self._monitor.lines(proc.spec.rank, stream, block)

    def _drain_fast(self, proc: RankProcess, tail: FileTail, stream: str) -> None:
        """The backlog of a rank npulaunch stopped, when it is big (a flood): every block is still
        looked at for signatures and progress, but its lines are not shown on the console (a note
        says how many), so that the job's end does not wait for the console to take them."""
        before = self._monitor.lines_read(proc.spec.rank)
        for block in tail.drain():
            self._monitor.lines(proc.spec.rank, stream, block)  # counts its lines too: not counted twice
        skipped = self._monitor.lines_read(proc.spec.rank) - before
        if skipped:
            note = f"[npulaunch: {skipped:,} lines written before the rank stopped are not shown; all are in its log]\n"
            self._output(proc.spec, stream, note.encode())
