"""The launcher's terminal: ranks' lines with a short prefix, and npulaunch's own messages.

Only presentation: what is shown never changes what is logged (the per-rank log files hold every
byte). A closed or broken terminal turns console output off instead of stopping the job.
"""

from __future__ import annotations

import sys
from typing import BinaryIO, List, Optional, Set

from npulaunch.config.cluster import ConsoleMode
from npulaunch.diagnose.summary import JobSummary
from npulaunch.host.agent.tail import Line, is_progress
from npulaunch.host.events import Event
from npulaunch.host.spec import RankSpec
from npulaunch.views.reporttext import render_report


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
        self._broken: Set[int] = set()  # the streams that failed (a closed pipe, a hung-up terminal)

    def prefix(self, spec: RankSpec) -> bytes:
        label = f"{spec.host} {spec.label}" if self._show_host else spec.label
        return f"[{label}] ".encode()

    def shows(self, spec: RankSpec) -> bool:
        if self.mode is ConsoleMode.NONE or (self.mode is ConsoleMode.RANK0 and spec.rank != 0):
            return False
        return self.ranks is None or spec.rank in self.ranks

    def event(self, event: Event) -> None:
        """Events, for consoles that show state (the live view); the plain console ignores them."""

    def rank_output(self, spec: RankSpec, stream: str, lines: List[Line]) -> None:
        """Show one batch of a rank's lines; runs of progress updates (``\\r``) collapse to the last."""
        if not self.shows(spec):
            return
        prefix = self.prefix(spec).decode()
        body = "\n".join(lines)  # one pass in C per batch, not a Python step per line
        if "\r" in body:  # progress lines (they end with \r): a run of them shows as its last
            lines = [
                line.rstrip("\r")
                for i, line in enumerate(lines)
                if not (is_progress(line) and i + 1 < len(lines) and is_progress(lines[i + 1]))
            ]
            body = "\n".join(lines)
        data = (prefix + body.replace("\n", "\n" + prefix) + "\n").encode("utf-8", "replace")
        self._write(self._err if stream == "stderr" else self._out, data)

    def message(self, text: str) -> None:
        """npulaunch's own words, on stderr so they never mix into a rank's stdout stream."""
        self._write(
            self._err,
            b"".join(b"npulaunch: " + line.encode("utf-8", "replace") + b"\n" for line in text.splitlines() or [""]),
        )

    def report(self, summary: JobSummary) -> None:
        """The job's report, once, when it has ended."""
        self._write(self._err, render_report(summary).encode("utf-8", "replace"))

    @property
    def broken(self) -> bool:
        """Whether a stream of the console failed (its output since then was dropped)."""
        return bool(self._broken)

    def _write(self, stream: BinaryIO, data: bytes) -> None:
        """Write, or drop the data when the stream failed before: a reader that went away
        (``| head``) or a terminal that hung up turns that stream off, not the job, and not the
        other stream (the report still reaches stderr when stdout's reader is gone)."""
        if id(stream) in self._broken:
            return
        try:
            stream.write(data)
            stream.flush()
        except (OSError, ValueError):  # BrokenPipeError (EPIPE), EIO from a hung-up tty, a closed file
            self._broken.add(id(stream))
            silence(stream)


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
