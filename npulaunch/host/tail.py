"""Follow a rank's log file and cut what it appends into blocks of whole lines (standard library,
Python 3.7+).

Ranks write straight into their log files (the kernel keeps every byte, even if the rank dies
mid-write or the agent falls behind); the agent follows those files for the console and for
events. What it passes on is a *block*: the bytes a rank wrote, cut after the last whole line, so
that everything downstream (signatures, progress, the console's prefix) works on a whole block at
C speed instead of stepping through it line by line in Python: a rank may print 100k lines a second.
Lines end at ``\\n``, ``\\r\\n`` or a bare ``\\r`` (a progress update). A line longer than
MAX_LINE_BYTES is passed on in pieces (each ended by ``\\n``, cut on a UTF-8 character boundary);
the log keeps it whole. ``split_lines`` turns a block into text lines where that is needed.
"""

from __future__ import annotations

import os
from typing import Iterator, List, Optional

MAX_LINE_BYTES = 64 * 1024  # longer lines are passed on in pieces
# what one read takes at most: small enough that the passes over a block (signatures, counting, the
# console's prefix) find it in the CPU's cache, and that no read allocates fresh pages (an 8 MB block
# made draining a 100 MB backlog twice as slow)
READ_CHUNK = 1 << 20

Line = str  # one line of output; ends with "\r" when it was a progress update
Block = bytes  # whole lines as the rank wrote them, each ended by b"\n", b"\r\n" or a bare b"\r"


def is_progress(line: Line) -> bool:
    return line.endswith("\r")


def split_lines(block: Block) -> List[Line]:
    """A block's lines as text (invalid UTF-8 replaced); a progress update keeps its ``\\r``."""
    if not block:
        return []
    text = block.decode("utf-8", "replace")
    if "\r" not in text:
        lines = text.split("\n")
        if text.endswith("\n"):
            lines.pop()
        return lines
    lines = []
    parts = text.replace("\r\n", "\n").split("\n")
    if text.endswith("\n"):
        parts.pop()
    for part in parts:
        if "\r" not in part:
            lines.append(part)
            continue
        updates = part.split("\r")
        lines.extend(update + "\r" for update in updates[:-1])
        if updates[-1]:
            lines.append(updates[-1])
    return lines


def count_lines(block: Block) -> int:
    """How many lines a block holds (a progress update counts as one)."""
    count = block.count(b"\n")
    if b"\r" in block:
        count += block.count(b"\r") - block.count(b"\r\n")
    if block and not block.endswith((b"\n", b"\r")):
        count += 1  # an unterminated last line (a log's end)
    return count


def tail_lines(block: Block, count: int) -> List[Line]:
    """The last ``count`` lines of a block, without decoding the rest of it."""
    start = len(block) - 1  # the block's last byte ends its last line
    for _ in range(count):
        start = block.rfind(b"\n", 0, start)
        if start < 0:
            break
    return split_lines(block[start + 1 :])[-count:]


class LineSplitter:
    """Incremental bytes -> blocks of whole lines; keeps the unfinished tail between calls."""

    def __init__(self) -> None:
        self._pending = b""

    def feed(self, data: bytes) -> Block:
        buf = self._pending + data if self._pending else data
        end = buf.rfind(b"\n") + 1  # past the last newline (0: none)
        cr = buf.rfind(b"\r", end)  # a bare \r after it ends a progress update ...
        if cr == len(buf) - 1:  # ... unless it may be the first half of "\r\n": wait for the next byte
            cr = buf.rfind(b"\r", end, cr)
        if cr >= 0:
            end = cr + 1
        block, self._pending = buf[:end], buf[end:]  # buf[:len(buf)] is buf itself, not a copy
        if len(self._pending) > MAX_LINE_BYTES:
            pieces = [block]
            while len(self._pending) > MAX_LINE_BYTES:
                cut = MAX_LINE_BYTES
                while cut > 0 and (self._pending[cut] & 0xC0) == 0x80:  # inside a UTF-8 character
                    cut -= 1
                cut = cut or MAX_LINE_BYTES  # not UTF-8 at all: cut anywhere
                pieces.append(self._pending[:cut] + b"\n")
                self._pending = self._pending[cut:]
            block = b"".join(pieces)
        return block

    def flush(self) -> Block:
        """The unterminated last line, ended by ``\\n`` (at end of stream), or nothing."""
        rest, self._pending = self._pending, b""
        if rest.endswith(b"\r"):
            rest = rest[:-1]
        return rest + b"\n" if rest else b""


class FileTail:
    """Reads what has been appended to a file since the last call."""

    def __init__(self, path: str) -> None:
        self.path = path
        self._fd: Optional[int] = os.open(path, os.O_RDONLY | os.O_CREAT, 0o600)
        self._splitter = LineSplitter()
        self.last_read = 0  # bytes the last read took

    def read(self, limit_bytes: int = READ_CHUNK) -> Block:
        """The whole lines appended since the last call (about ``limit_bytes`` of them at most)."""
        if self._fd is None:
            return b""
        blocks: List[bytes] = []
        total = 0
        while total < limit_bytes:
            data = os.read(self._fd, min(READ_CHUNK, limit_bytes - total))
            if not data:
                break
            total += len(data)
            blocks.append(self._splitter.feed(data))
        self.last_read = total  # == limit_bytes: there may be more
        return blocks[0] if len(blocks) == 1 else b"".join(blocks)

    def unread_bytes(self) -> int:
        """How much the file holds beyond what was read (0 once closed)."""
        if self._fd is None:
            return 0
        try:
            return max(0, os.fstat(self._fd).st_size - os.lseek(self._fd, 0, os.SEEK_CUR))
        except OSError:
            return 0

    def drain(self, limit_bytes: int = READ_CHUNK) -> Iterator[Block]:
        """Read to the end in blocks of about ``limit_bytes`` (memory stays bounded however much a
        rank wrote before it exited), the unterminated last line in the last block; then close."""
        if self._fd is None:
            return
        while True:
            block = self.read(limit_bytes)
            if block:
                yield block
            elif not self.last_read:
                break
        rest = self._splitter.flush()
        os.close(self._fd)
        self._fd = None
        if rest:
            yield rest

    def close(self) -> Block:
        """Read to the end, all at once (for small files), then close."""
        return b"".join(self.drain(limit_bytes=1 << 62))


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
    text = data.decode("utf-8", "replace").replace("\r\n", "\n")
    lines = [part.rsplit("\r", 1)[-1] for part in text.split("\n")]
    if lines and lines[-1] == "":
        lines.pop()
    return lines[-count:]
