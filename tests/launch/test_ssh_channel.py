"""The remote agent over real SSH (sshd in network namespaces): shipped, started without a pty,
streaming events; host keys checked; ranks stopped when the connection closes or the network is
cut."""

from __future__ import annotations

import queue
import subprocess
import time
from pathlib import Path
from typing import List

import pytest
from helpers import host_plan_dict, live_pids, wait_until

from npulaunch.host.events import Event, EventKind
from npulaunch.host.spec import HostPlan
from npulaunch.host.tail import split_lines
from npulaunch.host.wire import Closed, Command, Done, FromAgent, Output, Probe, ProbeAnswer, Start


def channel_for(netns_hosts, host, messages):
    from npulaunch.launch.fleet.ssh import AgentChannel, SshTarget, connect

    target = SshTarget(
        host.name,
        user="root",
        identity_file=str(netns_hosts.client_key),
        known_hosts=str(netns_hosts.known_hosts),
        ssh_config=str(netns_hosts.ssh_config),
    )
    return AgentChannel(connect(target), host.name, messages)


def start_message(tmp_path: Path, marker: str, *behaviours: str, heartbeat_timeout_s: float = 0) -> Start:
    return Start(HostPlan.from_dict(host_plan_dict(tmp_path, marker, *behaviours)), heartbeat_timeout_s)


def output_lines(got: List[FromAgent]) -> List[str]:
    return [line for m in got if isinstance(m, Output) for line in split_lines(m.block())]


def started_pids(got: List[FromAgent]) -> List[int]:
    return [m.data["pid"] for m in got if isinstance(m, Event) and m.kind is EventKind.RANK_STARTED]


def closed(got: List[FromAgent]) -> bool:
    return any(isinstance(m, Closed) for m in got)


def drain(messages: "queue.Queue", until, timeout_s: float = 20) -> List[FromAgent]:
    got: List[FromAgent] = []
    deadline = time.monotonic() + timeout_s
    while time.monotonic() < deadline and not until(got):
        try:
            got.append(messages.get(timeout=0.1)[1])
        except queue.Empty:
            pass
    assert until(got), got[-5:]
    return got


def built_zip(tmp_path: Path) -> bytes:
    from npulaunch.launch.fleet.ship import agent_zip

    return agent_zip()


def test_the_agent_runs_on_a_remote_host(netns_hosts, tmp_path: Path, marker: str) -> None:
    messages: "queue.Queue" = queue.Queue()
    host = netns_hosts.hosts[1]
    channel = channel_for(netns_hosts, host, messages)
    channel.start(built_zip(tmp_path), start_message(tmp_path, marker, "*=hostname"))
    got = drain(messages, closed)
    assert output_lines(got).count("host h2") == 2  # the ranks ran on h2, not here
    done = next(m for m in got if isinstance(m, Done))
    assert [r.state.value for r in done.ranks] == ["succeeded", "succeeded"]
    assert next(m for m in got if isinstance(m, Closed)).exit_status == 0
    assert not Path(channel.remote_dir).exists()  # the private directory was removed (shared filesystem)
    channel.close()


def test_an_unknown_host_key_is_refused(netns_hosts, tmp_path: Path) -> None:
    from npulaunch.launch.fleet.link import BackendError
    from npulaunch.launch.fleet.ssh import SshTarget, connect

    empty = tmp_path / "known_hosts"
    empty.write_text("")
    target = SshTarget(
        netns_hosts.hosts[0].address, user="root", identity_file=str(netns_hosts.client_key), known_hosts=str(empty)
    )
    with pytest.raises(BackendError, match="host key not known"):
        connect(target)


def test_a_closed_connection_stops_the_remote_ranks(netns_hosts, tmp_path: Path, marker: str) -> None:
    messages: "queue.Queue" = queue.Queue()
    channel = channel_for(netns_hosts, netns_hosts.hosts[0], messages)
    channel.start(built_zip(tmp_path), start_message(tmp_path, marker, "0=ignore_term", "*=grandchild:hang"))
    got = drain(messages, lambda g: len(started_pids(g)) == 2)
    pids = started_pids(got)
    time.sleep(0.3)
    started = time.monotonic()
    channel.close()  # the launcher's connection goes away (as when it is killed)
    assert wait_until(lambda: not live_pids(pids), 10), "ranks survived the closed connection"
    assert time.monotonic() - started < 1 + 3  # grace 1 s (rank 0 ignores SIGTERM) + detection


def test_a_cut_network_stops_the_remote_ranks_by_heartbeat(netns_hosts, tmp_path: Path, marker: str) -> None:
    messages: "queue.Queue" = queue.Queue()
    host = netns_hosts.hosts[2]
    channel = channel_for(netns_hosts, host, messages)
    channel.start(built_zip(tmp_path), start_message(tmp_path, marker, "*=hang", heartbeat_timeout_s=2))
    got = drain(messages, lambda g: len(started_pids(g)) == 2)
    pids = started_pids(got)
    channel.send(Command("heartbeat"))
    netns_hosts.set_link(host, up=False)  # no FIN, no RST: sshd keeps the session; only heartbeats tell
    try:
        started = time.monotonic()
        assert wait_until(lambda: not live_pids(pids), 10), "ranks survived the cut network"
        assert time.monotonic() - started < 2 + 1 + 2
    finally:
        netns_hosts.set_link(host, up=True)
        subprocess.run(["true"])
        channel.close()


def test_a_host_whose_python_does_not_run_says_why(netns_hosts, tmp_path: Path) -> None:
    messages: "queue.Queue" = queue.Queue()
    channel = channel_for(netns_hosts, netns_hosts.hosts[0], messages)
    channel.start(built_zip(tmp_path), Probe({}), python="no-such-python3")
    last = drain(messages, closed)[-1]
    assert isinstance(last, Closed) and last.exit_status == 127 and "no-such-python3" in last.stderr[-1]
    channel.close()


def test_the_probe_answers_then_the_agent_waits_for_its_plan(netns_hosts, tmp_path: Path, marker: str) -> None:
    messages: "queue.Queue" = queue.Queue()
    channel = channel_for(netns_hosts, netns_hosts.hosts[1], messages)
    ask = {
        "workdir": str(tmp_path),
        "script": "missing.py",
        "program": "python3",
        "job_dir": str(tmp_path / "j"),
        "devices": [0, 1],
        "need_ips": True,
    }
    channel.start(built_zip(tmp_path), Probe(ask))
    answer = drain(messages, lambda g: any(isinstance(m, ProbeAnswer) for m in g))[-1]
    assert isinstance(answer, ProbeAnswer)
    probe = answer.facts
    assert probe["workdir"] is True and probe["script"] is False and probe["program"] is True
    assert probe["npus"] is None and probe["device_ips"] is None  # no NPU tools on the test hosts' PATH
    assert Path(channel.remote_dir).is_dir()
    channel.send(start_message(tmp_path, marker, "*=hostname"))
    got = drain(messages, closed)
    assert output_lines(got).count("host h2") == 2
    assert not Path(channel.remote_dir).exists()
    channel.close()
