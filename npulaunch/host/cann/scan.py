"""The diagnosis of a job's output, stream by stream: blocks of whole lines in, findings out. Used by
the agent on live output and plogs (host/agent/monitor.py) and by ``npulaunch diagnose`` on the files
of any job. A block that holds neither a code's shape nor a phrase costs a few memchr calls and is never
cut into lines; one that may is read line by line, and so are the blocks after it while a message is
open. Standard library only, Python 3.7+.
"""

from __future__ import annotations

from typing import Callable, Dict, Hashable, List, Optional, Sequence, Tuple

from npulaunch.host.cann.findings import Finding, build
from npulaunch.host.cann.messages import CONTEXT_LINES, Reader
from npulaunch.host.cann.prefilter import SIGNATURES, Matcher, Signature
from npulaunch.host.tail import count_lines, split_lines, tail_lines

QUIET_S = 0.25  # a message with no new line for this long is complete (its rank may have stopped printing)
MAX_FINDINGS = 64  # findings reported for one stream; a stream that prints errors in a loop says no more


class Scanner:
    """One job's (or one host's) streams, each with its reader; a key names a stream (a rank's stdout,
    a plog file)."""

    def __init__(self, signatures: Sequence[Signature] = SIGNATURES, clock: Optional[Callable[[], float]] = None):
        self.matcher = Matcher(signatures)
        self._clock = clock
        self._readers: Dict[Hashable, Reader] = {}
        self._last: Dict[Hashable, float] = {}
        self._found: Dict[Hashable, int] = {}

    def block(self, key: Hashable, block: bytes, plog: bool = False) -> List[Finding]:
        """The findings a block of whole lines completes (a message still open waits for its end)."""
        reader = self._readers.get(key)
        if reader is None:
            reader = self._readers[key] = Reader(self.matcher.match, plog=plog)
        if not block or self._found.get(key, 0) >= MAX_FINDINGS:
            return []
        if not reader.open and not self.matcher.block_may_match(block):
            reader.remember(tail_lines(block, CONTEXT_LINES), count_lines(block))
            return []
        lines = [line.rstrip("\r") for line in split_lines(block)]
        if self._clock is not None:
            self._last[key] = self._clock()
        return self._built(key, reader.feed(lines, self.matcher.candidate_lines(lines)))

    def due_s(self) -> Optional[float]:
        """Seconds until an open message is complete by its quiet (None when none is open)."""
        if self._clock is None:
            return None
        waits = [self._last.get(k, 0.0) + QUIET_S for k, r in self._readers.items() if r.open]
        return max(0.0, min(waits) - self._clock()) if waits else None

    def flush_quiet(self) -> List[Tuple[Hashable, Finding]]:
        """The open messages whose streams have been quiet for QUIET_S: complete."""
        if self._clock is None:
            return []
        now = self._clock()
        quiet = [k for k, r in self._readers.items() if r.open and now - self._last.get(k, 0.0) >= QUIET_S]
        return [(key, f) for key in quiet for f in self.flush(key)]

    def flush(self, key: Hashable, died: bool = False) -> List[Finding]:
        """The stream's open message, complete (its stream ended). ``died``: its process died, a failed rank: the
        coded lines it printed last are a finding even when no line said it failed (host/cann/messages.py)."""
        reader = self._readers.get(key)
        message = reader.flush(died) if reader is not None else None
        return self._built(key, [message]) if message is not None else []

    def flush_all(
        self,
        died: Callable[[Hashable], bool] = lambda key: False,
        only: Callable[[Hashable], bool] = lambda key: True,
    ) -> List[Tuple[Hashable, Finding]]:
        """Every stream's open message (of the streams ``only`` keeps), complete; ``died(key)``: whether the
        stream's process died."""
        return [(key, f) for key in list(self._readers) if only(key) for f in self.flush(key, died(key))]

    def _built(self, key: Hashable, messages: Sequence[object]) -> List[Finding]:
        findings = []
        for message in messages:
            if self._found.get(key, 0) >= MAX_FINDINGS:
                break
            self._found[key] = self._found.get(key, 0) + 1
            findings.append(build(message))  # type: ignore[arg-type]
        return findings
