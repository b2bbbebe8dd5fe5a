"""Fold a finished job into its report: summary.json, the root cause, the exit code, and the
text printed at the end of the console. Pure except for reading the tails of log files.
"""

from __future__ import annotations

import signal
from dataclasses import dataclass
from typing import Any, Dict, List, Optional, Sequence

from .agent.agent import AgentOutcome, RankResult, RankState
from .agent.tail import last_lines
from .plan import LaunchPlan
from .spec import RankSpec

LAST_LINES = 10
EXIT_OK, EXIT_RANK_FAILED, EXIT_USAGE = 0, 1, 2


@dataclass(frozen=True)
class JobReport:
    summary: Dict[str, Any]
    exit_code: int
    text: str


def rank_ranges(ranks: Sequence[int]) -> str:
    """``[0, 1, 2, 5, 7, 8]`` -> ``0-2, 5, 7-8``."""
    runs: List[List[int]] = []
    for rank in sorted(ranks):
        if runs and rank == runs[-1][1] + 1:
            runs[-1][1] = rank
        else:
            runs.append([rank, rank])
    return ", ".join(str(a) if a == b else f"{a}-{b}" for a, b in runs)


def describe_exit(exit_code: Optional[int], signal_name: Optional[str], error: Optional[str] = None) -> str:
    """``exited with code 3`` / ``was killed by SIGSEGV`` / the reason it could not start."""
    if error:
        return error
    if signal_name is not None:
        return f"was killed by {signal_name}"
    return f"exited with code {exit_code}"


def describe_end(result: RankResult) -> str:
    return describe_exit(result.exit_code, result.signal, result.error)


def pick_root_cause(results: Sequence[RankResult]) -> Optional[RankResult]:
    """The earliest rank that failed on its own (not one npulaunch stopped); ties: lowest rank."""
    failed = [r for r in results if r.state in (RankState.FAILED, RankState.SPAWN_FAILED)]
    return min(failed, key=lambda r: (r.end_time or 0.0, r.rank)) if failed else None


def exit_code_for(outcome: AgentOutcome) -> int:
    """0 all succeeded; 1 a rank failed; 128+N when a signal to npulaunch stopped the job."""
    if outcome.stop_signal is not None:
        return 128 + outcome.stop_signal
    if all(r.state is RankState.SUCCEEDED for r in outcome.ranks):
        return EXIT_OK
    return EXIT_RANK_FAILED


def _log_tail(spec: RankSpec) -> Dict[str, List[str]]:
    return {"stdout": last_lines(spec.stdout_path, LAST_LINES), "stderr": last_lines(spec.stderr_path, LAST_LINES)}


def build_report(plan: LaunchPlan, outcome: AgentOutcome, start_time: float, end_time: float) -> JobReport:
    specs = {s.rank: s for s in plan.ranks}
    cause = pick_root_cause(outcome.ranks)
    code = exit_code_for(outcome)
    status = "succeeded" if code == EXIT_OK else ("stopped" if outcome.stop_signal is not None else "failed")
    ranks = []
    for result in outcome.ranks:
        spec = specs[result.rank]
        ranks.append({
            "rank": result.rank, "host": result.host, "device_id": result.device_id, "pid": result.pid,
            "state": result.state.value, "start_time": result.start_time, "end_time": result.end_time,
            "duration_s": _duration(result), "exit_code": result.exit_code, "signal": result.signal,
            "error": result.error, "stdout": spec.stdout_path, "stderr": spec.stderr_path,
            "last_lines": _log_tail(spec),
        })
    root = None
    if cause is not None:
        spec = specs[cause.rank]
        tail = _log_tail(spec)
        log_path = spec.stderr_path if tail["stderr"] else spec.stdout_path
        root = {"rank": cause.rank, "host": cause.host, "device_id": cause.device_id, "pid": cause.pid,
                "exit_code": cause.exit_code, "signal": cause.signal, "end_time": cause.end_time,
                "reason": f"rank {cause.rank} {describe_end(cause)}",
                "why_chosen": "the earliest rank to fail on its own; later exits followed npulaunch's stop",
                "log": log_path, "last_lines": tail["stderr"] or tail["stdout"]}
    summary = {
        "job": {"job_id": plan.job_id, "name": plan.job_name, "status": status, "exit_code": code,
                "root_cause_rank": cause.rank if cause else None, "world_size": plan.world_size,
                "hosts": list(plan.hosts), "job_dir": plan.job_dir, "start_time": start_time,
                "end_time": end_time, "duration_s": round(end_time - start_time, 3),
                "stop_signal": _signal_name(outcome.stop_signal), "strays_killed": outcome.strays_killed},
        "root_cause": root,
        "ranks": ranks,
    }
    return JobReport(summary, code, render_report(plan, outcome, summary))


def _duration(result: RankResult) -> Optional[float]:
    if result.start_time is None or result.end_time is None:
        return None
    return round(result.end_time - result.start_time, 3)


def _signal_name(signum: Optional[int]) -> Optional[str]:
    return None if signum is None else signal.Signals(signum).name


def render_report(plan: LaunchPlan, outcome: AgentOutcome, summary: Dict[str, Any]) -> str:
    """The lines printed at the end of the console."""
    job = summary["job"]
    head = f"npulaunch: job {plan.job_id} {job['status']} after {job['duration_s']:.1f} s"
    lines = [head + f" ({plan.world_size} rank{'s' if plan.world_size != 1 else ''})"]
    if job["stop_signal"]:
        lines.append(f"  stopped because npulaunch received {job['stop_signal']}")
    root = summary["root_cause"]
    if root is not None:
        where = f"host {root['host']}, device {root['device_id']}"
        lines.append(f"  root cause: {root['reason']} ({where}, pid {root['pid']})")
        if root["last_lines"]:
            lines.append(f"  last lines of {root['log']}:")
            lines.extend("    | " + text for text in root["last_lines"])
        lines.append(f"  log: {root['log']}")
    by_state: Dict[str, List[int]] = {}
    for rank in summary["ranks"]:
        if root is None or rank["rank"] != root["rank"]:
            by_state.setdefault(rank["state"], []).append(rank["rank"])
    if job["status"] != "succeeded":
        for state, members in sorted(by_state.items()):
            label = {"stopped": "stopped by npulaunch", "failed": "also failed"}.get(state, state)
            lines.append(f"  ranks {rank_ranges(members)}: {label}")
    if job["strays_killed"]:
        lines.append(f"  killed {len(job['strays_killed'])} leftover process(es) of the job")
    lines.append(f"  job directory: {plan.job_dir}")
    return "\n".join(lines) + "\n"
