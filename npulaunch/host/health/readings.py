"""What the health watch's answers say of each NPU (host/health/watch.py asks, this reads): a call's outcome
(``Answer``), what is known of one watched NPU (``Device``), taking a chip's or a NIC's answer into it, and the
NPU_HEALTH event data of a change or of a question not answered. The judgement of the facts is judge.py's.
Standard library only, Python 3.7+.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any, Dict, List, Optional, Sequence, Set, Tuple

from npulaunch.host.health import judge
from npulaunch.host.health.parse import parse_link, parse_npu_health

EventData = Dict[str, Any]


@dataclass(frozen=True)
class Answer:
    """One call's outcome: its stdout when it exited 0; else ``failed`` (it answered with an error) or
    ``silent`` (it did not answer: timed out, or could not start), with why."""

    text: str = ""
    failed: str = ""
    silent: str = ""


@dataclass
class Device:
    """What is known of one watched NPU: its last answered facts and what was last reported."""

    device: int
    ranks: List[int]
    npu: Optional[int] = None
    chip: Optional[int] = None
    health: str = "OK"
    codes: Tuple[str, ...] = ()
    info: str = ""
    nic: Optional[str] = None
    shown: Tuple[str, Tuple[str, ...], bool] = ("OK", (), False)  # (health, codes, link down) last reported
    reasons: Set[str] = field(default_factory=set)  # why it was not answered, each reported once

    def signature(self) -> Tuple[str, Tuple[str, ...], bool]:
        return self.health, tuple(sorted(self.codes)), self.nic == "DOWN"


def take_chip(dev: Device, answer: Answer, others_answered: bool) -> str:
    """Takes a chip's answer into what is known of it; returns why it was not answered ("" if it was).
    A call that fails for one chip while others answer is the card's drop: health UNKNOWN (what
    MindCluster makes of DeviceNotReady, host/health/judge.py CARD_DROP_CODE)."""
    if answer.silent or (answer.failed and not others_answered):
        return answer.silent or answer.failed
    if answer.failed:
        dev.health, dev.codes, dev.info = "UNKNOWN", (), f"npu-smi failed for this NPU alone: {answer.failed}"
        return ""
    health, code, info = parse_npu_health(answer.text)
    if health is None:
        first = answer.text.strip().splitlines()[0] if answer.text.strip() else "nothing"
        return f"npu-smi info -t health -i {dev.npu} -c {dev.chip} printed {first!r}, not a format npulaunch reads"
    dev.health, dev.codes, dev.info = health, judge.split_codes(code), info
    return ""


def take_nic(dev: Device, answer: Optional[Answer]) -> str:
    if answer is None:
        return ""
    if answer.silent or answer.failed:
        return answer.silent or answer.failed
    link = parse_link(answer.text)
    if link is None:
        first = answer.text.strip().splitlines()[0] if answer.text.strip() else "nothing"
        return f"hccn_tool -i {dev.device} -link -g printed {first!r}, not a format npulaunch reads"
    dev.nic = link
    return ""


def state_event(dev: Device) -> EventData:
    verdict = judge.judge_link(judge.judge_chip(dev.health, dev.codes), dev.nic)
    return {
        "device": dev.device,
        "npu": dev.npu,
        "chip": dev.chip,
        "health": dev.health,
        "codes": list(verdict.codes),
        "levels": dict(verdict.levels),
        "level": verdict.level,
        "action": verdict.action,
        "info": dev.info,
        "ranks": list(dev.ranks),
        "nic": dev.nic,
        "unanswered": None,
    }


def unanswered_event(dev: Optional[Device], why: str, every_rank: Sequence[int]) -> EventData:
    """Not answered: nothing is known, nothing changes of what was known. ``dev`` None: about the whole
    watch (a tool it needs is missing), for ``every_rank`` of the host."""
    ranks = dev.ranks if dev is not None else sorted(every_rank)
    return {
        "device": None if dev is None else dev.device,
        "npu": None if dev is None else dev.npu,
        "chip": None if dev is None else dev.chip,
        "health": None,
        "codes": [],
        "levels": {},
        "level": None,
        "action": judge.UNKNOWN,
        "info": "",
        "ranks": list(ranks),
        "nic": None,
        "unanswered": why,
    }
