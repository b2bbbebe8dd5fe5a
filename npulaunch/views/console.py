"""The launcher's terminal: ranks' lines with a short prefix, and npulaunch's own messages.

Only presentation: what is shown never changes what is logged (the per-rank log files hold every
byte). A closed or broken terminal turns console output off instead of stopping the job.
"""

from __future__ import annotations

import atexit
import sys
import threading
from collections import deque
from typing import BinaryIO, Deque, Dict, Optional, Set, Tuple, Union

from npulaunch.config.cluster import ConsoleMode
from npulaunch.diagnose.summary import JobSummary
from npulaunch.host.events import Event
from npulaunch.host.spec import RankSpec
from npulaunch.host.tail import Block, count_lines, is_progress, split_lines
from npulaunch.views.reporttext import render_report

Buffer = Union[bytes, memoryview]
MAX_PENDING_BYTES = 8 << 20  # rank output waiting for a slow reader; beyond, it is counted, not kept
DRAIN_AT_EXIT_S = 10.0  # how long the launcher waits at exit for a slow reader to take what is left


class _Writer:
    """One standard stream, written from a thread of its own: a reader that is slow (``| less``
    paused, a slow SSH link) never blocks the launcher's loop, so failure detection and teardown do
    not wait behind console output. Rank output beyond MAX_PENDING_BYTES is dropped and counted (a
    note says how many lines; every line is in the logs); npulaunch's own messages always wait
    their turn. A failed write (EPIPE, EIO) turns the stream off and points it at /dev/null."""

    def __init__(self, stream: BinaryIO) -> None:
        self.stream = stream
        self.broken = False
        self._chunks: Deque[Tuple[Buffer, ...]] = deque()
        self._bytes = 0
        self._dropped = 0  # rank lines not kept since the last note
        self._cond = threading.Condition()
        self._thread = threading.Thread(target=self._run, name="npulaunch-console", daemon=True)
        self._thread.start()

    def put(self, parts: Tuple[Buffer, ...], droppable: bool, lines: Optional[bytes] = None) -> None:
        """Queue the parts, to be written in one go; ``lines``: what a dropped chunk's lines are
        counted in (its parts may be views)."""
        size = sum(len(part) for part in parts)
        with self._cond:
            if self.broken:
                return
            if droppable and self._bytes + size > MAX_PENDING_BYTES:
                self._dropped += count_lines(lines if lines is not None else b"".join(parts))
                return
            if self._dropped and not droppable:
                self._note()
            self._chunks.append(parts)
            self._bytes += size
            self._cond.notify()

    def _note(self) -> None:
        note = "npulaunch: %s lines not shown (the console's reader is slow); all are in the logs\n" % (
            format(self._dropped, ",")
        )
        self._chunks.append((note.encode(),))
        self._bytes += len(note)
        self._dropped = 0

    def _run(self) -> None:
        while True:
            with self._cond:
                while not self._chunks:
                    if self._dropped:
                        self._note()
                        continue
                    self._cond.wait()
                parts = self._chunks.popleft()
            try:
                for part in parts:
                    self.stream.write(part)
                self.stream.flush()
            except (OSError, ValueError):  # BrokenPipeError (EPIPE), EIO from a hung-up tty, a closed file
                silence(self.stream)
                with self._cond:
                    self.broken = True
                    self._chunks.clear()
                    self._bytes = 0
                    self._cond.notify_all()
                return
            with self._cond:
                self._bytes -= sum(len(part) for part in parts)
                self._cond.notify_all()

    def drain(self, timeout_s: float) -> bool:
        """Wait until everything queued is written (or the stream broke); False after ``timeout_s``."""
        with self._cond:
            return self._cond.wait_for(lambda: self.broken or (not self._chunks and not self._bytes), timeout_s)


class Console:
    def __init__(
        self,
        mode: ConsoleMode = ConsoleMode.ALL,
        out: Optional[BinaryIO] = None,
        err: Optional[BinaryIO] = None,
        show_host: bool = False,
        ranks: Optional[Set[int]] = None,
    ) -> None:
        self.mode = mode
        self.ranks = ranks  # --ranks: only these ranks' output on the terminal (files get every rank)
        self._out = out if out is not None else sys.stdout.buffer
        self._err = err if err is not None else sys.stderr.buffer
        self._show_host = show_host
        self._writers: Dict[int, _Writer] = {}  # by id(stream), made when first written to
        # ranks' lines for /dev/null are not formatted at all (npulaunch run ... > /dev/null: no one reads them)
        self._discarded = {id(s) for s in (self._out, self._err) if is_devnull(s)}
        atexit.register(self.drain, DRAIN_AT_EXIT_S)

    def prefix(self, spec: RankSpec) -> bytes:
        label = f"{spec.host} {spec.label}" if self._show_host else spec.label
        return f"[{label}] ".encode()

    def shows(self, spec: RankSpec) -> bool:
        if self.mode is ConsoleMode.NONE or (self.mode is ConsoleMode.RANK0 and spec.rank != 0):
            return False
        return self.ranks is None or spec.rank in self.ranks

    def event(self, event: Event) -> None:
        """Events, for consoles that show state (the live view); the plain console ignores them."""

    def rank_output(self, spec: RankSpec, stream: str, block: Block) -> None:
        """Show one block of a rank's lines (bytes as the rank wrote them: the prefix goes after each
        newline in one pass in C, never a Python step per line); runs of progress updates (``\\r``)
        collapse to the last."""
        target = self._err if stream == "stderr" else self._out
        if not block or not self.shows(spec) or id(target) in self._discarded:
            return
        prefix = self.prefix(spec)
        if b"\r" in block:
            block = collapse_progress(block)
        body = block.replace(b"\n", b"\n" + prefix)  # ends with a prefix, which is not written
        self._write(
            target,
            (prefix, memoryview(body)[: len(body) - len(prefix)]),
            droppable=True,
            lines=block,
        )

    def message(self, text: str) -> None:
        """npulaunch's own words, on stderr so they never mix into a rank's stdout stream."""
        self._write(
            self._err,
            (b"".join(b"npulaunch: " + line.encode("utf-8", "replace") + b"\n" for line in text.splitlines() or [""]),),
        )

    def report(self, summary: JobSummary) -> None:
        """The job's report, once, when it has ended (written before this returns, unless the
        reader takes longer than DRAIN_AT_EXIT_S)."""
        self._write(self._err, (render_report(summary).encode("utf-8", "replace"),))
        writer = self._writers.get(id(self._err))
        if writer is not None:  # the report's own stream first: a slow stdout reader cannot hold it up
            writer.drain(DRAIN_AT_EXIT_S)

    @property
    def broken(self) -> bool:
        """Whether a stream of the console failed (its output since then was dropped)."""
        return any(writer.broken for writer in self._writers.values())

    def drain(self, timeout_s: float = DRAIN_AT_EXIT_S) -> None:
        """Wait (at most ``timeout_s`` in all) until every stream has written what is queued."""
        import time

        deadline = time.monotonic() + timeout_s
        for writer in list(self._writers.values()):
            writer.drain(max(0.0, deadline - time.monotonic()))

    def _write(
        self, stream: BinaryIO, parts: Tuple[Buffer, ...], droppable: bool = False, lines: Optional[bytes] = None
    ) -> None:
        """Queue the data for the stream's writer thread. A reader that went away (``| head``) or a
        terminal that hung up turns that stream off, not the job, and not the other stream (the
        report still reaches stderr when stdout's reader is gone)."""
        writer = self._writers.get(id(stream))
        if writer is None:
            writer = self._writers[id(stream)] = _Writer(stream)
        writer.put(parts, droppable, lines)


def collapse_progress(block: Block) -> Block:
    """A block with progress updates (lines ended by a bare ``\\r``) as the console shows it: a run of
    updates as its last, every line ended by ``\\n``."""
    lines = split_lines(block)
    shown = [
        line.rstrip("\r")
        for i, line in enumerate(lines)
        if not (is_progress(line) and i + 1 < len(lines) and is_progress(lines[i + 1]))
    ]
    return "".join(line + "\n" for line in shown).encode("utf-8", "surrogateescape")


def is_devnull(stream: BinaryIO) -> bool:
    """Whether the stream writes to /dev/null (the same character device)."""
    import os
    import stat

    try:
        mode = os.fstat(stream.fileno())
        null = os.stat(os.devnull)
    except (OSError, ValueError, AttributeError):
        return False
    return stat.S_ISCHR(mode.st_mode) and mode.st_rdev == null.st_rdev


def silence(stream: BinaryIO) -> None:
    """Point a failed standard stream's descriptor at /dev/null, so that nothing written later (the
    interpreter's own flush at exit included) fails again or prints a traceback."""
    try:
        fd = stream.fileno()
    except (OSError, ValueError, AttributeError):
        return
    if fd in (1, 2):
        silence_fd(fd)


def silence_fd(fd: int) -> None:
    import os

    try:
        null = os.open(os.devnull, os.O_WRONLY)
    except OSError:
        return
    os.dup2(null, fd)
    os.close(null)
