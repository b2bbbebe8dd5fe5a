"""Fold a finished job into its report: summary.json, the root cause, the exit code, and the
text printed at the end of the console. Pure except for reading the tails of log files.
"""

from __future__ import annotations

import resource
import signal
from dataclasses import dataclass
from typing import Any, Dict, List, Optional, Sequence, Tuple

from npulaunch.diagnose import rootcause
from npulaunch.host.agent.agent import AgentOutcome, RankResult, RankState
from npulaunch.host.agent.tail import last_lines
from npulaunch.host.events import Event
from npulaunch.plan.build import LaunchPlan
from npulaunch.diagnose.rootcause import rank_ranges, ranks_word

LAST_LINES = 10
EXIT_OK, EXIT_RANK_FAILED, EXIT_USAGE = 0, 1, 2


@dataclass(frozen=True)
class JobReport:
    summary: Dict[str, Any]
    exit_code: int
    text: str


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


def _log_tail(paths: Tuple[str, str]) -> Dict[str, List[str]]:
    return {"stdout": last_lines(paths[0], LAST_LINES), "stderr": last_lines(paths[1], LAST_LINES)}


def build_report(plan: LaunchPlan, outcome: AgentOutcome, start_time: float, end_time: float,
                 events: Sequence[Event] = ()) -> JobReport:
    specs = {s.rank: s for s in plan.ranks}
    code = exit_code_for(outcome)
    status = "succeeded" if code == EXIT_OK else ("stopped" if outcome.stop_signal is not None else "failed")
    cause = rootcause.pick(outcome.ranks, events) if code != EXIT_OK or events else None
    if status == "succeeded":
        cause = None
    ranks = []
    for result in outcome.ranks:
        spec = specs[result.rank]
        stdout, stderr = plan.log_paths(spec)
        ranks.append({
            "rank": result.rank, "host": result.host, "device_id": result.device_id, "pid": result.pid,
            "state": result.state.value, "start_time": result.start_time, "end_time": result.end_time,
            "duration_s": _duration(result), "exit_code": result.exit_code, "signal": result.signal,
            "error": result.error, "stdout": stdout, "stderr": stderr,
            "last_lines": _log_tail((stdout, stderr)),
        })
    root = None
    if cause is not None:
        result = next(r for r in outcome.ranks if r.rank == cause.rank)
        paths = plan.log_paths(specs[cause.rank])
        tail = _log_tail(paths)
        log_path = paths[1] if tail["stderr"] else paths[0]
        failed_itself = result.state in (RankState.FAILED, RankState.SPAWN_FAILED)
        if failed_itself:
            reason = f"rank {cause.rank} {describe_end(result)}"
        elif cause.cls == "hang":
            reason = f"rank {cause.rank} hung"
        else:
            reason = f"rank {cause.rank} reported {cause.code} ({cause.cls})"
        root = dict(cause.to_dict(), pid=result.pid, exit_code=result.exit_code, signal=result.signal,
                    end_time=result.end_time, reason=reason, log=log_path,
                    last_lines=tail["stderr"] or tail["stdout"])
    summary = {
        "job": {"job_id": plan.job_id, "name": plan.job_name, "status": status, "exit_code": code,
                "root_cause_rank": cause.rank if cause else None, "world_size": plan.world_size,
                "hosts": list(plan.hosts), "job_dir": plan.job_dir, "start_time": start_time,
                "end_time": end_time, "duration_s": round(end_time - start_time, 3),
                "stop_signal": _signal_name(outcome.stop_signal), "strays_killed": outcome.strays_killed,
                "launcher_cpu_s": _own_cpu_s()},
        "root_cause": root,
        "ranks": ranks,
    }
    return JobReport(summary, code, render_report(summary))


def _own_cpu_s() -> float:
    """CPU seconds npulaunch itself used (not its ranks): the cost of watching the job."""
    usage = resource.getrusage(resource.RUSAGE_SELF)
    return round(usage.ru_utime + usage.ru_stime, 3)


def _duration(result: RankResult) -> Optional[float]:
    if result.start_time is None or result.end_time is None:
        return None
    return round(result.end_time - result.start_time, 3)


def _signal_name(signum: Optional[int]) -> Optional[str]:
    return None if signum is None else signal.Signals(signum).name


def render_report(summary: Dict[str, Any]) -> str:
    """The lines printed at the end of the console (and by ``npulaunch report``)."""
    job = summary["job"]
    head = f"npulaunch: job {job['job_id']} {job['status']} after {job['duration_s']:.1f} s"
    lines = [head + f" ({job['world_size']} rank{'s' if job['world_size'] != 1 else ''})"]
    if job["stop_signal"]:
        lines.append(f"  stopped because npulaunch received {job['stop_signal']}")
    root = summary["root_cause"]
    if root is not None:
        where = f"host {root['host']}, device {root['device_id']}"
        lines.append(f"  root cause: {root['reason']} ({where}, pid {root['pid']})")
        if root["cls"] not in ("exit", "signal", "hang"):
            detail = f": {root['first_line']}" if root["first_line"] else ""
            lines.append(f"  error: {root['code'] or root['cls']} ({root['cls']}){detail}")
            if len(root["excerpt"]) > 1:
                lines.append("  excerpt:")
                lines.extend("    | " + text for text in root["excerpt"])
        lines.append(f"  why this rank: {root['why']}")
        lines.append(f"  hint: {root['hint']}" + (" (a restart may help)" if root["retryable"] else ""))
        if root["last_lines"]:
            lines.append(f"  last lines of {root['log']}:")
            lines.extend("    | " + text for text in root["last_lines"])
        lines.append(f"  log: {root['log']}")
        for group in root["others"]:
            lines.append(f"  {ranks_word(group['ranks'])}: {group['what']}")
    elif job["status"] != "succeeded":
        stopped = [r["rank"] for r in summary["ranks"] if r["state"] != "succeeded"]
        if stopped:
            lines.append(f"  ranks {rank_ranges(stopped)}: stopped by npulaunch")
    if job["strays_killed"]:
        lines.append(f"  killed {len(job['strays_killed'])} leftover process(es) of the job")
    lines.append(f"  job directory: {job['job_dir']}")
    return "\n".join(lines) + "\n"
