"""What a hardware fault excludes from the next attempt (launch/recovery.py: is_hardware, exclusions_after),
with ClusterD's rule that the same code on several NPUs within 30 s is no fault of the hardware; and the
steps each attempt lost (launch/restarts.py _with_steps_lost). Pure: events and root causes built here."""

from __future__ import annotations

from typing import Any, List, Optional

import pytest
from helpers import FAULT_CODE, FAULT_LEVEL, agent_lost_event, npu_health_event

from npulaunch.diagnose.cause import RootCause
from npulaunch.diagnose.hardware import HOST_LOST, NPU_FAULT
from npulaunch.diagnose.rootcause import pick
from npulaunch.diagnose.summary import AttemptRecord, JobStatus
from npulaunch.host.cann.knowledge import DEVICE_FAULT_CLASSES
from npulaunch.host.records import RankResult, RankState
from npulaunch.launch.recovery import SAME_FAULT_WINDOW_S, exclusions_after, is_hardware
from npulaunch.launch.restarts import _with_steps_lost
from npulaunch.plan.placement import Exclusion

CODE, LEVEL = FAULT_CODE, FAULT_LEVEL
health, agent_lost = npu_health_event, agent_lost_event


def cause(cls: str, host: str = "h1", device: int = 2, rank: int = 2, code: str = "", level: str = "") -> RootCause:
    info = {"level": level} if level else None
    return RootCause(rank, host, device, cls, code, 10.0, "exit", "line", (), "hint", False, "why", code_info=info)


NPU = cause(NPU_FAULT, code=CODE)


# --- is_hardware -------------------------------------------------------------------------------------


@pytest.mark.parametrize("cls", [NPU_FAULT, HOST_LOST, *sorted(DEVICE_FAULT_CLASSES)])
def test_hardware_causes(cls: str) -> None:
    assert is_hardware(cause(cls))


@pytest.mark.parametrize("cls", ["exit", "signal", "hang", "hccl_exec_timeout", "device_kernel_fault", "oom"])
def test_causes_that_are_not_the_hardware(cls: str) -> None:
    assert not is_hardware(cause(cls))


def test_no_cause_is_not_the_hardware() -> None:
    assert not is_hardware(None)
    assert exclusions_after(None, [health("h1", 2, 5.0), agent_lost("h2", 6.0)], 1) == []


@pytest.mark.parametrize("cls", ["exit", "hccl_exec_timeout", "hang"])
def test_nothing_is_excluded_when_the_cause_is_not_the_hardware(cls: str) -> None:
    events = [health("h1", 2, 5.0), agent_lost("h2", 6.0)]
    assert exclusions_after(cause(cls), events, 1) == []


# --- exclusions_after --------------------------------------------------------------------------------------


def test_a_reschedule_fault_excludes_its_npu() -> None:
    assert exclusions_after(NPU, [health("h1", 2, 5.0)], 3) == [
        Exclusion("h1", 2, f"NPU fault {CODE} ({LEVEL})", CODE, LEVEL, 3)
    ]


def test_a_pre_separate_fault_is_excluded_too_and_a_report_is_not() -> None:
    events = [
        health("h1", 2, 5.0),
        health("h1", 5, 6.0, action="pre_separate", codes=["81078603"], level="PreSeparateNPU"),
        health("h1", 6, 7.0, action="report", codes=["80CB8002"], level="NotHandleFault"),
        health("h1", 7, 8.0, action="none", codes=[], level=""),
    ]
    assert exclusions_after(NPU, events, 1) == [
        Exclusion("h1", 2, f"NPU fault {CODE} ({LEVEL})", CODE, LEVEL, 1),
        Exclusion("h1", 5, "NPU fault 81078603 (PreSeparateNPU)", "81078603", "PreSeparateNPU", 1),
    ]


def test_the_code_named_is_the_one_at_the_events_level() -> None:
    event = health("h1", 2, 5.0, codes=["80CB8002", "8C03A000"], level="RestartNPU")
    event.data["levels"] = {"80CB8002": "NotHandleFault", "8C03A000": "RestartNPU"}
    (found,) = exclusions_after(NPU, [event], 1)
    assert (found.code, found.level, found.reason) == (
        "8C03A000",
        "RestartNPU",
        "NPU fault 80CB8002 8C03A000 (RestartNPU)",
    )


def test_a_fault_without_codes_is_named_by_its_health_or_its_link() -> None:
    events = [
        health("h1", 2, 5.0, codes=[], level="SeparateNPU"),
        health("h1", 3, 6.0, codes=[], level="SeparateNPU", nic="DOWN"),
    ]
    assert [(e.device, e.reason, e.code) for e in exclusions_after(NPU, events, 1)] == [
        (2, "NPU health Critical (SeparateNPU)", None),
        (3, "NPU NIC link DOWN (SeparateNPU)", None),
    ]


def test_the_same_npu_reported_twice_is_excluded_once() -> None:
    found = exclusions_after(NPU, [health("h1", 2, 5.0), health("h1", 2, 35.0), health("h1", 2, 36.0)], 1)
    assert [(e.host, e.device) for e in found] == [("h1", 2)]


def test_exclusions_come_in_the_order_of_the_events_times() -> None:
    events = [health("h1", 4, 9.0, codes=["A"]), health("h1", 2, 5.0, codes=["B"]), health("h2", 0, 7.0, codes=["C"])]
    assert [(e.host, e.device) for e in exclusions_after(NPU, events, 1)] == [("h1", 2), ("h2", 0), ("h1", 4)]


def test_a_lost_host_is_excluded_whole() -> None:
    lost = cause(HOST_LOST, host="h2", device=0)
    assert exclusions_after(lost, [agent_lost("h2", 20.0)], 2) == [
        Exclusion("h2", None, "host lost (exit status 255)", None, None, 2)
    ]
    assert exclusions_after(lost, [agent_lost("h2", 20.0, status=None)], 2)[0].reason == "host lost"


def test_a_lost_host_gets_no_separate_npu_exclusion_after_it() -> None:
    lost = cause(HOST_LOST, host="h2", device=0)
    events = [agent_lost("h2", 20.0), health("h2", 1, 25.0), health("h1", 3, 26.0, codes=["8C03A000"])]
    assert [(e.host, e.device) for e in exclusions_after(lost, events, 1)] == [("h2", None), ("h1", 3)]


def test_a_lost_host_gets_no_separate_npu_exclusion_before_it() -> None:
    lost = cause(HOST_LOST, host="h2", device=0)
    events = [health("h2", 1, 5.0), agent_lost("h2", 20.0)]
    assert [(e.host, e.device) for e in exclusions_after(lost, events, 1)] == [("h2", None)]


def test_a_device_fault_in_a_ranks_output_excludes_its_own_npu() -> None:
    memory = cause("device_memory_fault", host="h1", device=3, rank=3, code="EL0004", level="L2")
    assert exclusions_after(memory, [], 4) == [
        Exclusion("h1", 3, "rank 3: EL0004 (device_memory_fault)", "EL0004", "L2", 4)
    ]
    # a health event on the same NPU came first: one exclusion, the health watch's
    found = exclusions_after(memory, [health("h1", 3, 5.0)], 4)
    assert [(e.device, e.reason) for e in found] == [(3, f"NPU fault {CODE} ({LEVEL})")]
    # a rank on a lost host: the host's exclusion covers it
    found = exclusions_after(memory, [agent_lost("h1", 5.0)], 4)
    assert [(e.host, e.device) for e in found] == [("h1", None)]


def test_a_device_fault_without_a_device_excludes_nothing_of_its_own() -> None:
    assert exclusions_after(cause("device_lost", device=-1), [], 1) == []


def test_npu_fault_from_pick_to_exclusion() -> None:
    results = [RankResult(r, "h1", r, 100 + r, RankState.FAILED, 1.0, 10.0 + r, 1, None) for r in range(4)]
    events = [health("h1", 0, 12.0)]  # after rank 0 failed (t=10), on its NPU
    root = pick(results, events)
    assert root is not None and (root.cls, root.rank) == (NPU_FAULT, 0) and is_hardware(root)
    assert [(e.host, e.device, e.code) for e in exclusions_after(root, events, 1)] == [("h1", 0, CODE)]
    assert exclusions_after(pick(results, []), events, 1) == []  # the same events, the cause not the hardware


# --- ClusterD: the same code on several NPUs within 30 s ------------------------------------------------


def test_the_same_code_on_two_npus_within_30_s_excludes_neither() -> None:
    events = [health("h1", 2, 5.0), health("h1", 3, 5.0 + SAME_FAULT_WINDOW_S)]
    assert SAME_FAULT_WINDOW_S == 30.0
    assert exclusions_after(NPU, events, 1) == []


def test_the_same_code_on_two_hosts_within_30_s_excludes_neither() -> None:
    assert exclusions_after(NPU, [health("h1", 2, 5.0), health("h2", 2, 20.0)], 1) == []


def test_the_same_code_further_apart_excludes_both() -> None:
    events = [health("h1", 2, 5.0), health("h1", 3, 35.5)]
    assert [(e.host, e.device) for e in exclusions_after(NPU, events, 1)] == [("h1", 2), ("h1", 3)]


def test_different_codes_on_two_npus_exclude_both() -> None:
    events = [health("h1", 2, 5.0), health("h1", 3, 6.0, codes=["8C03A000"])]
    assert [(e.host, e.device) for e in exclusions_after(NPU, events, 1)] == [("h1", 2), ("h1", 3)]


def test_a_fault_with_a_code_of_its_own_besides_the_shared_one_is_excluded() -> None:
    events = [health("h1", 2, 5.0, codes=[CODE, "8C03A000"]), health("h1", 3, 6.0)]
    assert [(e.host, e.device) for e in exclusions_after(NPU, events, 1)] == [("h1", 2)]


def test_the_same_code_twice_on_one_npu_is_still_the_hardware() -> None:
    events = [health("h1", 2, 5.0), health("h1", 2, 6.0), health("h1", 4, 50.0, codes=["other"])]
    assert [(e.host, e.device) for e in exclusions_after(NPU, events, 1)] == [("h1", 2), ("h1", 4)]


def test_a_shared_code_does_not_hide_a_lost_host() -> None:
    lost = cause(HOST_LOST, host="h3", device=0)
    events = [health("h1", 2, 5.0), health("h1", 3, 6.0), agent_lost("h3", 7.0)]
    assert [(e.host, e.device) for e in exclusions_after(lost, events, 1)] == [("h3", None)]


# --- steps lost ---------------------------------------------------------------------------------------------


def attempt(n: int, last_step: Optional[int], resumed_step: Any = "absent") -> AttemptRecord:
    resumed = None if resumed_step == "absent" else {"step": resumed_step, "checkpoint": "ckpt", "skipped": []}
    return AttemptRecord(n, f"/jobs/j/attempt-{n}", JobStatus.FAILED, 1, None, resumed=resumed, last_step=last_step)


def lost_steps(records: List[AttemptRecord]) -> List[Optional[int]]:
    return [r.steps_lost for r in _with_steps_lost(records)]


def test_steps_lost_are_the_last_step_minus_where_the_next_attempt_resumed() -> None:
    records = [attempt(1, 120), attempt(2, 250, 100), attempt(3, 300, 200)]
    assert lost_steps(records) == [20, 50, None]  # the last attempt has no next one


def test_steps_lost_without_a_checkpoint_to_resume_from_are_all_of_them() -> None:
    assert lost_steps([attempt(1, 80), attempt(2, 90, None)]) == [80, None]
    assert lost_steps([attempt(1, 80), attempt(2, 90)]) == [80, None]  # no resumed record at all


def test_steps_lost_are_never_negative_and_unknown_without_a_last_step() -> None:
    assert lost_steps([attempt(1, 100), attempt(2, None, 150), attempt(3, 10, 0)]) == [0, None, None]


def test_steps_lost_keep_the_rest_of_the_record() -> None:
    records = [attempt(1, 120), attempt(2, 250, 100)]
    done = _with_steps_lost(records)
    assert [r.attempt for r in done] == [1, 2]
    assert done[1].resumed == records[1].resumed and done[0].last_step == 120
    assert done[0].to_json()["steps_lost"] == 20
    assert _with_steps_lost([attempt(1, 5)])[0].steps_lost is None
    assert _with_steps_lost([]) == []


def test_a_printed_device_fault_whose_level_asks_nothing_is_no_recovery() -> None:
    for level, expected in (("NotHandleFault", False), ("SubHealthFault", False), ("RestartNPU", True), ("", True)):
        printed = cause("npu_hardware_fault", code="80B18009", level=level)
        assert is_hardware(printed) is expected, level
