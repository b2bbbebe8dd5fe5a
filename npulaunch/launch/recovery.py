"""Recovery from NPU and host faults: after an attempt that a fault of the hardware ended, what to
exclude (the NPU, or the whole host when it was lost), so that the next attempt is planned without it
(plan/placement.py, inside build_plan) and resumes from the newest checkpoint (launch/resume.py).

What counts, as MindCluster's default rescheduling mode has it (Ascend/mind-cluster
docs/en/scheduling/api/ascend_device_plugin.md, "Custom Chip Faults", Table 1): an NPU whose fault level
is RestartRequest up to SeparateNPU (the health watch's action "reschedule", host/health/judge.py); a lost
host (its SSH connection or agent gone); a rank failure the diagnosis files under a device fault
(host/cann/knowledge.py DEVICE_FAULT_CLASSES). PreSeparateNPU NPUs are excluded from the next placement
without stopping the job. ClusterD's rule is kept: the same code on several NPUs within 30 s is taken for
a software cause, and no NPU is excluded for it (docs/en/scheduling/usage/resumable_training/
03_configuring_fault_detection_levels.md, "Chip Faults / Overview"). Pure.
"""

from __future__ import annotations

from typing import Dict, List, Optional, Sequence, Set, Tuple

from npulaunch.diagnose.cause import RootCause
from npulaunch.diagnose.hardware import HOST_LOST, NPU_FAULT, SLOW_NPU
from npulaunch.host.cann.knowledge import DEVICE_FAULT_CLASSES
from npulaunch.host.events import Event, EventKind
from npulaunch.host.health import judge
from npulaunch.plan.placement import Exclusion

SAME_FAULT_WINDOW_S = 30.0  # ClusterD: the same fault on several chips of a job within 30 s is not the hardware


def is_hardware(cause: Optional[RootCause]) -> bool:
    """Whether a root cause is a fault of the hardware that recovery handles by excluding it. A device
    fault a rank printed counts unless its code's MindCluster level asks for nothing (NotHandleFault,
    SubHealthFault: host/health/judge.py)."""
    if cause is None:
        return False
    if cause.cls in (NPU_FAULT, HOST_LOST, SLOW_NPU):
        return True
    level = (cause.code_info or {}).get("level")
    return cause.cls in DEVICE_FAULT_CLASSES and (not level or judge.ACTIONS.get(level) != judge.REPORT)


def exclusions_after(cause: Optional[RootCause], events: Sequence[Event], attempt: int) -> List[Exclusion]:
    """What an attempt ended by ``cause`` excludes from the job: the NPUs the health watch saw fail at a
    rescheduling level (and those at PreSeparateNPU), the hosts lost, and the root cause's own NPU when the
    diagnosis filed its failure under a device fault. Empty when the cause is not the hardware."""
    if not is_hardware(cause):
        return []
    assert cause is not None
    found: List[Exclusion] = []
    seen = set()

    def add(exclusion: Exclusion) -> None:
        key = (exclusion.host, exclusion.device)
        if key not in seen and (exclusion.host, None) not in seen:
            seen.add(key)
            found.append(exclusion)

    software = _software_codes(events)
    lost = {e.host for e in events if e.kind is EventKind.AGENT_LOST}
    for event in sorted(events, key=lambda e: e.time):
        if event.kind is EventKind.NPU_HEALTH and event.host in lost:
            continue  # the whole host goes
        if event.kind is EventKind.AGENT_LOST:
            status = event.data.get("exit_status")
            add(
                Exclusion(
                    event.host, None, "host lost" + (f" (exit status {status})" if status else ""), None, None, attempt
                )
            )
        elif event.kind is EventKind.RANK_SLOW and event.data.get("state") == "excluded":
            data = event.data
            what = f"rank {event.rank} {data['factor']:.1f}x slower than its peers since step {data['since_step']}"
            add(Exclusion(event.host, int(data["device"]), f"{what} (SubHealthFault)", None, "SubHealthFault", attempt))
        elif event.kind is EventKind.NPU_HEALTH and event.data.get("action") in ("reschedule", "pre_separate"):
            codes = [str(c) for c in event.data.get("codes") or ()]
            if codes and all(c in software for c in codes):
                continue
            level = event.data.get("level")
            code = next((c for c in codes if (event.data.get("levels") or {}).get(c) == level), None)
            what = f"NPU fault {' '.join(codes)}" if codes else f"NPU health {event.data.get('health')}"
            if event.data.get("nic") == "DOWN" and not codes:
                what = "NPU NIC link DOWN"
            add(Exclusion(event.host, int(event.data["device"]), f"{what} ({level})", code, level, attempt))
    if cause.cls in DEVICE_FAULT_CLASSES and cause.device_id >= 0:
        level = (cause.code_info or {}).get("level")
        add(
            Exclusion(
                cause.host,
                cause.device_id,
                f"rank {cause.rank}: {cause.label} ({cause.cls})",
                cause.code,
                level,
                attempt,
            )
        )
    return found


def _software_codes(events: Sequence[Event]) -> Set[str]:
    """Codes the health watch saw on two or more NPUs within SAME_FAULT_WINDOW_S of each other."""
    times: Dict[str, List[Tuple[float, str, Optional[int]]]] = {}
    for event in events:
        if event.kind is EventKind.NPU_HEALTH and event.data.get("action") in ("reschedule", "pre_separate"):
            for code in event.data.get("codes") or ():
                times.setdefault(str(code), []).append((event.time, event.host, event.data.get("device")))
    shared: Set[str] = set()
    for code, seen in times.items():
        seen.sort()
        for (t1, h1, d1), (t2, h2, d2) in zip(seen, seen[1:]):
            if (h1, d1) != (h2, d2) and t2 - t1 <= SAME_FAULT_WINDOW_S:
                shared.add(code)
    return shared
