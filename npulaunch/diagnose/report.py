"""Fold a finished attempt into its JobSummary (summary.json, failure.json): the root cause, the
exit code, every rank's end and last lines. Pure except for reading the tails of log files; the
text shown from it is views/reporttext.py's, the files are written by launch/jobdir.py.
"""

from __future__ import annotations

import resource
import signal
from dataclasses import replace
from typing import Optional, Sequence, Tuple

from npulaunch.diagnose import rootcause
from npulaunch.diagnose.cause import RootCause
from npulaunch.diagnose.failure import FailureReport
from npulaunch.diagnose.hardware import HOST_LOST, NPU_FAULT
from npulaunch.diagnose.summary import JobInfo, JobStatus, JobSummary, RankSummary
from npulaunch.host.cann.shapes import strip_prefix
from npulaunch.host.errorfile import raised_text, written_at
from npulaunch.host.events import Event
from npulaunch.host.lazyre import lazy_re
from npulaunch.host.records import AgentOutcome, RankResult, RankState
from npulaunch.host.spec import process_name
from npulaunch.host.tail import last_lines
from npulaunch.plan.launchplan import LaunchPlan

LAST_LINES = 10
EXIT_OK, EXIT_RANK_FAILED, EXIT_USAGE = 0, 1, 2


def describe_exit(exit_code: Optional[int], signal_name: Optional[str], error: Optional[str] = None) -> str:
    """``exited with code 3`` / ``was killed by SIGSEGV`` / the reason it could not start."""
    if error:
        return error
    if signal_name is not None:
        return f"was killed by {signal_name}"
    return f"exited with code {exit_code}"


def describe_end(result: RankResult) -> str:
    return describe_exit(result.exit_code, result.signal, result.error)


def exit_code_for(outcome: AgentOutcome) -> int:
    """0 all succeeded; 1 a rank failed; 128+N when a signal to npulaunch stopped the job."""
    if outcome.stop_signal is not None:
        return 128 + outcome.stop_signal
    if all(r.state is RankState.SUCCEEDED for r in outcome.ranks):
        return EXIT_OK
    return EXIT_RANK_FAILED


def _log_tail(path: str) -> Tuple[str, ...]:
    return tuple(last_lines(path, LAST_LINES))


def build_report(
    plan: LaunchPlan, outcome: AgentOutcome, start_time: float, end_time: float, events: Sequence[Event] = ()
) -> JobSummary:
    """The attempt's summary (``summary.exit_code`` is the launcher's exit code). ``events``: the
    signature matches and hang reports the root cause is chosen from."""
    specs = {s.rank: s for s in plan.processes}
    code = exit_code_for(outcome)
    status = (
        JobStatus.SUCCEEDED
        if code == EXIT_OK
        else (JobStatus.STOPPED if outcome.stop_signal is not None else JobStatus.FAILED)
    )
    cause = rootcause.pick(outcome.ranks, events) if code != EXIT_OK or events else None
    if cause is not None:
        cause = with_raised(cause, outcome.ranks)
    if status is JobStatus.SUCCEEDED:
        cause = None
    ranks = []
    for result in outcome.ranks:
        stdout, stderr = plan.log_paths(specs[result.rank])
        ranks.append(RankSummary(result, stdout, stderr, _log_tail(stdout), _log_tail(stderr)))
    root = None
    if cause is not None:
        ended = next(r for r in ranks if r.result.rank == cause.rank)
        result = ended.result
        log_path = ended.stderr if ended.stderr_tail else ended.stdout
        if cause.cls == NPU_FAULT:
            level = (cause.code_info or {}).get("level")
            reason = f"NPU {cause.device_id} of {cause.host} (rank {cause.rank}) reported fault {cause.code or '?'}"
            reason += f" ({level})" if level else ""
        elif cause.cls == HOST_LOST:
            reason = f"host {cause.host} was lost (rank {cause.rank} and the others there)"
        elif result.state in (RankState.FAILED, RankState.SPAWN_FAILED) and cause.raised:
            reason = f"{process_name(cause.rank)} raised {raised_text(cause.raised)} and {describe_end(result)}"
        elif result.state in (RankState.FAILED, RankState.SPAWN_FAILED):
            reason = f"{process_name(cause.rank)} {describe_end(result)}"
        elif cause.cls == "hang":
            reason = f"{process_name(cause.rank)} hung"
        else:
            reason = f"{process_name(cause.rank)} reported {cause.code} ({cause.cls})"
        tail = ended.stderr_tail or ended.stdout_tail
        if cause.cls == PYTHON_EXCEPTION:
            cause = _python_cause(cause, tail)
        root = FailureReport(
            cause,
            result.pid,
            result.exit_code,
            result.signal,
            result.end_time,
            reason,
            log_path,
            tail,
        )
    job = JobInfo(
        job_id=plan.job_id,
        name=plan.job_name,
        status=status,
        exit_code=code,
        root_cause_rank=cause.rank if cause else None,
        world_size=plan.world_size,
        hosts=plan.hosts,
        job_dir=plan.job_dir,
        start_time=start_time,
        end_time=end_time,
        stop_signal=_signal_name(outcome.stop_signal),
        strays_killed=tuple(outcome.strays_killed),
        launcher_cpu_s=_own_cpu_s(),
    )
    return JobSummary(job, root, tuple(ranks))


PYTHON_EXCEPTION = "python_exception"  # the failure class of an exception a script raised
_UNNAMED = ("exit", "signal")  # classes of failures that have no name but how the rank ended


def with_raised(cause: RootCause, results: Sequence[RankResult]) -> RootCause:
    """The cause with what its rank raised, from its error file (torch's ``@record``): a failure known only
    by how the rank ended, or by a traceback in its log, is named by the exception (``ValueError``); a
    CANN code, a fault of the hardware, a hang keep their name, the exception beside them."""
    raised = next((r.raised for r in results if r.rank == cause.rank and r.raised), None)
    if raised is None:
        return cause
    if cause.cls not in _UNNAMED and cause.code != "python-traceback":
        return replace(cause, raised=raised)
    named = replace(
        cause,
        cls=PYTHON_EXCEPTION,
        code=str(raised.get("exception") or cause.code),
        first_line=raised_text(raised),
        raised=raised,
    )
    written = written_at(raised)
    if cause.cls in _UNNAMED and written is not None:  # known from the exit alone: the error file says when
        named = replace(named, time=written, time_source="error file")
    if cause.cls in _UNNAMED:
        named = replace(named, hint=f"the script raised an exception: its traceback is in {raised.get('path')}")
    return named


# "ValueError: bad", "numpy.linalg.LinAlgError: ...", "KeyboardInterrupt": a traceback's last line
_EXCEPTION_LINE = lazy_re(r"^[A-Za-z_][\w.]*(?:Error|Exception|Exit|Interrupt|Warning|Fault)\b(?::.*)?$")
_FRAME_LINE = lazy_re(r'^\s+File "[^"]*", line \d+')


def python_exception(lines: Sequence[str]) -> Optional[Tuple[str, Optional[str]]]:
    """The exception line of the last traceback in ``lines`` and its innermost frame
    (``File "train.py", line 3, in load``), or None when there is no complete traceback. A launcher's
    prefix before each line (torch's ``[rank1]: `` once a process group exists) is not part of it."""
    lines = [strip_prefix(line) for line in lines]
    start = max((i for i, line in enumerate(lines) if line.startswith("Traceback (most recent call last)")), default=-1)
    if start < 0:
        return None
    frame = None
    for line in lines[start + 1 :]:
        if _FRAME_LINE.match(line):
            frame = line.strip()
        elif _EXCEPTION_LINE.match(line):
            return line.strip(), frame
    return None


def _python_cause(cause: RootCause, tail: Sequence[str]) -> RootCause:
    """A Python failure as its exception line and innermost frame (what a user looks for first),
    the traceback itself once, in the log's last lines, when they hold it. When the rank's error file
    said what it raised, that is the line, and its traceback is the one shown (views/reporttext.py)."""
    if cause.raised:
        shown = () if cause.raised.get("traceback") else cause.excerpt
        return replace(cause, first_line=raised_text(cause.raised), excerpt=shown)
    found = python_exception(list(cause.excerpt)) or python_exception(list(tail))
    if found is None:
        return cause
    line, frame = found
    excerpt = list(cause.excerpt)
    starts = [i for i, text in enumerate(excerpt) if strip_prefix(text).startswith("Traceback (most recent call last)")]
    if starts:  # the traceback, not the log lines before it (a framework's warnings)
        excerpt = excerpt[starts[-1] :]
    shown_once = all(text in tail for text in excerpt if text.strip())
    return replace(
        cause,
        first_line=line + (f" (at {frame})" if frame else ""),
        excerpt=() if shown_once else tuple(excerpt),
    )


def _own_cpu_s() -> float:
    """CPU seconds npulaunch itself used (not its ranks): the cost of watching the job."""
    usage = resource.getrusage(resource.RUSAGE_SELF)
    return round(usage.ru_utime + usage.ru_stime, 3)


def _signal_name(signum: Optional[int]) -> Optional[str]:
    return None if signum is None else signal.Signals(signum).name
