"""The fault history's file: one ledger of the NPU and host faults the jobs of a ``log_dir`` saw (or of
``recovery.ledger``), as entries. plan/faulthistory.py judges what it keeps off; launch/ledgerwrite.py
appends to it; ``npulaunch faults`` lists and clears it. Reading only: nothing here writes the file.

JSON lines, one entry a line, appended and never rewritten (a clearing is an entry of its own, which clears
what is *before it in the file*, not by time: the writers' clocks may differ). Each line is written whole
under the file's fcntl lock with O_APPEND and fsync, and is at most ``MAX_LINE_BYTES``; a reader takes the
shared lock, so it never sees half a line. A line that is torn anyway (a writer died mid-write, a file system
without locks) or corrupt is skipped, and said once with its line number: never a traceback, never fatal.
"""

from __future__ import annotations

import errno
import fcntl
import json
import os
import time
from dataclasses import dataclass, replace
from typing import TYPE_CHECKING, Any, Dict, List, Optional, Tuple

if TYPE_CHECKING:
    from npulaunch.config.cluster import ClusterConfig
    from npulaunch.host.errors import ConfigProblem

LEDGER_NAME = "faults.jsonl"  # in the log_dir, by default
NPU_FAULT, HOST_LOST, CLEARED = "npu_fault", "host_lost", "cleared"
WHATS = (NPU_FAULT, HOST_LOST, CLEARED)
MAX_LINE_BYTES = 1024  # a line is written whole; reasons are cut to fit
LOCK_WAIT_S = 10.0  # a lock held longer (a hung NFS lock daemon) is given up on; the reader reads anyway


@dataclass(frozen=True)
class Entry:
    """One line of the ledger: a fault (``npu_fault``: ``device`` set; ``host_lost``: None), or a clearing of
    what came before it (``host`` None: everything; ``device`` None: the host and all its NPUs)."""

    time: float
    what: str
    host: Optional[str]
    device: Optional[int] = None
    code: Optional[str] = None
    level: Optional[str] = None  # MindCluster's level of the code (none for a lost host)
    reason: str = ""
    job_id: str = ""
    attempt: int = 0
    by: str = ""  # who cleared (user@host)

    @property
    def what_place(self) -> str:
        if self.host is None:
            return "every host"
        return f"{self.host} NPU {self.device}" if self.device is not None else f"host {self.host}"

    def to_json(self) -> Dict[str, Any]:
        data: Dict[str, Any] = {"time": round(self.time, 3), "what": self.what, "host": self.host}
        data["device"] = self.device
        for key in ("code", "level", "reason", "job_id", "attempt", "by"):
            value = getattr(self, key)
            if value not in (None, "", 0):
                data[key] = value
        return data

    def to_line(self) -> bytes:
        """The entry as one line of at most MAX_LINE_BYTES: the reason halved until it fits, then every text
        cut short (24 characters, six bytes each at most as JSON: a bound whatever the text)."""
        entry = self
        while True:
            line = (json.dumps(entry.to_json(), separators=(",", ":")) + "\n").encode("utf-8")
            if len(line) <= MAX_LINE_BYTES:
                return line
            if len(entry.reason) > 1:
                entry = replace(entry, reason=entry.reason[: len(entry.reason) // 2])
                continue
            entry = replace(
                entry,
                host=None if entry.host is None else entry.host[:24],
                code=None if entry.code is None else entry.code[:24],
                level=None if entry.level is None else entry.level[:24],
                reason="",
                job_id=entry.job_id[:24],
                by=entry.by[:24],
            )

    @classmethod
    def from_json(cls, data: Any) -> "Entry":
        """The entry of a decoded line; ValueError naming what is wrong."""
        if not isinstance(data, dict):
            raise ValueError("not a JSON object")
        what, host, device = data.get("what"), data.get("host"), data.get("device")
        stamp = data.get("time")
        if what not in WHATS:
            raise ValueError(f"'what' is {what!r}, not one of {', '.join(WHATS)}")
        if isinstance(stamp, bool) or not isinstance(stamp, (int, float)):
            raise ValueError("no number 'time'")
        if not (isinstance(host, str) and host) and not (host is None and what == CLEARED):
            raise ValueError("no 'host'")
        if device is not None and (isinstance(device, bool) or not isinstance(device, int) or device < 0):
            raise ValueError(f"'device' is {device!r}, not an NPU id")
        if what == NPU_FAULT and device is None:
            raise ValueError("an npu_fault without 'device'")
        texts = {key: data.get(key) for key in ("code", "level", "reason", "job_id", "by")}
        if any(value is not None and not isinstance(value, str) for value in texts.values()):
            raise ValueError("a text field that is not a string")
        attempt = data.get("attempt", 0)
        if isinstance(attempt, bool) or not isinstance(attempt, int):
            raise ValueError("'attempt' is not an integer")
        return cls(
            float(stamp),
            what,
            host,
            device,
            texts["code"],
            texts["level"],
            texts["reason"] or "",
            texts["job_id"] or "",
            attempt,
            texts["by"] or "",
        )


@dataclass(frozen=True)
class Ledger:
    """What a read of the ledger found: its entries in file order, and the lines it skipped."""

    path: str
    entries: Tuple[Entry, ...] = ()
    skipped: Tuple[Tuple[int, str], ...] = ()  # (line number, why) of torn or corrupt lines
    error: str = ""  # the file could not be read at all (it does not exist: no error, no entries)

    def warnings(self) -> List[str]:
        """One warning for the skipped lines (the first few named), one if the file could not be read."""
        said = []
        if self.skipped:
            first = ", ".join(f"{number} ({why})" for number, why in self.skipped[:3])
            more = f" and {len(self.skipped) - 3} more" if len(self.skipped) > 3 else ""
            lines = "a torn or corrupt line" if len(self.skipped) == 1 else f"{len(self.skipped)} torn or corrupt lines"
            said.append(f"warning: fault history {self.path}: skipped {lines}: line {first}{more}")
        if self.error:
            said.append(f"warning: fault history {self.path} cannot be read: {self.error}; it keeps nothing off")
        return said


def parse_ledger(data: bytes, path: str) -> Ledger:
    """The ledger in ``data``: every well-formed line, the others skipped with their line number."""
    entries: List[Entry] = []
    skipped: List[Tuple[int, str]] = []
    lines = data.split(b"\n")
    for number, raw in enumerate(lines, 1):
        if not raw.strip():
            continue
        if number == len(lines):  # the last line, without its end: a write cut short
            skipped.append((number, "torn: no end of line"))
            continue
        try:
            entries.append(Entry.from_json(json.loads(raw.decode("utf-8"))))
        except json.JSONDecodeError:
            skipped.append((number, "not JSON"))
        except (UnicodeDecodeError, ValueError) as exc:
            skipped.append((number, "not UTF-8" if isinstance(exc, UnicodeDecodeError) else str(exc)[:80]))
    return Ledger(path, tuple(entries), tuple(skipped))


def load_ledger(path: str) -> Ledger:
    """Read the ledger under a shared lock (a writer holds the exclusive one for each whole write, so no
    line is seen half-written); without the lock after LOCK_WAIT_S, or where the file system has no locks.
    A missing file is an empty ledger."""
    try:
        fd = os.open(path, os.O_RDONLY)
    except FileNotFoundError:
        return Ledger(path)
    except OSError as exc:
        return Ledger(path, error=exc.strerror or str(exc))
    try:
        locked = lock(fd, shared=True)
        try:
            chunks = []
            while True:
                chunk = os.read(fd, 1 << 20)
                if not chunk:
                    break
                chunks.append(chunk)
        finally:
            if locked:
                unlock(fd)
    except OSError as exc:
        return Ledger(path, error=exc.strerror or str(exc))
    finally:
        os.close(fd)
    return parse_ledger(b"".join(chunks), path)


def lock(fd: int, shared: bool, wait_s: float = LOCK_WAIT_S) -> bool:
    """Take the file's lock (fcntl's, which NFS carries to the server), waiting at most ``wait_s``;
    False when it could not be had (no locks on this file system, or held too long)."""
    kind = (fcntl.LOCK_SH if shared else fcntl.LOCK_EX) | fcntl.LOCK_NB
    deadline = time.monotonic() + wait_s
    while True:
        try:
            fcntl.lockf(fd, kind)
            return True
        except OSError as exc:
            if exc.errno not in (errno.EACCES, errno.EAGAIN) or time.monotonic() >= deadline:
                return False
        time.sleep(0.01)


def unlock(fd: int) -> None:
    fcntl.lockf(fd, fcntl.LOCK_UN)


# -- where the ledger is, and whether it can be written ---------------------------------------------------


def ledger_path(config: "ClusterConfig") -> str:
    """``recovery.ledger``, else ``<log_dir>/faults.jsonl``."""
    return config.recovery.ledger or os.path.join(config.job.log_dir, LEDGER_NAME)


def ledger_problem(config: "ClusterConfig") -> "Optional[ConfigProblem]":
    """Why the ledger cannot be appended to by this user (a problem at its key: ``recovery.ledger``, or
    ``job.log_dir`` / ``--log-dir`` for the default), or None. Nothing is created."""
    from npulaunch.host.errors import ConfigProblem

    path = ledger_path(config)
    if not config.recovery.ledger and not os.path.lexists(path):
        return None  # a log_dir that cannot be written is the job directory's own error, said as such
    why = why_not_writable(path)
    if not why:
        return None
    allowed = "a file npulaunch can append to (in a directory this user can write to or create)"
    if config.recovery.ledger:
        return config.problem(("recovery", "ledger"), repr(path), allowed, why)
    hint = f"{why}; the fault history is {LEDGER_NAME} there unless recovery.ledger says where"
    if config.sources.get("job.log_dir") == "cli" or config.document is None:
        return ConfigProblem("command line", None, "--log-dir", repr(config.job.log_dir), allowed, hint)
    return config.problem(("job", "log_dir"), repr(config.job.log_dir), allowed, hint)


def why_not_writable(path: str) -> str:
    """Why ``path`` cannot be appended to, or made, by this user ("" when it can)."""
    if os.path.isdir(path):
        return f"{path} is a directory"
    if os.path.exists(path):
        return "" if os.access(path, os.W_OK) else f"{path} is not writable"
    folder = os.path.dirname(path) or "."
    while not os.path.exists(folder):
        parent = os.path.dirname(folder)
        if parent == folder:
            break
        folder = parent
    if not os.path.isdir(folder):
        return f"{folder} is not a directory"
    if not os.access(folder, os.W_OK | os.X_OK):
        return f"{folder} is not writable"
    return ""
