"""What the agent watches besides exits: error signatures in every rank's output and plogs, and
progress for the hang watchdog. It reports through the agent's event callback and decides
nothing about the job (the supervisor does). Standard library only, Python 3.7+.
"""

from __future__ import annotations

import collections
import glob
import os
import re
import time
from typing import Callable, Deque, Dict, List, Optional, Set, Tuple

from npulaunch.host.agent.tail import Block, FileTail, count_lines, split_lines, tail_lines
from npulaunch.host.events import EventKind
from npulaunch.host.progress import LOOK_BACK, Step, find_step
from npulaunch.host.session import HEARTBEAT_FILE
from npulaunch.host.signatures import (
    SIGNATURES,
    Matcher,
    Signature,
    parse_plog_time,
    user_signatures,
)
from npulaunch.host.spec import HostPlan
from npulaunch.host.watchdog import HangLimits, Progress, describe, find_hangs, next_check_in

CONTEXT_LINES = 5  # lines kept before a match, for the report's excerpt
PLOG_SCAN_INTERVAL_S = 1.0  # how often new plog files are looked for
SAMPLE_EVERY_S = 30.0  # a PROGRESS event per rank this often (times the job's size / 64)

Emit = Callable[..., None]  # emit(kind, rank=None, **data)


class Monitor:
    def __init__(self, plan: HostPlan, emit: Emit, clock: Callable[[], float]) -> None:
        self._emit = emit
        self._clock = clock
        self._matcher = Matcher(SIGNATURES + tuple(user_signatures(plan.patterns)))
        self._limits = HangLimits(plan.hang_startup_s, plan.hang_steady_s)
        self.progress: Dict[int, Progress] = {}
        self._reported: Set[Tuple[int, str]] = set()  # (rank, signature): the first match of each
        self._context: Dict[Tuple[int, str], Deque[str]] = {}
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
        self._sample_every = SAMPLE_EVERY_S * max(1, world_size // 64)
        self._heartbeats = {spec.rank: os.path.join(spec.rank_dir, HEARTBEAT_FILE) for spec in plan.ranks}
        self._beats: Dict[int, float] = {}

    # -- fed by the agent ----------------------------------------------------------------------

    def started(self, rank: int) -> None:
        self.progress[rank] = Progress(started=self._clock())

    def exited(self, rank: int) -> None:
        self.progress.pop(rank, None)
        if rank in self._lines and self._sampled.get(rank) != (self._lines[rank], self._steps.get(rank)):
            self._sample(rank, last=True)  # where it got to, for the report's timeline

    def _sample(self, rank: int, first: bool = False, last: bool = False) -> None:
        """A PROGRESS event: the rank's lines so far and its latest step, for the report's timeline
        (its first line, then every SAMPLE_EVERY_S x the job's size / 64, so a big job stays cheap)."""
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
        """A block of a rank's output (whole lines): progress, and the signatures it carries. Looked
        at whole: its lines are counted, its last ones read for a step, and it is cut into lines only
        when a signature's needle is in it (host/signatures.py)."""
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
            )
            if w is not None
        ]
        return min(waits) if waits else None

    def poll(self) -> None:
        """Look at plogs (new files, new lines) and for hangs."""
        now = self._clock()
        if now >= self._next_scan:
            self._next_scan = now + PLOG_SCAN_INTERVAL_S
            self._scan_plogs()
        self._read_plogs()
        self._read_heartbeats()
        if not self.hung:
            hangs = find_hangs(self.progress, now, self._limits)
            if hangs:
                self.hung = True
                self._emit(EventKind.HANG_DETECTED, None, **describe(hangs, len(self.progress)))

    def close(self) -> None:
        self._scan_plogs()
        for path, (rank, tail) in sorted(self._plog_tails.items()):
            for block in tail.drain():
                self._match(rank, os.path.basename(path), block, plog=True)
        self._plog_tails.clear()

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
        context = self._context.setdefault((rank, stream), collections.deque(maxlen=CONTEXT_LINES))
        texts, found = self._matcher.scan_block(block)
        for index, signature in found:
            if (rank, signature.name) not in self._reported:
                self._reported.add((rank, signature.name))
                before = (list(context) + texts[:index])[-CONTEXT_LINES:]
                after = texts[index + 1 : index + 1 + CONTEXT_LINES]  # what arrived with it (a traceback's end)
                self._report(
                    rank, stream, texts[index], signature, [t[:500] for t in before], [t[:500] for t in after], plog
                )
        last = texts[-CONTEXT_LINES:] if texts else tail_lines(block, CONTEXT_LINES)
        context.extend(t.rstrip("\r")[:500] for t in last)

    def _report(
        self, rank: int, stream: str, text: str, signature: Signature, before: List[str], after: List[str], plog: bool
    ) -> None:
        stamped = parse_plog_time(text)
        self._emit(
            EventKind.SIGNATURE_MATCHED,
            rank,
            signature=signature.name,
            code=signature.code,
            cls=signature.cls,
            signature_kind=signature.kind,
            retryable=signature.retryable,
            fatal=signature.fatal,
            hint=signature.hint,
            line=text[:500],
            context=before,
            after=after,
            source="plog" if plog else stream,
            stream=stream,
            line_time=stamped if stamped is not None else time.time(),
            line_time_source="plog timestamp" if stamped is not None else "read time",
        )
