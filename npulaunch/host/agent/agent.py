"""The agent: the only code that starts rank processes. One per host; in-process for a local
launch, shipped to each host over SSH, the per-node entrypoint under a scheduler.

It starts this host's ranks, follows their logs, reaps them, and stops them (SIGTERM to every
process group, SIGKILL after the grace period) when told to or when its own process is signalled.
It reports through two sinks (events, output lines) and decides nothing about the job as a
whole: fail-fast is the supervisor's policy. ``run`` is the whole loop (the remote agent);
``start`` / ``step`` / ``finish`` / ``close`` let the launcher drive it one turn at a time
(launch/local.py). Standard library only, Python 3.7+; single-threaded.
"""

from __future__ import annotations

import json
import os
import signal
import subprocess
import time
from typing import Any, Callable, Dict, List, Mapping, Optional, Sequence, Set, Tuple

from npulaunch.host import procs, timing
from npulaunch.host.agent.guard import Guard
from npulaunch.host.agent.inbox import STOP_SIGNALS, SignalInbox, stop_signals
from npulaunch.host.agent.monitor import Monitor
from npulaunch.host.agent.prepare import prepare_rank
from npulaunch.host.agent.ranklogs import OutputSink, RankLogs
from npulaunch.host.agent.rankproc import RankProcess
from npulaunch.host.agent.stacks import StackDumps, remove_unused
from npulaunch.host.errorfile import RankErrorFile
from npulaunch.host.events import Event, EventKind
from npulaunch.host.files import write_once
from npulaunch.host.health.watch import HealthWatch
from npulaunch.host.records import AgentOutcome, RankState
from npulaunch.host.spec import HostPlan
from npulaunch.host.tail import FileTail
from npulaunch.host.trace import debug

EventSink = Callable[[Event], None]


class Agent:
    def __init__(
        self,
        plan: HostPlan,
        emit: EventSink,
        output: OutputSink,
        base_env: Optional[Mapping[str, str]] = None,
        clock: Callable[[], float] = time.monotonic,
        poll_interval_s: Optional[float] = None,
        stack_dump_limit_s: Optional[float] = None,
    ) -> None:
        self.plan = plan
        self._emit_to = emit
        self._base_env = dict(os.environ if base_env is None else base_env)
        self._clock = clock
        self._poll_s = timing.seconds("agent_poll_s") if poll_interval_s is None else poll_interval_s
        self.ranks = [RankProcess(spec) for spec in plan.ranks]
        self._by_pid: Dict[int, RankProcess] = {}
        self._stopping = False
        self._kill_deadline: Optional[float] = None
        self._killed = False
        self.stop_signal: Optional[int] = None
        self._inbox: Optional[SignalInbox] = None
        self._guard: Optional[Guard] = None
        self._preexisting: Set[int] = set()
        self._was_subreaper: Optional[bool] = None  # set by start()
        self.monitor = Monitor(plan, self._emit, clock)
        self._logs = RankLogs(output, self.monitor)
        self._watched: Dict[int, Callable[[], None]] = {}  # fd -> called when readable (a controller's commands)
        self._forward = tuple(getattr(signal, name) for name in plan.forward_signals)
        self._stops: Tuple[int, ...] = STOP_SIGNALS  # decided again when the job starts (stop_signals)
        self.tick: Optional[Callable[[], None]] = None  # called once per loop turn (the remote agent's checks)
        self._dumps = StackDumps(clock, stack_dump_limit_s)
        self._health: Optional[HealthWatch] = None  # the live NPU health watch (plan.health_watch)
        if plan.health_watch:
            on_device: Dict[int, List[int]] = {}
            for spec in plan.ranks:
                on_device.setdefault(spec.device_id, []).append(spec.rank)
            self._health = HealthWatch(plan.health_watch, on_device, self._base_env, clock)
        self._stray_pids: List[int] = []
        self._closed = False
        self._store: Optional[Any] = None  # torch's TCPStore served for the job's ranks (plan.store_port)

    def watch(self, fd: int, on_readable: Callable[[], None]) -> None:
        """Wake the loop when ``fd`` is readable and call ``on_readable`` (the remote agent's stdin)."""
        self._watched[fd] = on_readable

    def unwatch(self, fd: int) -> None:
        self._watched.pop(fd, None)

    # -- reporting -------------------------------------------------------------------------

    def _emit(self, kind: EventKind, rank: Optional[int] = None, **data: object) -> None:
        self._emit_to(Event(kind, self.plan.job_id, self.plan.host, rank, dict(data)))

    # -- commands (from the supervisor, or from this process's signals) --------------------

    def stop(self, reason: str) -> None:
        """SIGTERM every rank's process group now, SIGKILL what is left after the grace period."""
        if self._stopping:
            return
        self._stopping = True
        self._kill_deadline = self._clock() + self.plan.grace_period_s
        self._emit(EventKind.STOP_REQUESTED, reason=reason, grace_period_s=self.plan.grace_period_s)
        debug(__name__, "stop (%s): SIGTERM now, SIGKILL after %g s", reason, self.plan.grace_period_s)
        if self._health is not None:
            self._health.stop()  # nothing more is asked; its calls in flight are killed
        self._signal_everything(signal.SIGTERM)

    def kill(self, reason: str) -> None:
        """SIGKILL everything now (second Ctrl-C, or the grace period ran out)."""
        if not self._stopping:
            self.stop(reason)
        if self._killed:
            return
        self._killed = True
        alive = [r.spec.rank for r in self.ranks if r.state is RankState.RUNNING]
        self._emit(EventKind.KILL_ESCALATED, reason=reason, ranks=alive)
        debug(__name__, "kill (%s): SIGKILL, ranks still running: %s", reason, alive)
        self._signal_everything(signal.SIGKILL)

    def dump_stacks(self, ranks: Sequence[int]) -> None:
        """Ask these ranks (of those running here) for their Python stacks and read where each stands
        (host/agent/stacks.py). Returns at once: a STACKS_DUMPED event follows when the dumps are
        written or out of time."""
        self._dumps.start(
            [
                (p.spec.rank, p.spec.rank_dir, p.pid)
                for p in self.ranks
                if p.spec.rank in ranks and p.state is RankState.RUNNING and p.pid is not None
            ]
        )

    def forward(self, signum: int) -> None:
        for proc in self.ranks:
            if proc.state is RankState.RUNNING and proc.pid is not None:
                procs.kill_group(proc.pid, signum)
        self._emit(EventKind.SIGNAL_FORWARDED, signal=procs.signal_name(signum))

    def _signal_everything(self, signum: int) -> None:
        table = procs.snapshot()
        groups = {p.pid for p in self.ranks if p.pid is not None}
        members = procs.live_members(groups, table)
        strays = self._strays(table) - set(members)
        debug(
            __name__,
            "%s to process groups %s and other descendants %s",
            procs.signal_name(signum),
            sorted(set(members.values())),
            sorted(strays),
        )
        for pgid in set(members.values()):
            procs.kill_group(pgid, signum)
        procs.kill_pids(strays, signum)

    def _strays(self, table: Dict[int, procs.ProcInfo]) -> Set[int]:
        """Our live descendants (we are a subreaper), except the guard and whatever this process
        had started before the agent ran (when the agent is embedded in a larger program)."""
        found = procs.descendants(os.getpid(), table) - self._preexisting - self._dumps.pids()
        if self._health is not None:
            found -= self._health.pids(table)
        if self._guard is not None:
            found.discard(self._guard.pid)
        return found

    # -- the loop -------------------------------------------------------------------------------

    def run(self) -> AgentOutcome:
        """Start every rank and watch them until all have ended and nothing of the job is left."""
        self.start()
        try:
            while self.step():
                pass
            return self.finish()
        finally:
            self.close()

    def start(self) -> None:
        """Become the ranks' subreaper, start the guard, write the rank table, start every rank."""
        self._stops = stop_signals()
        self._inbox = SignalInbox(self._stops + self._forward)
        self._preexisting = procs.descendants(os.getpid(), procs.snapshot())
        self._was_subreaper = procs.is_subreaper()
        procs.become_subreaper()
        self._guard = Guard(self.plan.job_uuid)
        os.makedirs(self.plan.job_dir, mode=0o700, exist_ok=True)
        self._write_rank_table()
        self._start_all()

    def step(self, timeout_s: Optional[float] = None) -> bool:
        """One turn of the loop: wait (at most ``timeout_s``) for a signal, a command or the next
        poll, then reap and read the logs, so that what woke it is reported at once. False once
        every rank has ended."""
        self._wait(timeout_s)
        self._reap()
        self._logs.turn(self.ranks)
        if self._health is not None and self._health.looking():  # the last look at a failed rank's NPU
            return True
        return any(r.state in (RankState.RUNNING, RankState.PENDING) for r in self.ranks)

    def finish(self) -> AgentOutcome:
        """After the last rank ended: stop what the ranks left behind, then close."""
        if self._health is not None:
            self._health.stop()
        self._stray_pids = self._clean_up_strays()
        self.close()
        return AgentOutcome([r.result() for r in self.ranks], self.stop_signal, self._stray_pids)

    def close(self) -> None:
        """Kill whatever still runs (an exception left the loop), read the logs to their last
        byte, release the guard. Safe to call more than once."""
        if self._closed:
            return
        self._closed = True
        try:
            if any(r.state is RankState.RUNNING for r in self.ranks):
                debug(__name__, "closing with ranks still running: SIGKILL to everything")
                self._signal_everything(signal.SIGKILL)
            self._dumps.close()
            if self._store is not None:
                self._store.close()
            if self._health is not None:
                self._health.close()
            for proc in self.ranks:
                self._logs.drain(proc)  # an output sink that raises again must not skip what follows
            self.monitor.close()
            remove_unused([proc.spec.rank_dir for proc in self.ranks])  # empty stack files, markers
        finally:
            self._give_back()

    def _give_back(self) -> None:
        """Release the guard and give the process its signal handlers and subreaper setting back (an
        embedding program, a test process among them, must get Ctrl-C and its children back)."""
        try:
            if self._guard is not None:
                self._guard.release()
        finally:
            if self._inbox is not None:
                self._inbox.close()
            if self._was_subreaper is False:
                procs.stop_being_subreaper()
                self._reap_leftovers()

    def _wait(self, timeout_s: Optional[float] = None) -> None:
        assert self._inbox is not None
        timeout = self._poll_s if timeout_s is None else min(self._poll_s, timeout_s)
        if self._logs.backlog:  # the last turn left unread output: look again at once
            timeout = 0.0
        if self._kill_deadline is not None and not self._killed:
            timeout = min(timeout, self._kill_deadline - self._clock())
        watch = self._health.timeout_s() if self._health is not None else None
        for due in (self.monitor.timeout_s(), self._dumps.timeout_s(), watch):
            if due is not None:
                timeout = min(timeout, due)
        for fd in self._inbox.wait(max(0.0, timeout), list(self._watched)):
            self._watched[fd]()
        for signum in self._inbox.take():
            self._on_signal(signum)
        if self.tick is not None:
            self.tick()
        if not self._stopping:
            self.monitor.poll()
        dumped = self._dumps.poll()
        if dumped is not None:
            self._emit(EventKind.STACKS_DUMPED, **dumped)
        for change in self._health.poll() if self._health is not None else ():
            self._emit(EventKind.NPU_HEALTH, **change)
        for figures in self._health.take_perf() if self._health is not None else ():
            self._emit(EventKind.NPU_PERF, **figures)
        if self._kill_deadline is not None and not self._killed and self._clock() >= self._kill_deadline:
            self.kill(f"grace period of {self.plan.grace_period_s:g} s ran out")

    def _on_signal(self, signum: int) -> None:
        name = procs.signal_name(signum)
        debug(__name__, "received %s", name)
        if signum in self._forward:
            self.forward(signum)
            return
        self._emit(EventKind.SIGNAL_RECEIVED, signal=name)
        if not self._stopping:
            self.stop_signal = signum
            self.stop(f"npulaunch received {name}")
        else:
            self.kill(f"npulaunch received {name} again while stopping")

    def _write_rank_table(self) -> None:
        """On a remote host (or another node) the launcher's rank table does not exist: write the
        host's own copy, unless a host sharing this file system already did."""
        path, table = self.plan.rank_table_path, self.plan.rank_table
        if path and table is not None and not os.path.exists(path):
            os.makedirs(os.path.dirname(path), mode=0o700, exist_ok=True)  # a later attempt's table: its directory
            write_once(path, json.dumps(table, indent=2) + "\n")

    def _start_all(self) -> None:
        self._emit(EventKind.JOB_STARTED, ranks=[r.spec.rank for r in self.ranks], pid=os.getpid())
        cpus, refused = self._cpus_here()
        refused = refused or self._serve_store()
        for proc in self.ranks:
            if self._stopping:  # a signal arrived while we were still starting ranks
                break
            if refused:
                self._spawn_failed(proc, refused)
                continue
            self._start(proc, cpus.get(proc.spec.rank, proc.spec.cpus))
            for signum in self._inbox.take() if self._inbox else ():
                self._on_signal(signum)

    def _serve_store(self) -> str:
        """Serve the job's TCPStore before any rank starts (the ranks are its clients); why none can start
        when its port cannot be had."""
        if self.plan.store_port is None:
            return ""
        from npulaunch.host.tcpstore import StoreServer

        try:
            self._store = StoreServer(self.plan.store_port).start()
        except OSError as exc:
            return f"npulaunch cannot serve the TCPStore on port {self.plan.store_port} of {self.plan.host}: {exc}"
        debug(__name__, "serving the TCPStore on port %d", self.plan.store_port)
        return ""

    def _cpus_here(self) -> Tuple[Dict[int, Tuple[int, ...]], str]:
        """The CPUs of ranks whose binding the plan left to this host (it had no facts of it), decided
        here with the plan's rules (host/topology.py); or why none of this host's ranks can start."""
        asked = [(p.spec.rank, p.spec.device_id, p.spec.cpu_request) for p in self.ranks if p.spec.cpu_request]
        if not asked:
            return {}, ""
        from npulaunch.host.topology import BindingError, decide_on_host

        try:
            return decide_on_host(asked, self.plan.host), ""
        except BindingError as exc:
            return {}, f"job.cpu_binding: {exc}"

    def _start(self, proc: RankProcess, cpus: Optional[Tuple[int, ...]] = None) -> None:
        spec = proc.spec
        proc.start_time = time.time()
        try:
            env = prepare_rank(spec, self._base_env)
        except OSError as exc:
            self._spawn_failed(proc, str(exc.strerror or exc))
            return
        proc.error_file = RankErrorFile.prepare(env, spec.cwd, time.time())
        proc.tails = (FileTail(spec.stdout_path), FileTail(spec.stderr_path))
        try:
            popen = procs.spawn(spec.argv, spec.cwd, env, spec.stdout_path, spec.stderr_path, cpus)
        except OSError as exc:
            self._spawn_failed(proc, f"cannot start {spec.argv[0]!r}: {exc.strerror or exc}")
            return
        self._started(proc, popen, cpus)

    def _spawn_failed(self, proc: RankProcess, error: str) -> None:
        proc.spawn_failed(error)
        self._emit(EventKind.RANK_SPAWN_FAILED, proc.spec.rank, error=error, argv=list(proc.spec.argv))

    def _started(self, proc: RankProcess, popen: "subprocess.Popen[bytes]", cpus: Optional[Tuple[int, ...]]) -> None:
        spec = proc.spec
        proc.started(popen)
        self._by_pid[popen.pid] = proc
        self.monitor.started(spec.rank)
        assert self._guard is not None
        self._guard.watch(popen.pid)
        self._emit(
            EventKind.RANK_STARTED,
            spec.rank,
            pid=popen.pid,
            device_id=spec.device_id,
            argv=list(spec.argv),
            stdout=spec.stdout_path,
            stderr=spec.stderr_path,
            **({"cpus": list(cpus)} if cpus else {}),
        )

    def _reap(self) -> None:
        for pid, status in procs.reap_any():
            if self._reaped_other(pid, status):
                continue
            proc = self._by_pid.get(pid)
            if proc is None:
                continue  # an orphaned descendant re-parented to us
            # its last lines come before its exit on the console (all of them when they fit one turn's
            # read); a bigger backlog is read in the next turns, after the exit is reported, so that a
            # failure is acted on at once (the root cause still counts a late-read line from the exit)
            self._logs.read(proc)
            if self._guard is not None and procs.group_is_empty(pid):
                self._guard.forget(pid)  # its group is empty: the number may be reused by others
            proc.exited(status, self._stopping)
            self.monitor.exited(proc.spec.rank, died=proc.state is RankState.FAILED)
            if proc.state is RankState.FAILED and self._health is not None:
                self._health.last_look([proc.spec.device_id])  # did its NPU fail? asked before it stops
            if proc.raised is not None:
                self._emit(EventKind.RANK_ERROR_FILE, proc.spec.rank, **proc.raised)
            self._emit(
                EventKind.RANK_EXITED,
                proc.spec.rank,
                pid=pid,
                exit_code=proc.exit_code,
                signal=proc.signal,
                state=proc.state.value,
                duration_s=proc.duration_s(),
                end_time=proc.end_time,
            )

    def _reaped_other(self, pid: int, status: int) -> bool:
        """A child that is no rank: a health watch call (asked first: a live call's pid may be a number an
        ended rank had), or the guard. True when it was one of them."""
        if self._health is not None and self._health.reaped(pid, status):
            return True
        if self._guard is not None and pid == self._guard.pid:
            self._guard.reaped(status)
            return True
        return False

    def _reap_leftovers(self) -> None:
        """Reap after the last rank ended: strays re-parented to us, and the watch's killed calls."""
        for pid, status in procs.reap_any():
            self._reaped_other(pid, status)

    def _clean_up_strays(self) -> List[int]:
        """After every rank has exited: stop what they left behind (TERM, grace, KILL)."""
        table = procs.snapshot()
        groups = {p.pid for p in self.ranks if p.pid is not None}
        left = set(procs.live_members(groups, table)) | self._strays(table)
        if not left:
            return []
        found = sorted(left)
        debug(__name__, "processes left behind by the ranks: %s; TERM, grace, KILL", found)
        inbox = self._inbox
        assert inbox is not None
        self._signal_everything(signal.SIGTERM)
        deadline = self._clock() + self.plan.grace_period_s
        while left and self._clock() < deadline and not self._killed:
            inbox.wait(min(self._poll_s, max(0.0, deadline - self._clock())))
            for signum in inbox.take():
                if signum in self._stops:
                    self._killed = True
            self._reap_leftovers()
            self._logs.turn(self.ranks)
            table = procs.snapshot()
            left = set(procs.live_members(groups, table)) | self._strays(table)
        if left:
            self._signal_everything(signal.SIGKILL)
            time.sleep(0.01)
            self._reap_leftovers()
        self._emit(EventKind.STRAYS_KILLED, pids=found)
        return found
