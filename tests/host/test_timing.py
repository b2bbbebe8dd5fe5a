"""The launcher's intervals (npulaunch/host/timing.py): each one's default is what its user takes when nothing
is set, NPULAUNCH_TIMING sets any of them (checked before anything starts), and a job's values reach its
agents: a real job's pace windows follow the variable."""

from __future__ import annotations

import json
import sys
import time
from pathlib import Path
from typing import Callable, Dict

import pytest
from helpers import host_plan_dict, run_cli

from npulaunch.host import timing
from npulaunch.host.spec import HostPlan


def _plan(tmp_path: Path) -> HostPlan:
    return HostPlan.from_dict(host_plan_dict(tmp_path, "npltest-timing", "*=ok"))


def _agent_poll(tmp_path: Path) -> float:
    from npulaunch.host.agent.agent import Agent

    return Agent(_plan(tmp_path), lambda event: None, lambda spec, stream, block: None)._poll_s


def _pace_window(tmp_path: Path) -> float:
    from npulaunch.host.agent.paces import Paces

    return Paces(_plan(tmp_path), lambda *a, **k: None, time.monotonic).window_s


def _progress_sample(tmp_path: Path) -> float:
    from npulaunch.host.agent.monitor import Monitor

    return Monitor(_plan(tmp_path), lambda *a, **k: None, lambda: 100.0)._sample_every


def _plog_scan(tmp_path: Path) -> float:
    from npulaunch.host.agent.monitor import Monitor

    monitor = Monitor(_plan(tmp_path), lambda *a, **k: None, lambda: 100.0)
    monitor.poll()
    return monitor._next_scan - 100.0


def _stack_dumps(tmp_path: Path) -> float:
    from npulaunch.host.agent.stacks import StackDumps

    return StackDumps(time.monotonic)._limit_s


def _stack_sample(tmp_path: Path) -> float:
    from npulaunch.host.agent.stacks import StackDumps

    dumps = StackDumps(lambda: 100.0, py_spy="")
    dumps.start([])
    assert dumps._batch is not None
    return dumps._batch.settle_at - 100.0


def _heartbeat(tmp_path: Path) -> float:
    """The remote agent's beat period (host/agent/remote.py's Controller)."""
    from npulaunch.host.agent import remote

    class Sender:
        broken = False

        def send(self, record: Dict) -> None:
            assert record == {"type": "beat"}

    controller = remote.Controller.__new__(remote.Controller)
    controller.sender, controller.next_beat, controller.timeout_s, controller.gone = Sender(), 0.0, 0, ""
    before = time.monotonic()
    controller.tick()
    return round(controller.next_beat - before, 2)


def _drain(tmp_path: Path) -> float:
    from npulaunch.views.console import Console

    waited: Dict[str, float] = {}

    class Writer:
        def drain(self, timeout_s: float) -> bool:
            waited["s"] = timeout_s
            return True

    console = Console()
    console._destinations = {"out": Writer()}  # type: ignore[dict-item]
    console.drain()
    return round(waited["s"], 1)


# each interval's user, asked what it takes: what a test checks per default (the supervisor's and the c10d
# store's polls are read where they wait; their tests below follow the table)
USERS: Dict[str, Callable[[Path], float]] = {
    "agent_poll_s": _agent_poll,
    "pace_window_s": _pace_window,
    "progress_sample_s": _progress_sample,
    "plog_scan_s": _plog_scan,
    "heartbeat_interval_s": _heartbeat,
    "stack_dump_limit_s": _stack_dumps,
    "stack_sample_s": _stack_sample,
    "drain_at_exit_s": _drain,
}


def test_every_interval_has_a_default_within_its_range_and_words() -> None:
    assert len(timing.BY_NAME) == len(timing.INTERVALS)
    for interval in timing.INTERVALS:
        assert interval.name.endswith("_s") and interval.low <= interval.default <= interval.high, interval
        assert interval.what.endswith(".") and len(interval.what) > 30, interval


@pytest.mark.parametrize("name", sorted(USERS))
def test_the_default_is_what_its_user_takes_and_a_set_value_replaces_it(name: str, tmp_path: Path) -> None:
    assert USERS[name](tmp_path) == pytest.approx(timing.BY_NAME[name].default)
    other = timing.BY_NAME[name].low
    with timing.applied({name: other}):
        assert USERS[name](tmp_path) == pytest.approx(other)
    assert USERS[name](tmp_path) == pytest.approx(timing.BY_NAME[name].default)  # given back


def test_the_supervisor_and_the_store_read_theirs_where_they_wait() -> None:
    """The two intervals read inside a loop: their code asks the table by name (no copy of the number)."""
    root = Path(timing.__file__).parents[1]
    supervisor = (root / "launch" / "supervisor.py").read_text()
    c10d = (root / "plan" / "schedulers" / "c10d.py").read_text()
    assert 'timing.seconds("supervisor_poll_s")' in supervisor
    assert c10d.count('timing.seconds("store_poll_s")') == 3 and "POLL_S" not in c10d
    assert timing.seconds("supervisor_poll_s") == 0.5 and timing.seconds("store_poll_s") == 0.05


def test_the_variable_is_read_and_every_mistake_named() -> None:
    assert timing.parse_variable("") == ({}, None)
    assert timing.parse_variable(" pace_window_s=1, heartbeat_interval_s = 0.5 ,") == (
        {"pace_window_s": 1.0, "heartbeat_interval_s": 0.5},
        None,
    )
    _, wrong = timing.parse_variable("pace_window=1")
    assert wrong is not None and wrong[0] == "pace_window=1" and "pace_window_s" in wrong[2]
    _, wrong = timing.parse_variable("pace_window_s=fast")
    assert wrong == ("pace_window_s=fast", "pace_window_s", "a number of seconds, 0.2 to 600 seconds")
    _, wrong = timing.parse_variable("agent_poll_s=0")
    assert wrong == ("agent_poll_s=0", "agent_poll_s", "0.005 to 1 seconds")


def test_applied_values_nest_and_are_given_back() -> None:
    with timing.applied({"pace_window_s": 1.0}):
        with timing.applied({"plog_scan_s": 0.1}):
            assert timing.overrides() == {"pace_window_s": 1.0, "plog_scan_s": 0.1}
        assert timing.overrides() == {"pace_window_s": 1.0}
    assert timing.overrides() == {}
    with pytest.raises(RuntimeError):
        with timing.applied({"pace_window_s": 1.0}):
            raise RuntimeError("a job that failed")
    assert timing.overrides() == {}


def test_a_host_plan_carries_the_intervals_to_its_agent(tmp_path: Path) -> None:
    data = host_plan_dict(tmp_path, "npltest-timing", "*=ok")
    data["timing"] = {"heartbeat_interval_s": 0.25}
    plan = HostPlan.from_dict(json.loads(json.dumps(HostPlan.from_dict(data).to_dict())))
    assert plan.timing == {"heartbeat_interval_s": 0.25}
    del data["timing"]  # a plan from a launcher of before: the defaults
    assert HostPlan.from_dict(data).timing == {}


PACER = (
    "import os, time\n"
    "path = os.path.join(os.environ['NPULAUNCH_RANK_DIR'], 'pace')\n"
    "for step in range(1, 26):\n"
    "    with open(path, 'a') as f:\n"
    "        f.write('%.3f %d 0.010000 0.001000\\n' % (time.time(), step))\n"
    "    time.sleep(0.1)\n"
)


def _paced_job(tmp_path: Path, marker: str, variable: str) -> list:
    tmp_path.mkdir()
    path = tmp_path / "job.yaml"
    path.write_text(
        "framework: pytorch\n"
        f"job:\n  command: [{sys.executable}, -c, {json.dumps(PACER)}]\n  log_dir: {tmp_path / 'logs'}\n  id: paced\n"
        "hosts:\n  - host: localhost\n    devices: [0, 1]\n"
        f"env: {{NPLTEST_MARKER: {marker}}}\nmonitor: {{health_interval_s: 0}}\n"
    )
    result = run_cli("run", "--no-live", str(path), env={timing.VARIABLE: variable}, timeout=60)
    assert result.returncode == 0, result.stdout + result.stderr
    events = (tmp_path / "logs" / "paced" / "events.jsonl").read_text().splitlines()
    return [json.loads(line) for line in events if '"rank_pace"' in line]


def test_a_jobs_pace_windows_are_the_default_or_the_variables(tmp_path: Path, marker: str) -> None:
    paces = _paced_job(tmp_path / "default", marker, "")  # 2.5 s of steps: only the last, partial window
    assert [e["window_s"] for e in paces] == [5.0] and paces[-1]["final"] is True
    paces = _paced_job(tmp_path / "set", marker, "pace_window_s=0.5")
    assert {e["window_s"] for e in paces} == {0.5} and len(paces) >= 4, paces
    assert all(set(e["ranks"]) <= {"0", "1"} for e in paces)


def test_a_wrong_variable_stops_the_run_before_anything_starts(tmp_path: Path) -> None:
    path = tmp_path / "job.yaml"
    logs = tmp_path / "logs"
    path.write_text(
        f"job:\n  command: [{sys.executable}, -c, pass]\n  log_dir: {logs}\n"
        "hosts: [{host: localhost, devices: [0]}]\n"
    )
    result = run_cli("run", "--no-live", str(path), env={timing.VARIABLE: "pace_window_s=0.01"})
    assert result.returncode == 2, result.stdout + result.stderr
    assert "NPULAUNCH_TIMING: 'pace_window_s=0.01': 'pace_window_s': allowed: 0.2 to 600 seconds" in result.stderr
    assert not (tmp_path / "logs").exists()
