"""Follow a rank's log file and cut what it appends into lines (standard library, Python 3.7+).

Ranks write straight into their log files (the kernel keeps every byte, even if the rank dies
mid-write or the agent falls behind); the agent follows those files for the console and for
events. Lines end at ``\\n``, ``\\r\\n`` or ``\\r`` (progress bars); a UTF-8 character is never cut,
since newline bytes never occur inside one and over-long lines are cut on a character boundary.
"""

from __future__ import annotations

import os
import re
from typing import List, NamedTuple, Optional

MAX_LINE_BYTES = 64 * 1024  # longer lines are passed on in pieces
READ_CHUNK = 1 << 20

_EOL = re.compile(rb"\r\n|\r|\n")


class Line(NamedTuple):
    text: str
    cr: bool  # ended by a bare carriage return: a progress update, replaced by the next line


def _decode(raw: bytes) -> str:
    return raw.decode("utf-8", "replace")


class LineSplitter:
    """Incremental bytes -> lines; keeps the unfinished tail between calls."""

    def __init__(self) -> None:
        self._pending = b""

    def feed(self, data: bytes) -> List[Line]:
        buf = self._pending + data if self._pending else data
        if b"\r" not in buf:  # the common case, several times faster than the regex
            parts = buf.split(b"\n")
            self._pending = parts.pop()
            lines = [Line(_decode(p), False) for p in parts]
        else:
            lines, start = [], 0
            for match in _EOL.finditer(buf):
                if match.group() == b"\r" and match.end() == len(buf):
                    break  # may be the first half of "\r\n": wait for the next byte
                lines.append(Line(_decode(buf[start:match.start()]), match.group() == b"\r"))
                start = match.end()
            self._pending = buf[start:]
        while len(self._pending) > MAX_LINE_BYTES:
            cut = MAX_LINE_BYTES
            while cut > 0 and (self._pending[cut] & 0xC0) == 0x80:  # inside a UTF-8 character
                cut -= 1
            cut = cut or MAX_LINE_BYTES  # not UTF-8 at all: cut anywhere
            lines.append(Line(_decode(self._pending[:cut]), False))
            self._pending = self._pending[cut:]
        return lines

    def flush(self) -> List[Line]:
        """The unterminated last line, if any (at end of stream)."""
        rest, self._pending = self._pending, b""
        if rest.endswith(b"\r"):
            rest = rest[:-1]
        return [Line(_decode(rest), False)] if rest else []


class FileTail:
    """Reads what has been appended to a file since the last call."""

    def __init__(self, path: str) -> None:
        self.path = path
        self._fd: Optional[int] = os.open(path, os.O_RDONLY | os.O_CREAT, 0o600)
        self._splitter = LineSplitter()

    def read_lines(self, limit_bytes: int = 8 * READ_CHUNK) -> List[Line]:
        """Complete lines appended since the last call (at most about ``limit_bytes`` of them)."""
        if self._fd is None:
            return []
        lines: List[Line] = []
        total = 0
        while total < limit_bytes:
            data = os.read(self._fd, READ_CHUNK)
            if not data:
                break
            total += len(data)
            lines.extend(self._splitter.feed(data))
        return lines

    def close(self) -> List[Line]:
        """Read to the end, return the remaining lines including an unterminated last one."""
        if self._fd is None:
            return []
        lines = self.read_lines(limit_bytes=1 << 62)
        lines.extend(self._splitter.flush())
        os.close(self._fd)
        self._fd = None
        return lines


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
