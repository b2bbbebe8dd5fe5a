"""What an agent reports when its ranks have ended: each rank's state and result, and the
agent's outcome. Crosses the wire from remote agents (``to_json`` / ``from_json``); the report is
folded from these. Standard library only, Python 3.7+.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from enum import Enum
from typing import Any, Dict, List, Optional


class RankState(str, Enum):
    PENDING = "pending"
    RUNNING = "running"
    SUCCEEDED = "succeeded"
    FAILED = "failed"  # exited non-zero or by a signal before anyone asked it to stop
    STOPPED = "stopped"  # ended after the agent started stopping the job
    SPAWN_FAILED = "spawn_failed"


@dataclass(frozen=True)
class RankResult:
    rank: int
    host: str
    device_id: int
    pid: Optional[int]
    state: RankState
    start_time: Optional[float]
    end_time: Optional[float]
    exit_code: Optional[int]
    signal: Optional[str]
    error: Optional[str] = None
    raised: Optional[Dict[str, Any]] = None  # what it raised, from its error file (host/errorfile.py)

    def to_json(self) -> Dict[str, Any]:
        """A JSON-ready record (``state`` as its value; ``raised`` only when there is one)."""
        record = {
            "rank": self.rank,
            "host": self.host,
            "device_id": self.device_id,
            "pid": self.pid,
            "state": self.state.value,
            "start_time": self.start_time,
            "end_time": self.end_time,
            "exit_code": self.exit_code,
            "signal": self.signal,
            "error": self.error,
        }
        if self.raised is not None:
            record["raised"] = self.raised
        return record

    @classmethod
    def from_json(cls, record: Dict[str, Any]) -> "RankResult":
        return cls(**dict(record, state=RankState(record["state"])))


@dataclass
class AgentOutcome:
    ranks: List[RankResult]
    stop_signal: Optional[int] = None  # the signal that made this agent stop the ranks, if any
    strays_killed: List[int] = field(default_factory=list)
