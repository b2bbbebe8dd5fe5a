"""Rank mode (``npulaunch exec``): under ``srun -n N`` / ``mpirun -n N`` this process becomes the
rank the scheduler made it: it checks that the scheduler's numbering matches the plan, writes the
node's plan.json and the rank table once, and execs the command with the rank's environment (no
npulaunch process stays between the scheduler and the rank).
"""

from __future__ import annotations

import os
import sys
from typing import Optional, Tuple

from npulaunch.host.agent.prepare import prepare_rank
from npulaunch.host.errors import NpulaunchError, UsageError
from npulaunch.host.files import write_once
from npulaunch.host.spec import RankSpec
from npulaunch.plan.launchplan import LaunchPlan
from npulaunch.plan.planjson import render_plan_json
from npulaunch.plan.prepare import Loaded, planner
from npulaunch.plan.ranktable import render_rank_table

SPAWN_FAILED_EXIT_CODE = 127  # as a shell says of a command it cannot run


class ExecFailed(NpulaunchError):
    """The rank's command could not be executed."""

    exit_code = SPAWN_FAILED_EXIT_CODE


def _rank_cpus(plan: LaunchPlan, spec: RankSpec) -> Optional[Tuple[int, ...]]:
    """The rank's CPUs: the plan's, or (when the plan left them to the host: auto, or no facts of it)
    decided here as the agent would, among the node's ranks (host/topology.py)."""
    if spec.cpus is not None or not spec.cpu_request:
        return spec.cpus
    from npulaunch.host.topology import BindingError, decide_on_host

    asked = [
        (s.rank, s.device_id, s.cpu_request) for s in plan.ranks if s.node_rank == spec.node_rank and s.cpu_request
    ]
    try:
        return decide_on_host(asked, spec.host).get(spec.rank)
    except BindingError as exc:
        raise UsageError(f"job.cpu_binding: {exc}") from None


def exec_rank(loaded: Loaded) -> int:
    """Become the rank; returns only if the command cannot be executed (raises ExecFailed)."""
    view = loaded.view
    if loaded.node is None or view is None or view.rank is None:
        raise UsageError(
            "npulaunch exec runs as one task of a scheduler's job (srun -n N, mpirun -n N, ...), and "
            "no scheduler was found in the environment (or pass --scheduler)"
        )
    plan = planner(loaded)(1)
    if plan.helpers:
        raise UsageError(
            f"framework {plan.framework} needs a scheduler process beside the ranks, which npulaunch exec (one "
            "task per rank) cannot start: run one npulaunch per node (npulaunch run), as msrun does"
        )
    spec = plan.ranks[view.rank]
    if (spec.node_rank, spec.local_rank) != (loaded.node, view.local_rank):
        raise UsageError(
            f"{view.kind.value} made this task rank {view.rank}, task {view.local_rank} on node "
            f"{loaded.node}; in the plan rank {view.rank} is task {spec.local_rank} on node "
            f"{spec.node_rank}: distribute tasks in blocks (srun --distribution=block, mpirun "
            "--map-by slot)"
        )
    layout = plan.layout
    os.makedirs(layout.own_dir, 0o700, exist_ok=True)
    write_once(layout.plan_path, render_plan_json(plan, {spec.host: dict(os.environ)}))
    if plan.rank_table is not None and plan.rank_table_path is not None:
        write_once(plan.rank_table_path, render_rank_table(plan.rank_table))
    env = prepare_rank(spec, os.environ)
    cpus = _rank_cpus(plan, spec)
    if cpus:  # job.cpu_binding: this process becomes the rank, so it binds itself before the exec
        os.sched_setaffinity(0, cpus)
    os.chdir(spec.cwd)
    sys.stdout.flush()
    sys.stderr.flush()
    try:
        os.execvpe(spec.argv[0], list(spec.argv), env)
    except OSError as exc:
        raise ExecFailed(f"cannot start {spec.argv[0]!r}: {exc.strerror or exc}") from None
    raise AssertionError("not reached: exec replaced this process")
