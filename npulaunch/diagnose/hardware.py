"""A fault of the hardware as the root cause: an NPU the health watch saw fail (host/health/watch.py)
or a host whose agent went away, chosen over what the ranks printed when it came first or struck the
rank that failed first. Pure: events and results in, a RootCause out (diagnose/rootcause.py asks).
"""

from __future__ import annotations

from typing import Any, Dict, List, Optional, Sequence

from npulaunch.diagnose.cause import RootCause, clock_text, first_findings, rank_groups
from npulaunch.host.cann.codes import SYMPTOM
from npulaunch.host.events import Event, EventKind
from npulaunch.host.records import RankResult

NPU_FAULT = "npu_fault"  # the failure class of a fault the NPU health watch saw (host/health/watch.py)
HOST_LOST = "host_lost"  # a host whose agent went away (SSH connection closed, host unreachable)
SLOW_NPU = "slow_npu"  # a rank slow for monitor.stragglers.exclude_after_s, its NPU excluded (diagnose/stragglers.py)


def hardware_cause(
    results: Sequence[RankResult], events: Sequence[Event], software: Optional[RootCause]
) -> Optional[RootCause]:
    """The earliest fault of the hardware, when it is the root cause: an NPU_HEALTH event whose action is
    "reschedule" on an NPU the job uses, or a lost agent (AGENT_LOST). It is, when it happened before the
    first failure the ranks reported (or there is none), or when it struck that failure's rank: its NPU
    (same host and device) or its host. A rank failing on a faulty NPU failed because of the NPU."""
    faults = [e for e in events if _is_hardware(e)]
    if not faults:
        return None
    by_rank = {r.rank: r for r in results}
    chosen = None
    for event in sorted(faults, key=lambda e: e.time):
        symptom = software is not None and software.kind == SYMPTOM  # a symptom ranks after any cause
        if software is None or software.time is None or symptom or event.time <= software.time:
            chosen = event
            break
        if _struck(event, software):
            chosen = event
            break
    if chosen is None:
        return None
    ranks = [r for r in _ranks_of(chosen, results) if r in by_rank]
    rank = ranks[0] if ranks else min(by_rank) if by_rank else 0
    result = by_rank.get(rank)
    why = "a hardware fault"
    if software is not None:
        why += (
            f" struck rank {software.rank}, the first to fail ({software.label})"
            if _struck(chosen, software)
            else f" came before the first failure the ranks reported (rank {software.rank}, {software.label})"
        )
    others = rank_groups(results, first_findings(events), rank)
    if chosen.kind is EventKind.RANK_SLOW:
        from npulaunch.diagnose.stragglers import describe

        line = describe(dict(chosen.data, rank=chosen.rank, host=chosen.host))
        return RootCause(
            rank,
            chosen.host,
            int(chosen.data["device"]),
            SLOW_NPU,
            "",
            chosen.time,
            "straggler detection",
            line,
            (line,),
            "the rank was slower than its peers for longer than monitor.stragglers.exclude_after_s; with action "
            "exclude its NPU is treated as a sub-health fault and the job continues without it (recovery)",
            False,
            f"a slow rank ({line} at {clock_text(chosen.time)})",
            others,
            code_info={"family": "fault", "known": False, "level": "SubHealthFault"},
        )
    if chosen.kind is EventKind.AGENT_LOST:
        status = chosen.data.get("exit_status")
        line = f"lost the agent on {chosen.host}" + (f" (exit status {status})" if status is not None else "")
        if chosen.data.get("why"):
            line += f": {chosen.data['why']}"
        return RootCause(
            rank,
            chosen.host,
            result.device_id if result else -1,
            HOST_LOST,
            "",
            chosen.time,
            "launcher",
            line,
            (line,),
            (
                "the host, its network or the channel to its agent (its SSH connection, Slurm job step or mpirun) went "
                "away; with spare hosts (spares:, or slurm.spare_nodes under Slurm) npulaunch continues without it"
            ),
            False,
            why + f" ({line} at {clock_text(chosen.time)})",
            others,
        )
    data = chosen.data
    codes = tuple(str(c) for c in data.get("codes") or ())
    levels = data.get("levels") or {}
    level = str(data.get("level") or "")
    code = next((c for c in codes if levels.get(c) == level), codes[0] if codes else "")
    line = f"npu-smi: {chosen.host} NPU {data.get('device')}: health {data.get('health')}"
    if codes:
        line += f", error codes {' '.join(codes)}"
    if data.get("nic") == "DOWN":
        line += ", NIC link DOWN"
    detail = str(data.get("info") or "")
    return RootCause(
        rank,
        chosen.host,
        int(data.get("device", result.device_id if result else -1)),
        NPU_FAULT,
        code,
        chosen.time,
        "health watch",
        line,
        (line,),
        "the NPU reported a fault that MindCluster handles by isolating the chip and rescheduling the job; "
        "with spare NPUs or hosts npulaunch does the same (recovery)",
        False,
        why + f" ({line} at {clock_text(chosen.time)})",
        others,
        codes=tuple(c for c in codes if c != code),
        detail=detail,
        code_info=_fault_info(code, level),
    )


def _fault_info(code: str, level: str) -> Dict[str, Any]:
    """The catalog's facts of a fault code (MindCluster's level first: what the watch judged by)."""
    from npulaunch.host.cann.lookup import describe

    info = describe(code) if code else None
    facts: Dict[str, Any] = info.summary() if info is not None else {"family": "fault", "known": False}
    facts["level"] = level or facts.get("level")
    return facts


def _is_hardware(event: Event) -> bool:
    if event.kind is EventKind.AGENT_LOST:
        return True
    if event.kind is EventKind.RANK_SLOW:
        return event.data.get("state") == "excluded"
    return event.kind is EventKind.NPU_HEALTH and event.data.get("action") == "reschedule"


def _struck(event: Event, cause: RootCause) -> bool:
    if event.host != cause.host:
        return False
    return event.kind is EventKind.AGENT_LOST or event.data.get("device") == cause.device_id


def _ranks_of(event: Event, results: Sequence[RankResult]) -> List[int]:
    if event.kind is EventKind.RANK_SLOW and isinstance(event.rank, int):
        return [event.rank]
    if event.kind is EventKind.NPU_HEALTH and event.data.get("ranks"):
        return sorted(int(r) for r in event.data["ranks"])
    device = event.data.get("device") if event.kind is EventKind.NPU_HEALTH else None
    return sorted(r.rank for r in results if r.host == event.host and (device is None or r.device_id == device))
