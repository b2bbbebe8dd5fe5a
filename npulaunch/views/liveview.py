"""The live status view on a terminal: per rank its state, device, lines per second, time since
its last line, its last line, and (with a progress regex such as ``step (\\d+)/(\\d+)``) its step,
step rate and ETA, under the ranks' scrolling output. Only when stdout is a TTY; off a terminal the
plain Console prints prefixed lines. rich is imported here only.
"""

from __future__ import annotations

import re
import time
from dataclasses import dataclass
from typing import Callable, Dict, List, Optional, Set, Tuple

from rich.console import Console as RichConsole
from rich.live import Live
from rich.table import Table
from rich.text import Text

from npulaunch.config.cluster import ConsoleMode
from npulaunch.diagnose.summary import JobSummary
from npulaunch.host.events import Event, EventKind, signature_label
from npulaunch.host.progress import LOOK_BACK, find_step
from npulaunch.host.spec import RankSpec
from npulaunch.host.tail import Block, count_lines, split_lines, tail_lines
from npulaunch.plan.launchplan import LaunchPlan
from npulaunch.views.console import Console, silence_fd

FRAME_S = 0.1  # the view draws at most 10 frames a second, whatever the ranks print
FRAME_LINES = 300  # rank lines shown per frame at most; the rest are counted (all are in the logs)


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


class LiveConsole(Console):
    """A Console that keeps a status table at the bottom of the terminal."""

    def __init__(
        self,
        plan: LaunchPlan,
        mode: ConsoleMode = ConsoleMode.ALL,
        ranks: Optional[Set[int]] = None,
        rich_console: Optional[RichConsole] = None,
    ) -> None:
        super().__init__(mode, ranks=ranks)
        self._rich = rich_console or RichConsole(highlight=False, soft_wrap=True)
        self._rows: Dict[int, RankRow] = {s.rank: RankRow(s.rank, s.device_id) for s in plan.processes}
        self._step = re.compile(plan.progress_regex) if plan.progress_regex else None
        # the table is built when drawn (_Current), so a frame that prints rank lines draws it once, with them
        self._live = Live(_Current(self._table), console=self._rich, auto_refresh=False, transient=False)
        self._live_on = True
        self._guarded(self._live.start)
        self._next_refresh = 0.0
        self._frame: List[Tuple[str, str]] = []  # (line, style): rank lines waiting for the next frame
        self._hidden = 0  # rank lines a frame had no room for since the last note

    def _guarded(self, action: Callable[[], object]) -> None:
        """Run one terminal operation of the view; a terminal that hung up or a stream that broke
        turns the view off for good (the plain console then handles what is left: it drops what it
        cannot write), never the launcher."""
        if not self._live_on:
            return
        try:
            action()
        except (OSError, ValueError):
            self._live_on = False
            try:
                self._live.stop()
            except (OSError, ValueError):
                pass
            silence_fd(1)  # the view writes to stdout

    def rank_output(self, spec: RankSpec, stream: str, block: Block) -> None:
        """A block of a rank's lines: counted, its last lines read for the row, and only as many of
        them decoded as the next frame has room for."""
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
        if not self._live_on:
            super().rank_output(spec, stream, block)
            return
        if self.shows(spec):
            room = max(0, FRAME_LINES - len(self._frame))
            style = "red" if stream == "stderr" else ""
            prefix = f"[{spec.label}] "
            if count > room:  # decode only the lines that fit: a flood costs a split of `room` lines
                block = b"\n".join(block.split(b"\n", room)[:room]) + b"\n" if room else b""
            shown = split_lines(block)[:room]
            self._frame.extend((prefix + line.rstrip("\r"), style) for line in shown)
            self._hidden += max(0, count - len(shown))
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
        self._refresh(time.monotonic())

    def message(self, text: str) -> None:
        if not self._live_on:
            super().message(text)
            return
        self._flush_frame()  # the ranks' lines so far come first
        shown = Text("\n".join("npulaunch: " + line for line in text.splitlines()))
        self._guarded(lambda: self._live.console.print(shown))

    def report(self, summary: JobSummary) -> None:
        self._refresh(0, force=True)
        self._guarded(self._live.stop)
        self._live_on = False
        super().report(summary)

    def _refresh(self, now: float, force: bool = False) -> None:
        """Draw a frame (the lines gathered since the last one, then the table) when one is due:
        the cost of the view follows the clock, not the number of lines."""
        if self._live_on and (force or now >= self._next_refresh):
            self._next_refresh = now + FRAME_S
            if not self._flush_frame():  # printing the lines drew the table below them
                self._guarded(self._live.refresh)

    def _flush_frame(self) -> bool:
        """Print the rank lines gathered for this frame (the live table is drawn again below them);
        False when there were none."""
        if not self._frame and not self._hidden:
            return False
        text = Text()
        for index, (line, style) in enumerate(self._frame):
            text.append(line if index == 0 else "\n" + line, style=style)
        if self._hidden:
            note = (
                f"npulaunch: {self._hidden:,} lines not shown (the terminal cannot keep up); all are in the rank logs"
            )
            text.append(("\n" if self._frame else "") + note, style="dim")
        self._frame, self._hidden = [], 0
        self._guarded(lambda: self._live.console.print(text, soft_wrap=True))
        return True

    def _table(self) -> Table:
        now = time.monotonic()
        table = Table(box=None, pad_edge=False, header_style="bold")
        for column in ("rank", "device", "state", "lines/s", "silent", "step", "ETA", "last line"):
            table.add_column(column, no_wrap=True, overflow="ellipsis", max_width=60 if column == "last line" else None)
        for row in self._rows.values():
            silent = f"{now - row.last_time:.0f}s" if row.last_time is not None else "-"
            step = "-" if row.step is None else (f"{row.step}/{row.total}" if row.total else str(row.step))
            eta = "-"
            if row.total and row.step_rate > 0:
                eta = f"{max(0.0, (row.total - (row.step or 0)) / row.step_rate):.0f}s"
            table.add_row(
                str(row.rank) if row.rank >= 0 else "sched",
                str(row.device_id) if row.rank >= 0 else "-",
                row.state,
                f"{row.rate:.0f}",
                silent,
                step,
                eta,
                row.last_line[:60],
            )
        return table


class _Current:
    """What the live display shows: the status table as it is when drawn."""

    def __init__(self, build: Callable[[], Table]) -> None:
        self._build = build

    def __rich__(self) -> Table:
        return self._build()
