"""The agent as its own program (the unit the SSH backend ships): a zip application that takes its
plan and commands on stdin and streams events on stdout, and stops its ranks when its controller
goes away: stdin closed, no heartbeat, or a stop command. Run under Python 3.7 where available."""

from __future__ import annotations

import json
import os
import select
import subprocess
import sys
import time
from pathlib import Path
from typing import Dict, List

import pytest
from helpers import host_plan_dict, live_pids, python37, wait_until

from npulaunch.launch.fleet.ship import build_agent_zip


@pytest.fixture(scope="module")
def agent_zip(tmp_path_factory) -> str:
    path = str(tmp_path_factory.mktemp("ship") / "agent.pyz")
    build_agent_zip(path)
    return path


class Channel:
    """The controller's end of the pipe pair."""

    def __init__(self, agent_zip: str, first: Dict) -> None:
        interpreter = python37() or sys.executable
        self.proc = subprocess.Popen(
            [interpreter, "-I", "-S", agent_zip], stdin=subprocess.PIPE, stdout=subprocess.PIPE, stderr=subprocess.PIPE
        )
        self.messages: List[Dict] = []
        self._buffer = b""
        self.send(first)

    def send(self, message: Dict) -> None:
        assert self.proc.stdin is not None
        self.proc.stdin.write(json.dumps(message).encode() + b"\n")
        self.proc.stdin.flush()

    def pump(self, until, timeout_s: float = 20) -> None:
        assert self.proc.stdout is not None
        deadline = time.monotonic() + timeout_s
        while not until() and time.monotonic() < deadline:
            if select.select([self.proc.stdout], [], [], 0.1)[0]:
                data = os.read(self.proc.stdout.fileno(), 65536)
                if not data:
                    break
                *lines, self._buffer = (self._buffer + data).split(b"\n")
                self.messages.extend(json.loads(line) for line in lines if line)
        assert until(), self.messages[-5:]

    def kinds(self) -> List[str]:
        return [m.get("kind", m["type"]) for m in self.messages]


def test_the_agent_runs_a_plan_and_streams_events(agent_zip: str, tmp_path: Path, marker: str) -> None:
    channel = Channel(agent_zip, {"plan": host_plan_dict(tmp_path, marker, "*=say:hello"), "heartbeat_timeout_s": 0})
    channel.pump(lambda: "done" in channel.kinds())
    assert channel.kinds().count("rank_started") == 2 and channel.kinds().count("rank_exited") == 2
    said = [line for m in channel.messages if m["type"] == "output" for line in m["text"].splitlines()]
    assert said.count("hello") == 2
    done = channel.messages[-1]
    assert [r["state"] for r in done["ranks"]] == ["succeeded", "succeeded"] and done["controller_lost"] == ""
    assert channel.proc.wait(timeout=10) == 0


def test_a_closed_channel_stops_every_rank(agent_zip: str, tmp_path: Path, marker: str) -> None:
    channel = Channel(agent_zip, {"plan": host_plan_dict(tmp_path, marker, "0=grandchild:hang", "*=ignore_term")})
    channel.pump(lambda: channel.kinds().count("rank_started") == 2)
    pids = [m["pid"] for m in channel.messages if m.get("kind") == "rank_started"]
    time.sleep(0.3)
    assert channel.proc.stdin is not None
    channel.proc.stdin.close()  # the launcher, or its SSH connection, is gone
    channel.pump(lambda: "done" in channel.kinds())
    assert "channel closed" in channel.messages[-1]["controller_lost"]
    assert wait_until(lambda: not live_pids(pids), 5)  # rank 1 ignores SIGTERM: SIGKILL after the grace


@pytest.mark.alone  # heartbeats a second apart, judged in seconds
def test_missing_heartbeats_stop_every_rank(agent_zip: str, tmp_path: Path, marker: str) -> None:
    started = time.monotonic()
    channel = Channel(agent_zip, {"plan": host_plan_dict(tmp_path, marker, "*=hang"), "heartbeat_timeout_s": 1})
    channel.pump(lambda: "done" in channel.kinds())
    assert "no heartbeat" in channel.messages[-1]["controller_lost"]
    assert time.monotonic() - started < 1 + 1 + 3


@pytest.mark.alone  # heartbeats a second apart, judged in seconds
def test_heartbeats_keep_it_going_and_stop_is_obeyed(agent_zip: str, tmp_path: Path, marker: str) -> None:
    channel = Channel(agent_zip, {"plan": host_plan_dict(tmp_path, marker, "*=tick"), "heartbeat_timeout_s": 1})
    for _ in range(8):  # 1.6 s, longer than the timeout
        channel.send({"cmd": "heartbeat"})
        time.sleep(0.2)
    assert "done" not in channel.kinds()
    channel.send({"cmd": "stop", "reason": "rank 7 failed on another host"})
    channel.pump(lambda: "done" in channel.kinds())
    stop = next(m for m in channel.messages if m.get("kind") == "stop_requested")
    assert stop["reason"] == "rank 7 failed on another host"
    assert [r["state"] for r in channel.messages[-1]["ranks"]] == ["stopped", "stopped"]
    assert channel.messages[-1]["controller_lost"] == ""


def test_the_plans_intervals_are_the_agents(agent_zip: str, tmp_path: Path, marker: str) -> None:
    """The launcher's intervals reach the agent in its plan (host/timing.py): beats 0.2 s apart, not 2 s."""
    plan = host_plan_dict(tmp_path, marker, "*=tick")
    plan["timing"] = {"heartbeat_interval_s": 0.2}
    channel = Channel(agent_zip, {"plan": plan, "heartbeat_timeout_s": 0})
    channel.pump(lambda: "beat" in channel.kinds(), timeout_s=60)  # the first at once
    first = time.monotonic()
    channel.pump(lambda: channel.kinds().count("beat") >= 4, timeout_s=60)  # then one each 0.2 s
    took = time.monotonic() - first
    channel.send({"cmd": "stop", "reason": "enough beats"})
    channel.pump(lambda: "done" in channel.kinds())
    assert took < 4.0, (took, channel.kinds())  # 0.6 s; with the default's 2 s, at least 6 s


def test_the_agent_writes_the_rank_table_its_host_lacks(agent_zip: str, tmp_path: Path, marker: str) -> None:
    data = host_plan_dict(tmp_path, marker, "*=ok")
    table = {"version": "1.0", "server_count": "1", "server_list": [], "status": "completed"}
    data.update(rank_table=table, rank_table_path=str(tmp_path / "rank_table.json"))
    channel = Channel(agent_zip, {"plan": data, "heartbeat_timeout_s": 0})
    channel.pump(lambda: "done" in channel.kinds())
    assert json.loads((tmp_path / "rank_table.json").read_text()) == table
