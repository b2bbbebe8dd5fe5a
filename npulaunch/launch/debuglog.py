"""``--debug`` / ``NPULAUNCH_DEBUG=1``: every decision the launcher makes (spawns with their pids,
signals sent, events seen, teardown steps, restarts), timestamped, in the job directory's
``launcher.log``. Library code logs through ``logging.getLogger(__name__)`` under ``npulaunch``;
what is logged before the job directory exists is held in memory and written first.
"""

from __future__ import annotations

import logging
import logging.handlers
import os
from typing import Mapping, Optional

DEBUG_VAR = "NPULAUNCH_DEBUG"
FORMAT = "%(asctime)s.%(msecs)03d %(name)s: %(message)s"
DATE_FORMAT = "%Y-%m-%d %H:%M:%S"
_ROOT = logging.getLogger("npulaunch")


def wanted(flag: bool, environ: Mapping[str, str]) -> bool:
    """``--debug`` given, or NPULAUNCH_DEBUG set to anything but empty or 0."""
    return flag or environ.get(DEBUG_VAR, "") not in ("", "0")


def enable() -> None:
    """Start recording (in memory until ``write_to`` names the file)."""
    if _buffer() is None:
        _ROOT.setLevel(logging.DEBUG)
        _ROOT.propagate = False
        _ROOT.addHandler(logging.handlers.MemoryHandler(capacity=1 << 20, flushLevel=logging.CRITICAL + 1))


def enabled() -> bool:
    return _ROOT.isEnabledFor(logging.DEBUG) and any(
        isinstance(h, (logging.handlers.MemoryHandler, logging.FileHandler)) for h in _ROOT.handlers
    )


def write_to(path: str) -> None:
    """From now on, into ``path`` (mode 0600, appended): what was held in memory, then every record."""
    buffered = _buffer()
    if buffered is None:
        return
    os.close(os.open(path, os.O_WRONLY | os.O_CREAT | os.O_APPEND, 0o600))
    handler = logging.FileHandler(path, encoding="utf-8")
    handler.setFormatter(logging.Formatter(FORMAT, DATE_FORMAT))
    buffered.setTarget(handler)
    buffered.flush()
    _ROOT.removeHandler(buffered)
    buffered.close()
    _ROOT.addHandler(handler)


def disable() -> None:
    """Stop recording and close the file (tests run several jobs in one process)."""
    for handler in list(_ROOT.handlers):
        _ROOT.removeHandler(handler)
        handler.close()
    _ROOT.setLevel(logging.NOTSET)
    _ROOT.propagate = True


def _buffer() -> Optional[logging.handlers.MemoryHandler]:
    return next((h for h in _ROOT.handlers if isinstance(h, logging.handlers.MemoryHandler)), None)
