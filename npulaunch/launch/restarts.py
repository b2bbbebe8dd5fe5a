"""The job as a series of attempts: run it, and run it again (a fresh plan: new ports, a new
attempt directory) after a retryable failure, at most ``max_restarts`` times. The job directory's
summary.json is the last attempt's, with every attempt listed.
"""

from __future__ import annotations

import os
from typing import Callable, List, Mapping, Optional

from npulaunch.diagnose.summary import AttemptRecord, JobSummary
from npulaunch.host.errors import PlanError
from npulaunch.host.trace import debug
from npulaunch.launch.jobdir import write_summary
from npulaunch.launch.local import LocalRunner
from npulaunch.launch.runner import Console, RankRunner
from npulaunch.launch.supervisor import Supervisor
from npulaunch.plan.launchplan import LaunchPlan


def should_restart(summary: JobSummary, attempt: int, max_restarts: int) -> bool:
    """Only a failure whose root cause is retryable (never a configuration error or a kernel
    fault, never a stop by signal), and only while attempts remain."""
    return summary.exit_code == 1 and summary.retryable and attempt <= max_restarts


def run_with_restarts(
    plan_for: Callable[[int], LaunchPlan],
    console: Console,
    max_restarts: int,
    inherited: Optional[Mapping[str, str]] = None,
    make_runner: Optional[Callable[[LaunchPlan], RankRunner]] = None,
) -> JobSummary:
    """Run every attempt; ``make_runner(plan)`` gives each attempt its runner (default: this
    host's agent, in-process). Returns the job's summary (the last attempt's, listing them all)."""
    base_env = dict(os.environ if inherited is None else inherited)
    attempts: List[AttemptRecord] = []
    attempt = 1
    while True:
        try:
            planned = plan_for(attempt)
            runner = make_runner(planned) if make_runner is not None else LocalRunner(planned.this_host_plan, base_env)
            supervisor = Supervisor(planned, console, runner, base_env)
            summary = supervisor.run()
        except PlanError as exc:
            if attempt == 1:
                raise
            # a restart that cannot start (its directory cannot be written, ...): the job ends with
            # the failure that asked for it, and says why there was no restart
            console.message(f"the restart could not start: {exc}")
            break
        plan = planned
        record = summary.attempt_record(attempt, plan.attempt_dir)
        attempts.append(record)
        if not should_restart(summary, attempt, max_restarts):
            break
        why = record.root_cause.label if record.root_cause else "?"
        debug(__name__, "retryable failure (%s): restarting, attempt %d", why, attempt + 1)
        console.message(
            f"the failure is retryable ({why}): restarting the job, attempt {attempt + 1} of {max_restarts + 1}"
        )
        attempt += 1
    summary = summary.with_attempts(attempts)
    try:
        write_summary(plan.layout, summary)
    except OSError as exc:
        if supervisor.record_error is None:  # else it said so already
            console.message(
                f"the job record on disk is incomplete: cannot write {plan.layout.summary_path}: {exc.strerror}"
            )
    if len(attempts) > 1:
        console.message(
            "attempts: "
            + "; ".join(
                f"{a.attempt}: {a.status.value}" + (f" ({a.root_cause.label})" if a.root_cause else "")
                for a in attempts
            )
        )
    return summary
