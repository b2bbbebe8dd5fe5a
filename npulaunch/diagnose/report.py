"""Fold a finished attempt into its JobSummary (summary.json, failure.json): the root cause, the
exit code, every rank's end and last lines. Pure except for reading the tails of log files; the
text shown from it is views/reporttext.py's, the files are written by launch/jobdir.py.
"""

from __future__ import annotations

import resource
import signal
from dataclasses import replace
from typing import Callable, Dict, List, Mapping, Optional, Sequence, Tuple

from npulaunch.diagnose import rootcause
from npulaunch.diagnose.cause import RootCause
from npulaunch.diagnose.failure import FailureReport
from npulaunch.diagnose.hardware import HOST_LOST, NPU_FAULT
from npulaunch.diagnose.stragglers import stragglers_of
from npulaunch.diagnose.summary import JobInfo, JobStatus, JobSummary, RankSummary
from npulaunch.host.cann.shapes import strip_prefix
from npulaunch.host.errorfile import raised_text, written_at
from npulaunch.host.events import Event
from npulaunch.host.lazyre import lazy_re
from npulaunch.host.pystacks import TRACEBACK_FRAME, is_library
from npulaunch.host.records import AgentOutcome, RankResult, RankState
from npulaunch.host.spec import process_name
from npulaunch.host.tail import last_lines
from npulaunch.plan.launchplan import LaunchPlan

LAST_LINES = 10
TRACEBACK_LINES, TRACEBACK_BYTES = 400, 256 * 1024  # how far back a long traceback is looked for in the log
TRACEBACK_SHOWN = 40  # lines of it in the excerpt
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
    cause = root_cause(outcome.ranks, events, hosts_of(plan)) if code != EXIT_OK or events else None
    if status is JobStatus.SUCCEEDED:
        cause = None
    ranks = []
    for result in outcome.ranks:
        stdout, stderr = plan.log_paths(specs[result.rank])
        ranks.append(RankSummary(result, stdout, stderr, _log_tail(stdout), _log_tail(stderr)))
    root = failure_report(cause, ranks) if cause is not None else None
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
    return JobSummary(job, root, tuple(ranks), stragglers=tuple(stragglers_of(events)))


def hosts_of(plan: LaunchPlan) -> Dict[str, List[int]]:
    """Every host of the job and its ranks, by each name the job knows it by: its name, and the address its
    ranks were given (``HCCL_IF_IP``), which is what a peer's lines print."""
    hosts: Dict[str, List[int]] = {}
    for spec in plan.ranks:
        for name in dict.fromkeys((spec.host, spec.env.get("HCCL_IF_IP") or spec.host)):
            hosts.setdefault(name, []).append(spec.rank)
    return hosts


def root_cause(
    results: Sequence[RankResult], events: Sequence[Event], hosts: Mapping[str, Sequence[int]]
) -> Optional[RootCause]:
    """The root cause of an attempt from its ranks' ends and its events (the live job's, or a job directory's
    records read back: diagnose/records.py), with what its rank raised."""
    cause = rootcause.pick(results, events, hosts)
    return with_raised(cause, results) if cause is not None else None


def failure_report(cause: RootCause, ranks: Sequence[RankSummary]) -> FailureReport:
    """The root cause as the report tells it: in a sentence, with its rank's log and last lines, a Python
    failure at the user's line."""
    ended = next(r for r in ranks if r.result.rank == cause.rank)
    result = ended.result
    log_path = ended.stderr if ended.stderr_tail else ended.stdout
    tail = ended.stderr_tail or ended.stdout_tail
    if cause.cls == PYTHON_EXCEPTION:
        cause = _python_cause(cause, tail, lambda: last_lines(log_path, TRACEBACK_LINES, TRACEBACK_BYTES))
    return FailureReport(
        cause, result.pid, result.exit_code, result.signal, result.end_time, _reason(cause, result), log_path, tail
    )


def _reason(cause: RootCause, result: RankResult) -> str:
    if cause.cls == NPU_FAULT:
        level = (cause.code_info or {}).get("level")
        reason = f"NPU {cause.device_id} of {cause.host} (rank {cause.rank}) reported fault {cause.code or '?'}"
        return reason + (f" ({level})" if level else "")
    if cause.cls == HOST_LOST:
        return f"host {cause.host} was lost (rank {cause.rank} and the others there)"
    failed = result.state in (RankState.FAILED, RankState.SPAWN_FAILED)
    if failed and cause.raised:
        return f"{process_name(cause.rank)} raised {raised_text(cause.raised)} and {describe_end(result)}"
    if failed or cause.cls in ("exit", "signal"):  # failed, or ended on its own while the others still needed it
        return f"{process_name(cause.rank)} {describe_end(result)}"
    if cause.cls == "hang":
        return f"{process_name(cause.rank)} {cause.first_line or 'hung'}"
    return f"{process_name(cause.rank)} reported {cause.code} ({cause.cls})"


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


def python_exception(lines: Sequence[str]) -> Optional[Tuple[str, Optional[str]]]:
    """The exception line of the last traceback in ``lines`` and where it was raised: the innermost frame in
    the user's own files (``File "train.py", line 3, in load``), not in site-packages or the framework (those
    stay in the excerpt), else the innermost frame; None when there is no complete traceback. A launcher's
    prefix before each line (torch's ``[rank1]: `` once a process group exists) is not part of it."""
    lines = [strip_prefix(line) for line in lines]
    start = max((i for i, line in enumerate(lines) if line.startswith("Traceback (most recent call last)")), default=-1)
    if start < 0:
        return None
    frames: List[Tuple[str, bool]] = []  # (the frame's line, whether it is in the user's files)
    for line in lines[start + 1 :]:
        frame = TRACEBACK_FRAME.match(line)
        if frame is not None:
            frames.append((line.strip(), not is_library(frame.group("file"))))
        elif _EXCEPTION_LINE.match(line):
            own = [text for text, mine in frames if mine] or [text for text, _ in frames]
            return line.strip(), own[-1] if own else None
    return None


def _python_cause(cause: RootCause, tail: Sequence[str], more: Callable[[], Sequence[str]]) -> RootCause:
    """A Python failure as its exception line and where it was raised in the user's code (what a user looks
    for first), the traceback itself once, in the log's last lines, when they hold it. A traceback longer than
    the finding's excerpt and the log's tail (a failure deep inside a framework) is read from the log's end
    (``more``). When the rank's error file said what it raised, that is the line, and its traceback is the
    one shown (views/reporttext.py)."""
    if cause.raised:
        shown = () if cause.raised.get("traceback") else cause.excerpt
        return replace(cause, first_line=raised_text(cause.raised), excerpt=shown)
    excerpt = list(cause.excerpt)
    found = python_exception(excerpt) or python_exception(list(tail))
    if found is None:
        longer = list(more())
        found = python_exception(longer)
        if found is not None:
            excerpt = _last_traceback(longer)
    if found is None:
        return cause
    line, frame = found
    starts = [i for i, text in enumerate(excerpt) if strip_prefix(text).startswith("Traceback (most recent call last)")]
    if starts:  # the traceback, not the log lines before it (a framework's warnings)
        excerpt = excerpt[starts[-1] :]
    shown_once = all(text in tail for text in excerpt if text.strip())
    return replace(
        cause,
        first_line=line + (f" (at {frame})" if frame else ""),
        excerpt=() if shown_once else tuple(excerpt),
    )


def _last_traceback(lines: Sequence[str]) -> List[str]:
    """The last traceback of the lines, through its exception line, cut in the middle when it is long (its
    outer frames, where the script called in, and its innermost ones stay)."""
    start = max(i for i, text in enumerate(lines) if strip_prefix(text).startswith("Traceback (most recent call last)"))
    end = next(
        (i for i in range(start + 1, len(lines)) if _EXCEPTION_LINE.match(strip_prefix(lines[i]))), len(lines) - 1
    )
    shown = list(lines[start : end + 1])
    if len(shown) > TRACEBACK_SHOWN:
        cut = len(shown) - TRACEBACK_SHOWN
        half = TRACEBACK_SHOWN // 2
        shown = shown[:half] + [f"... ({cut} lines of the traceback not shown)"] + shown[-half:]
    return shown


def _own_cpu_s() -> float:
    """CPU seconds npulaunch itself used (not its ranks): the cost of watching the job."""
    usage = resource.getrusage(resource.RUSAGE_SELF)
    return round(usage.ru_utime + usage.ru_stime, 3)


def _signal_name(signum: Optional[int]) -> Optional[str]:
    return None if signum is None else signal.Signals(signum).name
