"""The slow rank, named while the job runs: each host's agent sends its ranks' pace every window
(host/agent/paces.py: per rank the median time a step kept it busy, and the median time it waited for
the others), and this compares every rank with its peers.

Why busy time: in synchronous data parallelism every rank's step takes as long as the slowest rank's,
so step times cannot tell. The slow rank is the one whose own work takes longer, and it waits least
(the others wait for it); both are checked. When a rank's hook cannot see its wait (TensorFlow's and
MindSpore's step hooks), busy is the whole step, and only a rank whose steps really differ is named.

The rule (robust, and a change point rather than one reading):
- a window's ratio is the rank's busy time over the **median** of its peers' (FALCON and MindCluster
  compare with the group; NVIDIA's straggler detector scores against the best and the median:
  github NVIDIA/nvidia-resiliency-ext, straggler_det/usage_guide);
- a window counts only when the rank also waits less than its peers' median (where waits are known): the
  slow rank is the one the others wait for;
- the ratios go into a CUSUM, Page's change-point test (FALCON detects fail-slow iteration times by
  change-point detection too, arXiv 2410.12588): each window adds its ratio less a reference level just
  under the factor (1.15 for 1.2), at most the decision level a window, never going below 0, and a rank
  is named when the sum reaches a decision level (0.3 for 1.2) with at least MIN_WINDOWS slow windows.
  A rank exactly at the factor is named in about six windows (30 s), one twice as slow in two (10 s);
  noise around 1.0 drifts back to 0, and one spike (a checkpoint, a pause) is forgotten in two windows;
- the last window of an attempt (sent once the ranks have ended: partial, with their last work) is drawn
  but not judged;
  MindCluster's slow-node detection wants consecutive anomalies the same way (``nConsecAnomaliesSignifySlow
  3``, Ascend/mind-cluster component/ascend-faultdiag-online/pkg/algo_src/slownode/nodelevel/
  node_level_algo_constants.go);
- "since" is where that rise began (the CUSUM's estimate of the change point); a named rank is released
  when the mirror CUSUM under 1 + (factor - 1) / 2 reaches the same decision level;
- a slowdown of every rank at once leaves the ratios at 1: nobody is named for it.

Pure: windows in, changes out (the supervisor records and shows them).
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any, Dict, List, Mapping, Optional, Sequence, Tuple

from npulaunch.diagnose.npuperf import host_load_text
from npulaunch.host.events import Event, EventKind

MIN_WINDOWS = 2  # windows of a slowness before its rank is named, however slow (one window may be a fluke)
MIN_GAP_S = 0.0005  # a difference in busy time below this is noise, whatever the ratio
STALE_WINDOWS = 3  # a rank whose last window is older than this many windows is left out of the median


@dataclass
class Window:
    time: float
    busy_s: float
    wait_s: Optional[float]
    step: int
    steps: int


@dataclass
class RankPace:
    rank: int
    host: str
    device: int
    windows: List[Window] = field(default_factory=list)
    ratios: List[float] = field(default_factory=list)  # one per window, against the peers then
    rise: float = 0.0  # the CUSUM of its ratio over the reference level
    fall: float = 0.0  # while named: the CUSUM of the release level over its ratio
    run: int = 0  # windows since the rise last was 0
    run_start: Optional[Window] = None  # the first of them: where the slowness began
    named: Optional[Dict[str, Any]] = None  # the straggler record while named


@dataclass
class HostLoad:
    load1: Optional[float]
    cpus: Optional[int]


class StragglerDetector:
    def __init__(self, ranks: Mapping[int, Tuple[str, int]], factor: float = 1.2) -> None:
        """``ranks``: rank -> (host, physical NPU id)."""
        self.factor = factor
        self.reference = factor - (factor - 1.0) / 4.0  # 1.15 for 1.2: what the CUSUM counts above
        self.decision = (factor - 1.0) * 1.5  # 0.3 for 1.2: six windows at the factor, one far above it
        self.release = 1.0 + (factor - 1.0) / 2.0
        self.paces = {rank: RankPace(rank, host, device) for rank, (host, device) in ranks.items()}
        self.loads: Dict[str, HostLoad] = {}
        self.window_s = 5.0
        self.stragglers: List[Dict[str, Any]] = []  # every rank named, in order (ended ones keep "until")

    def feed(self, host: str, data: Mapping[str, Any], now: float) -> List[Dict[str, Any]]:
        """One RANK_PACE event's data; returns the stragglers named or released by it (their records)."""
        self.window_s = float(data.get("window_s") or self.window_s)
        self.loads[host] = HostLoad(data.get("load1"), data.get("cpus"))
        fresh: List[RankPace] = []
        for key, seen in (data.get("ranks") or {}).items():
            pace = self.paces.get(int(key))
            if pace is None:
                continue
            wait = seen.get("wait_s")
            pace.windows.append(
                Window(
                    now,
                    float(seen["busy_s"]),
                    None if wait is None else float(wait),
                    int(seen["step"]),
                    int(seen["steps"]),
                )
            )
            del pace.windows[:-64]
            fresh.append(pace)
        if data.get("final"):  # the ranks have ended: a partial window of their last work, drawn but not judged
            return []
        return [change for pace in fresh for change in self._judge(pace, now)]

    def _peers(self, pace: RankPace, now: float) -> List[Window]:
        limit = now - STALE_WINDOWS * self.window_s - 1.0
        return [
            p.windows[-1] for p in self.paces.values() if p is not pace and p.windows and p.windows[-1].time >= limit
        ]

    def _judge(self, pace: RankPace, now: float) -> List[Dict[str, Any]]:
        peers = self._peers(pace, now)
        if not peers:
            return []
        mine = pace.windows[-1]
        peer_busy = median([w.busy_s for w in peers])
        ratio = mine.busy_s / peer_busy if peer_busy > 0 else 1.0
        pace.ratios.append(ratio)
        del pace.ratios[:-64]
        waits = [w.wait_s for w in peers if w.wait_s is not None]
        peer_wait = median(waits) if waits and len(waits) == len(peers) else None
        waits_less = mine.wait_s is None or peer_wait is None or mine.wait_s <= peer_wait
        if not waits_less or mine.busy_s - peer_busy < MIN_GAP_S:
            ratio = min(ratio, 1.0)  # not the one the others wait for: no evidence of slowness
        # CUSUM (Page's change-point test) of the ratio over the reference level: windows far above the
        # factor, or several a little above it, add up to the decision level; windows below take it back. One
        # window adds at most the decision level: a single spike (a checkpoint, a GC pause) is forgotten again.
        pace.rise = max(0.0, pace.rise + min(ratio - self.reference, self.decision))
        if pace.rise == 0.0:
            pace.run_start, pace.run = None, 0
        elif ratio > self.reference:  # a slow window: the slowness began at the first of them
            pace.run_start = pace.run_start or mine
            pace.run += 1
        pace.fall = max(0.0, pace.fall + self.release - ratio) if pace.named is not None else 0.0
        changes: List[Dict[str, Any]] = []
        if pace.named is None and pace.rise >= self.decision and pace.run >= MIN_WINDOWS:
            start = pace.run_start or mine
            pace.named = {
                "rank": pace.rank,
                "host": pace.host,
                "device": pace.device,
                "factor": round(median(pace.ratios[-pace.run :]), 2),
                "since_step": max(1, start.step - start.steps + 1),
                "since": round(start.time - self.window_s, 3),
                "until": None,
                "evidence": self._evidence(pace, mine, peer_busy, peer_wait),
            }
            self.stragglers.append(pace.named)
            changes.append(dict(pace.named, state="slow"))
        elif pace.named is not None:
            if pace.fall >= self.decision:
                pace.named["until"] = round(now, 3)
                changes.append(dict(pace.named, state="recovered"))
                pace.named = None
                pace.rise, pace.run_start, pace.run = 0.0, None, 0
            elif pace.run:  # still slow: the factor follows the latest windows
                pace.named["factor"] = round(median(pace.ratios[-min(pace.run, 12) :]), 2)
        return changes

    def _evidence(self, pace: RankPace, mine: Window, peer_busy: float, peer_wait: Optional[float]) -> Dict[str, Any]:
        load = self.loads.get(pace.host)
        return {
            "busy_s": round(mine.busy_s, 6),
            "peers_busy_s": round(peer_busy, 6),
            "wait_s": mine.wait_s,
            "peers_wait_s": None if peer_wait is None else round(peer_wait, 6),
            "load1": load.load1 if load else None,
            "cpus": load.cpus if load else None,
            "npu": [],
        }

    def slow_for(self, now: float) -> List[Tuple[Dict[str, Any], float]]:
        """The ranks named now, with how long each has been slow."""
        return [(p.named, now - p.named["since"]) for p in self.paces.values() if p.named is not None]


def stragglers_of(events: Sequence[Event]) -> List[Dict[str, Any]]:
    """The stragglers of an attempt from its RANK_SLOW events: one record per rank and start, as last said."""
    found: Dict[Tuple[int, Any], Dict[str, Any]] = {}
    for event in events:
        if event.kind is EventKind.RANK_SLOW:
            if isinstance(event.rank, int):  # the event's rank and host (events.jsonl keeps them out of the data)
                found[(event.rank, event.data.get("since"))] = dict(event.data, rank=event.rank, host=event.host)
    return list(found.values())


def describe(record: Mapping[str, Any]) -> str:
    """One line: "rank 2 (host h1, NPU 2) 1.9× slower than the median since step 30: ..."."""
    evidence = record.get("evidence") or {}
    text = (
        f"rank {record['rank']} (host {record['host']}, NPU {record['device']}) {record['factor']:.1f}× slower than "
        f"the median since step {record['since_step']}"
    )
    parts = [f"busy {evidence.get('busy_s', 0):.3f} s a step against {evidence.get('peers_busy_s', 0):.3f} s"]
    if evidence.get("wait_s") is not None and evidence.get("peers_wait_s") is not None:
        parts.append(f"waits {evidence['wait_s']:.3f} s while its peers wait {evidence['peers_wait_s']:.3f} s")
    if evidence.get("load1") is not None and evidence.get("cpus"):
        parts.append(host_load_text(str(record["host"]), float(evidence["load1"]), int(evidence["cpus"])))
    parts.extend(evidence.get("npu") or ["no NPU figures"])
    return text + ": " + "; ".join(parts)


def median(values: Sequence[float]) -> float:
    ordered = sorted(values)
    middle = len(ordered) // 2
    return ordered[middle] if len(ordered) % 2 else (ordered[middle - 1] + ordered[middle]) / 2.0
