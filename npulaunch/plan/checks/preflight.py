"""Checks of a plan against this machine before anything starts: the working directory, the
command, the script it runs, the log directory. Reads the filesystem; starts nothing.

All problems are reported together (PlanError, exit 2). Remote hosts are checked by the SSH
backend's preflight, not here.
"""

from __future__ import annotations

import os
import shutil
from typing import List, Mapping, Optional, Tuple

from npulaunch.host.errors import PlanError
from npulaunch.plan.launchplan import LaunchPlan

PYTHON_NAMES = ("python", "python3")


def local_problems(plan: LaunchPlan, inherited: Mapping[str, str]) -> List[str]:
    """What would make this host's ranks fail at once; empty when nothing was found."""
    problems: List[str] = []
    seen_cwds = set()
    for spec in plan.this_host_plan.ranks:
        if spec.cwd in seen_cwds:
            continue
        seen_cwds.add(spec.cwd)
        if not os.path.isdir(spec.cwd):
            problems.append(f"working directory {spec.cwd} does not exist (job.workdir)")
            continue
        path = spec.env.get("PATH", inherited.get("PATH", os.defpath))
        program = spec.argv[0]
        if os.sep in program:
            resolved = os.path.join(spec.cwd, program)
            if not (os.path.isfile(resolved) and os.access(resolved, os.X_OK)):
                problems.append(f"command {program} is not an executable file (from {spec.cwd})")
        elif shutil.which(program, path=path) is None:
            problems.append(f"command {program!r} is not found on the ranks' PATH")
        script = python_script(spec.argv)
        if script is not None and not os.path.isfile(os.path.join(spec.cwd, script)):
            problems.append(f"script {script} does not exist (from working directory {spec.cwd})")
    problems.extend(_written_dir_problems(plan))
    problems.extend(_meeting_port_problems(plan))
    if os.path.exists(plan.attempt_dir if plan.node is not None else plan.job_dir):  # nodes share a job dir
        problems.append(
            f"job directory {plan.attempt_dir if plan.node is not None else plan.job_dir} already "
            "exists: choose another --job-id or remove it"
        )
    return problems


def _meeting_port_problems(plan: LaunchPlan) -> List[str]:
    """The meeting point's port, when it is on this host: bound by another process, the job's ranks could
    not meet (torch's TCPStore on rank 0, msrun's scheduler fail at once). A remote first host checks it
    in its preflight (plan/checks/health.py)."""
    if plan.meeting is None or plan.hosts[0] not in plan.local_names or plan.node not in (None, 0):
        return []
    from npulaunch.host.health.hostnet import port_free
    from npulaunch.plan.frameworks import meeting_port_var

    port = plan.meeting[1]
    if port_free(port):
        return []
    name = meeting_port_var(plan.framework)
    return [
        f"{name} {port} ({plan.sources.get('framework.master_port', '')}) is in use on this host: the ranks could "
        "not meet there; choose another with framework.master_port (or --master-port), or stop what holds it"
    ]


def _written_dir_problems(plan: LaunchPlan) -> List[str]:
    """The directories the ranks' options make CANN write to must exist or be creatable by this user
    (each is made before its rank starts; CANN refuses a dump_path, work_path or graph compile cache
    that does not exist)."""
    problems, seen = [], set()
    for spec in plan.this_host_plan.ranks:
        for option, directory in spec.make_dirs:
            if directory in seen:
                continue
            seen.add(directory)
            why = _why_not_creatable(directory)
            if why:
                what = option if option.startswith("job.") else f"session option {option}"  # job.make_dirs
                problems.append(f"{what} of rank {spec.rank}: directory {directory} {why}")
    return problems


def _why_not_creatable(directory: str) -> str:
    """Why ``directory`` cannot be written to or made here; empty when it can."""
    path = directory
    while not os.path.exists(path):
        parent = os.path.dirname(path)
        if parent == path:
            break
        path = parent
    if not os.path.isdir(path):
        return f"cannot be made: {path} is not a directory"
    if not os.access(path, os.W_OK | os.X_OK):
        return "is not writable" if path == directory else f"cannot be made: {path} is not writable"
    return ""


def python_script(argv: Tuple[str, ...]) -> Optional[str]:
    """The script a ``python3 [options] script.py`` command runs, if that is its shape."""
    name = os.path.basename(argv[0])
    if name not in PYTHON_NAMES and not name.startswith("python3."):
        return None
    args = iter(argv[1:])
    for arg in args:
        if arg in ("-m", "-c", "-"):
            return None
        if arg in ("-W", "-X"):  # options that take the next word as their value
            next(args, None)
        elif not arg.startswith("-"):
            return arg
    return None


def check_local(plan: LaunchPlan, inherited: Mapping[str, str]) -> None:
    problems = local_problems(plan, inherited)
    if problems:
        raise PlanError("the job cannot start on this host:\n" + "\n".join("  " + p for p in problems))
