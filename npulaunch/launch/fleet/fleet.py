"""The job's hosts, reached through a transport (SSH, or Slurm's job steps: fleet/link.py) and checked
before anything starts.

``open_fleet`` reaches every host in parallel, ships and starts one agent per host, and has
it answer the preflight probe (with the NPU health facts); the answers are judged together
(plan/checks/remote.py, plan/checks/health.py), then, for a job on several hosts, a second round has fresh
agents ping their peers' NPUs (plan/checks/net.py). All failures are reported together and nothing
starts if any host fails. The plan is built after that (remote ``devices: all`` and device IPs come
from the probe). The agents then wait for their part of the plan, which ``FleetRun``
(launch/fleet/run.py) hands them.
"""

from __future__ import annotations

import queue
import time
from concurrent.futures import ThreadPoolExecutor
from dataclasses import replace
from typing import Any, Callable, Dict, List, Optional, Set, Tuple

from npulaunch.config.cluster import ALL_DEVICES
from npulaunch.host.wire import Closed, FromAgent, Probe, ProbeAnswer, ToAgent
from npulaunch.launch.fleet.link import BackendError, Channel, Connect, Link
from npulaunch.launch.fleet.ship import agent_zip
from npulaunch.plan.checks.findings import CheckFailed, Finding, Severity, fatal
from npulaunch.plan.checks.health import HealthSettings
from npulaunch.plan.checks.remote import judge, probe_asks, remote_facts, review_health
from npulaunch.plan.prepare import Loaded, planner

PROBE_TIMEOUT_S = 60.0  # npu-smi and hccn_tool can be slow; each has its own 20 s limit


class Fleet:
    """The job's hosts, connected, each with an agent that answered the preflight probe and waits
    for its plan. ``open`` is all or nothing: every host's problem is reported together and no
    agent is left behind when any host fails."""

    def __init__(self, hosts: List[str], connect: Connect, parallel: int = 32, spares: Tuple[str, ...] = ()) -> None:
        self.hosts = hosts  # every host, spares included
        self._connect = connect
        self.spares = spares  # hosts held back for recovery: one that cannot be reached is a warning
        self.parallel = max(1, parallel)
        self.connections: Dict[str, Link] = {}
        self.waiting: Dict[str, Channel] = {}  # agents that probed and wait for a plan
        self.facts: Dict[str, Dict[str, Any]] = {}  # host -> remotecheck.remote_facts
        self.answers: Dict[str, Dict[str, Any]] = {}  # host -> everything its probe found
        self.problems: Dict[str, List[str]] = {}  # host -> what stops the job there (judge)
        self.warnings: List[str] = []
        self.findings: List[Finding] = []  # the health check's warnings and what it could not check
        self.checked: Dict[str, Any] = {}  # what the health check asked: tool calls, pings
        self.unanswered: Dict[str, str] = {}  # host -> why its agent gave no answer in the last ask_round
        self.agent_code = agent_zip()

    def open(
        self, asks: Dict[str, Dict[str, Any]], review: Optional[Callable[["Fleet"], List[Finding]]] = None
    ) -> "Fleet":
        """Connect, probe, and judge (``review``: the health check over every answer, which may ask the
        hosts again through ``ask_round``). Raises CheckFailed with every problem and finding."""
        found = self._each(self._connect, list(self.hosts))
        problems = {h: [str(e)] for h, e in found.items() if isinstance(e, BackendError)}
        self.connections = {h: c for h, c in found.items() if not isinstance(c, BackendError)}
        problems = self._spares_apart(problems)
        findings: List[Finding] = []
        if not problems:
            problems = self._spares_apart(self._probe(asks))
            self.problems = problems
            if review is not None:
                findings = review(self)
        if problems or fatal(findings):
            self.close()
            listed = [p for host in self.hosts for p in problems.get(host, [])]
            raise CheckFailed("cannot start the job; nothing was started", listed, findings, self.checked)
        self.findings = [f for f in findings if f.severity is not Severity.FATAL]
        return self

    def _spares_apart(self, problems: Dict[str, List[str]]) -> Dict[str, List[str]]:
        """A spare host's problems do not stop the job: it is said, and the spare is not used."""
        for host in [h for h in problems if h in self.spares]:
            self.warnings.extend(f"warning: spare host {host} cannot be used: {p}" for p in problems.pop(host))
            self.facts.pop(host, None)
            channel = self.waiting.pop(host, None)
            if channel is not None:
                channel.close_channel()
            connection = self.connections.pop(host, None)
            if connection is not None:
                connection.close()
        return problems

    def _probe(self, asks: Dict[str, Dict[str, Any]]) -> Dict[str, List[str]]:
        """Start every agent with the probe; judge every answer. Host -> its problems."""
        messages: "queue.Queue[Tuple[str, FromAgent]]" = queue.Queue()
        sent = time.time()
        started = self._each(lambda h: self.start_agent(h, messages, Probe(asks[h])), list(self.connections))
        self.waiting.update(started)
        problems: Dict[str, List[str]] = {}
        for host, message in self._collect(messages, set(started), PROBE_TIMEOUT_S).items():
            if message is None:
                problems[host] = [f"{host}: no answer to the preflight within {PROBE_TIMEOUT_S:g} s"]
            elif isinstance(message, Closed):
                why = (message.stderr or [f"exit status {message.exit_status}"])[-1]
                problems[host] = [f"{host}: the agent did not start ({why})"]
            elif isinstance(message, ProbeAnswer):
                problems[host], warnings = judge(host, asks[host], message.facts, sent, time.time())
                self.warnings.extend(warnings)
                self.answers[host] = message.facts
                link = self.connections[host]
                self.facts[host] = dict(
                    remote_facts(message.facts), address=link.address(), launcher_address=link.own_address()
                )
                if host in self.spares:  # a spare may wait for long: a fresh agent starts when it is used
                    self.waiting.pop(host).close_channel()
        return {host: found for host, found in problems.items() if found}

    def ask_round(self, asks: Dict[str, Dict[str, Any]], timeout_s: float) -> Dict[str, Optional[Dict[str, Any]]]:
        """One more question to some hosts (the pings), each put to a fresh agent on the open connection,
        which answers and ends when its channel is closed; host -> its answer, None without one in time
        (``unanswered`` says why: the time ran out, or the agent or its channel ended first, with its last
        error line)."""
        messages: "queue.Queue[Tuple[str, FromAgent]]" = queue.Queue()
        started = self._each(lambda h: self.start_agent(h, messages, Probe(asks[h])), list(asks))
        try:
            got = self._collect(messages, {h for h, c in started.items() if not isinstance(c, BackendError)}, timeout_s)
        finally:
            for channel in started.values():
                if not isinstance(channel, BackendError):
                    channel.close_channel()
        self.unanswered = {h: f"{c}" for h, c in started.items() if isinstance(c, BackendError)}
        for host, message in got.items():
            if isinstance(message, Closed):
                why = (message.stderr or [f"exit status {message.exit_status}"])[-1]
                self.unanswered[host] = f"its agent ended first ({why})"
            elif message is None:
                self.unanswered[host] = f"no answer within {timeout_s:g} s"
        answers: Dict[str, Optional[Dict[str, Any]]] = {h: None for h in self.unanswered}
        answers.update({h: m.facts for h, m in got.items() if isinstance(m, ProbeAnswer)})
        return answers

    def _collect(
        self, messages: "queue.Queue[Tuple[str, FromAgent]]", pending: Set[str], timeout_s: float
    ) -> Dict[str, Optional[FromAgent]]:
        """Each host's first answer (a ProbeAnswer, or Closed when its agent ended first) within the time."""
        got: Dict[str, Optional[FromAgent]] = {host: None for host in pending}
        deadline = time.monotonic() + timeout_s
        while pending and time.monotonic() < deadline:
            try:
                host, message = messages.get(timeout=max(0.01, deadline - time.monotonic()))
            except queue.Empty:
                break
            if host in pending and isinstance(message, (ProbeAnswer, Closed)):
                pending.discard(host)
                got[host] = message
        return got

    def start_agent(
        self, host: str, messages: "queue.Queue[Tuple[str, FromAgent]]", first: ToAgent, wake_fd: Optional[int] = None
    ) -> Channel:
        return self.connections[host].start_agent(self.agent_code, first, messages, wake_fd)

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


def open_fleet(
    loaded: Loaded, connect: Connect, settings: Optional[HealthSettings] = None, parallel: int = 32
) -> Fleet:
    """Reach every host through ``connect``, ship the agent and run the preflight probe there, with the NPU
    health check of ``settings`` (None: the check's defaults). Raises CheckFailed, listing every host's
    problem, if any host fails. What can be checked offline is checked first: a plan without the hosts'
    facts (unless a remote host's devices are only known from its npu-smi), so a bad config never waits on
    a transport."""
    config = loaded.config
    if not any(h.devices == ALL_DEVICES and h.host not in loaded.local_names for h in config.hosts):
        planner(loaded)(1)
    settings = settings or HealthSettings()
    asks = probe_asks(config, loaded.job_id, settings)
    if config.spares:  # probed like the job's hosts: their NPUs, addresses and health are known when needed
        asks.update(probe_asks(replace(config, hosts=config.spares), loaded.job_id, settings))

    def review(fleet: Fleet) -> List[Finding]:
        ask_round = None if fleet.problems else fleet.ask_round  # a host already failed: no second round
        findings, checked = review_health(config, fleet.answers, asks, settings, ask_round)
        fleet.checked = checked
        return findings

    hosts = [h.host for h in config.hosts + config.spares]
    spares = tuple(h.host for h in config.spares)
    return Fleet(hosts, connect, parallel=parallel, spares=spares).open(asks, review)
