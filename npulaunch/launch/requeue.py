"""Requeueing a Slurm job without its broken nodes, when npulaunch holds the allocation and no spare is left:
the job goes back to the queue under the same job id, its excluded nodes grown by the broken ones, and its
next run (the batch script again) continues the same job: the attempts of every run in one summary.json,
every rank resumed from the newest checkpoint, ``SLURM_RESTART_COUNT`` counted against
``recovery.max_recoveries``.

Slurm changes a job's excluded nodes only while it is pending ("Job is no longer pending execution" for a
running one, scontrol update), and a requeue stops the batch script (SIGTERM) before it could do it after.
So the job is requeued held (``scontrol requeuehold``), and a small job submitted just before, the release,
waits until it is pending, adds the nodes to its ExcNodeList, and releases it (plan/schedulers/slurm.py
writes both commands). What the scheduler says is checked in the tests against the real Slurm they start.
"""

from __future__ import annotations

import json
import os
import shutil
import subprocess
from dataclasses import dataclass, field
from typing import List, Mapping, Sequence, Tuple

from npulaunch.diagnose.jsonfields import SummaryError
from npulaunch.diagnose.summary import AttemptRecord, JobSummary
from npulaunch.host.errors import NpulaunchError
from npulaunch.host.trace import debug
from npulaunch.plan.launchplan import LaunchPlan
from npulaunch.plan.layout import JobLayout
from npulaunch.plan.schedulers.slurm import release_job_argv, requeue_argv

SCONTROL_TIMEOUT_S = 30.0


class RequeueFailed(NpulaunchError):
    """Slurm did not take the requeue (the job is not requeueable, scontrol failed): the job stops here."""

    exit_code = 1


@dataclass(frozen=True)
class SlurmRequeue:
    """A run of a Slurm job that npulaunch may requeue: what earlier runs of the job id did, and how to ask."""

    job_id: str
    restart_count: int  # SLURM_RESTART_COUNT: requeues so far
    earlier: Tuple[AttemptRecord, ...] = ()  # the attempts of the earlier runs (the job's summary.json)
    checkpoint_dirs: Tuple[str, ...] = ()  # their ranks' checkpoint directories
    partition: str = ""
    account: str = ""
    env: Mapping[str, str] = field(default_factory=dict)

    @property
    def recoveries_before(self) -> int:
        """Recoveries the earlier runs used: each attempt recovered in place, and each requeue."""
        return self.restart_count + sum(1 for a in self.earlier if a.then == "recovered")

    def request(self, nodes: Sequence[str]) -> str:
        """Requeue the job held, with a release job that excludes ``nodes`` and lets it go; what was done.
        The batch script is stopped by Slurm soon after (its job is requeued): say everything before."""
        scontrol, sbatch = shutil.which("scontrol"), shutil.which("sbatch")
        if scontrol is None or sbatch is None:
            raise RequeueFailed("scontrol or sbatch is not on the PATH: the job cannot be requeued")
        release = release_job_argv(sbatch, scontrol, self.job_id, nodes, self.partition, self.account)
        _run(release, "submit the job that releases the requeued one")
        _run(requeue_argv(scontrol, self.job_id), f"requeue job {self.job_id}")
        return f"requeued job {self.job_id} without {', '.join(nodes)}; it resumes there from the newest checkpoint"


def _run(argv: List[str], what: str) -> str:
    debug(__name__, "%s: %s", what, argv)
    try:
        done = subprocess.run(argv, capture_output=True, text=True, timeout=SCONTROL_TIMEOUT_S, check=False)
    except (OSError, subprocess.TimeoutExpired) as exc:
        raise RequeueFailed(f"could not {what}: {exc}") from None
    if done.returncode != 0:
        said = (done.stderr or done.stdout).strip().splitlines()
        raise RequeueFailed(f"could not {what}: {said[-1] if said else f'exit status {done.returncode}'}")
    return done.stdout


def slurm_requeue(plan: LaunchPlan, environ: Mapping[str, str]) -> SlurmRequeue:
    """This run of the Slurm job ``plan`` belongs to: its earlier runs' attempts when it was requeued."""
    count = int(environ.get("SLURM_RESTART_COUNT") or 0)
    earlier: Tuple[AttemptRecord, ...] = ()
    dirs: Tuple[str, ...] = ()
    layout = JobLayout(plan.job_dir, plan.node)
    if count and os.path.exists(layout.summary_path):
        earlier, dirs = _earlier_runs(layout, plan)
    return SlurmRequeue(
        job_id=plan.job_id if not environ.get("SLURM_JOB_ID") else str(environ["SLURM_JOB_ID"]),
        restart_count=count,
        earlier=earlier,
        checkpoint_dirs=dirs,
        partition=environ.get("SLURM_JOB_PARTITION", ""),
        account=environ.get("SLURM_JOB_ACCOUNT", ""),
    )


def _earlier_runs(layout: JobLayout, plan: LaunchPlan) -> Tuple[Tuple[AttemptRecord, ...], Tuple[str, ...]]:
    """The attempts the job's summary.json lists, and the checkpoint directories of their plans (a rank moved
    to another host or NPU may have written its checkpoint in a directory named after it)."""
    from npulaunch.launch.resume import planned_checkpoint_dirs

    try:
        with open(layout.summary_path, encoding="utf-8") as handle:
            summary = JobSummary.from_json(json.load(handle), layout.summary_path)
    except (OSError, ValueError, SummaryError):
        return (), ()
    dirs: List[str] = []
    template = plan.recovery.get("checkpoint_dir")
    for record in summary.attempts or ():
        if template:
            dirs.extend(
                d for d in planned_checkpoint_dirs(os.path.join(record.dir, "plan.json"), template) if d not in dirs
            )
    return tuple(summary.attempts or ()), tuple(dirs)
