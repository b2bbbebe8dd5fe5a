"""What must agree across every NPU and host of the job, judged from the preflight probe's health facts
(host/health/gather.py): the NPU NICs' TLS switch, and the CANN toolkit, driver and firmware versions
(the toolkit's also against the YAML's cann_version). Part of plan/checks/health.py's judgement; pure
functions of the answers.
"""

from __future__ import annotations

from collections import Counter
from typing import Any, List, Mapping, Sequence, Tuple

from npulaunch.config.cluster import ClusterConfig
from npulaunch.plan.checks.findings import Finding, Severity


def tls_findings(config: ClusterConfig, answers: Mapping[str, Mapping[str, Any]], multi: bool) -> List[Finding]:
    """TLS on for some NPUs of the job and off for others: their links time out (EI0006), or HCCL refuses
    (EI0016, root-info mode, Ascend HDK 25.2.0+) (hicann/hccl docs/zh/user_guide/fault_diagnosis/
    param_link_stage.md and cluster_info_verify_fail.md @ 09300b7)."""
    values: List[Tuple[str, int, int]] = []
    for host in config.hosts:
        nics = ((answers.get(host.host) or {}).get("health") or {}).get("nics") or {}
        values += [(host.host, int(d), nic["tls"]) for d, nic in nics.items() if nic.get("tls") is not None]
    counts = Counter(value for _, _, value in values)
    if len(counts) < 2:
        return []
    usual = max(counts, key=lambda v: (counts[v], v == values[0][2]))
    where = sorted({h for h, _, v in values if v == usual}, key=[h.host for h in config.hosts].index)
    return [
        Finding(
            "tls",
            Severity.FATAL if multi else Severity.WARNING,
            host,
            f"TLS switch {value} ({'on' if value else 'off'})",
            f"{usual} as on {counts[usual]} other NPUs ({', '.join(where)})",
            f"make every NPU of the job the same: hccn_tool -i <id> -tls -s enable {usual}",
            (device,),
        )
        for host, device, value in values
        if value != usual
    ]


def version_findings(config: ClusterConfig, answers: Mapping[str, Mapping[str, Any]]) -> List[Finding]:
    """Toolkit versions must agree across hosts: HCCL checks and refuses (EI0008, "HCCL版本不一致", hicann/hccl
    docs/zh/user_guide/fault_diagnosis/debug_thinking.md @ 09300b7). Driver and firmware differences
    are warnings. The YAML's cann_version (the HCCL timeouts npulaunch derives) against the hosts'."""
    found: List[Finding] = []
    order = [h.host for h in config.hosts]
    for part, label, severity in (
        ("toolkit", "CANN toolkit", Severity.FATAL),
        ("driver", "driver", Severity.WARNING),
        ("firmware", "firmware", Severity.WARNING),
    ):
        seen = {}
        for host in order:
            version = (((answers.get(host) or {}).get("health") or {}).get("versions") or {}).get(part)
            if version:
                seen[host] = version
        found += _same_everywhere(part, label, severity, seen, order)
        if part == "toolkit" and config.cann_version:
            for host, (version, source) in seen.items():
                if version.lower() != config.cann_version.lower():
                    found.append(
                        Finding(
                            "toolkit",
                            Severity.WARNING,
                            host,
                            f"CANN toolkit {version} ({source}), but the YAML says cann_version: {config.cann_version}",
                            config.cann_version,
                            f'set cann_version: "{version}" (npulaunch derives HCCL timeouts from it)',
                        )
                    )
    return found


def _same_everywhere(
    part: str, label: str, severity: Severity, seen: Mapping[str, Sequence[str]], order: Sequence[str]
) -> List[Finding]:
    counts = Counter(version for version, _ in seen.values())
    if len(counts) < 2:
        return []
    first = {version: order.index(host) for host, (version, _) in reversed(list(seen.items()))}
    usual = max(counts, key=lambda v: (counts[v], -first[v]))
    where = ", ".join(host for host in seen if seen[host][0] == usual)
    why = " (HCCL refuses ranks of different versions: EI0008)" if part == "toolkit" else ""
    return [
        Finding(
            part,
            severity,
            host,
            f"{label} {version} ({source})",
            f"{usual} as on {where}{why}",
            f"install the same {label} version on every host",
        )
        for host, (version, source) in seen.items()
        if version != usual
    ]
