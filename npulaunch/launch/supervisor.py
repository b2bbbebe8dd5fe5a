"""The supervisor of a local job: prepares the job directory, runs this host's agent in-process,
applies the job policy (the first rank to fail stops every other rank), records every event,
and writes the report.

It never starts a process itself (the agent does) and never prints except through the Console.
"""

from __future__ import annotations

import os
import time
from typing import IO, Any, Callable, Dict, List, Mapping, Optional

from npulaunch.host.agent.agent import Agent, AgentOutcome, RankState
from npulaunch.host.files import write_private
from npulaunch.launch.jobdir import PLAN_FILENAME, EVENTS_FILENAME, prepare_job_dir, write_launcher, write_summary
from npulaunch.views.console import Console
from npulaunch.host.events import Event, EventKind
from npulaunch.plan.build import LaunchPlan
from npulaunch.plan.planjson import render_plan_json
from npulaunch.diagnose.report import JobReport, build_report, describe_exit
from npulaunch.diagnose.rootcause import ranks_word

KEPT_FOR_REPORT = (EventKind.SIGNATURE_MATCHED, EventKind.HANG_DETECTED)


def should_restart(report: JobReport, attempt: int, max_restarts: int) -> bool:
    """Only a failure whose root cause is retryable (never a configuration error or a kernel
    fault, never a stop by signal), and only while attempts remain."""
    root = report.summary["root_cause"]
    return (report.exit_code == 1 and root is not None and bool(root.get("retryable"))
            and attempt <= max_restarts)


def run_with_restarts(plan_for: Callable[[int], LaunchPlan], console: Console, max_restarts: int,
                      inherited: Optional[Mapping[str, str]] = None,
                      make_agents: Optional[Callable[..., Any]] = None) -> JobReport:
    """Run the job, and run it again (a fresh plan: new ports, a new attempt directory) after a
    retryable failure, at most ``max_restarts`` times. The job directory's summary.json is the
    last attempt's, with every attempt listed."""
    attempts: List[Dict[str, Any]] = []
    attempt = 1
    while True:
        plan = plan_for(attempt)
        report = LocalSupervisor(plan, console, inherited, make_agents).run()
        root = report.summary["root_cause"]
        attempts.append({"attempt": attempt, "dir": plan.attempt_dir, "status": report.summary["job"]["status"],
                         "exit_code": report.exit_code, "root_cause": None if root is None else {
                             k: root[k] for k in ("rank", "cls", "code", "retryable")}})
        if not should_restart(report, attempt, max_restarts):
            break
        console.message(f"the failure is retryable ({root['code'] or root['cls']}): restarting the job, attempt "
                        f"{attempt + 1} of {max_restarts + 1}")
        attempt += 1
    summary = dict(report.summary, attempts=attempts)
    write_summary(plan.own_dir, summary)
    if len(attempts) > 1:
        console.message("attempts: " + "; ".join(f"{a['attempt']}: {a['status']}" + (
            f" ({a['root_cause']['code'] or a['root_cause']['cls']})" if a["root_cause"] else "") for a in attempts))
    return JobReport(summary, report.exit_code, report.text)


class LocalSupervisor:
    """Runs a plan whose ranks are all on this host."""

    def __init__(self, plan: LaunchPlan, console: Console, inherited: Optional[Mapping[str, str]] = None,
                 make_agents: Optional[Callable[..., Any]] = None) -> None:
        """``make_agents(plan, on_event, on_output)`` returns what runs the ranks (an Agent for this
        host; the SSH backend's FleetRun for several hosts)."""
        self.plan = plan
        self._make_agents = make_agents
        self.console = console
        self.inherited = dict(os.environ if inherited is None else inherited)
        self._events: Optional[IO[str]] = None
        self._agent: Any = None  # an Agent, or a FleetRun
        self._kept: List[Event] = []  # what the root cause is decided from

    def run(self) -> JobReport:
        """Run one attempt of the job (the only one unless it is restarted)."""
        if self.plan.attempt <= 1:
            prepare_job_dir(self.plan, self.inherited)
            write_launcher(self.plan.own_dir)
        if self.plan.attempt:
            os.mkdir(self.plan.attempt_dir, 0o700)
            write_private(os.path.join(self.plan.attempt_dir, PLAN_FILENAME),
                          render_plan_json(self.plan, {host: self.inherited for host in self.plan.hosts}))
        out = self.plan.attempt_dir
        start = time.time()
        fd = os.open(os.path.join(out, EVENTS_FILENAME), os.O_WRONLY | os.O_CREAT | os.O_APPEND, 0o600)
        with os.fdopen(fd, "w", encoding="utf-8", buffering=1) as events:
            self._events = events
            if self._make_agents is not None:
                self._agent = self._make_agents(self.plan, self._on_event, self.console.rank_output)
            else:
                self._agent = Agent(self.plan.this_host_plan, self._on_event, self.console.rank_output,
                                    base_env=self.inherited)
            attempt = f" (attempt {self.plan.attempt} of {self.plan.max_restarts + 1})" if self.plan.attempt else ""
            what = f"{self.plan.world_size} ranks"
            if self.plan.node is not None:  # under a scheduler: this node's share
                what = (f"{len(self.plan.this_host_plan.ranks)} ranks of {self.plan.world_size}, node "
                        f"{self.plan.node} ({self.plan.hosts[self.plan.node]})")
            self.console.message(f"job {self.plan.job_id}{attempt}: starting {what}, logs in {out}")
            outcome: AgentOutcome = self._agent.run()
            report = build_report(self.plan, outcome, start, time.time(), self._kept)
            self._record(Event(EventKind.JOB_FINISHED, self.plan.job_id, self.plan.hosts[0], None,
                               {"status": report.summary["job"]["status"], "exit_code": report.exit_code,
                                "root_cause_rank": report.summary["job"]["root_cause_rank"]}))
        write_summary(out, report.summary)
        self.console.report(report.text)
        return report

    def _record(self, event: Event) -> None:
        assert self._events is not None
        self._events.write(event.to_json() + "\n")

    def _on_event(self, event: Event) -> None:
        """Record every event; apply fail-fast; tell the user what npulaunch is doing."""
        self._record(event)
        self.console.event(event)
        assert self._agent is not None
        kind, data = event.kind, event.data
        if kind in KEPT_FOR_REPORT:
            self._kept.append(event)
        if kind is EventKind.SIGNATURE_MATCHED:
            self.console.message(f"rank {event.rank} reported {data['code'] or data['signature']} "
                                 f"({data['cls']}, a {data['signature_kind']}): {data['line'][:200]}")
            if data.get("fatal"):
                self._agent.stop(f"rank {event.rank} reported {data['code'] or data['signature']}")
            return
        if kind is EventKind.HANG_DETECTED:
            scope = "every rank" if data["whole_job"] else ranks_word(data["ranks"])
            self.console.message(f"hang: {scope} printed nothing for more than {data['limit_s']:g} s "
                                 f"({data['phase']}); stopping the job")
            for path in self._agent.dump_stacks(data["ranks"]):
                self.console.message(f"stack dump: {path}")
            self._agent.stop("hang detected")
            return
        failed = kind is EventKind.RANK_SPAWN_FAILED or (
            kind is EventKind.RANK_EXITED and data["state"] == RankState.FAILED.value)
        if failed:
            why = describe_exit(data.get("exit_code"), data.get("signal"), data.get("error"))
            self.console.message(f"rank {event.rank} {why}; stopping the job")
            self._agent.stop(f"rank {event.rank} failed")
        elif kind is EventKind.SIGNAL_RECEIVED:
            self.console.message(f"received {data['signal']}; stopping every rank"
                                 f" (SIGKILL after {self.plan.grace_period_s:g} s; Ctrl-C again to kill now)")
        elif kind is EventKind.KILL_ESCALATED and data.get("ranks"):
            self.console.message(f"SIGKILL to ranks still running: {data['ranks']} ({data['reason']})")
        elif kind is EventKind.PREFLIGHT_WARNING:
            self.console.message(f"warning: {data['warning']}")
        elif kind is EventKind.AGENT_LOST:
            self.console.message(f"lost the agent on {event.host}; stopping the job")
        elif kind is EventKind.SIGNAL_FORWARDED:
            self.console.message(f"forwarded {data['signal']} to every rank")
