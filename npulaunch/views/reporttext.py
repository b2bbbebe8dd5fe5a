"""The report as text: the lines printed at the end of ``npulaunch run`` and by ``npulaunch report``,
rendered from a JobSummary. Pure rendering; what the report says is decided in diagnose/.
"""

from __future__ import annotations

from typing import List

from npulaunch.diagnose.rootcause import RootCause, rank_ranges, ranks_word
from npulaunch.diagnose.summary import FailureReport, JobStatus, JobSummary
from npulaunch.host.records import RankState

_PLAIN_ENDS = ("exit", "signal", "hang")  # causes whose reason says it all: no error line, no excerpt


def render_report(summary: JobSummary) -> str:
    """The lines printed at the end of the console (and by ``npulaunch report``)."""
    job = summary.job
    head = f"npulaunch: job {job.job_id} {job.status.value} after {job.duration_s:.1f} s"
    lines = [head + f" ({job.world_size} rank{'s' if job.world_size != 1 else ''})"]
    if job.stop_signal:
        lines.append(f"  stopped because npulaunch received {job.stop_signal}")
    if summary.root_cause is not None:
        lines.extend(_root_cause_lines(summary.root_cause))
    elif job.status is not JobStatus.SUCCEEDED:
        stopped = [r.result.rank for r in summary.ranks if r.result.state is not RankState.SUCCEEDED]
        if stopped:
            lines.append(f"  ranks {rank_ranges(stopped)}: stopped by npulaunch")
    if job.strays_killed:
        lines.append(f"  killed {len(job.strays_killed)} leftover process(es) of the job")
    lines.append(f"  job directory: {job.job_dir}")
    return "\n".join(lines) + "\n"


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


def _root_cause_lines(root: FailureReport) -> List[str]:
    cause = root.cause
    lines = [f"  root cause: {root.reason} (host {cause.host}, device {cause.device_id}, pid {root.pid})"]
    if cause.cls not in _PLAIN_ENDS:
        detail = f": {cause.first_line}" if cause.first_line else ""
        lines.append(f"  error: {cause.label} ({cause.cls}{', a symptom' if cause.kind == 'symptom' else ''}){detail}")
        lines.extend(code_lines(cause))
        if len(cause.excerpt) > 1:
            lines.append("  excerpt:")
            lines.extend("    | " + text for text in cause.excerpt)
    lines.append(f"  why this rank: {cause.why}")
    lines.append(f"  hint: {cause.hint}" + (f" (a restart may help: {cause.retryable_why})" if cause.retryable else ""))
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
