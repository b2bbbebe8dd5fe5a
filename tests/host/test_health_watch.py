"""The live NPU health watch (host/health/watch.py) in a real agent with real ranks and the stand-in
npu-smi / hccn_tool, whose faults file changes while the job runs; and the one judgement of an NPU's
facts (host/health/judge.py) it shares with the pre-start check."""

from __future__ import annotations

import time
from dataclasses import replace
from pathlib import Path
from typing import Any, Callable, Dict, List, Optional

import pytest
from helpers import STANDINS, base_env, host_plan, marked_pids

from npulaunch.host.agent.agent import Agent
from npulaunch.host.cann.catalog import FAULT_LEVELS
from npulaunch.host.events import Event, EventKind
from npulaunch.host.health import judge
from npulaunch.host.spec import HostPlan

WATCH = {"interval_s": 0.2, "tool_timeout_s": 5.0, "devices": [0, 1, 2, 3], "nics": False}


class Run:
    """An agent of 4 hanging ranks (devices 0-3) driven one turn at a time, its events kept."""

    def __init__(
        self, tmp_path: Path, marker: str, env: Dict[str, str], watch: Dict[str, Any], *rank_args: str, grace=2.0
    ) -> None:
        plan = host_plan(tmp_path, marker, *(rank_args or ("*=hang",)), ranks=4, grace=grace)
        self.events: List[Event] = []
        # the tools run in the agent's environment: the marker in it proves no call outlives the test
        self.agent = Agent(
            replace(plan, health_watch=watch),
            self.events.append,
            lambda *a: None,
            base_env=dict(env, NPLTEST_MARKER=marker),
        )
        self.agent.start()

    def health(self) -> List[Dict[str, Any]]:
        return [e.data for e in self.health_events()]

    def health_events(self) -> List[Event]:
        return [e for e in self.events if e.kind is EventKind.NPU_HEALTH]

    def turn_until(self, predicate: Callable[[], bool], timeout_s: float) -> bool:
        deadline = time.monotonic() + timeout_s
        while time.monotonic() < deadline:
            self.agent.step(0.05)
            if predicate():
                return True
        return predicate()

    def stop(self) -> float:
        """Stop the job; how long until every rank had ended."""
        started = time.monotonic()
        self.agent.stop("test")
        while self.agent.step(0.05):
            pass
        took = time.monotonic() - started
        self.agent.finish()
        return took


def tools_env(**extra: str) -> Dict[str, str]:
    return base_env(extra, standins=True)


def test_faults_that_appear_mid_run_are_one_event_each_and_only_on_the_jobs_npus(tmp_path: Path, marker: str) -> None:
    faults = tmp_path / "faults"
    faults.write_text("# nothing yet\n")
    run = Run(tmp_path, marker, tools_env(NPU_STANDIN_FAULTS=str(faults)), WATCH)
    try:
        assert not run.turn_until(lambda: bool(run.health()), 0.6)  # healthy: nothing said
        faults.write_text("2 Alarm 80E01801\n1 Warning 80E18401  # HBM isolation lines\n6 Critical 80E01801\n")
        assert run.turn_until(lambda: len(run.health()) >= 2, 3.0)
        run.turn_until(lambda: False, 1.0)  # five more rounds: nothing new
        by_device = {data["device"]: data for data in run.health()}
        assert sorted(by_device) == [1, 2] and len(run.health()) == 2  # NPU 6 is no NPU of the job
        assert by_device[2] == {
            "device": 2,
            "npu": 2,
            "chip": 0,
            "health": "Alarm",
            "codes": ["80E01801"],
            "levels": {"80E01801": FAULT_LEVELS["80E01801"]},
            "level": "RestartBusiness",
            "action": "reschedule",
            "info": "Multi-bit ECC error when accessing HBM",
            "ranks": [2],
            "nic": None,
            "unanswered": None,
        }
        assert (by_device[1]["level"], by_device[1]["action"], by_device[1]["ranks"]) == (
            "NotHandleFault",
            "report",
            [1],
        )
        assert all(e.host == "localhost" and e.rank is None for e in run.events if e.kind is EventKind.NPU_HEALTH)
        faults.write_text("2 Alarm 80E01801 8C03A000\n")  # another code: a change; device 1 recovered
        assert run.turn_until(lambda: len(run.health()) >= 4, 3.0)
        changes = {data["device"]: data for data in run.health()[2:]}
        assert (changes[1]["health"], changes[1]["action"], changes[1]["level"]) == ("OK", "none", "NormalNPU")
        assert (changes[2]["codes"], changes[2]["level"]) == (["80E01801", "8C03A000"], "RestartNPU")
    finally:
        run.stop()
    assert not marked_pids(marker)


@pytest.mark.alone  # the agent's loop turns timed in tenths of a second
def test_a_hung_npu_smi_is_reported_once_per_npu_and_never_holds_up_the_agent(tmp_path: Path, marker: str) -> None:
    # the figures' calls left out: on 2 busy cores their stand-ins' start-up competes with the rank's own
    watch = dict(WATCH, tool_timeout_s=1.0, perf=False)
    run = Run(tmp_path, marker, tools_env(NPU_STANDIN_HANG="health"), watch, "0=exit:3@0.4", "*=hang")
    try:
        # rank 0 exits while every health call hangs: reaped and reported at once all the same
        assert run.turn_until(lambda: any(e.kind is EventKind.RANK_EXITED for e in run.events), 2.0)
        exited = next(e for e in run.events if e.kind is EventKind.RANK_EXITED)
        assert exited.data["exit_code"] == 3 and exited.data["duration_s"] < 0.9
        assert run.turn_until(lambda: len(run.health()) >= 4, 3.0)
        run.turn_until(lambda: False, 1.5)  # a second round of hung calls: no new reason, nothing said
        unanswered = run.health()
        assert sorted(data["device"] for data in unanswered) == [0, 1, 2, 3]
        for data in unanswered:
            assert (data["health"], data["action"], data["level"]) == (None, "unknown", None)
            assert data["unanswered"] == f"npu-smi info -t health -i {data['device']} -c 0 did not answer within 1 s"
        assert any("npu-smi" in " ".join(p.cmdline()) for p in _children())  # a round is hanging now
    finally:
        took = run.stop()
    assert took < 1.0  # the grace period is 2 s; the ranks end at SIGTERM and nothing waits on npu-smi
    assert not [p for p in _children() if "npu-smi" in " ".join(p.cmdline())]
    assert not marked_pids(marker)


def _children() -> List[Any]:
    import psutil

    return [p for p in psutil.Process().children(recursive=True) if p.status() != psutil.STATUS_ZOMBIE]


def test_without_npu_smi_one_event_says_why_and_nothing_more(tmp_path: Path, marker: str) -> None:
    run = Run(tmp_path, marker, base_env(), dict(WATCH, nics=True))
    try:
        run.turn_until(lambda: False, 0.8)
    finally:
        run.stop()
    assert run.health() == [
        {
            "device": None,
            "npu": None,
            "chip": None,
            "health": None,
            "codes": [],
            "levels": {},
            "level": None,
            "action": "unknown",
            "info": "",
            "ranks": [0, 1, 2, 3],
            "nic": None,
            "unanswered": "npu-smi is not on the PATH: the NPU health watch cannot run",
            "missing": "npu-smi",  # the supervisor says nothing of it: a host without NPU software
        }
    ]


def test_a_job_npus_link_going_down_across_hosts_means_rescheduling(tmp_path: Path, marker: str) -> None:
    links = tmp_path / "links"
    links.write_text("")
    run = Run(tmp_path, marker, tools_env(HCCN_STANDIN_FAULTS=str(links)), dict(WATCH, nics=True))
    try:
        assert not run.turn_until(lambda: bool(run.health()), 0.6)
        links.write_text("3 link DOWN\n")
        assert run.turn_until(lambda: bool(run.health()), 3.0)
        links.write_text("")
        assert run.turn_until(lambda: len(run.health()) >= 2, 3.0)
    finally:
        run.stop()
    down, up = run.health()
    assert (down["device"], down["nic"], down["health"], down["level"], down["action"]) == (
        3,
        "DOWN",
        "OK",
        judge.LINK_DOWN,
        "reschedule",
    )
    assert (up["device"], up["nic"], up["action"]) == (3, "UP", "none")


def test_npu_smi_failing_for_one_chip_while_the_others_answer_is_a_card_drop(tmp_path: Path, marker: str) -> None:
    tools = tmp_path / "bin"
    tools.mkdir()
    fake = tools / "npu-smi"  # "-i 1" fails as a card that dropped off the bus would; the rest is the stand-in
    fake.write_text(
        '#!/bin/sh\ncase " $* " in *" -t health -i 1 "*) echo "dcmi get device health failed, ret = -8012" >&2; '
        f'exit 255;; esac\nexec {STANDINS / "npu-smi"} "$@"\n'
    )
    fake.chmod(0o755)
    env = tools_env()
    env["PATH"] = f"{tools}:{env['PATH']}"
    run = Run(tmp_path, marker, env, WATCH)
    try:
        assert run.turn_until(lambda: bool(run.health()), 3.0)
        run.turn_until(lambda: False, 0.6)
    finally:
        run.stop()
    [dropped] = run.health()
    assert (dropped["device"], dropped["health"], dropped["codes"]) == (1, "UNKNOWN", [judge.CARD_DROP_CODE])
    assert (dropped["level"], dropped["action"]) == (FAULT_LEVELS["40F84E00"], "reschedule")
    assert "ret = -8012" in dropped["info"]


# -- the performance figures (host/health/perf.py): one NPU_PERF event per round -------------------------


def perf_events(run: Run) -> List[Event]:
    return [e for e in run.events if e.kind is EventKind.NPU_PERF]


def test_each_round_reads_every_npus_figures_and_a_figure_changed_mid_run_is_picked_up(
    tmp_path: Path, marker: str
) -> None:
    figures = tmp_path / "perf"
    figures.write_text("# as the stand-in's defaults\n")
    run = Run(tmp_path, marker, tools_env(NPU_STANDIN_PERF=str(figures)), dict(WATCH, nics=True))
    try:
        # generous limits (a round is 17 calls of a Python stand-in): each wait ends as soon as it holds
        assert run.turn_until(lambda: len(perf_events(run)) >= 2, 15.0)
        figures.write_text("2 aicore_mhz=800 temp_c=104 power_w=120 usage=95 link_mbps=100000 rx_err=+1234\n")
        changed = len(perf_events(run))
        assert run.turn_until(lambda: any(_slowed(e) for e in perf_events(run)[changed:]), 15.0)
        assert run.turn_until(lambda: len(perf_events(run)) >= changed + 3, 15.0)  # and a round after it
    finally:
        run.stop()
    assert not run.health()  # figures are no health: nothing said of it
    events = perf_events(run)
    assert all(e.host == "localhost" and e.rank is None and list(e.data) == ["devices"] for e in events)
    before = events[1].data["devices"]
    assert sorted(before) == ["0", "1", "2", "3"]
    for device, figures_of in before.items():
        assert (figures_of["npu"], figures_of["chip"], figures_of["ranks"]) == (int(device), 0, [int(device)])
        assert figures_of["aicore_mhz"] == figures_of["aicore_rated_mhz"] == 1800 and figures_of["power_w"] > 250
        assert figures_of["link_mbps"] == 200000 and figures_of["link_errors"] == {}  # a second reading: none rose
        assert figures_of["unanswered"] is None and 60 <= figures_of["aicore_usage_pct"] <= 90
    assert events[0].data["devices"]["0"]["link_errors"] is None  # the first: nothing to compare with
    first = next(i for i, e in enumerate(events) if i >= changed and _slowed(e))
    slow = events[first].data["devices"]["2"]
    assert (slow["aicore_mhz"], slow["temp_c"], slow["power_w"], slow["aicore_usage_pct"]) == (800, 104.0, 120.0, 95.0)
    assert (slow["link_mbps"], slow["link_errors"]) == (100000, {"roce_rx_err_pkt_num": 1234})
    assert events[first].data["devices"]["1"]["aicore_mhz"] == 1800
    assert events[first + 1].data["devices"]["2"]["link_errors"] == {}  # 1234 new once, none since
    assert not marked_pids(marker)


def _slowed(event: Event) -> bool:
    return bool(event.data["devices"]["2"]["aicore_mhz"] == 800)


def test_a_hung_or_failing_figure_call_never_holds_up_the_health_answers(tmp_path: Path, marker: str) -> None:
    figures, faults = tmp_path / "perf", tmp_path / "faults"
    figures.write_text("1 hang=common\n3 fail=common\n")
    faults.write_text("2 Alarm 80E01801\n")
    env = tools_env(NPU_STANDIN_PERF=str(figures), NPU_STANDIN_FAULTS=str(faults))
    run = Run(tmp_path, marker, env, dict(WATCH, tool_timeout_s=3.0))
    try:
        assert run.turn_until(lambda: bool(run.health()), 10.0)
        assert not perf_events(run)  # the round goes on: NPU 1's figure call hangs
        assert run.turn_until(lambda: bool(perf_events(run)), 10.0)
    finally:
        run.stop()
    [fault] = run.health()
    assert (fault["device"], fault["health"], fault["action"]) == (2, "Alarm", "reschedule")
    event = perf_events(run)[0]
    # judged at the round's end, the health event would come in the same turn as the figures
    assert event.time - run.health_events()[0].time >= 1.0
    devices = event.data["devices"]
    assert devices["1"]["aicore_mhz"] is None and devices["3"]["temp_c"] is None
    assert devices["1"]["unanswered"] == "npu-smi info -t common -i 1 -c 0 did not answer within 3 s"
    assert devices["3"]["unanswered"].startswith("npu-smi info -t common -i 3 -c 0 exited with 1: ")
    assert devices["0"]["aicore_mhz"] == devices["2"]["aicore_mhz"] == 1800  # the others answered
    assert devices["0"]["link_mbps"] is None and devices["0"]["unanswered"] is None  # one host: no NIC asked
    assert not marked_pids(marker)


def test_the_figures_can_be_left_out(tmp_path: Path, marker: str) -> None:
    faults = tmp_path / "faults"
    faults.write_text("2 Alarm 80E01801\n")
    run = Run(tmp_path, marker, tools_env(NPU_STANDIN_FAULTS=str(faults)), dict(WATCH, perf=False))
    try:
        assert run.turn_until(lambda: bool(run.health()), 10.0)  # a first round is judged ...
        faults.write_text("2 Alarm 80E01801 8C03A000\n")
        assert run.turn_until(lambda: len(run.health()) >= 2, 10.0)  # ... and a second: the first one ended
    finally:
        run.stop()
    assert not perf_events(run)


# -- the judgement (host/health/judge.py) ---------------------------------------------------------------


@pytest.mark.parametrize(
    "health, codes, level, action",
    [
        ("OK", [], "NormalNPU", "none"),
        ("Alarm", ["A4025021", "8C03A000", "8C084E00"], "RestartNPU", "reschedule"),  # mind-cluster's fixture
        ("Alarm", ["0x80e01801"], "RestartBusiness", "reschedule"),
        ("Warning", ["80E18401"], "NotHandleFault", "report"),
        ("Warning", ["80E18405"], "SubHealthFault", "report"),
        ("Warning", ["8118043C", "80E01801"], "PreSeparateNPU", "pre_separate"),  # PreSeparate > RestartBusiness
        ("Critical", ["DEADBEEF"], "SeparateNPU", "reschedule"),  # a code faultCode.json does not list
        ("UNKNOWN", [], "RestartNPU", "reschedule"),  # the card-drop code
        ("Warning", [], "NotHandleFault", "report"),  # no code: the health's severity
        ("Alarm", [], "SeparateNPU", "reschedule"),
        ("Critical", [], "SeparateNPU", "reschedule"),
        (None, [], None, "unknown"),
    ],
)
def test_judge_chip(health: Optional[str], codes: List[str], level: Optional[str], action: str) -> None:
    verdict = judge.judge_chip(health, codes)
    assert (verdict.level, verdict.action) == (level, action)


def test_the_verdicts_codes_and_levels() -> None:
    verdict = judge.judge_chip("UNKNOWN", [])
    assert verdict.codes == ("40F84E00",) and verdict.levels == {"40F84E00": FAULT_LEVELS["40F84E00"]}
    verdict = judge.judge_chip("Alarm", ["a4025021", "8C03A000", "NA", "8C03A000"])
    assert verdict.codes == ("A4025021", "8C03A000")
    assert (
        verdict.describe() == "most severe RestartNPU (8C03A000), MindCluster: isolate the chip and reschedule the job"
    )


def test_most_severe_follows_mindclusters_order() -> None:
    assert judge.most_severe([]) == "NormalNPU"
    assert judge.most_severe(["NotHandleFault", "RestartRequest", "SubHealthFault"]) == "RestartRequest"
    assert judge.most_severe(["RestartNPU", "PreSeparateNPU"]) == "PreSeparateNPU"
    assert judge.most_severe(["ManuallySeparateNPU", "SeparateNPU"]) == "ManuallySeparateNPU"
    assert judge.most_severe(["no such level", "RestartNPU"]) == "SeparateNPU"
    assert list(judge.ACTIONS) == list(judge.SEVERITY)  # every level has its action


def test_a_down_link_reschedules_and_keeps_a_worse_chip_level() -> None:
    ok = judge.judge_chip("OK", [])
    assert judge.judge_link(ok, "UP") == ok and judge.judge_link(ok, None) == ok
    down = judge.judge_link(ok, "DOWN")
    assert (down.level, down.action) == (judge.LINK_DOWN, "reschedule")
    chip = judge.judge_chip("Alarm", ["8C03A000"])
    assert judge.judge_link(chip, "DOWN") == chip
    pre = judge.judge_link(judge.judge_chip("Warning", ["8118043C"]), "DOWN")
    assert (pre.level, pre.action, pre.codes) == (judge.LINK_DOWN, "reschedule", ("8118043C",))


def test_health_watch_round_trips_in_the_host_plan(tmp_path: Path, marker: str) -> None:
    plan = replace(host_plan(tmp_path, marker, "*=ok"), health_watch=dict(WATCH, nics=True))
    assert HostPlan.from_dict(plan.to_dict()) == plan
    old = plan.to_dict()
    del old["health_watch"]  # a plan written before the watch existed
    assert HostPlan.from_dict(old).health_watch is None
