"""The hang watchdog: a pure function of each rank's progress, the time, and the limits.

Progress is any line a rank prints. Two phases: start-up (launch until the first line, a budget
covering HCCL's connect timeout and graph compilation) and steady state (no line for longer than a
limit derived from the job's own timeouts). Standard library only, Python 3.7+ (runs in the agent);
no clock of its own: the caller passes ``now``.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Dict, List, Mapping, Optional

STARTUP, STEADY = "startup", "steady"


@dataclass(frozen=True)
class HangLimits:
    startup_s: float  # launch -> first progress; 0 turns the check off
    steady_s: float  # between two progress lines; 0 turns the check off


@dataclass
class Progress:
    started: float  # when the rank was launched (monotonic seconds)
    first: Optional[float] = None  # its first line
    last: Optional[float] = None  # its latest line

    def saw(self, now: float) -> None:
        if self.first is None:
            self.first = now
        self.last = now


@dataclass(frozen=True)
class Hang:
    rank: int
    phase: str  # STARTUP or STEADY
    silent_s: float  # how long the rank has been silent
    limit_s: float
    since: float  # when it last made progress (or was launched), monotonic


GROUP_RATIO = 0.9  # once one rank is past its limit, ranks silent for 90% of theirs stall with it


def find_hangs(progress: Mapping[int, Progress], now: float, limits: HangLimits) -> List[Hang]:
    """The ranks (among those given: the running ones) that have exceeded their phase's limit, and
    once one has, the others that are nearly there (ranks that fell silent together, as in a
    whole-job stall, cross their limits milliseconds apart)."""
    silent = []
    for rank, seen in sorted(progress.items()):
        if seen.first is None and limits.startup_s:
            silent.append(Hang(rank, STARTUP, now - seen.started, limits.startup_s, seen.started))
        elif seen.first is not None and limits.steady_s and seen.last is not None:
            silent.append(Hang(rank, STEADY, now - seen.last, limits.steady_s, seen.last))
    if not any(h.silent_s > h.limit_s for h in silent):
        return []
    return [h for h in silent if h.silent_s >= GROUP_RATIO * h.limit_s]


def next_check_in(progress: Mapping[int, Progress], now: float, limits: HangLimits) -> Optional[float]:
    """Seconds until the earliest rank could cross its limit (None: nothing to watch)."""
    waits: List[float] = []
    for seen in progress.values():
        if seen.first is None and limits.startup_s:
            waits.append(seen.started + limits.startup_s - now)
        elif seen.last is not None and limits.steady_s:
            waits.append(seen.last + limits.steady_s - now)
    return max(0.0, min(waits)) if waits else None


def describe(hangs: List[Hang], running: int) -> Dict[str, object]:
    """Event data for a set of hangs: which ranks, whether the whole job stalled."""
    return {
        "ranks": [h.rank for h in hangs],
        "phase": hangs[0].phase if hangs else "",
        "whole_job": len(hangs) == running,
        "silent_s": {str(h.rank): round(h.silent_s, 3) for h in hangs},
        "limit_s": hangs[0].limit_s if hangs else 0,
    }
