"""The report as text: the lines printed at the end of ``npulaunch run`` and by ``npulaunch report``,
rendered from a JobSummary. Pure rendering; what the report says is decided in diagnose/.
"""

from __future__ import annotations

import os
from typing import List, Sequence

from npulaunch.diagnose.cause import RootCause, rank_ranges, ranks_word
from npulaunch.diagnose.failure import FailureReport
from npulaunch.diagnose.stragglers import describe
from npulaunch.diagnose.summary import AttemptRecord, JobStatus, JobSummary
from npulaunch.host.errorfile import raised_text
from npulaunch.host.records import RankState
from npulaunch.host.spec import HELPER_RANK

_PLAIN_ENDS = ("exit", "signal", "hang")  # causes whose reason says it all: no error line, no excerpt


def render_report(summary: JobSummary) -> str:
    """The lines printed at the end of the console (and by ``npulaunch report``)."""
    job = summary.job
    start, end = summary.span  # the whole job's, over every attempt
    head = f"npulaunch: job {job.job_id} {job.status.value} after {end - start:.1f} s"
    if summary.attempts and len(summary.attempts) > 1:
        head += f" ({len(summary.attempts)} attempts, the last {job.duration_s:.1f} s)"
    lines = [head + f" ({job.world_size} rank{'s' if job.world_size != 1 else ''})"]
    if job.stop_signal:
        lines.append(f"  stopped because npulaunch received {job.stop_signal}")
    if summary.root_cause is not None:
        lines.extend(root_cause_lines(summary.root_cause))
    elif job.status is not JobStatus.SUCCEEDED:
        stopped = [r.result.rank for r in summary.ranks if r.result.state is not RankState.SUCCEEDED]
        if stopped:
            lines.append(f"  ranks {rank_ranges(stopped)}: stopped by npulaunch")
    if job.strays_killed:
        lines.append(f"  killed {len(job.strays_killed)} leftover process(es) of the job")
    if summary.crash_loop:
        lines.append(f"  stopped as {summary.crash_loop.get('why')}: exit code {job.exit_code} (do not requeue)")
    lines.extend(straggler_lines(summary))
    if summary.attempts and len(summary.attempts) > 1:
        lines.append("  attempts:")
        lines.extend("    " + line for line in attempt_lines(summary.attempts))
    lines.append(f"  job directory: {job.job_dir}")
    return "\n".join(lines) + "\n"


def straggler_lines(summary: JobSummary) -> List[str]:
    """The ranks named slower than their peers (diagnose/stragglers.py), and for how long."""
    lines = []
    for record in summary.stragglers:
        attempt = f"attempt {record['attempt']}: " if record.get("attempt") and len(summary.attempts or ()) > 1 else ""
        until = record.get("until")
        span = (
            f" (for {until - record['since']:.0f} s)"
            if isinstance(until, (int, float))
            else " (to the end)"
            if record.get("state") == "slow"
            else ""
        )
        lines.append(f"  slow rank: {attempt}{describe(record)}{span}")
    return lines


def attempt_lines(attempts: Sequence[AttemptRecord]) -> List[str]:
    """Each attempt in a few words: how it ended and why, where it ran, what it resumed from, what its
    failure excluded, and what followed (the report, ``npulaunch status``)."""
    lines = []
    for a in attempts:
        why = f" ({a.root_cause.label}, rank {a.root_cause.rank})" if a.root_cause else ""
        where = "; ".join(f"{host} NPUs {','.join(map(str, ids))}" for host, ids in a.devices.items())
        head = f"{a.attempt}: {a.status.value}{why}" + (f" on {where}" if where else "")
        resumed = a.resumed or {}
        if a.attempt > 1 and resumed:
            step, checkpoint = resumed.get("step"), resumed.get("checkpoint")
            if resumed.get("by") == "script":
                head += "; no checkpoint from npulaunch (the script's own, if it keeps one)"
            elif step is not None:
                head += f"; resumed from step {step}"
            else:  # a torch file's name may carry no step
                head += (
                    f"; resumed from {os.path.basename(checkpoint)}" if checkpoint else "; started from the beginning"
                )
        if a.last_step is not None:
            head += f"; reached step {a.last_step}"
        if a.steps_lost is not None:
            head += f" ({a.steps_lost} step{'' if a.steps_lost == 1 else 's'} lost)"
        lines.append(head)
        lines.extend(f"   moved: {change}" for change in a.changes)
        for skipped in resumed.get("skipped") or ():
            lines.append(f"   skipped checkpoint {skipped[0]}: {skipped[1]}")
        for e in a.excluded:
            what = f"{e.get('host')} NPU {e['device']}" if e.get("device") is not None else f"host {e.get('host')}"
            lines.append(f"   excluded {what}: {e.get('reason')}")
        if a.then:
            lines.append(f"   then {a.then}")
    return lines


def code_lines(cause: RootCause) -> List[str]:
    """What the catalog and the message say beyond the code: CANN's title and module, a code no catalog
    lists, MindCluster's level for a hardware fault, the block's detail, the message's other codes."""
    lines = []
    info = cause.code_info or {}
    if info:
        known = "" if info.get("known", True) else "; not in the catalog of the CANN versions npulaunch knows"
        title = f"{info.get('title')} " if info.get("title") else ""
        scope = f", {info['scope']} error" if info.get("scope") else ""
        level = f"; MindCluster's level {info['level']}" if info.get("level") else ""
        lines.append(f"  code: {title}({info.get('module')}{scope}){level}{known}")
    if cause.detail:
        lines.append(f"  detail: {cause.detail}")
    if cause.codes:
        lines.append(f"  other codes in the message: {', '.join(cause.codes)}")
    return lines


def raised_lines(root: FailureReport) -> List[str]:
    """What the rank raised, from its error file (torch's ``@record``): the exception, unless the reason says
    it already, and its traceback, unless the excerpt or the log's last lines shown hold all of its frames
    (their lines may carry a prefix: torch's ``[rank1]: ``)."""
    raised = root.cause.raised
    if not raised:
        return []
    lines = []
    said = raised_text(raised)
    if said not in root.reason:
        lines.append(f"  raised: {said}")
    traceback = str(raised.get("traceback") or "").rstrip("\n").splitlines()
    shown = (root.cause.excerpt if len(root.cause.excerpt) > 1 else ()) + root.last_lines
    told = [text for text in traceback[1:] if text.strip()]  # the header says nothing
    if told and not all(any(line.endswith(text) for line in shown) for text in told):
        lines.append(f"  traceback (from {raised.get('path')}):")
        lines.extend("    | " + text for text in traceback)
    return lines


def root_cause_lines(root: FailureReport) -> List[str]:
    """The root cause as the report says it (also ``npulaunch diagnose JOB_DIR``'s)."""
    cause = root.cause
    device = f", device {cause.device_id}" if cause.rank != HELPER_RANK else ""
    lines = [f"  root cause: {root.reason} (host {cause.host}{device}, pid {root.pid})"]
    if cause.cls not in _PLAIN_ENDS:
        detail = f": {cause.first_line}" if cause.first_line else ""
        lines.append(f"  error: {cause.label} ({cause.cls}{', a symptom' if cause.kind == 'symptom' else ''}){detail}")
        lines.extend(code_lines(cause))
    if cause.cls not in _PLAIN_ENDS or cause.cls == "hang":
        if len(cause.excerpt) > 1:
            lines.append("  excerpt:")
            lines.extend("    | " + text for text in cause.excerpt)
    lines.extend(raised_lines(root))
    lines.append(f"  why this rank: {cause.why}")
    lines.append(f"  hint: {cause.hint}" + (f" ({_restart_may_help(cause.retryable_why)})" if cause.retryable else ""))
    info = cause.code_info or {}
    if info.get("page"):
        lines.append(f"  CANN's page for {cause.code}: {info['page']}")
    if root.last_lines:
        lines.append(f"  last lines of {root.log}:")
        lines.extend("    | " + text for text in root.last_lines)
    lines.append(f"  log: {root.log}")
    for group in cause.others:
        lines.append(f"  {ranks_word(group.ranks)}: {group.what}")
    return lines


def _restart_may_help(why: str) -> str:
    return f"a restart may help: {why}" if why else "a restart may help"
