"""What the fault history keeps off a new placement now: the ledger's entries (plan/ledger.py) judged at a
time, as the planner's exclusions (plan/prepare.py passes them to build_plan: placement's ``Exclusion``, never
a second planner), as ``plan`` / ``check`` / ``run`` say them, and as ``npulaunch sbatch`` excludes nodes. Pure
but for the functions that read the ledger (``job_history``, ``read_history``, ``read_kept_off``).

- An NPU or host with a fault within ``recovery.ledger_window_h`` (default 24 h) is kept off: 24 h is the
  window in which MindCluster counts a fault's repeats (faultCustomization.json's TimeWindow 86400 s; ClusterD's
  fault_window_hours 24, component/clusterd/build/clusterd.yaml), so an NPU inside it is one fault from
  ManuallySeparateNPU and whole jobs should not stand on it; after it MindCluster forgets the fault too.
  0 keeps only escalated NPUs off.
- An NPU escalated to ManuallySeparateNPU is kept off until a person clears it (``npulaunch faults --clear``):
  the same code ``times`` times on it within ``window_s``, one occurrence per job attempt. The rules are the
  Ascend Device Plugin's FaultFrequency, Ascend/mind-cluster @ 22bb3d987bc0208c3eb7395e222b661276133c58 (the
  file last changed at ada4c99b3db0d4c8258851f869ac49bb9b9d0bdc),
  component/ascend-device-plugin/build/faultCustomization.json: 41 codes twice in 86,400 s, 80E18005 three
  times, 81078603 five times and released 172,800 s later (ReleaseTimeWindow). ``handleFrequencyFault``
  (component/ascend-device-plugin/pkg/common/fault_code.go) counts per chip within the window, and "the chip
  remains isolated ... until the maintenance personnel manually delete the chip name"
  (docs/en/scheduling/api/ascend_device_plugin.md, FaultHandling). Any other code: twice within 24 h, the
  Device Plugin's rule and issue 35's; ClusterD's generic counter asks 3 times and releases after 48 h
  (clusterd.yaml), but every entry here already stopped a whole job, so npulaunch takes the stricter rule.
"""

from __future__ import annotations

import time
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any, Dict, Iterable, List, NamedTuple, Optional, Sequence, Tuple

from npulaunch.config.cluster import RecoveryConfig
from npulaunch.plan.ledger import CLEARED, NPU_FAULT, Entry, Ledger, ledger_path, load_ledger
from npulaunch.plan.placement import Exclusion

if TYPE_CHECKING:
    from npulaunch.config.cluster import ClusterConfig
    from npulaunch.plan.launchplan import LaunchPlan

DEFAULT_WINDOW_H = RecoveryConfig.ledger_window_h
MANUALLY_SEPARATE = "ManuallySeparateNPU"


class FrequencyRule(NamedTuple):
    times: int
    window_s: float
    release_s: Optional[float] = None  # None: kept off until a person clears it


_TWICE = (  # faultCustomization.json's first FaultFrequency entry: Times 2, TimeWindow 86400
    "80C98000 80B78000 80B58000 80A18008 80A38008 80A58008 80B98000 80B98008 80BB8000 80BB8008 80BD8000 80BD8008 "
    "80C78008 80C98008 80CB8008 80CD8008 80CF8008 80D98008 80DF8008 80DE1801 80E01801 80E18008 80E38008 80E39200 "
    "80E3A202 80E3A203 80E78000 80E78008 80F18000 80F18008 80F38008 80F78008 81318008 81338008 813B8008 81478008 "
    "81578008 815F8008 81938008 81958008 81978008"
).split()
DEFAULT_RULE = FrequencyRule(2, 86400.0)
FREQUENCY: Dict[str, FrequencyRule] = {
    **{code: DEFAULT_RULE for code in _TWICE},
    "80E18005": FrequencyRule(3, 86400.0),
    "81078603": FrequencyRule(5, 86400.0, 172800.0),
}


@dataclass(frozen=True)
class Kept:
    """One NPU (or a whole host, ``device`` None) the history keeps off, why, and until when."""

    host: str
    device: Optional[int]
    why: str
    until: Optional[float]  # None: until a person clears it
    code: Optional[str] = None
    level: Optional[str] = None

    @property
    def key(self) -> str:
        """``host`` or ``host:npu``: as ``npulaunch faults --clear`` takes it."""
        return self.host if self.device is None else f"{self.host}:{self.device}"

    def to_json(self) -> Dict[str, Any]:
        return {
            "host": self.host,
            "device": self.device,
            "why": self.why,
            "until": self.until,
            "code": self.code,
            "level": self.level,
        }

    def exclusion(self, ledger: str) -> Exclusion:
        why = f"fault history: {self.why}; npulaunch faults {ledger} --clear {self.key} places it again"
        return Exclusion(self.host, self.device, why, self.code, self.level, 0)


@dataclass(frozen=True)
class KeptOff:
    """What the history keeps off at one time: ``hosts`` whole, ``npus`` one by one, and why (``reasons``,
    keyed ``host`` or ``host:npu``)."""

    items: Tuple[Kept, ...] = ()
    window_h: float = DEFAULT_WINDOW_H

    @property
    def hosts(self) -> Tuple[str, ...]:
        return tuple(k.host for k in self.items if k.device is None)

    @property
    def npus(self) -> Tuple[Tuple[str, int], ...]:
        return tuple((k.host, k.device) for k in self.items if k.device is not None)

    @property
    def hosts_with_npus(self) -> Tuple[str, ...]:
        """The hosts with an NPU kept off, in order (whole-node schedulers exclude these too, or not)."""
        return tuple(dict.fromkeys(host for host, _ in self.npus))

    @property
    def reasons(self) -> Dict[str, str]:
        return {k.key: k.why for k in self.items}

    def on(self, hosts: Iterable[str]) -> "KeptOff":
        """Only what lies on ``hosts``."""
        wanted = set(hosts)
        return KeptOff(tuple(k for k in self.items if k.host in wanted), self.window_h)

    def exclusions(self, ledger: str) -> List[Exclusion]:
        """As the planner's exclusions; ``ledger``: the file, for how to clear one."""
        return [k.exclusion(ledger) for k in self.items]

    def to_json(self) -> List[Dict[str, Any]]:
        return [k.to_json() for k in self.items]


def kept_off(entries: Sequence[Entry], now: float, window_h: float = DEFAULT_WINDOW_H) -> KeptOff:
    """What ``entries`` (in file order) keep off at ``now``: pure, the function the planner, ``check`` and
    ``npulaunch sbatch``'s ``--exclude`` share."""
    window_s = window_h * 3600.0
    live = _uncleared(entries)
    found: Dict[Tuple[str, Optional[int]], Kept] = {}
    for entry in live:
        assert entry.host is not None
        until = entry.time + window_s
        if window_s > 0 and until > now:
            why = f"{_said(entry)}; kept off for {window_h:g} h, until {_clock(until)}"
            earlier = found.get((entry.host, entry.device))
            if earlier is None or (earlier.until is not None and earlier.until < until):
                found[(entry.host, entry.device)] = Kept(entry.host, entry.device, why, until, entry.code, entry.level)
    for kept in _escalated(live, now):
        found[(kept.host, kept.device)] = kept
    order = sorted(found.values(), key=lambda k: (k.host, -1 if k.device is None else k.device))
    return KeptOff(tuple(order), window_h)


def _uncleared(entries: Sequence[Entry]) -> List[Entry]:
    """The faults no later clearing covers."""
    live: List[Entry] = []
    for entry in entries:
        if entry.what != CLEARED:
            live.append(entry)
            continue
        live = [f for f in live if not _covers(entry, f)]
    return live


def _covers(clearing: Entry, fault: Entry) -> bool:
    if clearing.host is None:
        return True
    return clearing.host == fault.host and (clearing.device is None or clearing.device == fault.device)


def _escalated(live: Sequence[Entry], now: float) -> List[Kept]:
    """NPUs whose code repeated often enough within its rule's window: ManuallySeparateNPU."""
    seen: Dict[Tuple[str, int, str], Dict[Tuple[str, int], Entry]] = {}  # (host, NPU, code) -> occurrences
    for entry in live:
        if entry.what == NPU_FAULT and entry.code and entry.host is not None and entry.device is not None:
            # one occurrence per attempt of a job (a fault several writers recorded counts once)
            key = (entry.job_id, entry.attempt) if entry.job_id else (f"@{entry.time}", 0)
            seen.setdefault((entry.host, entry.device, entry.code.upper()), {}).setdefault(key, entry)
    found = []
    for (host, device, code), occurrences in seen.items():
        rule = FREQUENCY.get(code, DEFAULT_RULE)
        times = sorted(occurrences.values(), key=lambda e: e.time)
        for first in range(len(times) - rule.times + 1):
            run = times[first : first + rule.times]
            if run[-1].time - run[0].time > rule.window_s:
                continue
            last = times[-1].time
            until = None if rule.release_s is None else last + rule.release_s
            if until is not None and until <= now:
                break
            jobs = ", ".join(f"{e.job_id or '?'} attempt {e.attempt} at {_clock(e.time)}" for e in run)
            why = (
                f"{MANUALLY_SEPARATE}: fault {code} {rule.times} times within {rule.window_s / 3600:g} h ({jobs}); "
                + ("kept off until a person clears it" if until is None else f"kept off until {_clock(until)}")
            )
            found.append(Kept(host, device, why, until, code, MANUALLY_SEPARATE))
            break
    return found


def _said(entry: Entry) -> str:
    where = f"in job {entry.job_id}" + (f" attempt {entry.attempt}" if entry.attempt else "") if entry.job_id else ""
    what = entry.reason or (f"NPU fault {entry.code}" if entry.code else entry.what.replace("_", " "))
    return " ".join(part for part in (what, where, f"at {_clock(entry.time)}") if part)


def _clock(stamp: float) -> str:
    return time.strftime("%Y-%m-%d %H:%M", time.localtime(stamp))


@dataclass(frozen=True)
class History:
    """The ledger as a job's planner sees it, read once when the job is planned: what it keeps off on the job's
    hosts and spares, and whether the plan places around it (``applied``: not under a scheduler, whose own
    placement stands; ``npulaunch sbatch`` excludes such nodes instead)."""

    ledger: Ledger
    kept: KeptOff
    applied: bool = True

    def exclusions(self) -> List[Exclusion]:
        return self.kept.exclusions(self.ledger.path) if self.applied else []

    def notes(self) -> List[str]:
        if not self.applied:
            return []
        return [
            f"the fault history ({self.ledger.path}) keeps {_place(k)} off: {k.why}; "
            f"npulaunch faults {self.ledger.path} --clear {k.key} places it again"
            for k in self.kept.items
        ]

    def warnings(self) -> List[str]:
        said = self.ledger.warnings()
        if not self.applied:
            said += [
                f"warning: the fault history ({self.ledger.path}) would keep {_place(k)} off ({k.why}), but the "
                "scheduler placed this job there: keep such nodes out of the jobs submitted to it"
                for k in self.kept.items
            ]
        return said

    def told(self, plan: "LaunchPlan") -> "LaunchPlan":
        """The plan saying what the history keeps off (its notes, warnings, and plan.json's
        ``recovery.history``)."""
        from dataclasses import replace

        return replace(
            plan,
            notes=plan.notes + tuple(self.notes()),
            warnings=plan.warnings + tuple(self.warnings()),
            recovery={**plan.recovery, "history": self.facts()},
        )

    def facts(self) -> Dict[str, Any]:
        """plan.json's ``recovery.history``."""
        return {
            "ledger": self.ledger.path,
            "window_h": self.kept.window_h,
            "entries": len(self.ledger.entries),
            "skipped_lines": [number for number, _ in self.ledger.skipped],
            "kept_off": self.kept.to_json(),
            "applied": self.applied,
        }


def job_history(config: "ClusterConfig", node: Optional[int]) -> History:
    """A job's history as its planner reads it when the job is planned; ConfigError (at the ledger's key)
    when the ledger could not be written, before anything starts. ``node``: the node of a scheduler's job
    this npulaunch runs (the scheduler placed the job: the history is said, not applied), or None."""
    from npulaunch.host.errors import ConfigError
    from npulaunch.plan.ledger import ledger_problem

    problem = ledger_problem(config)
    if problem is not None:
        raise ConfigError([problem])
    return read_history(config, time.time(), applied=node is None)


def read_history(config: "ClusterConfig", now: float, applied: bool = True) -> History:
    """The job's history: the ledger read, and what it keeps off of the job's hosts and spares at ``now``."""
    ledger = load_ledger(ledger_path(config))
    kept = kept_off(ledger.entries, now, config.recovery.ledger_window_h)
    return History(ledger, kept.on(h.host for h in config.hosts + config.spares), applied)


def _place(kept: Kept) -> str:
    return f"host {kept.host}" if kept.device is None else f"{kept.host} NPU {kept.device}"


def read_kept_off(config: "ClusterConfig", now: Optional[float] = None) -> Tuple[KeptOff, List[str]]:
    """What the config's ledger keeps off at ``now`` (default: the time now) on any host, and the ledger's
    warnings (lines skipped, a file that cannot be read): for ``npulaunch sbatch``, whose nodes are not known
    yet, to exclude ``.hosts`` (and ``.hosts_with_npus`` where a node is allocated whole)."""
    ledger = load_ledger(ledger_path(config))
    kept = kept_off(ledger.entries, time.time() if now is None else now, config.recovery.ledger_window_h)
    return kept, ledger.warnings()


def ledger_of(target: Optional[str], cwd: str) -> Tuple[str, float]:
    """The ledger ``npulaunch faults TARGET`` means, and the window to judge it by: a cluster YAML's (its
    ``recovery.ledger`` and ``ledger_window_h``), a log directory's faults.jsonl, a ledger file itself (a
    ``.jsonl`` path); without a target, the default log directory's here. UsageError for a path that is not
    there."""
    import os

    from npulaunch.config.cluster import DEFAULT_LOG_DIR
    from npulaunch.host.errors import UsageError
    from npulaunch.plan.ledger import LEDGER_NAME

    if target is None:
        return os.path.join(cwd, DEFAULT_LOG_DIR, LEDGER_NAME), DEFAULT_WINDOW_H
    path = os.path.abspath(os.path.join(cwd, target))
    if os.path.isdir(path):
        return os.path.join(path, LEDGER_NAME), DEFAULT_WINDOW_H
    if path.endswith(".jsonl"):
        return path, DEFAULT_WINDOW_H
    if not os.path.isfile(path):
        raise UsageError(f"{target}: no such file or directory (a cluster YAML, a log directory, or a ledger .jsonl)")
    from npulaunch.config.load import load_config

    config = load_config(path)
    return ledger_path(config), config.recovery.ledger_window_h
