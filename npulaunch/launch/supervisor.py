"""The supervisor of one attempt of a job: prepares the job directory, pulls events and output
from its RankRunner, applies the job policy (the first rank to fail stops every other rank; a hang
stops the job once the stacks are dumped), records every event, and writes the summary.

It never starts a process itself (the runner's agents do) and never prints except through the
Console. Nothing calls back into it: it acts between two pulls from the runner.
"""

from __future__ import annotations

import os
import time
from dataclasses import replace
from typing import IO, Any, Callable, Dict, List, Mapping, Optional, Set, Tuple

from npulaunch.diagnose.cause import ranks_word
from npulaunch.diagnose.npuperf import compare_npu, figures_text
from npulaunch.diagnose.records import KEPT_FOR_REPORT
from npulaunch.diagnose.report import build_report, describe_exit, python_exception
from npulaunch.diagnose.stragglers import StragglerDetector, describe
from npulaunch.diagnose.summary import JobSummary
from npulaunch.host import timing
from npulaunch.host.errors import PlanError
from npulaunch.host.events import Event, EventKind, signature_label
from npulaunch.host.records import RankState
from npulaunch.host.redact import redact_argv
from npulaunch.host.spec import process_name
from npulaunch.host.trace import debug
from npulaunch.host.words import counted
from npulaunch.launch import debuglog
from npulaunch.launch.jobdir import (
    open_events,
    prepare_attempt_dir,
    prepare_job_dir,
    write_attempt_summary,
    write_launcher,
)
from npulaunch.launch.runner import Console, RankOutput, RankRunner
from npulaunch.plan.launchplan import LaunchPlan

DUMP_MARGIN_S = 2.0  # over stack_dump_limit_s: a remote host's STACKS_DUMPED may never come, stop anyway


class Supervisor:
    """Runs one attempt of a plan with a runner (this host's agent, or every host's over SSH)."""

    def __init__(
        self,
        plan: LaunchPlan,
        console: Console,
        runner: RankRunner,
        inherited: Optional[Mapping[str, str]] = None,
        first: bool = False,
        watch: Optional[Callable[[], Tuple[str, bool]]] = None,
    ) -> None:
        """``first``: the first attempt of this launcher's run (a requeued Slurm job's next run continues its
        attempts: its job directory is there, this launcher is new). ``watch()``, asked about once a second:
        (a reason to stop every rank now, whether it is a restart after a failure): the c10d rendezvous' nodes
        re-form the world ("" when they do not)."""
        self.plan = plan
        self._first = first or plan.attempt <= 1
        self.console = console
        self.runner = runner
        self.inherited = dict(os.environ if inherited is None else inherited)
        self._events: Optional[IO[str]] = None
        self.kept: List[Event] = []  # what the root cause is decided from
        self.last_step: Optional[int] = None  # the furthest step any rank printed (PROGRESS events)
        self._health_said: Set[Tuple[str, str]] = set()  # (host, why) of "not answered" shown
        self._stop_after_dumps: Optional[Tuple[str, float]] = None  # (reason, monotonic deadline)
        self._dumps_due = 0  # hosts whose STACKS_DUMPED has not come yet
        self._hang_seen = False
        self.record_error: Optional[str] = None  # the first failure to write the job record
        self._events_failed = False
        self._stragglers: Optional[StragglerDetector] = None  # monitor.stragglers (diagnose/stragglers.py)
        if plan.stragglers:
            devices = {spec.rank: (spec.host, plan.rank_device(spec)[0]) for spec in plan.ranks}
            self._stragglers = StragglerDetector(devices, float(plan.stragglers["factor"]))
        self._excluding = False  # a slow rank's NPU is being excluded (action exclude): the job is stopping
        self._watch = watch
        self._watched_at = time.monotonic()
        self.reformed = ""  # why watch() stopped the attempt
        self.reform_is_restart = False  # ... after a failure on another node (a restart there, so here too)
        self._figures: Dict[Tuple[str, int], Dict[str, Any]] = {}  # (host, NPU) -> its latest NPU_PERF figures
        self._figures_said: Dict[Tuple[str, int], str] = {}  # what stood out of each NPU, as last said
        self._handlers: Dict[EventKind, Callable[[Event], None]] = {
            EventKind.NPU_HEALTH: self._on_health,
            EventKind.RANK_PACE: self._on_pace,
            EventKind.NPU_PERF: self._on_figures,
            EventKind.RANK_SLOW: self._on_slow,
        }

    def run(self, report: bool = True) -> JobSummary:
        """Run the attempt until every rank has ended; returns its summary (shown unless ``report`` is
        False: the caller shows it with ``report`` when it knows whether more attempts follow)."""
        plan, layout = self.plan, self.plan.layout
        if plan.attempt <= 1 or (plan.node is not None and not os.path.isdir(layout.own_dir)):
            prepare_job_dir(plan, self.inherited)  # (a node joining a running job, or given another node rank)
        if self._first:
            try:
                write_launcher(layout)
            except OSError as exc:
                raise PlanError(f"cannot write {layout.launcher_path}: {exc.strerror}; nothing was started") from None
            if debuglog.enabled():
                debuglog.write_to(layout.launcher_log_path)
        prepare_attempt_dir(plan, self.inherited)
        start = time.time()
        try:
            events_file = open_events(layout)
        except OSError as exc:
            raise PlanError(f"cannot write {layout.events_path}: {exc.strerror}; nothing was started") from None
        self._events = events_file
        try:
            attempt = f" (attempt {plan.attempt})" if plan.attempt else ""
            what = counted(plan.world_size, "rank")
            if plan.node is not None:  # under a scheduler: this node's share
                what = (
                    f"{counted(len(plan.this_host_plan.ranks), 'rank')} of {plan.world_size}, node "
                    f"{plan.node} ({plan.hosts[plan.node]})"
                )
            self.console.message(f"job {plan.job_id}{attempt}: starting {what}, logs in {layout.attempt_dir}")
            debug(__name__, "job %s%s: starting %s in %s", plan.job_id, attempt, what, layout.attempt_dir)
            try:
                self.runner.start()
                self._loop()
                outcome = self.runner.result()
            finally:
                debug(__name__, "closing the runner")
                self.runner.close()
            summary = build_report(plan, outcome, start, time.time(), self.kept)
            self._record(
                Event(
                    EventKind.JOB_FINISHED,
                    plan.job_id,
                    plan.hosts[0],
                    None,
                    {
                        "status": summary.status.value,
                        "exit_code": summary.exit_code,
                        "root_cause_rank": summary.job.root_cause_rank,
                    },
                )
            )
        finally:
            try:
                events_file.close()
            except (OSError, ValueError):  # what a full disk left in the buffer
                pass
        try:
            write_attempt_summary(layout, summary)
        except OSError as exc:
            self.record_error = self.record_error or f"cannot write {layout.attempt_summary_path}: {exc.strerror}"
        debug(__name__, "attempt finished: %s, exit code %d", summary.status.value, summary.exit_code)
        if report:
            self.report(summary)
        return summary

    def report(self, summary: JobSummary) -> None:
        """Show the report (the attempt's, or the job's with every attempt listed when it is the last)."""
        self.console.report(summary)
        if self.record_error is not None:
            self.console.message(
                f"the job record on disk is incomplete: {self.record_error}; the report above is complete"
            )

    def _record_failed(self, exc: OSError, path: str) -> None:
        """Writing the record failed mid-run (a full disk, a read-only remount, a removed
        directory): keep supervising, say so once now, and once more under the report."""
        if self.record_error is None:
            self.record_error = f"cannot write {path}: {exc.strerror or exc}"
            debug(__name__, "record write failed: %s", self.record_error)
            self.console.message(
                f"warning: {self.record_error}; the job goes on, what happens is kept in memory and reported here"
            )

    def _loop(self) -> None:
        runner = self.runner
        while not runner.done:
            timeout = timing.seconds("supervisor_poll_s")
            if self._stop_after_dumps is not None:
                timeout = min(timeout, max(0.0, self._stop_after_dumps[1] - time.monotonic()))
            for item in runner.items(timeout):
                if isinstance(item, RankOutput):
                    self.console.rank_output(item.spec, item.stream, item.block)
                else:
                    self._on_event(item)
            if self._stop_after_dumps is not None and time.monotonic() >= self._stop_after_dumps[1]:
                self._stop_now("stack dumps out of time")
            if self._watch is not None and not self.reformed and time.monotonic() - self._watched_at >= 1.0:
                self._watched_at = time.monotonic()
                self.reformed, self.reform_is_restart = self._watch()
                if self.reformed:
                    self._stop_now(f"the world re-forms: {self.reformed}")

    def _stop_now(self, why: str) -> None:
        reason = self._stop_after_dumps[0] if self._stop_after_dumps else why
        self._stop_after_dumps = None
        debug(__name__, "stopping the job: %s (%s)", reason, why)
        self.runner.stop(reason)

    def _on_health(self, event: Event) -> None:
        """What the NPU health watch saw: a fault at a rescheduling level stops the job (recovery then
        excludes the NPU); a lower level is said; a watch that cannot ask says so once per host and reason."""
        data = event.data
        where = f"{event.host} NPU {data.get('device')}" if data.get("device") is not None else event.host
        if data.get("unanswered"):
            key = (event.host, data["unanswered"])
            if data.get("missing") == "npu-smi":  # a host without NPU software (as check: nothing to say)
                debug(__name__, "health watch on %s: %s", event.host, data["unanswered"])
            elif key not in self._health_said:
                self._health_said.add(key)
                self.console.message(f"health watch: {where}: not answered: {data['unanswered']}")
            return
        codes = " ".join(data.get("codes") or ())
        seen = f"health {data.get('health')}" + (f", error codes {codes}" if codes else "")
        if data.get("nic") == "DOWN":
            seen += ", NIC link DOWN"
        level = data.get("level")
        action = data.get("action")
        if action == "reschedule":
            self.console.message(f"NPU fault on {where}: {seen} ({level}); stopping the job")
            debug(__name__, "NPU fault on %s (%s): stopping the job", where, level)
            self.runner.stop(f"NPU fault on {where}")
        elif action == "none":
            self.console.message(f"health watch: {where} is healthy again")
        else:
            what = {"pre_separate": "no new work is placed there", "report": "nothing to do"}.get(str(action), "")
            self.console.message(f"health watch: {where}: {seen} ({level}): {what}")

    def _on_pace(self, event: Event) -> None:
        """A host's ranks' pace: the detector compares them with their peers; a rank named (or no longer)
        is a RANK_SLOW event; with action exclude, a rank slow long enough stops the job for recovery."""
        if self._stragglers is None:
            return
        now = time.time()  # the launcher's clock: every host's windows are compared on one
        for change in self._stragglers.feed(event.host, event.data, now):
            change["evidence"]["npu"] = [self._figures_of(change["host"], int(change["device"]))]
            self._on_event(Event(EventKind.RANK_SLOW, self.plan.job_id, change["host"], change["rank"], change))
        settings = self.plan.stragglers or {}
        if settings.get("action") != "exclude" or self._excluding:
            return
        for record, slow_s in self._stragglers.slow_for(now):
            if slow_s >= float(settings["exclude_after_s"]):
                self._excluding = True
                excluded = dict(record, state="excluded", slow_s=round(slow_s, 1))
                self._on_event(Event(EventKind.RANK_SLOW, self.plan.job_id, record["host"], record["rank"], excluded))
                break

    def _on_figures(self, event: Event) -> None:
        """A host's NPU performance figures (host/health/perf.py): kept for the stragglers' evidence; an NPU
        whose figures stand out from the others' (throttled, hot, a slower link) is said once per finding,
        since a framework whose steps cannot be split (TensorFlow, MindSpore) names no rank by pace alone."""
        for device, figures in (event.data.get("devices") or {}).items():
            self._figures[(event.host, int(device))] = figures
        for key in sorted(k for k in self._figures if k[0] == event.host):
            found = "; ".join(compare_npu(self._figures, key))
            if found and found != self._figures_said.get(key):
                self.console.message(f"NPU figures: {key[0]} {found}")
            self._figures_said[key] = found

    def _figures_of(self, host: str, device: int) -> str:
        if not self.plan.health_interval_s:
            return "no NPU figures: the health watch is off (monitor.health_interval_s: 0)"
        return figures_text(self._figures, (host, device))

    def _on_slow(self, event: Event) -> None:
        data = event.data
        if data["state"] == "slow":
            self.console.message(f"slow rank: {describe(data)}")
        elif data["state"] == "recovered":
            self.console.message(
                f"rank {data['rank']} keeps pace again "
                f"(it was {data['factor']:.1f}× slower since step {data['since_step']})"
            )
        else:
            self.console.message(
                f"rank {data['rank']} has been slow for {data['slow_s']:g} s (monitor.stragglers.exclude_after_s "
                f"{float((self.plan.stragglers or {}).get('exclude_after_s', 0)):g}): NPU {data['device']} of "
                f"{data['host']} is excluded as a sub-health fault; stopping the job"
            )
            self.runner.stop(f"rank {data['rank']} slow")

    def _on_hang(self, data: Mapping[str, Any]) -> None:
        """A hang: every process's stack and process-table state first (the silent ranks are not the only
        evidence: the ones waiting in a collective say who they wait for), then the stop, once every host
        asked has answered or stack_dump_limit_s and DUMP_MARGIN_S have passed. A second host's hang of the
        same stall adds nothing."""
        if self._hang_seen:
            return
        self._hang_seen = True
        scope = "every rank" if data["whole_job"] else ranks_word(data["ranks"])
        self.console.message(
            f"hang: {scope} printed nothing for more than {data['limit_s']:g} s ({data['phase']}); "
            "reading every rank's stack, then stopping the job"
        )
        everyone = [spec.rank for spec in self.plan.processes]
        wait_s = timing.seconds("stack_dump_limit_s") + DUMP_MARGIN_S
        debug(
            __name__,
            "hang: dumping the stacks of %d processes, stopping when read (at most %g s)",
            len(everyone),
            wait_s,
        )
        self._stop_after_dumps = ("hang detected", time.monotonic() + wait_s)
        self._dumps_due = self.runner.dump_stacks(everyone) or 1

    def _on_stacks(self, data: Mapping[str, Any]) -> None:
        """A host's stacks are read: say where they are (and why py-spy gave none), stop once every host has."""
        for path in data.get("files", []):
            self.console.message(f"stack dump: {path}")
        for what in data.get("timed_out", []):
            self.console.message(f"stack dump did not finish in time and was killed: {what}")
        unread: Dict[str, List[int]] = {}
        for rank, said in (data.get("ranks") or {}).items():
            if said.get("note"):
                unread.setdefault(str(said["note"]), []).append(int(rank))
        for note, ranks in unread.items():
            self.console.message(f"no stack by py-spy for {ranks_word(sorted(ranks))} ({note})")
        self._dumps_due -= 1
        if self._stop_after_dumps is not None and self._dumps_due <= 0:
            self._stop_now("stacks dumped")

    def _record(self, event: Event) -> None:
        assert self._events is not None
        if self.record_error is not None and self._events_failed:
            return
        if isinstance(event.data.get("argv"), list):  # recorded as shown: --token values masked
            event = replace(event, data={**event.data, "argv": redact_argv(event.data["argv"])})
        try:
            self._events.write(event.to_json() + "\n")
        except (OSError, ValueError) as exc:
            self._events_failed = True
            self._record_failed(exc if isinstance(exc, OSError) else OSError(str(exc)), self.plan.layout.events_path)

    def _on_event(self, event: Event) -> None:
        """Record every event; apply fail-fast; tell the user what npulaunch is doing."""
        self._record(event)
        debug(
            __name__,
            "event %s host=%s rank=%s %s",
            event.kind.value,
            event.host,
            event.rank,
            {k: v for k, v in event.data.items() if k not in ("context", "after", "argv")},
        )
        self.console.event(event)
        kind, data = event.kind, event.data
        if kind in KEPT_FOR_REPORT:
            self.kept.append(event)
        if kind is EventKind.PROGRESS and isinstance(data.get("step"), int):
            self.last_step = max(self.last_step or 0, data["step"])
            return
        handler = self._handlers.get(kind)
        if handler is not None:
            handler(event)
            return
        if kind is EventKind.SIGNATURE_MATCHED:
            line = data["line"]
            if data["cls"] == "python_exception":  # the exception line says more than "Traceback ..."
                found = python_exception([line, *data.get("after", [])])
                line = found[0] if found else line
            self.console.message(
                f"{process_name(event.rank)} reported {signature_label(data)} "
                f"({data['cls']}, a {data['signature_kind']}): {line[:200]}"
            )
            if data.get("fatal"):
                debug(__name__, "fatal signature on rank %s: stopping the job", event.rank)
                self.runner.stop(f"{process_name(event.rank)} reported {signature_label(data)}")
            return
        if kind is EventKind.HANG_DETECTED:
            self._on_hang(data)
            return
        if kind is EventKind.STACKS_DUMPED:
            self._on_stacks(data)
            return
        failed = kind is EventKind.RANK_SPAWN_FAILED or (
            kind is EventKind.RANK_EXITED and data["state"] == RankState.FAILED.value
        )
        if failed:
            why = describe_exit(data.get("exit_code"), data.get("signal"), data.get("error"))
            self.console.message(f"{process_name(event.rank)} {why}; stopping the job")
            debug(__name__, "rank %s failed (%s): stopping the job", event.rank, why)
            self.runner.stop(f"{process_name(event.rank)} failed")
        elif kind is EventKind.SIGNAL_RECEIVED:
            self.console.message(
                f"received {data['signal']}; stopping every rank"
                f" (SIGKILL after {self.plan.grace_period_s:g} s; Ctrl-C again to kill now)"
            )
        elif kind is EventKind.KILL_ESCALATED and data.get("ranks"):
            self.console.message(f"SIGKILL to ranks still running: {data['ranks']} ({data['reason']})")
        elif kind is EventKind.PREFLIGHT_WARNING:
            self.console.message(f"warning: {data['warning']}")
        elif kind is EventKind.AGENT_LOST:
            self.console.message(f"lost the agent on {event.host}; stopping the job")
        elif kind is EventKind.SIGNAL_FORWARDED:
            self.console.message(f"forwarded {data['signal']} to every rank")
