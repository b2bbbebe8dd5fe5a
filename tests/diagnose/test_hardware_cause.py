"""A fault of the hardware as the root cause (diagnose/rootcause.py: pick, hardware_cause): an NPU the
health watch saw fail at a rescheduling level, or a host whose agent was lost, against what the ranks
printed and how they ended. RankResult and Event objects are built here directly."""

from __future__ import annotations

from typing import List, Optional

import pytest
from helpers import FAULT_CODE, FAULT_LEVEL, agent_lost_event, npu_health_event

from npulaunch.diagnose.hardware import HOST_LOST, NPU_FAULT, hardware_cause
from npulaunch.diagnose.rootcause import pick
from npulaunch.host.events import Event, EventKind
from npulaunch.host.records import RankResult, RankState

CODE, LEVEL = FAULT_CODE, FAULT_LEVEL
health, agent_lost = npu_health_event, agent_lost_event


def ended(rank: int, host: str, device: int, end: Optional[float], state: RankState = RankState.FAILED) -> RankResult:
    code = 1 if state is RankState.FAILED else None
    return RankResult(rank, host, device, 100 + rank, state, 1.0, end, code, None)


def matched(rank: int, host: str, when: float, code: str, cls: str, kind: str, retryable: bool = False) -> Event:
    data = {"signature": f"{code}-sig", "code": code, "cls": cls, "line": f"{code}: something"}
    data.update(signature_kind=kind, line_time=when, line_time_source="plog timestamp", hint="h")
    data.update(source="plog", retryable=retryable)
    return Event(EventKind.SIGNATURE_MATCHED, "j", host, rank, data, time=when)


def hccl_timeout(rank: int, host: str, when: float) -> Event:
    return matched(rank, host, when, "EI0002", "hccl_exec_timeout", "symptom", retryable=True)


# four ranks on h1 (devices 0-3); rank 2 exits first at t=10, the others later, after printing EI0002
FOUR = [
    ended(0, "h1", 0, 14.0),
    ended(1, "h1", 1, 14.0),
    ended(2, "h1", 2, 10.0),
    ended(3, "h1", 3, 14.0),
]
WAITING = [hccl_timeout(r, "h1", 8.0) for r in (0, 1, 3)]  # printed before rank 2 exited


def test_without_the_fault_the_first_rank_to_fail_is_the_cause() -> None:
    root = pick(FOUR, WAITING)
    assert root is not None and (root.rank, root.cls, root.code) == (2, "exit", "exit 1")


def test_an_npu_fault_on_the_first_failing_ranks_npu_is_the_root_cause() -> None:
    # the health watch saw it after the rank ended (its round comes every 30 s): it struck that rank
    root = pick(FOUR, WAITING + [health("h1", 2, 12.0, ranks=[2])])
    assert root is not None
    assert (root.cls, root.code, root.host, root.device_id, root.rank) == (NPU_FAULT, CODE, "h1", 2, 2)
    assert root.time == 12.0 and root.time_source == "health watch" and root.kind == "cause"
    assert root.retryable is False
    assert root.codes == ()  # the other codes of the reading: none
    assert root.first_line == f"npu-smi: h1 NPU 2: health Critical, error codes {CODE}"
    assert root.detail == "MindCluster: isolate the chip and reschedule the job"  # the reading's information
    assert root.code_info is not None
    assert (root.code_info["family"], root.code_info["level"], root.code_info["known"]) == ("fault", LEVEL, True)
    assert root.why.startswith("a hardware fault struck rank 2, the first to fail (exit 1)")
    groups = {g.what: g.ranks for g in root.others}
    assert sorted(r for ranks in groups.values() for r in ranks) == [0, 1, 3]


def test_the_npu_fault_wins_over_the_ranks_own_later_crash() -> None:
    crash = matched(2, "h1", 10.0, "EZ9999", "device_kernel_fault", "cause")
    assert pick(FOUR, WAITING + [crash]).code == "EZ9999"  # type: ignore[union-attr]
    root = pick(FOUR, WAITING + [crash, health("h1", 2, 40.0)])
    assert root is not None and (root.cls, root.code, root.rank, root.device_id) == (NPU_FAULT, CODE, 2, 2)
    assert "struck rank 2, the first to fail (EZ9999)" in root.why


def test_the_rank_is_found_by_host_and_device_without_ranks_in_the_event() -> None:
    results = [ended(0, "h1", 0, 14.0), ended(1, "h2", 5, 10.0), ended(2, "h2", 6, 14.0)]
    root = pick(results, [health("h2", 5, 11.0)])
    assert root is not None and (root.rank, root.host, root.device_id) == (1, "h2", 5)


def test_a_fault_on_another_npu_after_the_first_failure_is_not_the_root_cause() -> None:
    root = pick(FOUR, WAITING + [health("h1", 3, 12.0, ranks=[3])])
    assert root is not None and (root.cls, root.rank) == ("exit", 2)
    assert hardware_cause(FOUR, [health("h1", 3, 12.0)], root) is None


def test_a_fault_on_another_host_with_the_same_device_is_not_the_first_ranks() -> None:
    results = FOUR + [ended(4, "h2", 2, 14.0)]
    root = pick(results, WAITING + [health("h2", 2, 12.0)])
    assert root is not None and (root.cls, root.rank, root.host) == ("exit", 2, "h1")


def test_a_fault_on_another_npu_before_the_first_failure_is_the_root_cause() -> None:
    root = pick(FOUR, WAITING + [health("h1", 3, 9.0, ranks=[3])])
    assert root is not None
    assert (root.cls, root.rank, root.host, root.device_id, root.time) == (NPU_FAULT, 3, "h1", 3, 9.0)
    assert root.why.startswith("a hardware fault came before the first failure the ranks reported (rank 2, exit 1)")


def test_the_earliest_of_several_faults_is_chosen() -> None:
    events = WAITING + [health("h1", 1, 7.0, ranks=[1]), health("h1", 0, 5.0, ranks=[0])]
    root = pick(FOUR, events)
    assert root is not None and (root.cls, root.rank, root.device_id, root.time) == (NPU_FAULT, 0, 0, 5.0)


@pytest.mark.parametrize("action", ["report", "pre_separate", "none", "unknown"])
def test_faults_that_do_not_reschedule_are_never_the_root_cause(action: str) -> None:
    for when in (5.0, 12.0):  # before the first failure, and after it on its own NPU
        root = pick(FOUR, WAITING + [health("h1", 2, when, action=action, level="PreSeparateNPU")])
        assert root is not None and (root.cls, root.rank) == ("exit", 2), (action, when)
    assert hardware_cause(FOUR, [health("h1", 2, 5.0, action=action)], None) is None


def test_the_code_at_the_events_level_is_named() -> None:
    levels = {"80CB8002": "NotHandleFault", CODE: LEVEL, "8C03A000": "RestartNPU"}
    root = pick(FOUR, [health("h1", 2, 12.0, codes=list(levels), levels=levels, level="RestartNPU")])
    assert root is not None and root.code == "8C03A000"
    assert root.codes == ("80CB8002", CODE)  # the others, the one named left out
    assert root.code_info is not None and root.code_info["level"] == "RestartNPU"
    # no code at that level: the first
    root = pick(FOUR, [health("h1", 2, 12.0, codes=["80CB8002"], levels={"80CB8002": "x"}, level="SeparateNPU")])
    assert root is not None and root.code == "80CB8002"


def test_a_fault_with_nothing_failed_is_the_root_cause() -> None:
    results = [ended(r, "h1", r, 20.0, RankState.STOPPED) for r in range(4)]
    root = pick(results, [health("h1", 1, 12.0)])
    assert root is not None and (root.cls, root.rank, root.device_id) == (NPU_FAULT, 1, 1)
    assert root.why.startswith("a hardware fault (")


# --- a lost host ---------------------------------------------------------------------------------------

TWO_HOSTS = [
    ended(0, "h1", 0, 30.0),  # the ranks on h1 fail later, waiting on h2
    ended(1, "h1", 1, 31.0),
    ended(2, "h2", 0, None, RankState.STOPPED),
    ended(3, "h2", 1, None, RankState.STOPPED),
]


def test_a_lost_host_is_the_root_cause_on_its_first_rank() -> None:
    root = pick(TWO_HOSTS, [agent_lost("h2", 20.0), hccl_timeout(0, "h1", 29.0), hccl_timeout(1, "h1", 29.5)])
    assert root is not None
    assert (root.cls, root.code, root.host, root.rank, root.device_id) == (HOST_LOST, "", "h2", 2, 0)
    assert root.first_line == "lost the agent on h2 (exit status 255)"
    assert root.time == 20.0 and root.time_source == "launcher" and root.retryable is False
    assert root.label == HOST_LOST
    # h1's ranks only waited (EI0002): the first failure the ranks reported is rank 0's symptom
    assert root.why.startswith("a hardware fault came before the first failure the ranks reported (rank 0, EI0002)")
    assert sorted(r for g in root.others for r in g.ranks) == [0, 1, 3]


def test_a_lost_host_after_the_first_failure_elsewhere_is_not_the_root_cause() -> None:
    root = pick(TWO_HOSTS, [agent_lost("h2", 40.0)])
    assert root is not None and (root.cls, root.rank) == ("exit", 0)


def test_a_lost_host_struck_the_first_rank_to_fail() -> None:
    results = [ended(0, "h1", 0, 30.0), ended(1, "h2", 0, 10.0), ended(2, "h2", 1, 12.0)]
    root = pick(results, [agent_lost("h2", 25.0, status=None)])
    assert root is not None and (root.cls, root.host, root.rank) == (HOST_LOST, "h2", 1)
    assert root.first_line == "lost the agent on h2"
    assert "struck rank 1, the first to fail (exit 1)" in root.why


def test_the_earlier_of_a_lost_host_and_an_npu_fault() -> None:
    events = [health("h1", 1, 21.0), agent_lost("h2", 20.0)]
    assert pick(TWO_HOSTS, events).cls == HOST_LOST  # type: ignore[union-attr]
    events = [health("h1", 1, 19.0), agent_lost("h2", 20.0)]
    root = pick(TWO_HOSTS, events)
    assert root is not None and (root.cls, root.host, root.rank) == (NPU_FAULT, "h1", 1)


def test_an_npu_fault_seen_after_the_symptoms_is_still_the_cause() -> None:
    results = [ended(0, "h1", 0, 9.0), ended(1, "h1", 1, 9.0), ended(2, "h1", 2, 20.0, RankState.STOPPED)]
    results.append(ended(3, "h1", 3, 9.0))
    events: List[Event] = [hccl_timeout(r, "h1", 8.0) for r in (0, 1, 3)]
    assert pick(results, events).kind == "symptom"  # type: ignore[union-attr]
    root = pick(results, events + [health("h1", 2, 12.0, ranks=[2])])
    assert root is not None and (root.cls, root.rank, root.device_id) == (NPU_FAULT, 2, 2)


def test_the_ranks_that_waited_on_the_faulty_npu_are_named_so() -> None:
    root = pick(FOUR, WAITING + [health("h1", 2, 12.0, ranks=[2])])
    assert root is not None and {g.what: g.ranks for g in root.others} == {"EI0002, waiting on rank 2": (0, 1, 3)}
