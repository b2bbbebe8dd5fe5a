"""``npulaunch check``'s report as text or JSON: what was checked, with a count per kind (hosts, NPUs,
session options, environment variables, rules, tool calls, pings), then every finding (fatal, warning,
not checked) with its host, NPUs, what was seen and expected and what to run, and the verdict. Data in,
text out: the CLI prints it and picks the exit code.
"""

from __future__ import annotations

import json
from dataclasses import replace
from typing import Any, Dict, List, Optional, Sequence

from npulaunch.config.cluster import ALL_DEVICES, ClusterConfig
from npulaunch.host.words import counted
from npulaunch.plan.checks.findings import Finding, Severity
from npulaunch.plan.launchplan import LaunchPlan

ORDER = (Severity.FATAL, Severity.WARNING, Severity.NOT_CHECKED)


def inventory(
    config: ClusterConfig, plan: Optional[LaunchPlan], checked: Dict[str, Any], health: bool, over_ssh: bool
) -> Dict[str, Any]:
    """What the check covered, a count per kind."""
    from npulaunch.config import rules  # noqa: F401 (registers every rule, product rules included)
    from npulaunch.config.rulebase import RULES

    if plan is not None:
        devices: Optional[int] = plan.world_size
    elif all(h.devices != ALL_DEVICES for h in config.hosts):
        devices = sum(len(h.devices) for h in config.hosts)
    else:
        devices = checked.get("npus")
    return {
        "hosts": len(config.hosts),
        "over_ssh": over_ssh,  # the remote hosts were asked (over SSH, or with mpirun: transport)
        "transport": config.transport.value,
        "devices": devices,
        "cpu_fallback": config.cpu_fallback,  # the devices are ranks on CPUs, not NPUs
        "npus_health_checked": checked.get("npus", 0) if health else 0,
        "session_options": len(config.session_options),
        "env_vars": len(config.env),
        "rules": len(RULES),
        "tool_calls": dict(checked.get("tool_calls") or {}),
        "pings": checked.get("pings", 0),
        "network": bool(checked.get("ping")),
        "pings_skipped": checked.get("ping_skipped", ""),
        "hosts_checked": health,
    }


def preflight_findings(problems: Sequence[str], warnings: Sequence[str], hosts: Sequence[str]) -> List[Finding]:
    """The preflight's and the plan's own lines ("h2: working directory ... does not exist", "warning:
    cluster.yaml:11: ...") as findings, with the host when a line starts with one of ``hosts``."""
    found = []
    for severity, lines in ((Severity.FATAL, problems), (Severity.WARNING, warnings)):
        for line in lines:
            line = line[len("warning: ") :] if line.startswith("warning: ") else line
            host, sep, rest = line.partition(": ")
            if sep and host in hosts:
                found.append(Finding("preflight", severity, host, rest))
            else:
                found.append(Finding("preflight", severity, "", line))
    return found


def render_checked(counts: Dict[str, Any]) -> str:
    """``checked: 3 hosts (over SSH), 6 NPUs, ...``."""
    parts = [counted(counts["hosts"], "host") + (f" ({_reached(counts)})" if counts["over_ssh"] else "")]
    if counts["devices"] is not None and counts.get("cpu_fallback"):
        parts.append(counted(counts["devices"], "rank") + " on CPUs (cpu_fallback)")
    elif counts["devices"] is not None:
        parts.append(counted(counts["devices"], "NPU"))
    parts.append(counted(counts["session_options"], "session option"))
    parts.append(counted(counts["env_vars"], "environment variable"))
    parts.append(counted(counts["rules"], "rule") + " between options")
    if not counts["hosts_checked"]:
        parts.append("hosts not asked (--offline)")
    else:
        calls = counts["tool_calls"]
        tools = ", ".join(f"{tool} x{n}" for tool, n in sorted(calls.items())) or "no NPU tool found"
        parts.append(f"tools: {tools}")
        if counts["network"]:
            parts.append(f"{counts['pings']} NPU-to-NPU pings")
        elif counts["pings_skipped"]:
            parts.append(f"no NPU-to-NPU pings ({counts['pings_skipped']})")
    return "checked: " + ", ".join(parts)


def render_text(counts: Dict[str, Any], findings: Sequence[Finding], verdict: str) -> str:
    """The report: the inventory, each finding on its line (fatal first; the same finding on several
    hosts once, naming them), the verdict last."""
    lines = [render_checked(counts)]
    shown: List[Finding] = []
    for severity in ORDER:
        shown += across_hosts([f for f in findings if f.severity is severity])
    lines += [f"{finding.severity.value}: {finding.render()}" for finding in shown]
    tally = _tally(shown)
    if any(tally.values()):
        words = {"fatal": "fatal", "warning": "warnings" if tally["warning"] != 1 else "warning"}
        lines.append("found: " + ", ".join(f"{n} {words.get(s, s)}" for s, n in tally.items() if n))
    lines.append(verdict)
    return "\n".join(lines) + "\n"


def render_json(
    counts: Dict[str, Any], findings: Sequence[Finding], exit_code: int, notes: Sequence[str], job: Dict[str, Any]
) -> str:
    record = {
        "ok": exit_code == 0,
        "exit_code": exit_code,
        "job": job,
        "checked": counts,
        "counts": _tally(findings),
        "findings": [f.to_json() for f in sorted(findings, key=lambda f: ORDER.index(f.severity))],
        "notes": list(notes),
    }
    return json.dumps(record, indent=2) + "\n"


def _tally(findings: Sequence[Finding]) -> Dict[str, int]:
    return {s.value: sum(1 for f in findings if f.severity is s) for s in ORDER}


def across_hosts(findings: Sequence[Finding]) -> List[Finding]:
    """Findings that differ only in their host as one naming the hosts ("h1, h2, h3: driver version: no
    /usr/local/Ascend/driver/version.info"), in first-seen order."""
    groups: Dict[tuple, List[Finding]] = {}
    for finding in findings:
        key = (finding.check, finding.seen, finding.expected, finding.hint, finding.devices)
        groups.setdefault(key, []).append(finding)
    return [replace(group[0], host=", ".join(f.host for f in group)) for group in groups.values()]


def _reached(counts: Dict[str, Any]) -> str:
    return "with mpirun" if counts.get("transport") == "mpirun" else "over SSH"
