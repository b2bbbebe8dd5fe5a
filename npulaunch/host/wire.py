"""The agent's wire protocol: JSON lines between the launcher and a remote agent (over SSH, or any
pipe), one dataclass per message with ``to_json`` / ``from_json``. Standard library only,
Python 3.7+: both ends import this module.

Launcher -> agent: optionally ``{"probe": {...}}`` first (the preflight's questions), then a
``Start`` (the host's plan), then ``Command``s (heartbeat, stop, kill, signal, dump_stacks).
Agent -> launcher: a ``ProbeAnswer``, then events (``{"type": "event", ...}``, an Event's record),
``Output`` batches, and last ``Done``. The launcher's channel adds ``Closed`` when the channel ends.
"""

from __future__ import annotations

import json
from dataclasses import dataclass, field
from typing import Any, Dict, List, Optional, Tuple, Union

from npulaunch.host.events import Event
from npulaunch.host.records import RankResult
from npulaunch.host.spec import HostPlan


def encode(message: Dict[str, Any]) -> bytes:
    """One line of the wire, compact."""
    return json.dumps(message, separators=(",", ":")).encode("utf-8") + b"\n"


@dataclass(frozen=True)
class Probe:
    """The preflight's questions (launcher side: plan/checks/remote.py); the first message, if any."""

    asks: Dict[str, Any]

    def to_json(self) -> Dict[str, Any]:
        return {"probe": self.asks}


@dataclass(frozen=True)
class Start:
    """The host's part of the plan; the agent starts its ranks on receiving it."""

    plan: HostPlan
    heartbeat_timeout_s: float

    def to_json(self) -> Dict[str, Any]:
        return {"plan": self.plan.to_dict(), "heartbeat_timeout_s": self.heartbeat_timeout_s}

    @classmethod
    def from_json(cls, record: Dict[str, Any], default_heartbeat_s: float) -> "Start":
        return cls(HostPlan.from_dict(record["plan"]), float(record.get("heartbeat_timeout_s", default_heartbeat_s)))


@dataclass(frozen=True)
class Command:
    """What the launcher asks of a running agent."""

    cmd: str  # heartbeat | stop | kill | signal | dump_stacks
    reason: str = ""
    signal: str = ""  # for signal: one of FORWARDABLE_SIGNALS
    ranks: Tuple[int, ...] = ()  # for dump_stacks

    def to_json(self) -> Dict[str, Any]:
        record: Dict[str, Any] = {"cmd": self.cmd}
        if self.reason:
            record["reason"] = self.reason
        if self.signal:
            record["signal"] = self.signal
        if self.ranks:
            record["ranks"] = list(self.ranks)
        return record

    @classmethod
    def from_json(cls, record: Dict[str, Any]) -> "Command":
        return cls(
            str(record.get("cmd", "")),
            str(record.get("reason", "the launcher asked")),
            str(record.get("signal", "")),
            tuple(int(r) for r in record.get("ranks", ())),
        )


@dataclass(frozen=True)
class ProbeAnswer:
    """The host's facts for the preflight (host/agent/probe.py gathers them)."""

    facts: Dict[str, Any]

    def to_json(self) -> Dict[str, Any]:
        return dict(self.facts, type="probe")

    @classmethod
    def from_json(cls, record: Dict[str, Any]) -> "ProbeAnswer":
        return cls({k: v for k, v in record.items() if k != "type"})


@dataclass(frozen=True)
class Output:
    """A block of whole lines one rank printed on one stream, as text: its bytes decoded with
    ``surrogateescape``, so that ``block()`` gives back the very bytes, invalid UTF-8 included."""

    rank: int
    stream: str
    text: str

    @classmethod
    def of(cls, rank: int, stream: str, block: bytes) -> "Output":
        return cls(rank, stream, block.decode("utf-8", "surrogateescape"))

    def block(self) -> bytes:
        return self.text.encode("utf-8", "surrogateescape")

    def to_json(self) -> Dict[str, Any]:
        return {"type": "output", "rank": self.rank, "stream": self.stream, "text": self.text}

    @classmethod
    def from_json(cls, record: Dict[str, Any]) -> "Output":
        return cls(int(record["rank"]), str(record["stream"]), str(record["text"]))


@dataclass(frozen=True)
class Done:
    """The agent's last word: every rank's result, and why it stopped them, if it did."""

    ranks: List[RankResult]
    stop_signal: Optional[int] = None
    strays_killed: List[int] = field(default_factory=list)
    controller_lost: str = ""

    def to_json(self) -> Dict[str, Any]:
        return {
            "type": "done",
            "stop_signal": self.stop_signal,
            "strays_killed": self.strays_killed,
            "controller_lost": self.controller_lost,
            "ranks": [r.to_json() for r in self.ranks],
        }

    @classmethod
    def from_json(cls, record: Dict[str, Any]) -> "Done":
        return cls(
            [RankResult.from_json(r) for r in record["ranks"]],
            record.get("stop_signal"),
            list(record.get("strays_killed", [])),
            str(record.get("controller_lost", "")),
        )


@dataclass(frozen=True)
class Beat:
    """The agent is there: sent every heartbeat_interval_s (host/timing.py) while its ranks run, so that the
    launcher can tell a host it no longer hears from (a cut network keeps an SSH session open: no FIN, no
    RST) from one that is quiet. A launcher that does not know it ignores it."""

    def to_json(self) -> Dict[str, Any]:
        return {"type": "beat"}


@dataclass(frozen=True)
class Closed:
    """Not sent by the agent: the launcher's channel saying the agent's channel ended."""

    exit_status: Optional[int]
    stderr: List[str] = field(default_factory=list)

    def to_json(self) -> Dict[str, Any]:
        return {"type": "closed", "exit_status": self.exit_status, "stderr": self.stderr}

    @classmethod
    def from_json(cls, record: Dict[str, Any]) -> "Closed":
        return cls(record.get("exit_status"), list(record.get("stderr") or []))


ToAgent = Union[Probe, Start, Command]
FromAgent = Union[ProbeAnswer, Event, Output, Done, Closed, Beat]


def event_to_json(event: Event) -> Dict[str, Any]:
    record = json.loads(event.to_json())
    record["type"] = "event"
    return record


def from_agent(record: Dict[str, Any]) -> Optional[FromAgent]:
    """Decode a message an agent (or its channel) sent; None for one this launcher does not know."""
    kind = record.get("type")
    if kind == "event":
        return Event.from_record({k: v for k, v in record.items() if k != "type"})
    if kind == "output":
        return Output.from_json(record)
    if kind == "done":
        return Done.from_json(record)
    if kind == "probe":
        return ProbeAnswer.from_json(record)
    if kind == "closed":
        return Closed.from_json(record)
    if kind == "beat":
        return Beat()
    return None
