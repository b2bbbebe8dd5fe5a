"""The job as a series of attempts. After a failure whose root cause is a fault of the hardware (an
NPU the health watch saw fail, a lost host, a device fault in a rank's output), the job is *recovered*:
what broke is excluded, the job is planned again without it (spares take its place: plan/placement.py),
every rank's checkpoint directory is given the newest complete checkpoint (launch/resume.py), and the
next attempt starts, at most ``recovery.max_recoveries`` times. After another retryable failure it is
*restarted* as it was, at most ``job.max_restarts`` times. The faults go to the fault history
(launch/ledgerwrite.py); attempts that fail the same way without progress stop as a crash loop
(launch/crashloop.py). Each attempt has a fresh plan (new ports, its
own directory); the job directory's summary.json is the last attempt's, with every attempt listed.
"""

from __future__ import annotations

import os
from dataclasses import replace
from typing import Any, Callable, Dict, List, Mapping, Optional, Protocol, Sequence, Set, Tuple

from npulaunch.diagnose.summary import AttemptRecord, JobStatus, JobSummary
from npulaunch.host.errors import PlanError
from npulaunch.host.trace import debug
from npulaunch.launch.crashloop import CRASH_LOOP_EXIT, crash_loop
from npulaunch.launch.crashloop import THEN as CRASH_LOOP_THEN
from npulaunch.launch.jobdir import write_summary
from npulaunch.launch.ledgerwrite import record_faults
from npulaunch.launch.local import LocalRunner
from npulaunch.launch.recovery import exclusions_after, is_hardware
from npulaunch.launch.requeue import RequeueFailed, SlurmRequeue
from npulaunch.launch.resume import Resumed, checkpoint_dirs, resume
from npulaunch.launch.runner import Console, RankRunner
from npulaunch.launch.supervisor import Supervisor
from npulaunch.plan.launchplan import LaunchPlan
from npulaunch.plan.placement import Exclusion, NoSpare

PlanFor = Callable[[int, Sequence[Exclusion]], LaunchPlan]  # (attempt, exclusions) -> the attempt's plan
Recheck = Callable[[LaunchPlan], List[Exclusion]]  # what a health check of a new placement excludes


class Reforming(Protocol):
    """This node in torchrun's c10d rendezvous (plan/schedulers/c10d.py Membership): whether the world
    re-forms now, and why the next meeting happens."""

    cause: str  # "restart" or "join": told to the other nodes when this node meets them again

    def pending(self, joins_only: bool = False) -> Tuple[str, bool]: ...


def should_restart(summary: JobSummary, attempt: int, max_restarts: int, restart_on: str = "retryable") -> bool:
    """A failure of a rank (never a stop by signal, never a job that did not start), while attempts remain;
    with ``restart_on`` "retryable" (job.restart_on's default) only one whose root cause is retryable (never
    a configuration error, a Python exception or a kernel fault), with "any" every one, as torchrun does."""
    if summary.exit_code != 1 or attempt > max_restarts:
        return False
    return restart_on == "any" or summary.retryable


def why_not_restarted(summary: JobSummary, attempt: int, max_restarts: int, restart_on: str) -> str:
    """One line on why a failed job that may restart (max_restarts > 0) was not restarted; "" when it was
    not a failure of a rank (a stop by signal says so itself)."""
    if summary.exit_code != 1 or max_restarts == 0:
        return ""
    if attempt > max_restarts:
        used = f"{max_restarts} restart{'' if max_restarts == 1 else 's'}"
        return f"not restarted: the job has used its {used} (job.max_restarts)"
    cause = summary.root_cause.cause.label if summary.root_cause is not None else "the failure"
    return (
        f"not restarted: {cause} is not a failure a restart may cure (job.restart_on: retryable; "
        "restart_on: any, or --restart-on any, restarts after every failure, as torchrun does)"
    )


def run_with_restarts(
    plan_for: PlanFor,
    console: Console,
    max_restarts: int,
    inherited: Optional[Mapping[str, str]] = None,
    make_runner: Optional[Callable[[LaunchPlan], RankRunner]] = None,
    recheck: Optional[Recheck] = None,
    excluded: Sequence[Exclusion] = (),
    requeue: Optional[SlurmRequeue] = None,
    reform: Optional[Reforming] = None,
) -> JobSummary:
    """Run every attempt; ``make_runner(plan)`` gives each attempt its runner (default: this host's agent,
    in-process). ``recheck(plan)``: the health check of a re-planned attempt's NPUs, returning what it
    excludes. ``excluded``: what is never to be placed from the start (a spare host that cannot be reached).
    ``requeue``: a Slurm job npulaunch holds, requeued without its broken nodes when no spare is left (its
    earlier runs' attempts continue here). ``reform``: this node in torchrun's c10d rendezvous: when another
    node waits to join, the attempt stops (or its failure is taken) for it, and the next is planned on the
    new world, not counted as a restart; when another node restarts after a failure, this one restarts too,
    counted as there. Returns the job's summary (the last attempt's, listing them all)."""
    base_env = dict(os.environ if inherited is None else inherited)
    earlier_runs = requeue.earlier if requeue else ()
    attempts: List[AttemptRecord] = list(earlier_runs)
    stragglers: List[Dict[str, Any]] = []  # every attempt's, each with its attempt number
    excluded = list(excluded)
    restarts, recoveries = 0, requeue.recoveries_before if requeue else 0
    # every attempt's checkpoint directories, where a newer checkpoint may be
    earlier_dirs: List[str] = list(requeue.checkpoint_dirs) if requeue else []
    resumed: Optional[Resumed] = None
    planned: Optional[LaunchPlan] = None
    stopped = False  # recovery could not go on: the failed attempt's report is shown, then why
    requeue_without: List[str] = []  # the broken nodes the job is requeued without
    last_word = ""  # said after the report: why a failure that might have been restarted was not
    attempt = len(attempts) + 1
    uncounted = 0  # attempts that are no restart: the world re-formed, or a joining node's attempts before it
    first_here = True
    while True:
        try:
            planned = plan_for(attempt, tuple(excluded)) if planned is None else planned
            if planned.attempt > attempt:  # a node joining a running job takes node 0's attempt number
                uncounted += planned.attempt - attempt
                attempt = planned.attempt
            if attempt > 1:
                planned, resumed = resume(planned, earlier_dirs)
                for line in resumed.lines():
                    console.message(line)
                if resumed.error:
                    raise PlanError(f"cannot give every rank the checkpoint: {resumed.error}")
            runner = make_runner(planned) if make_runner is not None else LocalRunner(planned.this_host_plan, base_env)
            watch = reform.pending if reform is not None else None
            supervisor = Supervisor(planned, console, runner, base_env, first=first_here, watch=watch)
            first_here = False
            summary = supervisor.run(report=False)
            stragglers.extend(dict(record, attempt=attempt) for record in summary.stragglers)
        except PlanError as exc:
            if attempt == 1:
                raise
            # a restart that cannot start (its directory cannot be written, ...): the job ends with
            # the failure that asked for it, and says why there was no restart
            console.message(f"the next attempt could not start: {exc}")
            break
        plan = planned
        planned = None
        template = plan.recovery.get("checkpoint_dir")
        if template:
            earlier_dirs.extend(d for d in checkpoint_dirs(plan, template).values() if d not in earlier_dirs)
        record = _record(summary, plan, attempt, resumed, supervisor.last_step)
        attempts.append(record)
        cause = summary.root_cause.cause if summary.root_cause is not None else None
        hardware = summary.exit_code == 1 and is_hardware(cause)
        found = exclusions_after(cause, supervisor.kept, attempt) if hardware else []
        record_faults(plan, found, console)  # the fault history (plan/ledger.py), whatever follows
        # a failure while a node waits to join is the stop of a peer for the new world; a failure while another
        # node restarts after its own failure is a failure here too, counted as a restart, as on that node
        why_reform, elsewhere = supervisor.reformed, supervisor.reform_is_restart
        if not why_reform and reform is not None and summary.exit_code == 1:
            why_reform, elsewhere = reform.pending(joins_only=True)
        if elsewhere and attempt - uncounted > max_restarts:
            last_word = f"not restarted ({why_reform}): the job has used its {max_restarts} restarts"
            break
        if elsewhere:
            assert reform is not None
            supervisor.report(summary)
            restarts += 1
            reform.cause = "restart"
            attempts[-1] = _then(record, "restarted", ())
            console.message(
                f"restarting the job: {why_reform}: attempt {attempt + 1} (restart {restarts} of {max_restarts})"
            )
            attempt += 1
            continue
        if why_reform:  # the nodes change: every node stops its ranks and they meet again, no restart counted
            assert reform is not None
            reform.cause = "join"
            uncounted += 1
            attempts[-1] = record = _then(record, "re-formed", ())
            if supervisor.reformed:  # its ranks were stopped for the new world: not a failure
                attempts[-1] = replace(record, status=JobStatus.STOPPED, root_cause=None)
            console.message(
                f"the world re-forms ({why_reform}): every rank stopped; the nodes meet again at the c10d "
                f"rendezvous for attempt {attempt + 1} (not counted as a restart)"
            )
            attempt += 1
            continue
        loop = crash_loop(attempts, plan.crash_loop_limit) if summary.exit_code == 1 else None
        if loop is not None:  # the same failure without progress, again and again: never requeue it
            attempts[-1] = _then(record, CRASH_LOOP_THEN, found)
            summary = loop.ended(summary)
            console.message(f"the job stops: {loop.why}; exit code {CRASH_LOOP_EXIT} (do not requeue)")
            break
        if hardware:
            if not found:
                break
            attempts[-1] = record = _then(record, "", found)
            if recoveries >= plan.recovery.get("max_recoveries", 0):
                supervisor.report(summary)
                stopped = True
                console.message(
                    f"a fault of the hardware ({_listed(found)}), and the job has used its "
                    f"{recoveries} recoveries (recovery.max_recoveries): it stops here"
                )
                break
            supervisor.report(summary)
            before = len(excluded)
            planned = _replan(plan_for, attempt + 1, excluded, found, console, recheck)
            # what the failure excluded, and what the new placement's check found
            attempts[-1] = _then(record, "" if planned is None else "recovered", excluded[before:])
            if planned is None:
                stopped = True
                if requeue is not None:  # no spare left: the same job, back in the queue without them
                    requeue_without = sorted({e.host for e in excluded})
                    attempts[-1] = _then(record, "requeued", excluded[before:])
                break
            recoveries += 1
            console.message(
                f"recovery {recoveries} of {plan.recovery.get('max_recoveries')}: excluded {_listed(found)}; "
                f"attempt {attempt + 1} on {_where(planned)}"
            )
        elif should_restart(summary, attempt - uncounted, max_restarts, plan.restart_on):
            supervisor.report(summary)
            restarts += 1
            if reform is not None:
                reform.cause = "restart"
            attempts[-1] = _then(record, "restarted", ())
            why = record.root_cause.label if record.root_cause else "the failure"
            debug(__name__, "failure (%s), restart_on %s: restarting, attempt %d", why, plan.restart_on, attempt + 1)
            because = "retryable" if summary.retryable else "job.restart_on: any"
            console.message(
                f"restarting the job after {why} ({because}): attempt {attempt + 1} "
                f"(restart {restarts} of {max_restarts})"
            )
        else:
            last_word = why_not_restarted(summary, attempt - uncounted, max_restarts, plan.restart_on)
            break
        attempt += 1
    attempts = _with_steps_lost(attempts)
    summary = replace(summary.with_attempts(attempts), stragglers=tuple(stragglers))
    if not stopped:  # the last attempt's report, with every attempt (shown already when recovery said why not)
        supervisor.report(summary)
    if last_word:
        console.message(last_word)
    try:
        write_summary(plan.layout, summary)
    except OSError as exc:
        if supervisor.record_error is None:  # else it said so already
            console.message(
                f"the job record on disk is incomplete: cannot write {plan.layout.summary_path}: {exc.strerror}"
            )
    if requeue_without and requeue is not None:  # last: Slurm stops this batch script once the job is requeued
        _requeue(requeue, requeue_without, plan, console, recoveries)
    return summary


def _requeue(requeue: SlurmRequeue, nodes: Sequence[str], plan: LaunchPlan, console: Console, used: int) -> None:
    """Requeue the Slurm job without ``nodes`` while recoveries remain (``used``: the recoveries and requeues of
    this job id so far, SLURM_RESTART_COUNT among them)."""
    limit = plan.recovery.get("max_recoveries", 0)
    if used + 1 > limit:
        console.message(f"no spare is left, and the job has used its {limit} recoveries: it is not requeued")
        return
    try:
        console.message(requeue.request(nodes))
    except RequeueFailed as exc:
        console.message(f"no spare is left, and {exc}")


def _replan(
    plan_for: PlanFor,
    attempt: int,
    excluded: List[Exclusion],
    found: Sequence[Exclusion],
    console: Console,
    recheck: Optional[Recheck],
) -> Optional[LaunchPlan]:
    """The next attempt's plan without what was found (and without what a health check of the new
    placement finds); None, said, when nothing fits."""
    excluded.extend(found)
    for _ in range(8):  # each round excludes at least one NPU more; a cluster of broken spares ends here
        try:
            plan = plan_for(attempt, tuple(excluded))
        except NoSpare as exc:
            console.message(str(exc))
            return None
        more = [e for e in (recheck(plan) if recheck else []) if (e.host, e.device) not in _keys(excluded)]
        if not more:
            return plan
        console.message(f"the health check of the new placement excludes {_listed(more)}")
        excluded.extend(more)
    console.message("the health check kept finding faulty spares: the job stops")
    return None


def _keys(excluded: Sequence[Exclusion]) -> Set[Tuple[str, Optional[int]]]:
    return {(e.host, e.device) for e in excluded}


def _listed(found: Sequence[Exclusion]) -> str:
    return "; ".join(f"{e.what} ({e.reason})" for e in found)


def _where(plan: LaunchPlan) -> str:
    return ", ".join(f"{host} NPUs {','.join(map(str, ids))}" for host, ids in plan.devices_by_host().items())


def _record(
    summary: JobSummary, plan: LaunchPlan, attempt: int, resumed: Optional[Resumed], last_step: Optional[int]
) -> AttemptRecord:
    return replace(
        summary.attempt_record(attempt, plan.attempt_dir),
        devices=plan.devices_by_host(),
        resumed=resumed.to_json() if resumed is not None and attempt > 1 else None,
        last_step=last_step,
        changes=tuple(plan.recovery.get("changes") or ()),
    )


def _then(record: AttemptRecord, then: str, found: Sequence[Exclusion]) -> AttemptRecord:
    return replace(record, then=then, excluded=tuple(e.to_json() for e in found))


def _with_steps_lost(attempts: List[AttemptRecord]) -> List[AttemptRecord]:
    """Each attempt's steps lost: how far it got beyond the step the next attempt resumed from."""
    done = []
    for record, following in zip(attempts, [*attempts[1:], None]):
        lost = None
        if following is not None and record.last_step is not None:
            step = (following.resumed or {}).get("step")
            lost = max(record.last_step - (step or 0), 0)
        done.append(replace(record, steps_lost=lost))
    return done
