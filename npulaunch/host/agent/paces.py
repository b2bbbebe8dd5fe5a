"""The agent's reading of its ranks' pace files (host/pace.py): every window it sends the launcher one
RANK_PACE event with each rank's steps in that window, summarised, and the host's CPU load. The
launcher compares the ranks (diagnose/stragglers.py); nothing is judged here. Standard library only,
Python 3.7+.

An event's data: ``ranks`` {rank (text): {"steps": steps in the window, "step": the last one,
"busy_s": median busy time, "wait_s": median wait (None when the rank's hook cannot tell)}},
``window_s``, ``load1`` (/proc/loadavg, None elsewhere), ``cpus`` (the CPUs this agent may use), and
``final`` (true on the last window, sent when the ranks have ended: partial, and holding whatever a rank
does last, such as rank 0 saving the model).
"""

from __future__ import annotations

import os
from typing import Callable, Dict, List, Optional, Tuple

from npulaunch.host import timing
from npulaunch.host.events import EventKind
from npulaunch.host.pace import PACE_FILE, UNKNOWN_WAIT
from npulaunch.host.spec import HELPER_RANK, HostPlan
from npulaunch.host.tail import FileTail

Emit = Callable[..., None]
Step = Tuple[int, float, Optional[float]]  # (step, busy, wait)


class Paces:
    def __init__(self, plan: HostPlan, emit: Emit, clock: Callable[[], float]) -> None:
        self._emit = emit
        self._clock = clock
        self._paths = {
            spec.rank: os.path.join(spec.rank_dir, PACE_FILE) for spec in plan.ranks if spec.rank != HELPER_RANK
        }
        self._tails: Dict[int, FileTail] = {}
        self._window: Dict[int, List[Step]] = {}
        world_size = plan.ranks[0].world_size if plan.ranks else 1
        self.window_s = timing.seconds("pace_window_s") * max(1, world_size // 256)  # a big job stays cheap
        self._due = clock() + self.window_s
        self._started = clock()

    def due_s(self) -> float:
        return max(0.0, self._due - self._clock())

    def poll(self) -> None:
        now = self._clock()
        if now < self._due:
            return
        self._read()
        self._send(now)

    def close(self) -> None:
        """The last window (what the ranks wrote since the last event), then the files are let go."""
        self._read()
        self._send(self._clock(), final=True)
        for tail in self._tails.values():
            tail.close()
        self._tails.clear()

    def _read(self) -> None:
        for rank, path in self._paths.items():
            tail = self._tails.get(rank)
            if tail is None:
                if not os.path.exists(path):
                    continue
                tail = self._tails[rank] = FileTail(path)
            block = tail.read()
            if block:
                self._window.setdefault(rank, []).extend(parse_pace(block))

    def _send(self, now: float, final: bool = False) -> None:
        self._due = now + self.window_s
        ranks = {str(rank): summarise(steps) for rank, steps in sorted(self._window.items()) if steps}
        self._window.clear()
        if not ranks:
            return
        load1 = read_load1()
        self._emit(
            EventKind.RANK_PACE,
            None,
            ranks=ranks,
            window_s=round(self.window_s, 3),
            load1=load1,
            cpus=len(os.sched_getaffinity(0)) if hasattr(os, "sched_getaffinity") else os.cpu_count(),
            **({"final": True} if final else {}),
        )


def parse_pace(block: bytes) -> List[Step]:
    """The steps of whole pace lines (a line that does not parse is skipped)."""
    steps: List[Step] = []
    for line in block.decode("ascii", "replace").splitlines():
        parts = line.split()
        if len(parts) != 4:
            continue
        try:
            wait = None if parts[3] == UNKNOWN_WAIT else float(parts[3])
            steps.append((int(parts[1]), float(parts[2]), wait))
        except ValueError:
            continue
    return steps


def summarise(steps: List[Step]) -> Dict[str, object]:
    waits = [wait for _, _, wait in steps if wait is not None]
    return {
        "steps": len(steps),
        "step": steps[-1][0],
        "busy_s": round(median([busy for _, busy, _ in steps]), 6),
        "wait_s": round(median(waits), 6) if len(waits) == len(steps) else None,
    }


def median(values: List[float]) -> float:
    ordered = sorted(values)
    middle = len(ordered) // 2
    return ordered[middle] if len(ordered) % 2 else (ordered[middle - 1] + ordered[middle]) / 2.0


def read_load1() -> Optional[float]:
    try:
        with open("/proc/loadavg") as handle:
            return float(handle.read().split()[0])
    except (OSError, ValueError, IndexError):
        return None
