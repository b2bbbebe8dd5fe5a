"""``--debug`` / ``NPULAUNCH_DEBUG=1``: every decision the launcher makes (spawns with their pids,
signals sent, events seen, teardown steps, restarts), timestamped, in the job directory's
``launcher.log``. Library code logs through ``logging.getLogger(__name__)`` under ``npulaunch``;
what is logged before the job directory exists is held in memory and written first.
"""

from __future__ import annotations

import logging
import os
from typing import TYPE_CHECKING, Mapping, Optional

if TYPE_CHECKING:  # logging.handlers costs ~8 ms to import: only when --debug asks for it
    import logging.handlers

DEBUG_VAR = "NPULAUNCH_DEBUG"
FORMAT = "%(asctime)s.%(msecs)03d %(name)s: %(message)s"
DATE_FORMAT = "%Y-%m-%d %H:%M:%S"
_ROOT = logging.getLogger("npulaunch")
_held: "Optional[logging.handlers.MemoryHandler]" = None  # records kept until the job directory exists


def wanted(flag: bool, environ: Mapping[str, str]) -> bool:
    """``--debug`` given, or NPULAUNCH_DEBUG set to anything but empty or 0."""
    return flag or environ.get(DEBUG_VAR, "") not in ("", "0")


def enable() -> None:
    """Start recording (in memory until ``write_to`` names the file)."""
    global _held
    import logging.handlers

    if _held is None and not enabled():
        _ROOT.setLevel(logging.DEBUG)
        _ROOT.propagate = False
        _held = logging.handlers.MemoryHandler(capacity=1 << 20, flushLevel=logging.CRITICAL + 1)
        _ROOT.addHandler(_held)


def enabled() -> bool:
    return _ROOT.isEnabledFor(logging.DEBUG) and bool(_ROOT.handlers)


def write_to(path: str) -> None:
    """From now on, into ``path`` (mode 0600, appended): what was held in memory, then every record."""
    global _held
    if _held is None:
        return
    os.close(os.open(path, os.O_WRONLY | os.O_CREAT | os.O_APPEND, 0o600))
    handler = logging.FileHandler(path, encoding="utf-8")
    handler.setFormatter(logging.Formatter(FORMAT, DATE_FORMAT))
    _held.setTarget(handler)
    _held.flush()
    _ROOT.removeHandler(_held)
    _held.close()
    _held = None
    _ROOT.addHandler(handler)


def disable() -> None:
    """Stop recording and close the file (tests run several jobs in one process)."""
    global _held
    _held = None
    for handler in list(_ROOT.handlers):
        _ROOT.removeHandler(handler)
        handler.close()
    _ROOT.setLevel(logging.NOTSET)
    _ROOT.propagate = True
