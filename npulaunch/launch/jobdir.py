"""The job directory, written: created private, with plan.json, the rank table, launcher.json,
each attempt's directory and events.jsonl, and summary.json / failure.json. Every path comes from
the plan's JobLayout; the supervisor calls these and never builds a path itself.
"""

from __future__ import annotations

import json
import os
import shutil
from typing import IO, Mapping

from npulaunch.diagnose.summary import JobSummary
from npulaunch.host.errors import PlanError
from npulaunch.host.files import write_once, write_private
from npulaunch.plan.launchplan import LaunchPlan
from npulaunch.plan.layout import JobLayout
from npulaunch.plan.planjson import render_plan_json
from npulaunch.plan.ranktable import render_rank_table


def prepare_job_dir(plan: LaunchPlan, inherited: Mapping[str, str]) -> None:
    """Create ``<log_dir>/<job_id>/`` (mode 0700) with plan.json and the rank table. Under a
    scheduler every node does this in a job directory the nodes may share: the node's own
    directory in it must be new, the rank table is written once, whole, by whichever node is first."""
    layout = plan.layout
    own = layout.own_dir
    try:
        os.makedirs(os.path.dirname(layout.job_dir), exist_ok=True)
        if plan.node is not None:
            os.makedirs(layout.job_dir, 0o700, exist_ok=True)
            # nodes share the job directory: a symlink there (npulaunch never makes one) could send this
            # node's records, and the rank table every rank reads, anywhere
            if os.path.islink(layout.job_dir):
                raise PlanError(f"job directory {layout.job_dir} is a symbolic link, which npulaunch did not make")
        os.mkdir(own, 0o700)  # atomic: of two launchers choosing the same directory, one gets it
    except FileExistsError as exc:
        if exc.filename is not None and os.path.abspath(exc.filename) != os.path.abspath(own):
            raise PlanError(f"cannot create job directory {own}: {exc.filename} is a file") from None
        raise PlanError(f"job directory {own} already exists: choose another --job-id") from None
    except OSError as exc:
        raise PlanError(f"cannot create job directory {own}: {_why(exc)}") from None
    try:
        os.chmod(own, 0o700)  # whatever the umask
        write_private(layout.plan_path, render_plan_json(plan, {host: inherited for host in plan.hosts}))
        if plan.rank_table is not None and plan.rank_table_path is not None:
            text = render_rank_table(plan.rank_table)
            if plan.node is None:
                write_private(plan.rank_table_path, text)
            elif not write_once(plan.rank_table_path, text) and _read_text(plan.rank_table_path) != text:
                # another node wrote it first: every node plans the same table, so it must be this one
                shutil.rmtree(own, ignore_errors=True)
                raise PlanError(
                    f"{plan.rank_table_path} exists but is not the rank table of job {plan.job_id} as this node "
                    "plans it (left by another job with the same id, or changed): remove it or choose another --job-id"
                )
    except OSError as exc:  # a full disk, a read-only mount: nothing has started, leave nothing behind
        shutil.rmtree(own, ignore_errors=True)
        raise PlanError(f"cannot write the job directory {own}: {_why(exc)}; nothing was started") from None


def _read_text(path: str) -> str:
    with open(path, encoding="utf-8", errors="replace") as handle:
        return handle.read()


def _why(exc: OSError) -> str:
    """``No space left on device (plan.json)``: the reason, and the file when it is not the directory."""
    name = f" ({os.path.basename(exc.filename)})" if exc.filename else ""
    return f"{exc.strerror or exc}{name}"


def prepare_attempt_dir(plan: LaunchPlan, inherited: Mapping[str, str]) -> None:
    """With restarts: the attempt's own directory (new, mode 0700) with the attempt's plan.json.
    Without, nothing: the attempt's files go in the job directory itself."""
    layout = plan.layout
    if layout.attempt:
        try:
            os.mkdir(layout.attempt_dir, 0o700)
            write_private(layout.attempt_plan_path, render_plan_json(plan, {host: inherited for host in plan.hosts}))
            if plan.rank_table is not None and plan.rank_table_path is not None and plan.attempt > 1:
                write_private(plan.rank_table_path, render_rank_table(plan.rank_table))  # the attempt's own
        except OSError as exc:
            raise PlanError(f"cannot write the attempt directory {layout.attempt_dir}: {_why(exc)}") from None


def open_events(layout: JobLayout) -> IO[str]:
    """The attempt's events.jsonl, to append to (mode 0600; line-buffered: readers see whole lines)."""
    fd = os.open(layout.events_path, os.O_WRONLY | os.O_CREAT | os.O_APPEND, 0o600)
    return os.fdopen(fd, "w", encoding="utf-8", buffering=1)


def write_launcher(layout: JobLayout) -> None:
    """Record this launcher in launcher.json: its host, pid, start time in clock ticks since boot and
    the boot id (so that neither a reused pid nor a rebooted machine is mistaken for it), and the
    wall-clock start. What ``npulaunch stop`` signals and ``status`` checks (launch/control.py)."""
    import time

    from npulaunch.host.procs import boot_id, start_ticks

    record = {
        "pid": os.getpid(),
        "start_ticks": start_ticks(os.getpid()),
        "boot_id": boot_id(),
        "host": os.uname().nodename,  # gethostname(), without importing socket (2 ms)
        "started": time.time(),
    }
    write_private(layout.launcher_path, json.dumps(record) + "\n")


def write_summary(layout: JobLayout, summary: JobSummary) -> None:
    """The job's summary.json (with restarts: the last attempt's, listing every attempt), and
    failure.json when there is a root cause."""
    _write(layout.summary_path, layout.failure_path, summary)


def write_attempt_summary(layout: JobLayout, summary: JobSummary) -> None:
    """One attempt's summary.json and failure.json, in its own directory (without restarts: the
    job's, until write_summary writes them again with the attempts listed)."""
    _write(layout.attempt_summary_path, layout.attempt_failure_path, summary)


def _write(summary_path: str, failure_path: str, summary: JobSummary) -> None:
    write_private(summary_path, json.dumps(summary.to_json(), indent=2) + "\n")
    if summary.root_cause is not None:
        write_private(failure_path, json.dumps(summary.root_cause.to_json(), indent=2) + "\n")
