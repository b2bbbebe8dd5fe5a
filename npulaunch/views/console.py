"""The launcher's terminal: ranks' lines with a short prefix, and npulaunch's own messages.

Only presentation: what is shown never changes what is logged (the per-rank log files hold every
byte). Each line shown is whole, once, with its own rank's prefix: whatever is bound for one terminal
(or pipe, or file) goes through one queue and one thread. A broken terminal turns output off, never the job.
"""

from __future__ import annotations

import atexit
import sys
import threading
from collections import deque
from typing import BinaryIO, Deque, Dict, Hashable, List, Optional, Sequence, Set, Tuple, Union

from npulaunch.config.cluster import ConsoleMode
from npulaunch.diagnose.summary import JobSummary
from npulaunch.host import timing
from npulaunch.host.events import Event
from npulaunch.host.spec import RankSpec
from npulaunch.host.tail import Block, count_lines, is_progress, split_lines
from npulaunch.views.reporttext import render_report

Buffer = Union[bytes, memoryview]
MAX_PENDING_BYTES = 8 << 20  # rank output waiting for a slow reader; beyond, it is counted, not kept
BATCH_PARTS = 1024  # buffers one writev takes at most (Linux's IOV_MAX)
WAIT_WRITABLE_MS = 1000  # a descriptor that takes nothing (non-blocking, full) is asked again this often


class _Writer:
    """One destination (a terminal, a pipe, a file), written from a thread of its own: a reader that
    is slow (``| less`` paused, a slow SSH link) never blocks the launcher's loop, so failure
    detection and teardown do not wait behind console output. Every stream bound for the
    destination shares the writer (stdout and stderr on one terminal, ``2>&1``): one queue, one
    thread, each chunk written whole before the next, so no two writes ever interleave there. Rank
    output beyond MAX_PENDING_BYTES is dropped and counted (a note says how many lines; every line is
    in the logs); npulaunch's own messages always wait their turn. A failed write (EPIPE, EIO) turns
    the destination off and points it at /dev/null."""

    def __init__(self, stream: BinaryIO) -> None:
        self.stream = stream
        self.streams = [stream]  # every stream bound here (all are silenced when it breaks)
        self.broken = False
        self._fd = raw_fd(stream)  # None: a stream without a descriptor, written through its own write()
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

    def room(self) -> int:
        """How many more bytes of rank output the queue takes before it drops them."""
        with self._cond:
            return 0 if self.broken else max(0, MAX_PENDING_BYTES - self._bytes)

    def _note(self) -> None:
        note = "npulaunch: %s lines not shown (the console's reader is slow); all are in the logs\n" % (
            format(self._dropped, ",")
        )
        self._chunks.append((note.encode(),))
        self._bytes += len(note)
        self._dropped = 0

    def _take(self) -> List[Buffer]:
        """The queued chunks' parts, as many as one writev takes (waiting for the first)."""
        with self._cond:
            while not self._chunks:
                if self._dropped:
                    self._note()
                    continue
                self._cond.wait()
            parts = list(self._chunks.popleft())
            while self._chunks and len(parts) + len(self._chunks[0]) <= BATCH_PARTS:
                parts.extend(self._chunks.popleft())
        return parts

    def _run(self) -> None:
        while True:
            parts = self._take()
            try:
                if self._fd is not None:
                    write_all(self._fd, parts)
                else:
                    self.stream.write(b"".join(parts))
                    self.stream.flush()
            except (OSError, ValueError):  # BrokenPipeError (EPIPE), EIO from a hung-up tty, a closed file
                for stream in self.streams:
                    silence(stream)
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
        if out is None or err is None:
            flush_text_streams()  # what print() left there goes first: the writers use the descriptors
        self._out = out if out is not None else sys.stdout.buffer
        self._err = err if err is not None else sys.stderr.buffer
        self._show_host = show_host
        self._writers: Dict[int, _Writer] = {}  # by id(stream), made when first written to
        self._destinations: Dict[Hashable, _Writer] = {}  # streams to one terminal, pipe or file share one
        # ranks' lines for /dev/null are not formatted at all (npulaunch run ... > /dev/null: no one reads them)
        self._discarded = {id(s) for s in (self._out, self._err) if is_devnull(s)}
        atexit.register(self.drain, timing.seconds("drain_at_exit_s"))

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
        """Show one block of a rank's lines, each line whole and with its prefix, as one chunk."""
        target = self._err if stream == "stderr" else self._out
        if not block or not self.shows(spec) or id(target) in self._discarded:
            return
        self._write(target, self.prefixed(spec, block), droppable=True, lines=block)

    def prefixed(self, spec: RankSpec, block: Block) -> Tuple[bytes, memoryview]:
        """A block as the console shows it, in two parts written as one: the prefix, and the rest
        (bytes as the rank wrote them: the prefix goes after each newline in one pass in C, never a
        Python step per line). Runs of progress updates (``\\r``) collapse to the last. A block is
        whole lines (host/tail.py); one that is not is ended here, so that its last line never
        runs into the next block's prefix."""
        prefix = self.prefix(spec)
        if b"\r" in block:
            block = collapse_progress(block)
        elif not block.endswith(b"\n"):
            block += b"\n"
        body = block.replace(b"\n", b"\n" + prefix)  # ends with a prefix, which is not written
        return prefix, memoryview(body)[: len(body) - len(prefix)]

    def message(self, text: str) -> None:
        """npulaunch's own words, on stderr so they never mix into a rank's stdout stream."""
        self._write(
            self._err,
            (b"".join(b"npulaunch: " + line.encode("utf-8", "replace") + b"\n" for line in text.splitlines() or [""]),),
        )

    def report(self, summary: JobSummary) -> None:
        """The job's report, once, when it has ended (written before this returns, unless the
        reader takes longer than drain_at_exit_s, host/timing.py)."""
        self._write(self._err, (render_report(summary).encode("utf-8", "replace"),))
        writer = self._writers.get(id(self._err))
        if writer is not None:  # the report's own stream first: a slow stdout reader cannot hold it up
            writer.drain(timing.seconds("drain_at_exit_s"))

    @property
    def broken(self) -> bool:
        """Whether a stream of the console failed (its output since then was dropped)."""
        return any(writer.broken for writer in list(self._destinations.values()))

    def drain(self, timeout_s: Optional[float] = None) -> None:
        """Wait (at most ``timeout_s`` in all: drain_at_exit_s by default) until every stream has written what
        is queued."""
        import time

        deadline = time.monotonic() + (timing.seconds("drain_at_exit_s") if timeout_s is None else timeout_s)
        for writer in list(self._destinations.values()):
            writer.drain(max(0.0, deadline - time.monotonic()))

    def _write(
        self, stream: BinaryIO, parts: Tuple[Buffer, ...], droppable: bool = False, lines: Optional[bytes] = None
    ) -> None:
        """Queue the data for the stream's writer thread. A reader that went away (``| head``) or a
        terminal that hung up turns that stream off, not the job, and not the other stream (the
        report still reaches stderr when stdout's reader is gone)."""
        self.writer(stream).put(parts, droppable, lines)

    def writer(self, stream: BinaryIO) -> _Writer:
        """The writer of the stream's destination, made when first asked for: stdout and stderr on
        one terminal (or ``2>&1``) get the same one."""
        writer = self._writers.get(id(stream))
        if writer is None:
            key = destination(stream)
            writer = self._destinations.get(key)
            if writer is None:
                writer = self._destinations[key] = _Writer(stream)
            elif stream not in writer.streams:
                writer.streams.append(stream)
            self._writers[id(stream)] = writer
        return writer


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


def write_all(fd: int, parts: Sequence[Buffer]) -> None:
    """Write every byte of ``parts`` in order, in as few ``writev`` calls as the descriptor allows (one,
    on a terminal that keeps up): a partial write (a signal during a blocked write, a full pipe) is
    finished before anything else is written, and a descriptor another process made non-blocking is
    waited on, never given up on."""
    import os
    import select

    pending = [part for part in parts if len(part)]
    while pending:
        try:
            written = os.writev(fd, pending[:BATCH_PARTS])
        except BlockingIOError:
            written = 0
        if not written:
            poller = select.poll()
            poller.register(fd, select.POLLOUT)
            poller.poll(WAIT_WRITABLE_MS)
            continue
        done = 0
        while done < len(pending) and written >= len(pending[done]):
            written -= len(pending[done])
            done += 1
        pending = pending[done:]
        if written:
            pending[0] = memoryview(pending[0])[written:]


def raw_fd(stream: BinaryIO) -> Optional[int]:
    """The stream's descriptor, once what its buffer holds is written; None for a stream without one."""
    try:
        stream.flush()
        return stream.fileno()
    except (OSError, ValueError, AttributeError):  # io.UnsupportedOperation is both
        return None


def destination(stream: BinaryIO) -> Hashable:
    """What a stream writes to: the same for two streams on one terminal (the same device, whatever
    name opened it), one pipe or one file."""
    import os
    import stat

    try:
        found = os.fstat(stream.fileno())
    except (OSError, ValueError, AttributeError):
        return ("stream", id(stream))
    if stat.S_ISCHR(found.st_mode):
        return ("device", found.st_rdev)
    return ("file", found.st_dev, found.st_ino)


def flush_text_streams() -> None:
    """Write what sys.stdout and sys.stderr hold in their buffers (lines print() left there)."""
    for text in (sys.stdout, sys.stderr):
        try:
            text.flush()
        except (OSError, ValueError, AttributeError):  # closed, or None (pythonw)
            pass


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
