"""Every host's agent, driven like one Agent: the multi-host side of the supervisor.

``Fleet`` connects to every host in parallel, ships and starts one agent per host, and has it
answer the preflight probe; all failures are reported together and nothing starts if any host
fails. The plan is built after that (remote ``devices: all`` and device IPs come from the
probe). ``FleetRun`` runs one attempt of the plan: it hands every waiting agent its part,
merges their events and output into the supervisor's callbacks, sends heartbeats, and turns
stop / kill into commands to every agent. The supervisor's policy (stop every rank on the first
failure, the report) stays where it is. Signals to the launcher (Ctrl-C, SIGTERM, SIGHUP) stop
every host; a second one kills.
"""

from __future__ import annotations

import os
import queue
import signal
import time
from concurrent.futures import ThreadPoolExecutor
from typing import Any, Callable, Dict, List, Optional, Set

from npulaunch.host.agent.agent import STOP_SIGNALS, AgentOutcome, RankResult, RankState
from npulaunch.host.agent.inbox import SignalInbox
from npulaunch.launch.ssh.ship import agent_zip
from npulaunch.host.events import Event, EventKind
from npulaunch.plan.build import LaunchPlan
from npulaunch.host.spec import RankSpec
from npulaunch.plan.remotecheck import judge, remote_facts
from npulaunch.launch.ssh.channel import AgentChannel, BackendError, SshTarget, connect

HEARTBEAT_INTERVAL_S = 2.0
HEARTBEAT_TIMEOUT_S = 15.0  # an agent that hears nothing for this long stops its ranks
PROBE_TIMEOUT_S = 60.0  # npu-smi and hccn_tool can be slow; each has its own 20 s limit


class Fleet:
    """The job's hosts, connected, each with an agent that answered the preflight probe and waits
    for its plan. ``open`` is all or nothing: every host's problem is reported together and no
    agent is left behind when any host fails."""

    def __init__(self, targets: Dict[str, SshTarget], parallel: int = 32) -> None:
        self.targets = targets
        self.parallel = max(1, parallel)
        self.connections: Dict[str, Any] = {}
        self.waiting: Dict[str, AgentChannel] = {}  # agents that probed and wait for a plan
        self.facts: Dict[str, Dict[str, Any]] = {}  # host -> remotecheck.remote_facts
        self.warnings: List[str] = []
        self.agent_code = agent_zip()

    def open(self, asks: Dict[str, Dict[str, Any]]) -> "Fleet":
        found = self._each(lambda host: connect(self.targets[host]), list(self.targets))
        problems = {h: [str(e)] for h, e in found.items() if isinstance(e, BackendError)}
        self.connections = {h: c for h, c in found.items() if not isinstance(c, BackendError)}
        if not problems:
            problems = self._probe(asks)
        if problems:
            self.close()
            listed = [p for host in self.targets for p in problems.get(host, [])]
            raise BackendError("cannot start the job; nothing was started:\n" + "\n".join("  " + p for p in listed))
        return self

    def _probe(self, asks: Dict[str, Dict[str, Any]]) -> Dict[str, List[str]]:
        """Start every agent with the probe; judge every answer. Host -> its problems."""
        answers: "queue.Queue[tuple]" = queue.Queue()
        sent = time.time()
        started = self._each(lambda h: self.start_agent(h, answers, {"probe": asks[h]}), list(self.connections))
        self.waiting.update(started)
        problems: Dict[str, List[str]] = {}
        pending = set(started)
        deadline = time.monotonic() + PROBE_TIMEOUT_S
        while pending and time.monotonic() < deadline:
            try:
                host, message = answers.get(timeout=max(0.01, deadline - time.monotonic()))
            except queue.Empty:
                break
            if host not in pending or message.get("type") not in ("probe", "closed"):
                continue
            pending.discard(host)
            if message["type"] == "closed":
                why = (message.get("stderr") or [f"exit status {message.get('exit_status')}"])[-1]
                problems[host] = [f"{host}: the agent did not start ({why})"]
                continue
            problems[host], warnings = judge(host, asks[host], message, sent, time.time())
            self.warnings.extend(warnings)
            self.facts[host] = remote_facts(message)
        for host in pending:
            problems[host] = [f"{host}: no answer to the preflight within {PROBE_TIMEOUT_S:g} s"]
        return {host: found for host, found in problems.items() if found}

    def start_agent(self, host: str, messages: "queue.Queue[tuple]", first: Dict[str, Any],
                    wake_fd: Optional[int] = None) -> AgentChannel:
        channel = AgentChannel(self.connections[host], host, messages, wake_fd)
        channel.start(self.agent_code, first)
        return channel

    def _each(self, work: Callable[[str], Any], hosts: List[str]) -> Dict[str, Any]:
        """``work(host)`` for every host in parallel; a BackendError is returned, not raised."""
        def guarded(host: str) -> Any:
            try:
                return work(host)
            except BackendError as exc:
                return exc

        with ThreadPoolExecutor(max_workers=min(self.parallel, len(hosts) or 1)) as pool:
            return dict(zip(hosts, pool.map(guarded, hosts)))

    def close(self) -> None:
        """End every waiting agent (its input closes; it removes its directory) and disconnect."""
        for channel in self.waiting.values():
            channel.close_channel()
        self.waiting.clear()
        for connection in self.connections.values():
            connection.close()
        self.connections.clear()


class FleetRun:
    """One attempt of a multi-host job on an open Fleet (the first attempt uses the agents that
    answered the preflight; a restart starts new ones on the same connections)."""

    def __init__(self, plan: LaunchPlan, emit: Callable[[Event], None],
                 output: Callable[[RankSpec, str, List[str]], None], fleet: Fleet,
                 heartbeat_timeout_s: float = HEARTBEAT_TIMEOUT_S) -> None:
        self.plan, self._emit, self._output, self._fleet = plan, emit, output, fleet
        self._heartbeat_timeout_s = heartbeat_timeout_s
        self._specs = {spec.rank: spec for spec in plan.ranks}
        self._channels: Dict[str, AgentChannel] = {}
        self._copies: Dict[tuple, Any] = {}  # (rank, stream) -> the launcher-side log file
        self._stopping = self._killed = False
        self.stop_signal: Optional[int] = None

    # -- the Agent interface the supervisor uses ------------------------------------------------

    def stop(self, reason: str) -> None:
        if not self._stopping:
            self._stopping = True
            self._broadcast({"cmd": "stop", "reason": reason})

    def kill(self, reason: str) -> None:
        self._stopping = True
        if not self._killed:
            self._killed = True
            self._broadcast({"cmd": "kill", "reason": reason})

    def dump_stacks(self, ranks: List[int]) -> List[str]:
        hosts = {self._specs[r].host for r in ranks if r in self._specs}
        for host in hosts:
            self._channels[host].send({"cmd": "dump_stacks", "ranks": ranks})
        return []  # the stack files are written on the hosts, in each rank's directory

    def run(self) -> AgentOutcome:
        for warning in self._fleet.warnings:
            self._emit(Event(EventKind.PREFLIGHT_WARNING, self.plan.job_id, warning.split(":")[0], None,
                             {"warning": warning}))
        self._fleet.warnings = []  # reported with the first attempt
        messages: "queue.Queue[tuple]" = queue.Queue()
        wake_read, wake_write = os.pipe()
        os.set_blocking(wake_read, False)
        os.set_blocking(wake_write, False)
        inbox = SignalInbox(STOP_SIGNALS + tuple(getattr(signal, s) for s in self.plan.forward_signals))
        results: Dict[int, RankResult] = {}
        finished: Set[str] = set()
        try:
            self._start_all(messages, wake_write)
            next_beat = time.monotonic() + HEARTBEAT_INTERVAL_S
            while len(finished) < len(self._channels):
                inbox.wait(max(0.0, next_beat - time.monotonic()), [wake_read])
                _drain(wake_read)
                for signum in inbox.take():
                    self._on_signal(signum)
                while True:
                    try:
                        host, message = messages.get_nowait()
                    except queue.Empty:
                        break
                    self._on_message(host, message, results, finished)
                if time.monotonic() >= next_beat:
                    next_beat = time.monotonic() + HEARTBEAT_INTERVAL_S
                    self._broadcast({"cmd": "heartbeat"})
        finally:
            inbox.close()
            for channel in self._channels.values():
                channel.close_channel()
            for copy in self._copies.values():
                copy.close()
            os.close(wake_read)
            os.close(wake_write)
        for rank, spec in self._specs.items():  # a host lost before it reported: its ranks are unknown
            results.setdefault(rank, RankResult(rank, spec.host, spec.device_id, None, RankState.FAILED, None,
                                                time.time(), None, None, f"lost with host {spec.host}"))
        return AgentOutcome([results[r] for r in sorted(results)], self.stop_signal, [])

    # -- internals ------------------------------------------------------------------------------------

    def _start_all(self, messages: "queue.Queue[tuple]", wake_fd: int) -> None:
        def start(node_rank: int) -> None:
            host = self.plan.hosts[node_rank]
            first = {"plan": self.plan.host_plan(node_rank).to_dict(), "heartbeat_timeout_s": self._heartbeat_timeout_s}
            channel = self._fleet.waiting.pop(host, None)
            if channel is None:
                channel = self._fleet.start_agent(host, messages, first, wake_fd)
            else:
                channel.attach(messages, wake_fd)
                channel.send(first)
            self._channels[host] = channel

        with ThreadPoolExecutor(max_workers=min(self._fleet.parallel, len(self.plan.hosts))) as pool:
            list(pool.map(start, range(len(self.plan.hosts))))

    def _on_message(self, host: str, message: Dict[str, Any], results: Dict[int, RankResult],
                    finished: Set[str]) -> None:
        kind = message.get("type")
        if kind == "output":
            spec = self._specs[message["rank"]]
            self._gather(spec, message["stream"], message["lines"])
            self._output(spec, message["stream"], message["lines"])
        elif kind == "event":
            self._emit(Event.from_record({k: v for k, v in message.items() if k != "type"}))
        elif kind == "done":
            for data in message["ranks"]:
                results[data["rank"]] = RankResult(**dict(data, state=RankState(data["state"])))
            finished.add(host)
        elif kind == "closed" and host not in finished:
            finished.add(host)
            self._emit(Event(EventKind.AGENT_LOST, self.plan.job_id, host, None,
                             {"exit_status": message.get("exit_status")}))
            self.stop(f"lost the agent of {host}")

    def _gather(self, spec: RankSpec, stream: str, lines: List[str]) -> None:
        """Keep a copy of every remote line in the launcher's job directory (rank-N/stdout.log)."""
        copy = self._copies.get((spec.rank, stream))
        if copy is None:
            path = self.plan.log_paths(spec)[0 if stream == "stdout" else 1]
            os.makedirs(os.path.dirname(path), mode=0o700, exist_ok=True)
            copy = os.fdopen(os.open(path, os.O_WRONLY | os.O_CREAT | os.O_APPEND, 0o600), "w", encoding="utf-8")
            self._copies[(spec.rank, stream)] = copy
        copy.write("".join(line if line.endswith("\r") else line + "\n" for line in lines))

    def _on_signal(self, signum: int) -> None:
        if signum not in STOP_SIGNALS:
            self._broadcast({"cmd": "signal", "signal": signal.Signals(signum).name})
            return
        self._emit(Event(EventKind.SIGNAL_RECEIVED, self.plan.job_id, self.plan.hosts[0], None,
                         {"signal": signal.Signals(signum).name}))
        if not self._stopping:
            self.stop_signal = signum
            self.stop(f"npulaunch received {signal.Signals(signum).name}")
        else:
            self.kill(f"npulaunch received {signal.Signals(signum).name} again")

    def _broadcast(self, message: Dict[str, Any]) -> None:
        for channel in self._channels.values():
            channel.send(message)


def _drain(fd: int) -> None:
    try:
        while os.read(fd, 4096):
            pass
    except BlockingIOError:
        pass
