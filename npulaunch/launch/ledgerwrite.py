"""Appending to the fault history (plan/ledger.py's file): the faults an attempt ended on, after
launch/restarts.py found them (local, SSH, a scheduler's node, Volcano and Kubernetes alike), and the
clearings of ``npulaunch faults --clear``. The only code that writes the ledger; it never rewrites a line.

Safe under concurrent writers on a shared file system: the file is opened with O_APPEND, every write
holds the file's exclusive fcntl lock (which NFS carries to the server, where O_APPEND alone is not
atomic across clients), writes whole lines of at most MAX_LINE_BYTES in one call, and is fsynced before
the lock is released. A torn last line left by a writer that died is closed first with a newline, so it
stays one corrupt line (skipped by readers) and never swallows the next entry.
"""

from __future__ import annotations

import os
import time
from typing import TYPE_CHECKING, List, Optional, Sequence

from npulaunch.host.trace import debug
from npulaunch.plan.ledger import CLEARED, HOST_LOST, NPU_FAULT, Entry, lock, unlock
from npulaunch.plan.placement import Exclusion

if TYPE_CHECKING:
    from npulaunch.launch.runner import Console
    from npulaunch.plan.launchplan import LaunchPlan


def append_entries(path: str, entries: Sequence[Entry]) -> None:
    """Append ``entries`` as lines, whole, under the lock; OSError when they could not be written."""
    if not entries:
        return
    data = b"".join(entry.to_line() for entry in entries)
    folder = os.path.dirname(path)
    if folder:
        os.makedirs(folder, exist_ok=True)
    # readable by all: it holds host names, NPU ids, codes and job ids, no secret, and the jobs of a shared
    # log_dir read it
    fd = os.open(path, os.O_RDWR | os.O_APPEND | os.O_CREAT, 0o644)
    try:
        if not lock(fd, shared=False):
            raise OSError(f"could not lock {path} (held by another writer, or no locks on this file system)")
        try:
            size = os.fstat(fd).st_size
            if size and os.pread(fd, 1, size - 1) != b"\n":
                data = b"\n" + data  # a torn line before: it stays a line of its own
            view = memoryview(data)
            while view:
                view = view[os.write(fd, view) :]
            os.fsync(fd)
        finally:
            unlock(fd)
    finally:
        os.close(fd)


def fault_entries(plan: "LaunchPlan", found: Sequence[Exclusion], now: Optional[float] = None) -> List[Entry]:
    """The ledger's entries for what an attempt's fault excluded (launch/recovery.py ``exclusions_after``)."""
    stamp = time.time() if now is None else now
    return [
        Entry(
            stamp,
            NPU_FAULT if e.device is not None else HOST_LOST,
            e.host,
            e.device,
            e.code,
            e.level,
            e.reason,
            plan.job_id,
            plan.attempt or 1,
        )
        for e in found
    ]


def record_faults(plan: "LaunchPlan", found: Sequence[Exclusion], console: "Console") -> None:
    """Write what an attempt's fault excluded to the plan's fault history; a ledger that cannot be written
    is said, and the job goes on (recovery does not depend on it)."""
    history = plan.recovery.get("history") or {}
    path = history.get("ledger")
    if not path or not found:
        return
    try:
        append_entries(path, fault_entries(plan, found))
        debug(__name__, "fault history %s: recorded %d entries", path, len(found))
    except OSError as exc:
        console.message(f"the fault history {path} could not be written: {exc.strerror or exc}")


def clearing(host: Optional[str], device: Optional[int], now: Optional[float] = None) -> Entry:
    """An entry that clears what came before it: ``host`` None for everything, ``device`` None for the host
    and all its NPUs; who cleared is recorded."""
    return Entry(time.time() if now is None else now, CLEARED, host, device, by=_who())


def _who() -> str:
    import getpass
    import socket

    try:
        user = getpass.getuser()
    except (KeyError, OSError):  # no name for this uid (a container)
        user = str(os.getuid())
    return f"{user}@{socket.gethostname()}"
