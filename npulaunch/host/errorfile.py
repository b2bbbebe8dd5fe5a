"""A rank's error file, torchrun's way: the agent clears it before the rank starts and reads it after the
rank failed, for what the script raised (its type, message, the line in the user's code, the traceback).
Read safely (bounded, a bad file is None, never an exception); decides nothing about the job.
Standard library only, Python 3.7+.

The format is torch's own (torch 2.13.0, commit cf30153c4c131c8164ee7798e5022d810682e2cb):
``torch/distributed/elastic/multiprocessing/errors/error_handler.py`` ``ErrorHandler.record_exception``,
called by ``@record`` (``errors/__init__.py``) for an uncaught ``Exception`` (not a BaseException such as
SystemExit or KeyboardInterrupt) before it re-raises it, writes with ``open(path, "w")`` to the path in
``TORCHELASTIC_ERROR_FILE``::

    {"message": {"message": "ValueError: bad batch",        # f"{type(e).__name__}: {e}"
                 "extraInfo": {"py_callstack": "Traceback (most recent call last):\\n ...",
                               "timestamp": "1700000000"}}}  # str(int(time.time()))

A parent that is itself a launcher under ``@record`` (``ChildFailedError``) copies its child's file into
its own with ``message.errorCode`` set to the child's exit code (``dump_error_file``; only that path warns
that the file exists and replaces it; ``record_exception`` overwrites silently). torchrun's reader
(``ProcessFailure._get_error_data``) also takes ``{"message": "<text>", "timestamp": N}``. torchrun gives each
attempt fresh directories (``multiprocessing/api.py``: ``attempt_<n>/<local_rank>/error.json``); here the
path may be the same for every attempt, so a file left by an earlier attempt is removed before the rank
starts, and one that could not be removed is read only when it was written after the rank started.
"""

from __future__ import annotations

import json
import os
import stat
from typing import Any, Dict, List, Mapping, Optional, Tuple

from npulaunch.host.lazyre import lazy_re
from npulaunch.host.pystacks import TRACEBACK_FRAME, is_library
from npulaunch.host.trace import debug

ERROR_FILE_VAR = "TORCHELASTIC_ERROR_FILE"
MAX_FILE_BYTES = 1 << 20  # a larger file is not read (torch writes a message and one traceback)
MAX_MESSAGE_CHARS = 4096
MAX_TRACEBACK_CHARS = 16 << 10  # its end is kept: the innermost frames and the exception
# a file kept from before the rank started is read only when written after it: mtimes come from a coarse
# clock (a few ms behind time.time()), and some file systems keep whole or even two seconds
MTIME_SLACK_S = 2.0

_TYPE = lazy_re(r"[A-Za-z_][\w.]*")
_HEADER = "Traceback (most recent call last):"


class RankErrorFile:
    """One rank's error file: cleared before the rank starts, read once it has failed."""

    def __init__(self, path: str, started: float, kept_stale: bool) -> None:
        self.path = path
        self.started = started
        self.kept_stale = kept_stale  # a file there before the start could not be removed

    @classmethod
    def prepare(cls, env: Mapping[str, str], cwd: str, started: float) -> Optional["RankErrorFile"]:
        """The error file the rank's environment names (None when it names none), made ready: its
        directory created (torch's handler does not make it: its ``open`` would fail while handling the
        user's exception), an earlier attempt's file removed."""
        given = env.get(ERROR_FILE_VAR) or ""
        if not given or given == os.devnull:
            return None
        path = os.path.join(cwd, given)  # relative: to the rank's working directory, as the rank opens it
        try:
            os.makedirs(os.path.dirname(path) or ".", mode=0o700, exist_ok=True)
        except OSError as exc:
            debug(__name__, "cannot create the directory of %s: %s", path, exc)
        kept = False
        try:
            os.unlink(path)
        except FileNotFoundError:
            pass
        except OSError as exc:
            debug(__name__, "cannot remove an earlier error file %s: %s", path, exc)
            kept = True
        return cls(path, started, kept)

    def read(self) -> Optional[Dict[str, Any]]:
        """What the rank raised (``load_error_file``), or None."""
        return load_error_file(self.path, self.started if self.kept_stale else None)


def load_error_file(path: str, not_before: Optional[float] = None) -> Optional[Dict[str, Any]]:
    """The exception an error file records (``parse_error_file``) with the file's ``path`` and ``written``
    (its mtime), or None: no file, not a regular file, larger than MAX_FILE_BYTES, not torch's JSON, or
    (with ``not_before``) written before that time."""
    try:
        # O_NONBLOCK: a FIFO at the path must not block the agent's loop (it is refused below)
        fd = os.open(path, os.O_RDONLY | os.O_NONBLOCK | getattr(os, "O_NOCTTY", 0))
    except OSError:
        return None
    try:
        info = os.fstat(fd)
        if not stat.S_ISREG(info.st_mode) or info.st_size > MAX_FILE_BYTES:
            debug(__name__, "error file %s not read: not a regular file, or %d bytes", path, info.st_size)
            return None
        if not_before is not None and info.st_mtime < not_before - MTIME_SLACK_S:
            debug(__name__, "error file %s not read: written before the rank started", path)
            return None
        data = os.read(fd, MAX_FILE_BYTES + 1)
    except OSError:
        return None
    finally:
        os.close(fd)
    if len(data) > MAX_FILE_BYTES:  # grown since fstat
        return None
    found = parse_error_file(data.decode("utf-8", "replace"))
    if found is not None:
        found["path"] = path
        found["written"] = round(info.st_mtime, 3)
    return found


def parse_error_file(text: str) -> Optional[Dict[str, Any]]:
    """An error file's text as ``{exception, message, where, traceback, timestamp}`` (and ``error_code``
    when a parent launcher recorded its child's exit code): the exception's type name, its message (both
    from torch's ``"Type: message"``, else from the traceback's last line), the innermost frame in the
    user's code (``train.py:41, in step``), the traceback (its end, at most MAX_TRACEBACK_CHARS), and
    torch's time stamp (whole seconds). None when the text is not such a record."""
    try:
        record = json.loads(text)
    except (ValueError, RecursionError):  # RecursionError: nested deeper than the decoder goes
        return None
    if not isinstance(record, dict):
        return None
    outer = record.get("message")
    said, callstack, stamp, code = outer, "", record.get("timestamp"), None
    if isinstance(outer, dict):
        said = outer.get("message")
        extra = outer.get("extraInfo")
        if isinstance(extra, dict):
            stamp = extra.get("timestamp")
            if isinstance(extra.get("py_callstack"), str):
                callstack = extra["py_callstack"]
        if isinstance(outer.get("errorCode"), int) and not isinstance(outer.get("errorCode"), bool):
            code = outer["errorCode"]
    if not isinstance(said, str):
        said = ""
    if not said and not callstack:
        return None
    kind, message = _split_message(said)
    frames, last_line = _last_traceback(callstack)
    if not kind and last_line:  # a message of another shape: the type from the traceback
        kind, told = _split_message(last_line)
        message = said or told
    found: Dict[str, Any] = {
        "exception": kind,
        "message": _bounded(message, MAX_MESSAGE_CHARS, keep_end=False),
        "where": _where(frames),
        "traceback": _bounded(callstack, MAX_TRACEBACK_CHARS, keep_end=True),
        "timestamp": _seconds(stamp),
    }
    if code is not None:
        found["error_code"] = code
    return found


def raised_text(raised: Mapping[str, Any]) -> str:
    """``ValueError: bad batch (train.py:41, in step)``: a record of ``parse_error_file`` in one line (the
    message's first; the report shows the traceback)."""
    text = str(raised.get("exception") or "an exception")
    message = str(raised.get("message") or "").strip().splitlines()
    if message:
        first = message[0] if len(message[0]) <= 200 else message[0][:197] + "..."
        text += ": " + first + (" ..." if len(message) > 1 else "")
    if raised.get("where"):
        text += " (%s)" % raised["where"]
    return text


def written_at(raised: Optional[Mapping[str, Any]]) -> Optional[float]:
    """When the rank wrote its error file (``load_error_file``'s ``written``: the moment it raised, to the
    millisecond, on its host's clock); None without one."""
    written = (raised or {}).get("written")
    return float(written) if isinstance(written, (int, float)) and not isinstance(written, bool) else None


def _split_message(text: str) -> Tuple[str, str]:
    """``"ValueError: bad"`` -> ``("ValueError", "bad")``; a bare type name -> ``(name, "")``; text without a
    type name first -> ``("", text)``."""
    head, sep, rest = text.partition(":")
    if sep and _TYPE.fullmatch(head):
        return head, rest[1:] if rest.startswith(" ") else rest
    if _TYPE.fullmatch(text):
        return text, ""
    return "", text


def _last_traceback(callstack: str) -> Tuple[List[Tuple[str, str, str]], str]:
    """The frames (file, line, function) of the traceback's last exception (after its last header: a
    chained exception's come after "During handling ..."), and the line that names the exception."""
    lines = callstack.splitlines()
    start = max((i for i, line in enumerate(lines) if line.startswith(_HEADER)), default=-1)
    frames = []
    last = ""
    for line in lines[start + 1 :]:
        match = TRACEBACK_FRAME.match(line)
        if match is not None:
            frames.append((match.group("file"), match.group("line"), match.group("func")))
            last = ""
        elif line and not line.startswith((" ", "\t")) and not last:
            last = line  # the exception's line (its message may go on over more lines)
    return frames, last


def _where(frames: List[Tuple[str, str, str]]) -> str:
    """The innermost frame in the user's code (else the innermost of all), as ``train.py:41, in step``."""
    own = [frame for frame in frames if not is_library(frame[0])]
    chosen = (own or frames)[-1:] if frames else []
    if not chosen:
        return ""
    path, line, func = chosen[0]
    return "%s:%s, in %s" % (os.path.basename(path) or path, line, func)


def _bounded(text: str, limit: int, keep_end: bool) -> str:
    """``text`` cut to ``limit`` characters, saying how many were cut: its start kept, or its end (a traceback's
    header stays first)."""
    if len(text) <= limit:
        return text
    note = "... (%d characters not shown)" % (len(text) - limit)
    if not keep_end:
        return text[:limit] + " " + note
    head = _HEADER + "\n" if text.startswith(_HEADER) else ""
    return head + "  " + note + "\n" + text[-limit:]


def _seconds(value: Any) -> Optional[int]:
    """torch's time stamp (``str(int(time.time()))``), as an int; None when it is not one."""
    if isinstance(value, bool):
        return None
    try:
        return int(value)
    except (TypeError, ValueError):
        return None
