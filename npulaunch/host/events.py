"""Events: the one channel from agents to the supervisor, as JSON lines.

Standard library only, Python 3.7+ (agents emit these on compute hosts). A leaf: it knows the
vocabulary of events, not what anyone does with them.
"""

from __future__ import annotations

import json
import time
from dataclasses import dataclass, field
from enum import Enum
from typing import Any, Dict, Mapping, Optional


class EventKind(str, Enum):
    JOB_STARTED = "job_started"
    RANK_STARTED = "rank_started"
    RANK_SPAWN_FAILED = "rank_spawn_failed"
    # what a failed rank raised, from its error file (host/errorfile.py: exception, message, where, traceback,
    # timestamp, written, path); emitted just before its RANK_EXITED
    RANK_ERROR_FILE = "rank_error_file"
    RANK_EXITED = "rank_exited"
    STOP_REQUESTED = "stop_requested"
    SIGNAL_RECEIVED = "signal_received"
    SIGNAL_FORWARDED = "signal_forwarded"
    KILL_ESCALATED = "kill_escalated"
    STRAYS_KILLED = "strays_killed"
    SIGNATURE_MATCHED = "signature_matched"
    HANG_DETECTED = "hang_detected"
    STACKS_DUMPED = "stacks_dumped"
    AGENT_LOST = "agent_lost"
    PREFLIGHT_WARNING = "preflight_warning"
    PROGRESS = "progress"  # a rank's output so far (lines, step): its first line, then now and then
    NPU_HEALTH = "npu_health"  # a watched NPU's health changed, or could not be asked (host/health/watch.py)
    RANK_PACE = "rank_pace"  # a host's ranks' steps in the last window, summarised (host/agent/paces.py)
    RANK_SLOW = "rank_slow"  # the launcher named a rank slower than its peers, or no longer (diagnose/stragglers.py)
    # each watched NPU's performance figures, once per health watch round (host/health/perf.py: AI Core usage
    # and clocks, temperature, power, HBM usage, its NIC's rate and new error counts; None where not read)
    NPU_PERF = "npu_perf"
    JOB_FINISHED = "job_finished"


def signature_label(data: Mapping[str, Any]) -> str:
    """What a signature_matched event's data is called wherever it is shown: its CANN error code
    (``EZ9999``), or the signature's own name when it has none (a job's pattern, ``nan-loss``)."""
    return str(data.get("code") or data["signature"])


@dataclass(frozen=True)
class Event:
    """One thing that happened; ``time`` is wall-clock seconds since the epoch."""

    kind: EventKind
    job_id: str
    host: str
    rank: Optional[int] = None
    data: Dict[str, Any] = field(default_factory=dict)
    time: float = field(default_factory=time.time)

    def to_json(self) -> str:
        record = {
            "kind": self.kind.value,
            "time": round(self.time, 6),
            "job_id": self.job_id,
            "host": self.host,
            "rank": self.rank,
        }
        record.update(self.data)
        return json.dumps(record, sort_keys=False, default=str)

    @classmethod
    def from_json(cls, line: str) -> "Event":
        return cls.from_record(json.loads(line))

    @classmethod
    def from_record(cls, record: Dict[str, Any]) -> "Event":
        """The inverse of to_json, from the decoded object (extra keys become data)."""
        record = dict(record)
        kind = EventKind(record.pop("kind"))
        return cls(
            kind=kind,
            time=record.pop("time"),
            job_id=record.pop("job_id"),
            host=record.pop("host"),
            rank=record.pop("rank"),
            data=record,
        )
