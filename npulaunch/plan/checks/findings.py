"""What the pre-launch check found, as values: a ``Finding`` (host, NPUs, what was expected, what was
seen, what to run), its ``Severity``, and ``CheckFailed``, the error that stops a job before anything
starts. Judged by plan/checks/health.py and plan/checks/net.py, shown by views/checkview.py. Pure.
"""

from __future__ import annotations

from dataclasses import dataclass, replace
from enum import Enum
from typing import Any, Dict, Iterable, List, Sequence, Tuple

from npulaunch.host.errors import NpulaunchError
from npulaunch.host.lazyre import lazy_re
from npulaunch.host.ranges import ranges


class Severity(str, Enum):
    FATAL = "fatal"  # the job would fail: nothing starts (exit 2)
    WARNING = "warning"  # likely trouble, or trouble only in some cases: the job starts
    NOT_CHECKED = "not checked"  # a check a host could not run: never counted as passed


@dataclass(frozen=True)
class Finding:
    """One thing the check saw. ``devices``: the NPUs (physical ids) it concerns, empty for the host or the
    job; ``host`` empty for the job as a whole. ``hint`` may hold ``<id>``, filled in for one NPU."""

    check: str  # link, net_health, ip, subnet, netdetect, tls, chip_health, busy, toolkit, driver, ...
    severity: Severity
    host: str
    seen: str
    expected: str = ""
    hint: str = ""
    devices: Tuple[int, ...] = ()

    def render(self) -> str:
        """``h2: NPU 1: link DOWN (expected UP); inspect: hccn_tool -i 1 -link -g``."""
        where = [self.host] if self.host else []
        if self.devices:
            where.append(("NPU " if len(self.devices) == 1 else "NPUs ") + compact(self.devices))
        text = ": ".join(where + [self.seen])
        if self.expected:
            text += f" (expected {self.expected})"
        hint = self.hint_text()
        return text + (f"; {hint}" if hint else "")

    def hint_text(self) -> str:
        if len(self.devices) == 1:
            return self.hint.replace("<id>", str(self.devices[0]))
        return self.hint

    def to_json(self) -> Dict[str, Any]:
        return {
            "check": self.check,
            "severity": self.severity.value,
            "host": self.host or None,
            "devices": list(self.devices),
            "seen": self.seen,
            "expected": self.expected or None,
            "hint": self.hint_text() or None,
        }


def compact(ids: Iterable[int]) -> str:
    """``0, 1, 2, 3, 5`` -> ``0-3, 5``."""
    return ranges(ids)


_DEVICE_ARG = lazy_re(r"-i \d+\b")


def merged(findings: Iterable[Finding]) -> List[Finding]:
    """Findings that differ only in their NPU become one listing the NPUs (8 NPUs with the same down
    cable make one line, not 8), in first-seen order."""
    groups: Dict[Tuple[Any, ...], Finding] = {}
    for finding in findings:
        seen = _DEVICE_ARG.sub("-i <id>", finding.seen)
        key = (
            finding.check,
            finding.severity,
            finding.host,
            seen,
            finding.expected,
            finding.hint,
            bool(finding.devices),
        )
        if key in groups:
            known = groups[key]
            groups[key] = replace(known, devices=tuple(sorted(set(known.devices + finding.devices))))
            if known.seen != finding.seen:
                groups[key] = replace(groups[key], seen=seen)
        else:
            groups[key] = finding
    return list(groups.values())


def fatal(findings: Iterable[Finding]) -> List[Finding]:
    return [f for f in findings if f.severity is Severity.FATAL]


class CheckFailed(NpulaunchError):
    """The pre-launch check found what would make the job fail; nothing was started. Carries every
    problem and finding, so ``check --json`` can show them as data."""

    exit_code = 2

    def __init__(
        self, head: str, problems: Sequence[str], findings: Sequence[Finding], checked: Dict[str, Any]
    ) -> None:
        self.problems, self.findings, self.checked = tuple(problems), tuple(findings), dict(checked)
        lines = list(self.problems) + [f.render() for f in fatal(self.findings)]
        super().__init__(head + ":\n" + "\n".join("  " + line for line in lines))
