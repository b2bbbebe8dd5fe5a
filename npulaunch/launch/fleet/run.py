"""One attempt of a multi-host job, as a RankRunner: every host's agent gets its part of the plan,
their events and output arrive through one queue, heartbeats keep the agents alive, and stop /
kill / stack dumps become commands to every agent. Signals to the launcher (Ctrl-C, SIGTERM,
SIGHUP) stop every host; a second one kills. Remote lines are also copied into the launcher's
job directory, so a finished job's directory holds every rank's log.
"""

from __future__ import annotations

import logging
import os
import queue
import signal
import threading
import time
from concurrent.futures import ThreadPoolExecutor
from typing import IO, Dict, List, Optional, Sequence, Set, Tuple

from npulaunch.host import timing
from npulaunch.host.agent.inbox import SignalInbox, stop_signals
from npulaunch.host.events import Event, EventKind
from npulaunch.host.records import AgentOutcome, RankResult, RankState
from npulaunch.host.spec import RankSpec
from npulaunch.host.wire import Beat, Closed, Command, Done, FromAgent, Output, Start
from npulaunch.launch.fleet.fleet import Fleet
from npulaunch.launch.fleet.link import Channel, close_wake, open_wake
from npulaunch.launch.runner import Item, RankOutput
from npulaunch.plan.launchplan import LaunchPlan

HEARTBEAT_TIMEOUT_S = 15.0  # an agent that hears nothing for this long stops its ranks; and the launcher a host
TIMEOUT_VARIABLE = "NPULAUNCH_HEARTBEAT_TIMEOUT_S"  # both timeouts, for tests and for clusters with slow links


def heartbeat_timeout() -> float:
    """HEARTBEAT_TIMEOUT_S, or the environment's NPULAUNCH_HEARTBEAT_TIMEOUT_S (at least 3 s: beats come every 2)."""
    try:
        return max(3.0, float(os.environ.get(TIMEOUT_VARIABLE, HEARTBEAT_TIMEOUT_S)))
    except ValueError:
        return HEARTBEAT_TIMEOUT_S


log = logging.getLogger(__name__)


class FleetRun:
    """One attempt of a multi-host job on an open Fleet, as a RankRunner (the first attempt uses
    the agents that answered the preflight; a restart starts new ones on the same connections).
    Messages from every host's channel thread arrive in one queue; ``items`` turns them into
    events and output batches for the supervisor, and sends the heartbeats."""

    def __init__(self, plan: LaunchPlan, fleet: Fleet, heartbeat_timeout_s: Optional[float] = None) -> None:
        self.plan, self._fleet = plan, fleet
        self._heartbeat_timeout_s = heartbeat_timeout() if heartbeat_timeout_s is None else heartbeat_timeout_s
        self._heard: Dict[str, float] = {}  # host -> when its agent last sent anything (hosts that send beats)
        self._specs = {spec.rank: spec for spec in plan.processes}
        self._channels: Dict[str, Channel] = {}
        self._copies: Dict[Tuple[int, str], IO[bytes]] = {}  # (rank, stream) -> the launcher-side log file
        self._stopping = self._killed = False
        self.stop_signal: Optional[int] = None
        self._messages: "queue.Queue[Tuple[str, FromAgent]]" = queue.Queue()
        self._wake: Optional[Tuple[int, int]] = None
        self._inbox: Optional[SignalInbox] = None
        self._stops: Tuple[int, ...] = ()  # the signals that stop the job, decided when it starts
        self._results: Dict[int, RankResult] = {}
        self._finished: Set[str] = set()
        self._next_beat = 0.0
        self._out: List[Item] = []
        self._closed = False

    # -- the RankRunner interface ------------------------------------------------------------

    def start(self) -> None:
        for warning in self._fleet.warnings:
            self._out.append(
                Event(EventKind.PREFLIGHT_WARNING, self.plan.job_id, warning.split(":")[0], None, {"warning": warning})
            )
        self._fleet.warnings = []  # reported with the first attempt
        self._wake = open_wake()
        wake_write = self._wake[1]
        self._stops = stop_signals()
        self._inbox = SignalInbox(self._stops + tuple(getattr(signal, s) for s in self.plan.forward_signals))
        self._start_all(wake_write)
        self._next_beat = time.monotonic() + timing.seconds("heartbeat_interval_s")

    def items(self, timeout_s: float) -> List[Item]:
        assert self._inbox is not None and self._wake is not None
        if not self._out and not self._all_finished():
            self._inbox.wait(max(0.0, min(timeout_s, self._next_beat - time.monotonic())), [self._wake[0]])
            _drain(self._wake[0])
            for signum in self._inbox.take():
                self._on_signal(signum)
            while True:
                try:
                    host, message = self._messages.get_nowait()
                except queue.Empty:
                    break
                self._on_message(host, message)
            if time.monotonic() >= self._next_beat:
                self._next_beat = time.monotonic() + timing.seconds("heartbeat_interval_s")
                self._broadcast(Command("heartbeat"))
            self._silent_hosts()
        taken, self._out = self._out, []
        return taken

    @property
    def done(self) -> bool:
        return self._all_finished() and not self._out

    def stop(self, reason: str) -> None:
        if not self._stopping:
            self._stopping = True
            log.debug("stop (%s): to every host's agent", reason)
            self._broadcast(Command("stop", reason=reason))

    def kill(self, reason: str) -> None:
        self._stopping = True
        if not self._killed:
            self._killed = True
            log.debug("kill (%s): to every host's agent", reason)
            self._broadcast(Command("kill", reason=reason))

    def dump_stacks(self, ranks: Sequence[int]) -> int:
        """The stack files are written on the hosts, in each rank's directory; each host's agent
        reports STACKS_DUMPED (a lost host's never comes: the supervisor's deadline covers it)."""
        hosts = {self._specs[r].host for r in ranks if r in self._specs}
        for host in hosts:
            self._channels[host].send(Command("dump_stacks", ranks=tuple(ranks)))
        return len(hosts)

    def result(self) -> AgentOutcome:
        results = dict(self._results)
        for rank, spec in self._specs.items():  # a host lost before it reported: its ranks are unknown
            results.setdefault(
                rank,
                RankResult(
                    rank,
                    spec.host,
                    spec.device_id,
                    None,
                    RankState.FAILED,
                    None,
                    time.time(),
                    None,
                    None,
                    f"lost with host {spec.host}",
                ),
            )
        return AgentOutcome([results[r] for r in sorted(results)], self.stop_signal, [])

    def close(self) -> None:
        if self._closed:
            return
        self._closed = True
        if self._inbox is not None:
            self._inbox.close()
        for channel in self._channels.values():
            channel.close_channel()
        for copy in self._copies.values():
            copy.close()
        if self._wake is not None:
            close_wake(self._wake)

    # -- internals ------------------------------------------------------------------------------------

    def _all_finished(self) -> bool:
        return len(self._finished) >= len(self._channels)

    def _start_all(self, wake_fd: int) -> None:
        def start(node_rank: int) -> None:
            host = self.plan.hosts[node_rank]
            part = self.plan.host_plan(node_rank)
            first = Start(part, self._heartbeat_timeout_s)
            channel = self._fleet.waiting.pop(host, None)
            if channel is None:
                channel = self._fleet.start_agent(host, self._messages, first, wake_fd)
            else:
                channel.attach(self._messages, wake_fd)
                channel.send(first)
            log.debug("agent on %s has its plan (%d ranks)", host, len(part.ranks))
            self._channels[host] = channel

        with ThreadPoolExecutor(max_workers=min(self._fleet.parallel, len(self.plan.hosts))) as pool:
            list(pool.map(start, range(len(self.plan.hosts))))

    def _silent_hosts(self) -> None:
        """A host whose agent sent beats and then nothing for the heartbeat timeout is lost: its network or
        the host itself went away (its agent stops its ranks when it stops hearing the launcher's beats)."""
        now = time.monotonic()
        for host, heard in list(self._heard.items()):
            if host in self._finished or now - heard <= self._heartbeat_timeout_s:
                continue
            del self._heard[host]
            self._finished.add(host)
            why = f"nothing from the agent for {self._heartbeat_timeout_s:g} s: the host or its network is down"
            log.debug("lost %s: %s", host, why)
            self._out.append(
                Event(EventKind.AGENT_LOST, self.plan.job_id, host, None, {"exit_status": None, "why": why})
            )
            threading.Thread(target=self._channels[host].close_channel, daemon=True).start()  # may block on TCP
            self.stop(f"lost the agent of {host}")

    def _on_message(self, host: str, message: FromAgent) -> None:
        if isinstance(message, Beat):  # an agent that sends no beats (an older one) is never timed out
            if host not in self._finished:
                self._heard[host] = time.monotonic()
            return
        if host in self._heard:
            self._heard[host] = time.monotonic()
        if isinstance(message, Output):
            spec = self._specs[message.rank]
            block = message.block()
            self._gather(spec, message.stream, block)
            self._out.append(RankOutput(spec, message.stream, block))
        elif isinstance(message, Event):
            self._out.append(message)
        elif isinstance(message, Done):
            self._heard.pop(host, None)
            for result in message.ranks:
                self._results[result.rank] = result
            self._finished.add(host)
            log.debug("agent on %s is done", host)
        elif isinstance(message, Closed) and host not in self._finished:
            self._finished.add(host)
            self._heard.pop(host, None)
            data: Dict[str, object] = {"exit_status": message.exit_status}
            said = [line.strip() for line in message.stderr if line.strip()]
            if said:  # ssh's or srun's last word: "srun: error: Node failure on n2", "Connection reset by peer"
                data["why"] = next((line for line in reversed(said) if "error" in line.lower()), said[-1])
            self._out.append(Event(EventKind.AGENT_LOST, self.plan.job_id, host, None, data))
            self.stop(f"lost the agent of {host}")

    def _gather(self, spec: RankSpec, stream: str, block: bytes) -> None:
        """Keep a copy of every remote line in the launcher's job directory (rank-N/stdout.log)."""
        copy = self._copies.get((spec.rank, stream))
        if copy is None:
            path = self.plan.log_paths(spec)[0 if stream == "stdout" else 1]
            os.makedirs(os.path.dirname(path), mode=0o700, exist_ok=True)
            copy = os.fdopen(os.open(path, os.O_WRONLY | os.O_CREAT | os.O_APPEND, 0o600), "wb")
            self._copies[(spec.rank, stream)] = copy
        copy.write(block)

    def _on_signal(self, signum: int) -> None:
        if signum not in self._stops:
            self._broadcast(Command("signal", signal=signal.Signals(signum).name))
            return
        log.debug("received %s", signal.Signals(signum).name)
        self._out.append(
            Event(
                EventKind.SIGNAL_RECEIVED,
                self.plan.job_id,
                self.plan.hosts[0],
                None,
                {"signal": signal.Signals(signum).name},
            )
        )
        if not self._stopping:
            self.stop_signal = signum
            self.stop(f"npulaunch received {signal.Signals(signum).name}")
        else:
            self.kill(f"npulaunch received {signal.Signals(signum).name} again")

    def _broadcast(self, message: Command) -> None:
        for channel in self._channels.values():
            channel.send(message)


def _drain(fd: int) -> None:
    try:
        while os.read(fd, 4096):
            pass
    except BlockingIOError:
        pass
