"""Whether a job's launcher still runs, read from its launcher.json and this host's processes:
what ``npulaunch status`` says of a job without a summary, and what ``npulaunch stop`` acts on.
Reads files and /proc only.
"""

from __future__ import annotations

import os
from dataclasses import dataclass
from typing import Optional, Tuple

from npulaunch.host.errors import UsageError
from npulaunch.host.files import read_json
from npulaunch.host.procs import start_ticks
from npulaunch.plan.layout import JobLayout


@dataclass(frozen=True)
class LauncherState:
    """Whether a job's launcher still runs, as far as this machine can tell."""

    alive: Optional[bool]  # None: cannot tell from here (another host, no launcher.json)
    pid: Optional[int]
    why: str  # for the user: "launcher 1234 on host-a", "launcher gone since 12:03:04", ...
    leftovers: Tuple[int, ...] = ()  # the job's processes still alive on this host when it is gone


def launcher_state(layout: JobLayout) -> LauncherState:
    """Read launcher.json and look at this host's processes: the same pid with the same start
    time and boot id is the launcher; anything else means it is gone (killed, or the machine
    rebooted). When it is gone, the job's processes still alive here are listed (by the job's
    uuid in their environment)."""
    import time

    from npulaunch.host.procs import boot_id, marked_processes

    try:
        record = read_json(layout.launcher_path)
    except UsageError:
        record = None
    if not isinstance(record, dict) or not isinstance(record.get("pid"), int):
        return LauncherState(None, None, "no readable launcher.json")
    pid, host = record["pid"], record.get("host")
    if host is not None and host != os.uname().nodename:  # gethostname()
        return LauncherState(None, pid, f"launcher {pid} runs on {host}: look there")
    same_boot = record.get("boot_id") in (None, boot_id())
    if same_boot and record.get("start_ticks") is not None and start_ticks(pid) == record["start_ticks"]:
        return LauncherState(True, pid, f"launcher {pid}")
    try:
        last = os.path.getmtime(layout.events_path)
        since = " since " + time.strftime("%Y-%m-%d %H:%M:%S", time.localtime(last))
    except OSError:
        since = ""
    uuid = _job_uuid(layout)
    leftovers = tuple(marked_processes(uuid)) if uuid and same_boot else ()
    return LauncherState(False, pid, f"launcher {pid} gone{since}", leftovers)


def _job_uuid(layout: JobLayout) -> Optional[str]:
    try:
        plan = read_json(layout.plan_path)
    except UsageError:
        return None
    uuid = plan.get("job_uuid") if isinstance(plan, dict) else None
    return uuid if isinstance(uuid, str) and uuid else None
