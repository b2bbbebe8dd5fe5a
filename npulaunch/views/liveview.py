"""The live status view on a terminal: per rank its state, device, lines per second, time since
its last line, its last line, and (with a progress regex such as ``step (\\d+)/(\\d+)``) its step,
step rate and ETA, under the ranks' scrolling output. Only when stdout is a TTY; off a terminal the
plain Console prints prefixed lines. The table is views/columns.py's, as ``npulaunch status`` draws it:
each frame (the previous table erased, the lines since, the table again) is one chunk on the console's
one writer of the terminal, so frames and lines never mix and a slow terminal never blocks the loop.
"""

from __future__ import annotations

import atexit
import re
import shutil
import sys
import threading
import time
from dataclasses import dataclass
from typing import Any, List, Optional, Set, TextIO, Tuple

from npulaunch.config.cluster import ConsoleMode
from npulaunch.diagnose.summary import JobSummary
from npulaunch.host.events import Event, EventKind, signature_label
from npulaunch.host.progress import LOOK_BACK, find_step
from npulaunch.host.spec import RankSpec
from npulaunch.host.tail import Block, count_lines, tail_lines
from npulaunch.plan.launchplan import LaunchPlan
from npulaunch.views.columns import Column, fit_table
from npulaunch.views.console import MAX_PENDING_BYTES, Buffer, Console

FRAME_S = 0.1  # the view draws at most 10 frames a second, whatever the ranks print
# on a narrow terminal "last line", then "state", are cut down to their heading's width; the others never are
COLUMNS = (
    Column("rank"),
    Column("device"),
    Column("state", min_width=5, keep=1),
    Column("lines/s", right=True),
    Column("silent", right=True),
    Column("step", right=True),
    Column("ETA", right=True),
    Column("last line", min_width=9),
)
BOLD = "\x1b[1m"
LAST_LINE_CHARS = 60
ERASE_LINE, CURSOR_UP = b"\x1b[2K", b"\x1b[1A"
HIDE_CURSOR, SHOW_CURSOR = b"\x1b[?25l", b"\x1b[?25h"
RED, PLAIN = b"\x1b[31m", b"\x1b[0m"  # a rank's stderr lines
UNPRINTABLE = re.compile(r"\x1b\[[0-?]*[ -/]*[@-~]|[\x00-\x1f\x7f]")  # in a row's last line: escapes, controls


@dataclass
class RankRow:
    rank: int
    device_id: int
    state: str = "starting"
    lines: int = 0
    last_line: str = ""
    last_time: Optional[float] = None
    rate: float = 0.0  # lines per second, smoothed
    step: Optional[int] = None
    total: Optional[int] = None
    step_rate: float = 0.0  # steps per second
    first_step: Optional[tuple] = None  # (time, step) when steps were first seen


@dataclass
class _Waiting:
    """What the next frame prints above the table: rank lines (``lines`` > 0: they may be counted
    instead when the terminal is behind) and messages (always printed)."""

    parts: List[Buffer]
    size: int
    lines: int


class LiveConsole(Console):
    """A Console that keeps a status table at the bottom of the terminal."""

    def __init__(self, plan: LaunchPlan, mode: ConsoleMode = ConsoleMode.ALL, ranks: Optional[Set[int]] = None) -> None:
        super().__init__(mode, ranks=ranks)
        self._screen = self.writer(self._out)  # the terminal's one writer: frames, rank lines, messages
        self._rows = {s.rank: RankRow(s.rank, s.device_id) for s in plan.processes}
        self._step = re.compile(plan.progress_regex) if plan.progress_regex else None
        self._lock = threading.Lock()  # the launcher's own prints (_Stray) may come from any thread
        self._waiting: List[_Waiting] = []
        self._waiting_bytes = 0
        self._hidden = 0  # rank lines not kept for a frame since the last note
        self._table_lines = 0  # the table on the screen, the cursor at the end of its last line
        self._next_refresh = 0.0
        self._live_on = True
        self._streams: Tuple[TextIO, TextIO] = (sys.stdout, sys.stderr)
        sys.stdout, sys.stderr = _Stray(self, sys.stdout), _Stray(self, sys.stderr)
        self._screen.put((HIDE_CURSOR,), droppable=False)
        self._refresh(0.0, force=True)
        atexit.register(self._stop)  # runs before the console's drain (registered first)

    def rank_output(self, spec: RankSpec, stream: str, block: Block) -> None:
        """A block of a rank's lines: counted, its last lines read for the row, and shown above the
        table at the next frame (prefixed as the plain console does it, in C)."""
        if not block:
            return
        row, now = self._rows[spec.rank], time.monotonic()
        count = count_lines(block)
        if row.last_time is not None and now > row.last_time:
            row.rate = 0.7 * row.rate + 0.3 * (count / max(now - row.last_time, 0.05))
        row.lines += count
        row.last_time = now
        last = tail_lines(block, LOOK_BACK)
        row.last_line = last[-1].rstrip("\r") if last else row.last_line
        self._parse_steps(row, last, now)
        if not self._on():
            super().rank_output(spec, stream, block)
            return
        if self.shows(spec):
            prefix, body = self.prefixed(spec, block)
            self._wait([RED, prefix, body, PLAIN] if stream == "stderr" else [prefix, body], count)
        self._refresh(now)

    def _parse_steps(self, row: RankRow, lines: List[str], now: float) -> None:
        """The step (and total) from the job's progress_regex, else from the forms common training
        output takes (host/progress.py): step rate and ETA need no configuration."""
        found = find_step(lines, self._step)
        if found is None:
            return
        row.step, total = found
        if total is not None:
            row.total = total
        if row.first_step is None or row.step < row.first_step[1]:  # a new epoch restarts the count
            row.first_step = (now, row.step)
        elif now > row.first_step[0]:
            row.step_rate = (row.step - row.first_step[1]) / (now - row.first_step[0])

    def event(self, event: Event) -> None:
        row = self._rows.get(event.rank) if event.rank is not None else None
        if row is not None and event.kind is EventKind.RANK_STARTED:
            row.state = "running"
        elif row is not None and event.kind is EventKind.RANK_EXITED:
            row.state = event.data["state"] + (
                f" ({event.data['signal'] or event.data['exit_code']})" if event.data["state"] != "succeeded" else ""
            )
        elif row is not None and event.kind is EventKind.SIGNATURE_MATCHED:
            row.state += f" {signature_label(event.data)}"
        elif row is not None and event.kind is EventKind.RANK_SLOW:
            row.state = row.state.split(" SLOW ")[0]
            if event.data["state"] != "recovered":
                row.state += f" SLOW {event.data['factor']:.1f}×"
        self._refresh(time.monotonic())

    def message(self, text: str) -> None:
        """npulaunch's own words, above the table, drawn at once after the ranks' lines so far."""
        if not self._on():
            super().message(text)
            return
        self._wait([("".join("npulaunch: " + line + "\n" for line in text.splitlines() or [""])).encode()], 0)
        self._refresh(time.monotonic(), force=True)

    def stray(self, text: str, flush: bool) -> None:
        """Whole lines the launcher's own code printed (sys.stdout, sys.stderr) while the view is on."""
        if text:
            self._wait([text.encode("utf-8", "replace")], 0)
        if flush and threading.current_thread() is threading.main_thread():
            self._refresh(time.monotonic(), force=True)

    def report(self, summary: JobSummary) -> None:
        self._stop()
        super().report(summary)

    def _on(self) -> bool:
        return self._live_on and not self._screen.broken

    def _stop(self) -> None:
        """The last frame, left on the screen with the cursor under it; the standard streams back."""
        if not self._live_on:
            return
        for name, original in zip(("stdout", "stderr"), self._streams):
            proxy = getattr(sys, name)
            if isinstance(proxy, _Stray):  # (one that something else wrapped since passes writes through)
                proxy.close_view()
                setattr(sys, name, original)
        self._draw(final=True)
        self._live_on = False

    def _wait(self, parts: List[Buffer], lines: int) -> None:
        """Keep parts for the next frame; rank lines beyond MAX_PENDING_BYTES are counted instead."""
        size = sum(len(part) for part in parts)
        with self._lock:
            if lines and self._waiting_bytes + size > MAX_PENDING_BYTES:
                self._hidden += lines
                return
            self._waiting.append(_Waiting(parts, size, lines))
            self._waiting_bytes += size

    def _refresh(self, now: float, force: bool = False) -> None:
        """Draw a frame when one is due: the cost of the view follows the clock, not the lines."""
        if self._on() and (force or now >= self._next_refresh):
            self._next_refresh = now + FRAME_S
            self._draw()

    def _draw(self, final: bool = False) -> None:
        """One frame as one chunk: the table on the screen erased, the lines waiting (those the
        terminal's writer has no room for counted in a note), the table drawn again below them."""
        with self._lock:
            waiting, hidden = self._waiting, self._hidden
            self._waiting, self._waiting_bytes, self._hidden = [], 0, 0
        frame: List[Buffer] = [erase_lines(self._table_lines)]
        room = self._screen.room()
        for item in waiting:
            if item.lines and item.size > room:  # the terminal is behind: counted, not kept
                hidden += item.lines
                continue
            room -= item.size
            frame.extend(item.parts)
        if hidden:
            note = f"npulaunch: {hidden:,} lines not shown (the terminal cannot keep up); all are in the rank logs\n"
            frame.append(note.encode())
        table, self._table_lines = self._render(cut=not final)
        frame.append(table)
        if final:
            frame.append(b"\n" + SHOW_CURSOR)
            self._table_lines = 0
        self._screen.put(tuple(frame), droppable=False)

    def _render(self, cut: bool = True) -> Tuple[bytes, int]:
        """The table as the terminal shows it (no newline after its last line), and its height: as
        wide as the terminal at most, and (``cut``) shorter than it: a line scrolled off cannot be
        erased for the next frame. The last frame is not erased: it is shown whole."""
        width, height = shutil.get_terminal_size()
        lines = self._table(width)
        if cut and len(lines) >= height > 2:
            lines = lines[: height - 2] + [f"... {len(lines) - (height - 2)} more rows (npulaunch status shows all)"]
        return "\n".join(lines).encode("utf-8", "replace"), len(lines)

    def _table(self, width: int) -> List[str]:
        """The table's lines (its heading in bold), at most ``width`` wide where the columns allow it."""
        now = time.monotonic()
        lines = fit_table(COLUMNS, [self._cells(row, now) for row in self._rows.values()], width)
        return [BOLD + lines[0] + PLAIN.decode()] + lines[1:]

    @staticmethod
    def _cells(row: RankRow, now: float) -> Tuple[str, ...]:
        step = "-" if row.step is None else (f"{row.step}/{row.total}" if row.total else str(row.step))
        eta = "-"
        if row.total and row.step_rate > 0:
            eta = f"{max(0.0, (row.total - (row.step or 0)) / row.step_rate):.0f}s"
        return (
            str(row.rank) if row.rank >= 0 else "sched",
            str(row.device_id) if row.rank >= 0 else "-",
            row.state,
            f"{row.rate:.0f}",
            f"{now - row.last_time:.0f}s" if row.last_time is not None else "-",
            step,
            eta,
            UNPRINTABLE.sub("", row.last_line)[:LAST_LINE_CHARS],
        )


def erase_lines(count: int) -> bytes:
    """From the end of the last of ``count`` lines on the screen, erase them, leaving the cursor at
    the start of the first."""
    if not count:
        return b""
    return b"\r" + ERASE_LINE + (CURSOR_UP + ERASE_LINE) * (count - 1)


class _Stray:
    """sys.stdout or sys.stderr while the view is drawn: what the launcher's own code prints there
    (a warning, a traceback) is shown above the table, a line at a time, instead of across it."""

    def __init__(self, view: LiveConsole, original: TextIO) -> None:
        self._view: Optional[LiveConsole] = view
        self._original = original
        self._partial = ""

    def write(self, text: str) -> int:
        if self._view is None:
            return self._original.write(text)
        whole, newline, self._partial = (self._partial + text).rpartition("\n")
        if newline:
            self._view.stray(whole + newline, flush=False)
        return len(text)

    def flush(self) -> None:
        if self._view is None:
            self._original.flush()
        else:
            self._view.stray("", flush=True)

    def close_view(self) -> None:
        """The view ends: an unfinished line is shown, and what comes later goes to the stream."""
        if self._view is not None and self._partial:
            self._view.stray(self._partial + "\n", flush=False)
        self._view, self._partial = None, ""

    def __getattr__(self, name: str) -> Any:  # isatty, fileno, encoding, buffer, ...
        return getattr(self._original, name)
