"""The job directory, written: created private, with plan.json, the rank table, launcher.json and
summary.json / failure.json. The supervisor calls these; it never builds a path itself.
"""

from __future__ import annotations

import json
import os
from typing import Any, Dict, Mapping

from npulaunch.host.errors import PlanError
from npulaunch.host.files import write_once, write_private
from npulaunch.plan.build import LaunchPlan
from npulaunch.plan.ranktable import render_rank_table
from npulaunch.plan.planjson import render_plan_json

PLAN_FILENAME = "plan.json"
EVENTS_FILENAME = "events.jsonl"
SUMMARY_FILENAME = "summary.json"
FAILURE_FILENAME = "failure.json"


def prepare_job_dir(plan: LaunchPlan, inherited: Mapping[str, str]) -> None:
    """Create ``<log_dir>/<job_id>/`` (mode 0700) with plan.json and the rank table. Under a
    scheduler every node does this in a job directory the nodes may share: the node's own
    directory in it must be new, the rank table is written once, whole, by whichever node is first."""
    os.makedirs(os.path.dirname(plan.job_dir), exist_ok=True)
    own = plan.own_dir
    try:
        if plan.node is not None:
            os.makedirs(plan.job_dir, 0o700, exist_ok=True)
        os.mkdir(own, 0o700)
    except FileExistsError:
        raise PlanError(f"job directory {own} already exists: choose another --job-id") from None
    except OSError as exc:
        raise PlanError(f"cannot create job directory {own}: {exc.strerror}") from None
    os.chmod(own, 0o700)  # whatever the umask
    write_private(os.path.join(own, PLAN_FILENAME), render_plan_json(plan, {host: inherited for host in plan.hosts}))
    if plan.rank_table is not None and plan.rank_table_path is not None:
        if plan.node is None:
            write_private(plan.rank_table_path, render_rank_table(plan.rank_table))
        else:
            write_once(plan.rank_table_path, render_rank_table(plan.rank_table))


LAUNCHER_FILENAME = "launcher.json"  # who is running the job: for npulaunch stop


def write_launcher(job_dir: str) -> None:
    """Record this launcher (pid and start time, so a reused pid is never mistaken for it)."""
    from npulaunch.host.agent.procs import start_ticks

    write_private(os.path.join(job_dir, LAUNCHER_FILENAME),
                  json.dumps({"pid": os.getpid(), "start_ticks": start_ticks(os.getpid())}) + "\n")


def write_summary(directory: str, summary: Dict[str, Any]) -> None:
    """summary.json, and failure.json when there is a root cause."""
    write_private(os.path.join(directory, SUMMARY_FILENAME), json.dumps(summary, indent=2) + "\n")
    if summary["root_cause"] is not None:
        write_private(os.path.join(directory, FAILURE_FILENAME), json.dumps(summary["root_cause"], indent=2) + "\n")
