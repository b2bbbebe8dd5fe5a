"""What the agent watches besides exits: CANN's error messages and known failure phrases in every
rank's output and plogs (host/cann/scan.py), and progress for the hang watchdog. It reports through
the agent's event callback and decides nothing about the job (the supervisor does). Standard
library only, Python 3.7+.
"""

from __future__ import annotations

import glob
import os
import re
import time
from typing import Callable, Dict, Hashable, Optional, Set, Tuple, cast

from npulaunch.host import timing
from npulaunch.host.agent.paces import Paces
from npulaunch.host.cann.findings import Finding
from npulaunch.host.cann.prefilter import SIGNATURES, user_signatures
from npulaunch.host.cann.scan import Scanner
from npulaunch.host.events import EventKind
from npulaunch.host.progress import LOOK_BACK, Step, find_step
from npulaunch.host.session import HEARTBEAT_FILE
from npulaunch.host.spec import HELPER_RANK, HostPlan
from npulaunch.host.tail import Block, FileTail, count_lines, split_lines, tail_lines
from npulaunch.host.watchdog import HangLimits, Progress, describe, find_hangs, next_check_in

CONTEXT_BEFORE = 8  # lines before a finding's line kept for the report's excerpt

Emit = Callable[..., None]  # emit(kind, rank=None, **data)


class Monitor:
    def __init__(self, plan: HostPlan, emit: Emit, clock: Callable[[], float]) -> None:
        self._emit = emit
        self._clock = clock
        self._scanner = Scanner(SIGNATURES + tuple(user_signatures(plan.patterns)), clock)
        self._streams: Dict[int, Set[Tuple[int, str, bool]]] = {}  # each rank's streams read so far
        self._limits = HangLimits(plan.hang_startup_s, plan.hang_steady_s)
        self.progress: Dict[int, Progress] = {}
        self._reported: Set[Tuple[int, str]] = set()  # (rank, finding's name): the first of each
        self._plog_dirs = {spec.rank: os.path.join(spec.plog_dir, "plog") for spec in plan.ranks}
        self._plog_tails: Dict[str, Tuple[int, FileTail]] = {}
        self._next_scan = 0.0
        self.hung = False
        self._progress_re = re.compile(plan.progress_regex, re.MULTILINE) if plan.progress_regex else None
        # steps: the job's regex when it captures one, else the common forms (host/progress.py)
        self._step_re = self._progress_re if self._progress_re is not None and self._progress_re.groups else None
        self._lines: Dict[int, int] = {}
        self._steps: Dict[int, Step] = {}
        self._sampled: Dict[int, Tuple[int, Optional[Step]]] = {}
        self._next_sample: Dict[int, float] = {}
        world_size = plan.ranks[0].world_size if plan.ranks else 1
        self._sample_every = timing.seconds("progress_sample_s") * max(1, world_size // 64)
        self._heartbeats = {spec.rank: os.path.join(spec.rank_dir, HEARTBEAT_FILE) for spec in plan.ranks}
        self._beats: Dict[int, float] = {}
        self.paces = Paces(plan, emit, clock)

    # -- fed by the agent ----------------------------------------------------------------------

    def started(self, rank: int) -> None:
        if rank == HELPER_RANK:  # a framework's scheduler may wait in silence while the ranks work
            return
        self.progress[rank] = Progress(started=self._clock())

    def exited(self, rank: int, died: bool = False) -> None:
        """The rank ended (``died``: it failed on its own): its streams' open messages are complete, and a failed
        rank's last coded lines are a finding even when no line said it failed (torch_npu's "NPU warning, error
        code is N" before the process died: host/cann/messages.py)."""
        self.progress.pop(rank, None)
        if died:
            mine = self._streams.get(rank, set())
            for key, finding in self._scanner.flush_all(lambda key: True, only=lambda key: key in mine):
                self._report(key, finding)
        if rank in self._lines and self._sampled.get(rank) != (self._lines[rank], self._steps.get(rank)):
            self._sample(rank, last=True)  # where it got to, for the report's timeline

    def _sample(self, rank: int, first: bool = False, last: bool = False) -> None:
        """A PROGRESS event: the rank's lines so far and its latest step, for the report's timeline
        (its first line, then every progress_sample_s (host/timing.py) x the job's size / 64, so that a big
        job stays cheap)."""
        step = self._steps.get(rank)
        self._sampled[rank] = (self._lines[rank], step)
        self._next_sample[rank] = self._clock() + self._sample_every
        data = {"lines": self._lines[rank], "step": step[0] if step else None, "total": step[1] if step else None}
        if first:
            data["first"] = True
        if last:
            data["last"] = True
        self._emit(EventKind.PROGRESS, rank, **data)

    def lines(self, rank: int, stream: str, block: Block) -> None:
        """A block of a rank's output (whole lines): progress, and the findings it completes. Looked at
        whole: its lines are counted, its last ones read for a step, and it is cut into lines only when
        it may hold a code or a failure phrase, or a message is open (host/cann/scan.py)."""
        if not block:
            return
        first = rank not in self._lines
        self._lines[rank] = self._lines.get(rank, 0) + count_lines(block)
        step = find_step(tail_lines(block, LOOK_BACK), self._step_re)
        if step is not None:
            self._steps[rank] = step
        if first or self._clock() >= self._next_sample.get(rank, 0.0):
            self._sample(rank, first=first)
        seen = self.progress.get(rank)
        if seen is not None and (self._progress_re is None or self._shows_progress(block)):
            seen.saw(self._clock())
        self._match(rank, stream, block, plog=False)

    def lines_read(self, rank: int) -> int:
        """How many lines of the rank's output (both streams) have been looked at."""
        return self._lines.get(rank, 0)

    def _shows_progress(self, block: Block) -> bool:
        """Whether a line of the block matches the job's progress_regex (searched in the whole block
        at once; a match that spans lines is checked again line by line)."""
        assert self._progress_re is not None
        text = block.decode("utf-8", "replace")
        match = self._progress_re.search(text)
        if match is None or "\n" not in match.group() and "\r" not in match.group():
            return match is not None
        return any(self._progress_re.search(line.rstrip("\r")) for line in split_lines(block))

    def timeout_s(self) -> Optional[float]:
        """How long the agent may sleep before the next check."""
        waits = [
            w
            for w in (
                next_check_in(self.progress, self._clock(), self._limits),
                max(0.0, self._next_scan - self._clock()),
                self._scanner.due_s(),
                self.paces.due_s(),
            )
            if w is not None
        ]
        return min(waits) if waits else None

    def poll(self) -> None:
        """Look at plogs (new files, new lines) and for hangs."""
        now = self._clock()
        if now >= self._next_scan:
            self._next_scan = now + timing.seconds("plog_scan_s")
            self._scan_plogs()
        self._read_plogs()
        for key, finding in self._scanner.flush_quiet():
            self._report(key, finding)
        self._read_heartbeats()
        self.paces.poll()
        if not self.hung:
            hangs = find_hangs(self.progress, now, self._limits)
            if hangs:
                self.hung = True
                self._emit(EventKind.HANG_DETECTED, None, **describe(hangs, len(self.progress)))

    def close(self) -> None:
        self.paces.close()
        self._scan_plogs()
        for path, (rank, tail) in sorted(self._plog_tails.items()):
            for block in tail.drain():
                self._match(rank, os.path.basename(path), block, plog=True)
        self._plog_tails.clear()
        for key, finding in self._scanner.flush_all():
            self._report(key, finding)

    # -- internals -----------------------------------------------------------------------------------

    def _read_heartbeats(self) -> None:
        for rank, seen in self.progress.items():
            try:
                beat = os.stat(self._heartbeats[rank]).st_mtime
            except OSError:
                continue
            if beat != self._beats.get(rank):
                self._beats[rank] = beat
                seen.saw(self._clock())

    def _scan_plogs(self) -> None:
        for rank, directory in self._plog_dirs.items():
            for path in glob.glob(os.path.join(directory, "plog-*.log")):
                if path not in self._plog_tails:
                    self._plog_tails[path] = (rank, FileTail(path))

    def _read_plogs(self) -> None:
        for path, (rank, tail) in self._plog_tails.items():
            block = tail.read()
            if block:
                self._match(rank, os.path.basename(path), block, plog=True)

    def _match(self, rank: int, stream: str, block: Block, plog: bool) -> None:
        key = (rank, stream, plog)
        self._streams.setdefault(rank, set()).add(key)
        for finding in self._scanner.block(key, block, plog):
            self._report(key, finding)

    def _report(self, key: Hashable, finding: Finding) -> None:
        rank, stream, plog = cast(Tuple[int, str, bool], key)
        if (rank, finding.name) in self._reported:
            return
        self._reported.add((rank, finding.name))
        info = finding.info
        self._emit(
            EventKind.SIGNATURE_MATCHED,
            rank,
            signature=finding.name,
            code=finding.code,
            codes=list(finding.codes),
            cls=finding.cls,
            signature_kind=finding.kind,
            retryable=finding.retryable,
            retryable_why=finding.retryable_why,
            fatal=finding.fatal,
            hint=finding.hint,
            detail=finding.detail,
            code_info=info.summary() if info is not None else None,
            line=finding.line,
            context=list(finding.before[-CONTEXT_BEFORE:]),
            after=list(finding.after),
            source="plog" if plog else stream,
            stream=stream,
            # a plog is read once a second: its own time stamps say when; output is read as it comes
            line_time=finding.time if plog and finding.time is not None else time.time(),
            line_time_source="plog timestamp" if plog and finding.time is not None else "read time",
        )
