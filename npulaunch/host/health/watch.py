"""The live NPU health watch of a running job, run from the agent's loop as stack dumps are (stacks.py): every
``interval_s`` it asks ``npu-smi info -t health -i <card> -c <chip>`` of each job NPU and, for a job across
hosts, ``hccn_tool -i <device> -link -g`` of its NIC, and says what changed, as NPU_HEALTH event data. In
the same rounds it reads each NPU's performance figures (``npu-smi info -t common``; across hosts its NIC's
``hccn_tool -speed -g`` and ``-stat -g``): one NPU_PERF event's data per round (host/health/perf.py).

The calls are child processes (WORKERS at a time, in their own sessions, dying with the agent, output to
files), never waited for here: the agent, a subreaper waiting on any child, hands their exit statuses to
``reaped``, and a call still running at ``tool_timeout_s`` is killed with its process group, so a hung
driver call never holds up the loop. What the facts mean is host/health/judge.py's. Standard library only,
Python 3.7+.

An event's data: ``device`` (physical id; None for the whole watch), ``npu``, ``chip``, ``health`` (as npu-smi
says, None when not answered), ``codes`` (upper case, no 0x; 40F84E00 added for health UNKNOWN), ``levels``
({code: MindCluster level}), ``level`` (the most severe, ``link_down``, or None), ``action`` (reschedule,
pre_separate, report, none, unknown), ``info`` (Error Information), ``ranks`` (this host's on the device),
``nic`` (UP, DOWN, None), ``unanswered`` (why it could not be asked, else None). One is emitted at the first
reading that is not healthy, at each change of health, codes or link, at the return to healthy, and once
per device for each distinct reason it was not answered (that changes nothing of what is known). The
health calls are queued before the figure calls and judged as soon as they are in: a slow figure call never
delays a health event.
"""

from __future__ import annotations

import os
import shutil
import signal
import tempfile
import time
from dataclasses import dataclass, field
from typing import Any, Callable, Dict, List, Mapping, Optional, Sequence, Set, Tuple

from npulaunch.host import procs
from npulaunch.host.discovery import CONTAINER_VISIBLE_VAR, parse_npu_smi_info, physical_ids
from npulaunch.host.health import perf
from npulaunch.host.health.readings import (
    Answer,
    Device,
    EventData,
    state_event,
    take_chip,
    take_nic,
    unanswered_event,
)
from npulaunch.host.trace import debug

WORKERS = 8  # tool calls at a time (as the preflight's, host/health/gather.py)
INTERVAL_S = 10.0  # between rounds, when the plan does not say
TOOL_TIMEOUT_S = 10.0  # one call
OUTPUT_LIMIT = 1 << 20  # what is read of a call's output
CLOSE_REAP_S = 0.2  # close() waits this long at most for the calls it killed to be gone
CHIP, NIC, MAP = "chip", "nic", "map"  # what a call asks: a chip's health, a NIC's link, npu-smi's table


@dataclass
class _Round:
    started: float
    queue: List[Tuple[str, Optional[int], List[str]]]  # (part, device, argv) not yet started
    pending: int = 0  # started and not finished
    answers: Dict[Tuple[str, Optional[int]], "Answer"] = field(default_factory=dict)
    judged: bool = False  # its health calls are in and judged (its figure calls may still run)


@dataclass
class _Call:
    part: str
    device: Optional[int]
    argv: List[str]
    popen: Any  # subprocess.Popen[bytes]; never polled (the agent reaps it)
    out_path: str
    err_path: str
    deadline: float
    round: Optional[_Round]
    finished: bool = False


class HealthWatch:
    """The watch of one agent's NPUs. ``settings``: HostPlan.health_watch (``"perf": False`` leaves the
    figures out); ``ranks``: physical device -> this host's ranks on it; ``env``: the environment the tools
    run in (the agent's, PATH included)."""

    def __init__(
        self,
        settings: Mapping[str, Any],
        ranks: Mapping[int, Sequence[int]],
        env: Mapping[str, str],
        clock: Callable[[], float] = time.monotonic,
    ) -> None:
        self.interval_s = float(settings.get("interval_s") or INTERVAL_S)
        self.tool_timeout_s = float(settings.get("tool_timeout_s") or TOOL_TIMEOUT_S)
        wanted = settings.get("devices")
        devices = sorted(ranks) if wanted is None else [int(d) for d in wanted]
        self._devices = {d: Device(d, sorted(ranks.get(d, ()))) for d in devices}
        self._nics = bool(settings.get("nics"))
        self._perf = bool(settings.get("perf", True))
        self._figures = perf.PerfReadings(list(self._devices.values()))
        self._perf_events: List[EventData] = []  # NPU_PERF data not yet taken (take_perf)
        self._env = dict(env)
        self._clock = clock
        self._calls: Dict[int, _Call] = {}  # by pid: started, not yet reaped
        self._round: Optional[_Round] = None
        self._next_at = clock()
        self._checked = False  # the tools were looked for on the PATH
        self._off = False  # npu-smi is missing: nothing more is asked
        self._mapped = False  # each device's card and chip are known
        self._stopped = False
        self._dir: Optional[str] = None
        self._serial = 0
        self._last: Optional[_Round] = None  # the last look at the NPUs of a rank that failed
        self._looked: Set[int] = set()

    # -- what the agent asks --------------------------------------------------------------------

    def pids(self, table: Optional[Dict[int, procs.ProcInfo]] = None) -> Set[int]:
        """The calls' pids (children of the agent that are not the job's strays) and, given the process
        table, everything in their process groups or below them."""
        own = set(self._calls)
        if table is None or not own:
            return own
        found = set(own) | {pid for pid, info in table.items() if info.pgid in own}
        for pid in own:
            found |= procs.descendants(pid, table)
        return found

    def reaped(self, pid: int, status: int) -> bool:
        """The agent reaped ``pid``: True when it was one of the watch's calls (its outcome is taken)."""
        call = self._calls.pop(pid, None)
        if call is None:
            return False
        exit_code, signal_name = procs.decode_status(status)
        call.popen.returncode = exit_code if signal_name is None else -1  # not left to subprocess's clean-up
        if not call.finished:
            call.finished = True
            self._done(call, self._answer(call, exit_code, signal_name))
        _remove(call)
        return True

    def last_look(self, devices: Sequence[int]) -> None:
        """A rank on these NPUs failed: ask their health now, once, even while the job is being stopped, so
        that a fault the NPU reports as its rank ends is known (the root cause names it, recovery excludes
        it) without waiting for the next round. The agent's loop goes on until the answers are in
        (``looking``), at most ``tool_timeout_s``."""
        if self._off or not self._mapped or self._last is not None:
            return
        wanted = [self._devices[d] for d in devices if d in self._devices and d not in self._looked]
        calls = [c for c in self._chip_calls() if c[1] in {d.device for d in wanted}]
        if not calls:
            return
        self._looked.update(d.device for d in wanted)
        self._last = _Round(self._clock(), calls)

    def take_perf(self) -> List[EventData]:
        """The NPU_PERF events' data of the rounds ended since the last call (one per round)."""
        taken, self._perf_events = self._perf_events, []
        return taken

    def looking(self) -> bool:
        """A last look is under way: the agent keeps its loop going until it is answered."""
        return self._last is not None

    def timeout_s(self) -> Optional[float]:
        """How long the loop may sleep before the watch needs a turn (None: it needs none)."""
        if self._last is not None:
            return 0.0 if self._last.queue else 0.02
        if self._off or self._stopped:
            return None
        if not self._checked:
            return 0.0
        dues = [call.deadline for call in self._calls.values() if not call.finished]
        current = self._round
        if current is None:
            dues.append(self._next_at)
        elif (current.queue and len(self._calls) < WORKERS) or (not current.queue and not current.pending):
            return 0.0
        elif not current.judged and self._health_done(current):
            return 0.0
        return max(0.0, min(dues) - self._clock()) if dues else None

    def poll(self) -> List[EventData]:
        """One turn: kill calls out of time, start a round when due and its calls as slots free up, and
        judge a round whose calls have all ended. Returns the NPU_HEALTH events' data."""
        events: List[EventData] = self._poll_last()
        if self._off or self._stopped:
            return events
        if not self._checked:
            events += self._check_tools()
            if self._off:
                return events
        now = self._clock()
        self._kill_overdue(now)
        current = self._round
        if current is None:
            if now < self._next_at:
                return events
            current = self._round = self._begin(now)
        self._start_queued(current)
        if not current.judged and self._health_done(current):
            current.judged = True
            events += self._judge(current)
        if not current.queue and not current.pending:
            if self._perf:
                mapped = current.answers.get((MAP, None))
                not_asked = lambda dev: self._not_asked(dev, mapped)  # noqa: E731
                self._perf_events.append(self._figures.event(current.answers, self._nics, not_asked))
            self._round = None
            self._next_at = max(current.started + self.interval_s, self._clock())
        return events

    def _poll_last(self) -> List[EventData]:
        last = self._last
        if last is None:
            return []
        self._kill_overdue(self._clock())
        self._start_queued(last)
        if last.queue or last.pending:
            return []
        self._last = None
        return self._judge(last, {device for _, device in last.answers})

    def stop(self) -> None:
        """Ask nothing more (the job is stopping): the round is dropped and its calls killed (a last look
        goes on); the agent still reaps them."""
        self._stopped = True
        self._round = None
        for pid, call in self._calls.items():
            if call.round is self._last and self._last is not None:
                continue
            call.finished = True
            procs.kill_group(pid, signal.SIGKILL)

    def close(self) -> None:
        """Kill what still runs and reap it, waiting CLOSE_REAP_S at most: a call stuck in the driver
        (uninterruptible) is left to whoever reaps the agent's children next, never waited for."""
        self._last = None
        self.stop()
        deadline = time.monotonic() + CLOSE_REAP_S
        while self._calls:
            for pid in list(self._calls):
                try:
                    done, status = os.waitpid(pid, os.WNOHANG)
                except ChildProcessError:  # reaped by someone else: its status is lost, not needed
                    done, status = pid, 0
                if done == pid:
                    self.reaped(pid, status)
            if not self._calls or time.monotonic() >= deadline:
                break
            time.sleep(0.005)
        for call in self._calls.values():
            debug(__name__, "pid %d (%s) did not end when killed; left behind", call.popen.pid, call.argv[0])
        if self._dir is not None and not self._calls:
            shutil.rmtree(self._dir, ignore_errors=True)
            self._dir = None

    # -- rounds ---------------------------------------------------------------------------------------

    def _check_tools(self) -> List[EventData]:
        self._checked = True
        path = self._env.get("PATH", os.defpath)
        if shutil.which("npu-smi", path=path) is None:
            self._off = True
            return [
                dict(
                    unanswered_event(
                        None, "npu-smi is not on the PATH: the NPU health watch cannot run", self._ranks()
                    ),
                    missing="npu-smi",
                )
            ]
        if self._nics and shutil.which("hccn_tool", path=path) is None:
            self._nics = False
            why = "hccn_tool is not on the PATH: the NPUs' NIC links are not watched"
            return [dict(unanswered_event(None, why, self._ranks()), missing="hccn_tool")]
        return []

    def _begin(self, now: float) -> _Round:
        current = _Round(now, [])
        if not self._mapped:
            current.queue.append((MAP, None, ["npu-smi", "info"]))
        else:
            current.queue += self._chip_calls()
        if self._nics:
            current.queue += [
                (NIC, device, ["hccn_tool", "-i", str(device), "-link", "-g"]) for device in self._devices
            ]
        if self._mapped and self._perf:  # after every health call (else added once mapped: _done_answer)
            current.queue += perf.perf_calls(list(self._devices.values()), self._nics)
        return current

    def _health_done(self, current: _Round) -> bool:
        """Every health call of the round is in (what is left are figure calls)."""
        if any(part not in perf.PARTS for part, _, _ in current.queue):
            return False
        return not any(c.round is current and not c.finished and c.part not in perf.PARTS for c in self._calls.values())

    def _chip_calls(self) -> List[Tuple[str, Optional[int], List[str]]]:
        return [
            (CHIP, d.device, ["npu-smi", "info", "-t", "health", "-i", str(d.npu), "-c", str(d.chip)])
            for d in self._devices.values()
            if d.npu is not None
        ]

    def _start_queued(self, current: _Round) -> None:
        while current.queue and len(self._calls) < WORKERS:
            part, device, argv = current.queue.pop(0)
            current.pending += 1
            try:
                self._spawn(part, device, argv, current)
            except OSError as exc:
                self._done_answer(current, part, device, Answer(silent=f"{argv[0]} cannot be run: {exc.strerror}"))

    def _spawn(self, part: str, device: Optional[int], argv: List[str], current: _Round) -> None:
        if self._dir is None:
            self._dir = tempfile.mkdtemp(prefix="npulaunch-health-")
        self._serial += 1
        out_path = os.path.join(self._dir, "%d.out" % self._serial)
        err_path = os.path.join(self._dir, "%d.err" % self._serial)
        popen = procs.spawn(argv, self._dir, self._env, out_path, err_path)
        deadline = self._clock() + self.tool_timeout_s
        self._calls[popen.pid] = _Call(part, device, argv, popen, out_path, err_path, deadline, current)

    def _kill_overdue(self, now: float) -> None:
        for pid, call in self._calls.items():
            if not call.finished and now >= call.deadline:
                debug(__name__, "%s did not answer within %g s: SIGKILL", " ".join(call.argv), self.tool_timeout_s)
                procs.kill_group(pid, signal.SIGKILL)
                call.finished = True  # still counted among the calls (a slot) until the agent reaps it
                why = f"{' '.join(call.argv)} did not answer within {self.tool_timeout_s:g} s"
                self._done(call, Answer(silent=why))

    def _answer(self, call: _Call, exit_code: Optional[int], signal_name: Optional[str]) -> Answer:
        out, err = _read(call.out_path), _read(call.err_path)
        if exit_code == 0:
            return Answer(text=out)
        lines = (err or out).strip().splitlines()
        said = lines[-1].strip() if lines else "no output"
        how = f"exited with {exit_code}" if signal_name is None else f"was killed by {signal_name}"
        return Answer(failed=f"{' '.join(call.argv)} {how}: {said}")

    def _done(self, call: _Call, answer: Answer) -> None:
        if call.round is not None and (call.round is self._round or call.round is self._last):
            self._done_answer(call.round, call.part, call.device, answer)

    def _done_answer(self, current: _Round, part: str, device: Optional[int], answer: Answer) -> None:
        current.pending -= 1
        current.answers[(part, device)] = answer
        if part == MAP:
            self._map(answer)
            if self._mapped:
                current.queue[:0] = self._chip_calls()
                if self._perf:
                    current.queue += perf.perf_calls(list(self._devices.values()), self._nics)

    def _map(self, answer: Answer) -> None:
        """Each device's card and chip from ``npu-smi info`` (as health.gather: physical ids in listing
        order, or as ASCEND_VISIBLE_DEVICES or the Phy-ID column say)."""
        chips = parse_npu_smi_info(answer.text) if answer.text else ()
        if not chips:
            return
        ids = physical_ids(chips, self._env.get(CONTAINER_VISIBLE_VAR))
        where = {device: chip for device, chip in zip(ids, chips)}
        for dev in self._devices.values():
            chip = where.get(dev.device)
            if chip is not None:
                dev.npu, dev.chip = chip.npu_id, chip.chip_id
        self._mapped = True

    # -- judging ------------------------------------------------------------------------------------

    def _judge(self, current: _Round, only: Optional[Set[Optional[int]]] = None) -> List[EventData]:
        """The round's events: each device's new reasons for not answering, then its change of state
        (``only``: of these devices, a last look's)."""
        answers = current.answers
        mapped = answers.get((MAP, None))
        answered = any(not (a.failed or a.silent) for (part, _), a in answers.items() if part == CHIP)
        events: List[EventData] = []
        for dev in self._devices.values():
            if only is not None and dev.device not in only:
                continue
            why = []
            chip = answers.get((CHIP, dev.device))
            if chip is None:
                why.append(self._not_asked(dev, mapped))
            else:
                why.append(take_chip(dev, chip, answered))
            if self._nics:
                why.append(take_nic(dev, answers.get((NIC, dev.device))))
            for reason in why:
                if reason and reason not in dev.reasons:
                    dev.reasons.add(reason)
                    events.append(unanswered_event(dev, reason, ()))
            if dev.signature() != dev.shown:
                dev.shown = dev.signature()
                events.append(state_event(dev))
        return events

    def _ranks(self) -> List[int]:
        return [r for d in self._devices.values() for r in d.ranks]

    def _not_asked(self, dev: Device, mapped: Optional[Answer]) -> str:
        if mapped is not None and (mapped.silent or mapped.failed):
            return mapped.silent or mapped.failed
        if mapped is not None and not self._mapped:
            return "npu-smi info printed no NPU table npulaunch reads"
        return f"npu-smi info lists no NPU with physical id {dev.device}"


def _remove(call: _Call) -> None:
    for path in (call.out_path, call.err_path):
        try:
            os.unlink(path)
        except OSError:
            pass


def _read(path: str) -> str:
    try:
        with open(path, "rb") as handle:
            return handle.read(OUTPUT_LIMIT).decode("utf-8", "replace")
    except OSError:
        return ""
