"""One job, start to end, as ``npulaunch run`` and ``npulaunch check`` see it: connect to the
remote hosts when there are any (Fabric is imported only then) and check every host, plan the
job, then run it under the supervisor with its restarts. The fleet of SSH connections is always
closed, whatever happens.
"""

from __future__ import annotations

import os
from dataclasses import dataclass
from typing import TYPE_CHECKING, Callable, Optional, Tuple

from npulaunch.diagnose.summary import JobSummary
from npulaunch.launch.restarts import run_with_restarts
from npulaunch.launch.runner import Console, RankRunner
from npulaunch.plan.launchplan import LaunchPlan
from npulaunch.plan.preflight import check_local
from npulaunch.plan.prepare import Loaded, is_remote, planner

if TYPE_CHECKING:
    from npulaunch.launch.ssh.fleet import Fleet


@dataclass(frozen=True)
class CheckedJob:
    """What ``npulaunch check`` found: the plan, and what the hosts' preflight warned about."""

    plan: LaunchPlan
    warnings: Tuple[str, ...]
    over_ssh: bool


def _open_fleet(loaded: Loaded) -> "Optional[Fleet]":
    if not is_remote(loaded):
        return None
    try:
        from npulaunch.launch.ssh.fleet import open_fleet
    except ImportError as exc:  # Fabric / Paramiko: the ssh extra
        from npulaunch.host.errors import UsageError

        raise UsageError(
            f"a job on several hosts needs the ssh extra ({exc.name or 'Fabric'} is not installed): "
            "python3 -m pip install 'npulaunch[ssh]'"
        ) from None
    return open_fleet(loaded)


def check_job(loaded: Loaded, offline: bool = False) -> CheckedJob:
    """Plan the job and check every host (over SSH unless ``offline``); start nothing."""
    fleet = None if offline else _open_fleet(loaded)
    try:
        plan = planner(loaded, fleet.facts if fleet else None)(1)
    finally:
        if fleet is not None:
            fleet.close()
    if plan.is_local_only():
        check_local(plan, os.environ)
    return CheckedJob(plan, plan.warnings + tuple(fleet.warnings if fleet else ()), fleet is not None)


def run_job(
    loaded: Loaded,
    make_console: Callable[[LaunchPlan], Console],
    finished: Optional[Callable[[JobSummary, str], object]] = None,
) -> int:
    """Run the job until it ends; returns the process's exit code (0, 1 or 128+N). ``finished``:
    called with the job's summary and the directory of its summary.json (the views write the
    HTML report there)."""
    fleet = _open_fleet(loaded)
    try:
        plan_for = planner(loaded, fleet.facts if fleet else None)
        plan = plan_for(1)
        make_runner: Optional[Callable[[LaunchPlan], RankRunner]] = None
        if fleet is None:
            check_local(plan, os.environ)
        else:
            from npulaunch.launch.ssh.run import FleetRun

            open_fleet = fleet

            def make_runner(plan: LaunchPlan) -> RankRunner:
                return FleetRun(plan, open_fleet)

        console = make_console(plan)
        for note in plan.notes:
            console.message(f"note: {note}")
        for warning in plan.warnings:
            console.message(warning)
        summary = run_with_restarts(plan_for, console, plan.max_restarts, make_runner=make_runner)
        if finished is not None:
            finished(summary, plan.layout.own_dir)
        return summary.exit_code
    finally:
        if fleet is not None:
            fleet.close()
