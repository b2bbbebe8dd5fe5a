"""Follow a rank's log file and cut what it appends into lines (standard library, Python 3.7+).

Ranks write straight into their log files (the kernel keeps every byte, even if the rank dies
mid-write or the agent falls behind); the agent follows those files for the console and for
events. Lines end at ``\\n``, ``\\r\\n`` or ``\\r`` (progress bars); a UTF-8 character is never cut,
since newline bytes never occur inside one and over-long lines are cut on a character boundary.
A line is a plain ``str`` (cheap: a rank may print 100k lines a second); a progress update, ended
by a bare ``\\r``, keeps that ``\\r`` at its end so the console can show only the latest.
"""

from __future__ import annotations

import os
import re
from typing import Iterator, List, Optional

MAX_LINE_BYTES = 64 * 1024  # longer lines are passed on in pieces
READ_CHUNK = 1 << 20

_EOL = re.compile(rb"\r\n|\r|\n")


Line = str  # one line of output; ends with "\r" when it was a progress update


def is_progress(line: Line) -> bool:
    return line.endswith("\r")


def _decode(raw: bytes) -> str:
    return raw.decode("utf-8", "replace")


class LineSplitter:
    """Incremental bytes -> lines; keeps the unfinished tail between calls."""

    def __init__(self) -> None:
        self._pending = b""

    def feed(self, data: bytes) -> List[Line]:
        buf = self._pending + data if self._pending else data
        lines: List[Line]
        if b"\r" not in buf:  # the common case: decode the complete lines at once, then split
            end = buf.rfind(b"\n")
            lines = _decode(buf[:end]).split("\n") if end >= 0 else []
            self._pending = buf[end + 1 :]
        else:
            lines, start = [], 0
            for match in _EOL.finditer(buf):
                if match.group() == b"\r" and match.end() == len(buf):
                    break  # may be the first half of "\r\n": wait for the next byte
                text = _decode(buf[start : match.start()])
                lines.append(text + "\r" if match.group() == b"\r" else text)
                start = match.end()
            self._pending = buf[start:]
        while len(self._pending) > MAX_LINE_BYTES:
            cut = MAX_LINE_BYTES
            while cut > 0 and (self._pending[cut] & 0xC0) == 0x80:  # inside a UTF-8 character
                cut -= 1
            cut = cut or MAX_LINE_BYTES  # not UTF-8 at all: cut anywhere
            lines.append(_decode(self._pending[:cut]))
            self._pending = self._pending[cut:]
        return lines

    def flush_bytes(self) -> bytes:
        """The unfinished tail as bytes, forgotten here (another reader carries on from it)."""
        rest, self._pending = self._pending, b""
        return rest

    def flush(self) -> List[Line]:
        """The unterminated last line, if any (at end of stream)."""
        rest, self._pending = self._pending, b""
        if rest.endswith(b"\r"):
            rest = rest[:-1]
        return [_decode(rest)] if rest else []


class FileTail:
    """Reads what has been appended to a file since the last call."""

    def __init__(self, path: str) -> None:
        self.path = path
        self._fd: Optional[int] = os.open(path, os.O_RDONLY | os.O_CREAT, 0o600)
        self._splitter = LineSplitter()
        self.last_read = 0  # bytes the last read_lines took

    def read_lines(self, limit_bytes: int = 8 * READ_CHUNK) -> List[Line]:
        """Complete lines appended since the last call (at most about ``limit_bytes`` of them)."""
        if self._fd is None:
            return []
        lines: List[Line] = []
        total = 0
        while total < limit_bytes:
            data = os.read(self._fd, min(READ_CHUNK, limit_bytes - total))
            if not data:
                break
            total += len(data)
            lines.extend(self._splitter.feed(data))
        self.last_read = total  # == limit_bytes: there may be more
        return lines

    def unread_bytes(self) -> int:
        """How much the file holds beyond what was read (0 once closed)."""
        if self._fd is None:
            return 0
        try:
            return max(0, os.fstat(self._fd).st_size - os.lseek(self._fd, 0, os.SEEK_CUR))
        except OSError:
            return 0

    def drain_blocks(self, limit_bytes: int = 8 * READ_CHUNK) -> Iterator[bytes]:
        """Read to the end in blocks of whole lines (bytes, not split), the unterminated last line in
        the last block; then close. For a backlog too big to split line by line in time: the caller
        looks at a block as one text and splits only the blocks that matter."""
        if self._fd is None:
            return
        pending = self._splitter.flush_bytes()
        while True:
            data = os.read(self._fd, limit_bytes)
            if not data:
                break
            data = pending + data
            end = data.rfind(b"\n")
            if end < 0:
                pending = data
                continue
            pending = data[end + 1 :]
            yield data[: end + 1]
        os.close(self._fd)
        self._fd = None
        if pending:
            yield pending

    def close(self) -> List[Line]:
        """Read to the end, return the remaining lines including an unterminated last one (all at
        once: for small files; a rank's log is drained in batches with ``drain``)."""
        return [line for batch in self.drain(limit_bytes=1 << 62) for line in batch]

    def drain(self, limit_bytes: int = 8 * READ_CHUNK) -> Iterator[List[Line]]:
        """Read to the end in batches of about ``limit_bytes`` (memory stays bounded however much
        a rank wrote before it exited), the unterminated last line in the last batch; then close."""
        if self._fd is None:
            return
        while True:
            lines = self.read_lines(limit_bytes)
            if not lines:
                break
            yield lines
        rest = self._splitter.flush()
        os.close(self._fd)
        self._fd = None
        if rest:
            yield rest


def last_lines(path: str, count: int, max_bytes: int = 64 * 1024) -> List[str]:
    """The last ``count`` lines of a file (reading at most ``max_bytes`` from its end)."""
    try:
        with open(path, "rb") as handle:
            handle.seek(0, os.SEEK_END)
            size = handle.tell()
            handle.seek(max(0, size - max_bytes))
            data = handle.read()
    except OSError:
        return []
    text = _decode(data).replace("\r\n", "\n")
    lines = [part.rsplit("\r", 1)[-1] for part in text.split("\n")]
    if lines and lines[-1] == "":
        lines.pop()
    return lines[-count:]
