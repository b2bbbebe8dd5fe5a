"""``--debug`` / ``NPULAUNCH_DEBUG=1``: every decision the launcher makes (spawns with their pids,
signals sent, events seen, teardown steps, restarts), timestamped, in the job directory's
``launcher.log``. Library code logs through ``logging.getLogger(__name__)`` under ``npulaunch``;
what is logged before the job directory exists is held in memory and written first.
"""

from __future__ import annotations

import os
import sys
from typing import TYPE_CHECKING, Mapping, Optional

if TYPE_CHECKING:  # logging (~7 ms) and logging.handlers (~8 ms) are imported only when --debug asks
    import logging
    import logging.handlers

DEBUG_VAR = "NPULAUNCH_DEBUG"
FORMAT = "%(asctime)s.%(msecs)03d %(name)s: %(message)s"
DATE_FORMAT = "%Y-%m-%d %H:%M:%S"
_held: "Optional[logging.handlers.MemoryHandler]" = None  # records kept until the job directory exists


def wanted(flag: bool, environ: Mapping[str, str]) -> bool:
    """``--debug`` given, or NPULAUNCH_DEBUG set to anything but empty or 0."""
    return flag or environ.get(DEBUG_VAR, "") not in ("", "0")


def enable() -> None:
    """Start recording (in memory until ``write_to`` names the file)."""
    global _held
    import logging.handlers

    if _held is None and not enabled():
        root = _root()
        root.setLevel(logging.DEBUG)
        root.propagate = False
        _held = logging.handlers.MemoryHandler(capacity=1 << 20, flushLevel=logging.CRITICAL + 1)
        root.addHandler(_held)


def _root() -> "logging.Logger":
    import logging

    return logging.getLogger("npulaunch")


def enabled() -> bool:
    """Whether records are kept (never, when nothing has loaded ``logging``: host/trace.py then drops them)."""
    logging = sys.modules.get("logging")
    return logging is not None and _root().isEnabledFor(logging.DEBUG) and bool(_root().handlers)


def write_to(path: str) -> None:
    """From now on, into ``path`` (mode 0600, appended): what was held in memory, then every record."""
    global _held
    if _held is None:
        return
    import logging

    os.close(os.open(path, os.O_WRONLY | os.O_CREAT | os.O_APPEND, 0o600))
    handler = logging.FileHandler(path, encoding="utf-8")
    handler.setFormatter(logging.Formatter(FORMAT, DATE_FORMAT))
    _held.setTarget(handler)
    _held.flush()
    _root().removeHandler(_held)
    _held.close()
    _held = None
    _root().addHandler(handler)


def disable() -> None:
    """Stop recording and close the file (tests run several jobs in one process)."""
    global _held
    _held = None
    if "logging" not in sys.modules:
        return
    import logging

    root = _root()
    for handler in list(root.handlers):
        root.removeHandler(handler)
        handler.close()
    root.setLevel(logging.NOTSET)
    root.propagate = True
