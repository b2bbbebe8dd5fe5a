"""Files of a job that readers must never see half-written, and that only their owner may read
(the job directory holds environments and logs). Standard library only, Python 3.7+.
"""

from __future__ import annotations

import json
import os
from typing import Any, Optional


def write_private(path: str, text: str) -> None:
    """Write a file only its owner can read (0600 whatever the umask), whole or not at all: the
    text goes to a temporary file beside it, is flushed to disk, and is renamed into place, so a
    reader never sees 0 bytes or half a file, even when the disk fills up or the launcher dies.
    Raises OSError (ENOSPC, EROFS, ...) with ``path`` unchanged."""
    aside = "%s.%d.tmp" % (path, os.getpid())
    try:
        fd = os.open(aside, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o600)
        with os.fdopen(fd, "w", encoding="utf-8") as handle:
            handle.write(text)
            handle.flush()
            os.fsync(handle.fileno())
        os.replace(aside, path)
    except BaseException:
        try:
            os.unlink(aside)
        except OSError:
            pass
        raise


def write_once(path: str, text: str) -> bool:
    """Create ``path`` with ``text`` unless it exists; readers never see it half-written (it is
    written aside, then linked into place, which fails when another process got there first).
    True when this call wrote it."""
    aside = f"{path}.{os.getpid()}.tmp"
    fd = os.open(aside, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o600)
    try:
        with os.fdopen(fd, "w", encoding="utf-8") as handle:
            handle.write(text)
            handle.flush()
            os.fsync(handle.fileno())
        try:
            os.link(aside, path)
        except FileExistsError:
            return False
        except OSError:  # a file system without hard links: a rename is whole too, and the copies are equal
            if os.path.exists(path):
                return False
            os.rename(aside, path)
        return True
    finally:
        if os.path.exists(aside):
            os.unlink(aside)


def read_json(path: str) -> Optional[Any]:
    """A JSON file of the job directory, decoded; None when it does not exist (yet). Any other
    failure to read it is a UsageError naming the file."""
    from npulaunch.host.errors import UsageError  # only the launcher's readers use this

    try:
        with open(path, encoding="utf-8") as handle:
            return json.load(handle)
    except FileNotFoundError:
        return None
    except (OSError, ValueError) as exc:
        raise UsageError(f"cannot read {path}: {exc}") from None
