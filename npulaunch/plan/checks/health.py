"""Judging every host's NPU health facts (host/health/gather.py gathers them in the preflight probe)
together, before anything starts: chip health, devices another process holds, each NPU NIC (link, net
health, address against the rank table's device_ip, /etc/hccn.conf), TLS the same on every NPU and the
same versions on every host (plan/checks/crosshost.py), and the host side of HCCL (HCCL_IF_IP,
HCCL_SOCKET_IFNAME, its ports). Subnets, detect addresses and pings are plan/checks/net.py's.

Severity: what makes HCCL fail is fatal; the NPU NIC carries HCCL's traffic only between hosts (one
host's NPUs talk over HCCS; plan/ranktable.py: device_ip optional on one server), so NIC faults are
fatal for a multi-host job and warnings for a one-host job. What a host could not check is "not
checked", never passed. Pure functions of the answers.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any, Dict, List, Mapping, Optional, Sequence, Tuple

from npulaunch.config.cluster import ALL_DEVICES, ClusterConfig, HostConfig, RankTableMode
from npulaunch.host.health.judge import is_fatal, judge_chip, split_codes
from npulaunch.host.health.parse import NET_HEALTH_BAD, NET_HEALTH_GOOD
from npulaunch.plan.checks.crosshost import tls_findings, version_findings
from npulaunch.plan.checks.findings import Finding, Severity, compact
from npulaunch.plan.checks.net import host_nics, subnet_findings

# the job's own values of the variables the probe reads (the ranks see the YAML's over the host's)
READ_VARS = (
    "ASCEND_HOME_PATH",
    "ASCEND_TOOLKIT_HOME",
    "HCCL_IF_IP",
    "HCCL_SOCKET_IFNAME",
    "HCCL_IF_BASE_PORT",
    "HCCL_HOST_SOCKET_PORT_RANGE",
)
SKIPPED_LABELS = {
    "link": "NIC link",
    "net_health": "NIC net health",
    "ip": "NIC address",
    "gateway": "NIC gateway",
    "netdetect": "NIC detect address",
    "tls": "TLS switch",
    "chip_detail": "chip error details",
    "toolkit": "CANN toolkit version",
    "driver": "driver version",
    "firmware": "firmware version",
}


@dataclass(frozen=True)
class HealthSettings:
    """What the preflight asks of the hosts. ``ping``: None = on for a job on several hosts.

    The pings are on by default across hosts because nothing else proves the path between two NPUs: a
    NIC can be up, addressed and in the right subnet and still not reach its peer (a switch port in
    the wrong VLAN, a cable in the wrong switch, an ACL), and that costs HCCL_CONNECT_TIMEOUT (120 s by
    default) after the graph has compiled, then EI0006. The pings cost one more agent round per host
    and at most ``ping_timeout_s`` per NPU (3 packets each, in parallel); ``check --no-network`` skips them."""

    nics: bool = True
    ping: Optional[bool] = None
    tool_timeout_s: float = 10.0
    limit_s: float = 30.0
    ping_timeout_s: float = 10.0

    def pings_for(self, hosts: int) -> bool:
        return hosts > 1 if self.ping is None else self.ping and hosts > 1


def health_ask(config: ClusterConfig, index: int, settings: HealthSettings) -> Optional[Dict[str, Any]]:
    """The ``health`` question of host ``index``'s probe; None when the job uses no NPU (cpu_fallback)."""
    if config.cpu_fallback:
        return None
    cm = config.rank_table is RankTableMode.CM
    chief = config.env.get("CM_CHIEF_PORT") if cm and index == 0 and len(config.hosts) > 1 else None
    if index == 0 and len(config.hosts) > 1 and _port_var(config):  # torch's TCPStore, msrun's scheduler
        from npulaunch.plan.frameworks import contract_of

        chief = str(config.framework.master_port or contract_of(config).DEFAULT_PORT)
    return {
        "nics": settings.nics,
        "env": {name: config.env[name] for name in READ_VARS if name in config.env},
        "ports": cm,  # HCCL's host ports matter when it builds the cluster from the root's information
        "chief_port": int(chief) if chief and str(chief).isdigit() else None,
        "tool_timeout_s": settings.tool_timeout_s,
        "limit_s": settings.limit_s,
    }


def judge_health(
    config: ClusterConfig, answers: Mapping[str, Mapping[str, Any]], asks: Mapping[str, Mapping[str, Any]]
) -> List[Finding]:
    """Every finding of every host that answered (``answers``: host -> its probe's facts), in host order."""
    multi = len(config.hosts) > 1
    findings: List[Finding] = []
    for index, host in enumerate(config.hosts):
        facts = answers.get(host.host) or {}
        health = facts.get("health")
        if health is None:
            continue
        findings += _tools(host.host, health, bool(((asks.get(host.host) or {}).get("health") or {}).get("nics")))
        findings += _chips(host.host, health)
        findings += _nics(config, index, health, asks.get(host.host) or {}, multi)
        findings += _host_side(
            host.host, health, config.rank_table is RankTableMode.CM, _port_var(config) or "CM_CHIEF_PORT"
        )
        findings += _skipped(host.host, health)
    nics = {
        h.host: host_nics(answers[h.host]["health"]) for h in config.hosts if (answers.get(h.host) or {}).get("health")
    }
    findings += subnet_findings(nics, multi)
    findings += tls_findings(config, answers, multi)
    findings += version_findings(config, answers)
    return findings


def _tools(host: str, health: Mapping[str, Any], nics_asked: bool) -> List[Finding]:
    found = []
    if not health["tools"].get("npu-smi"):
        found.append(Finding("chip_health", Severity.NOT_CHECKED, host, "chip health and processes: no npu-smi"))
    if nics_asked and not health["tools"].get("hccn_tool"):
        found.append(
            Finding(
                "nic", Severity.NOT_CHECKED, host, "NPU NICs (link, net health, address, gateway, TLS): no hccn_tool"
            )
        )
    return found


def _chips(host: str, health: Mapping[str, Any]) -> List[Finding]:
    """Each chip judged as the live watch judges it (host/health/judge.py): MindCluster's level of its error
    codes (of its health when it lists none) decides fatal (the chip would be isolated, or nothing new
    scheduled on it) or a warning (NotHandleFault, SubHealthFault)."""
    found = []
    for device, chip in health.get("chips", {}).items():
        state = chip.get("detail_health") or chip.get("health")
        verdict = judge_chip(state, split_codes(chip.get("code") or ""))
        if verdict.healthy:
            continue
        detail = f"error code {chip['code']}: {chip.get('info') or 'no information'}; " if chip.get("code") else ""
        found.append(
            Finding(
                "chip_health",
                Severity.FATAL if is_fatal(verdict) else Severity.WARNING,
                host,
                f"chip health {state} ({detail}{verdict.describe()})",
                "OK",
                f"inspect: npu-smi info -t health -i {chip.get('npu')} -c {chip.get('chip')}",
                (int(device),),
            )
        )
    for device, processes in health.get("busy", {}).items():
        pids = ", ".join(str(pid) for pid, _ in processes)
        names = sorted({name or "in another container" for _, name in processes})
        found.append(
            Finding(
                "busy",
                Severity.FATAL,
                host,
                f"held by another process: pid {pids} ({', '.join(names)})",
                "a free device",
                "npu-smi info lists it: stop that process or choose other devices",
                (int(device),),
            )
        )
    return found


def yaml_ips(host: HostConfig) -> Dict[int, str]:
    """The YAML's device_ips by device id (the rank table's device_ip)."""
    if host.device_ips is None or host.devices == ALL_DEVICES:
        return {}
    return dict(zip(host.devices, host.device_ips))  # type: ignore[arg-type]


def _nics(
    config: ClusterConfig, index: int, health: Mapping[str, Any], ask: Mapping[str, Any], multi: bool
) -> List[Finding]:
    host = config.hosts[index]
    net = Severity.FATAL if multi else Severity.WARNING
    given = yaml_ips(host)
    reported_by_preflight = bool(ask.get("need_ips")) and bool(ask.get("ips_required"))
    conf = health.get("hccn_conf") or {}
    found = []
    for device, nic in health.get("nics", {}).items():
        dev = (int(device),)
        if nic.get("link") == "DOWN":
            found.append(
                Finding(
                    "link",
                    net,
                    host.host,
                    "NIC link DOWN",
                    "UP",
                    "inspect: hccn_tool -i <id> -link -g; cable and switch port: hccn_tool -i <id> -optical -g, "
                    "hccn_tool -i <id> -lldp -g",
                    dev,
                )
            )
        found += _net_health(host.host, nic, net, dev)
        ip, want = nic.get("ip"), given.get(int(device))
        if "ip" in nic and ip is None and (want or not reported_by_preflight):
            found.append(
                Finding("ip", net, host.host, "the NIC has no address", want or "an address", _SET_IP_HINT, dev)
            )
        elif want and ip and ip != want:
            found.append(
                Finding(
                    "ip",
                    Severity.FATAL,
                    host.host,
                    f"NIC address {ip}, but the rank table's device_ip is {want} (hosts[{index}].device_ips)",
                    want,
                    "correct device_ips in the YAML, or the NIC: " + _SET_IP_HINT,
                    dev,
                )
            )
        configured = (conf.get(device) or {}).get("address")
        if ip and configured and configured != ip:
            found.append(
                Finding(
                    "hccn_conf",
                    Severity.WARNING,
                    host.host,
                    f"NIC address {ip}, but /etc/hccn.conf configures {configured}: a reboot or "
                    "hccn_tool -i <id> -cfg recovery would change it",
                    ip,
                    "make /etc/hccn.conf and the NIC agree",
                    dev,
                )
            )
    return found


_SET_IP_HINT = "hccn_tool -i <id> -ip -g; set: hccn_tool -i <id> -ip -s address <address> netmask <netmask>"


def _net_health(host: str, nic: Mapping[str, Any], net: Severity, dev: Tuple[int, ...]) -> List[Finding]:
    state = nic.get("net_health")
    if state is None or nic.get("link") == "DOWN":  # a down link's "Fault" says nothing more
        return []
    hint = "inspect: hccn_tool -i <id> -net_health -g and the detect address: hccn_tool -i <id> -netdetect -g"
    if state in NET_HEALTH_BAD:
        return [Finding("net_health", net, host, f"NIC net health {state}", "Success", hint, dev)]
    if state not in NET_HEALTH_GOOD:
        return [
            Finding(
                "net_health",
                Severity.WARNING,
                host,
                f"NIC net health {state!r}, a state not known",
                "Success",
                hint,
                dev,
            )
        ]
    if state == "Init" and "netdetect" in nic and nic.get("netdetect") is None:
        return [
            Finding(
                "net_health",
                Severity.NOT_CHECKED,
                host,
                "NIC net health: Init, no detect address set, so the NIC's path is not probed",
                "",
                "hccn_tool -i <id> -netdetect -s address <an address the NIC reaches, such as its gateway>",
                dev,
            )
        ]
    return []


def _port_var(config: ClusterConfig) -> str:
    from npulaunch.plan.frameworks import meeting_port_var

    mode = config.framework.start_mode
    return meeting_port_var(config.framework.name.value, mode.value if mode else None)


def _host_side(host: str, health: Mapping[str, Any], cm: bool, port_name: str) -> List[Finding]:
    found = []
    severity = Severity.FATAL if cm else Severity.WARNING
    for name, value, problem in health.get("hccl_env") or []:
        if problem:
            hint = (
                "ip -brief address lists this host's addresses"
                if name == "HCCL_IF_IP"
                else ("ip -brief link lists this host's interfaces")
            )
            why = "" if cm else " (HCCL reads it when the job is rank-table-free, rank_table: cm)"
            found.append(Finding("hccl_env", severity, host, f"{name}={value} {problem}{why}", "", hint))
    ports = health.get("ports") or {}
    busy = ports.get("busy") or []
    if busy:
        seen = f"HCCL's host port{'s' if len(busy) > 1 else ''} {_ranges(busy)} ({ports['source']}) in use"
        if ports.get("connections"):  # no listener: an outgoing connection took it from the ephemeral range
            seen += f": {_ranges(ports['connections'])} by a connection, not a listener"
        hint = f"ss -tanp 'sport >= :{busy[0]} and sport <= :{busy[-1]}' shows who; or move HCCL_IF_BASE_PORT"
        found.append(Finding("ports", Severity.FATAL, host, seen, "free ports", hint))
    if ports.get("unreserved"):
        spread = _ranges(ports["unreserved"])
        found.append(
            Finding(
                "ports",
                Severity.WARNING,
                host,
                f"HCCL's host ports {spread} lie in the kernel's ephemeral range and are not reserved: an "
                "outgoing connection may take one",
                "reserved ports",
                f"sysctl -w net.ipv4.ip_local_reserved_ports={spread.replace(', ', ',')}",
            )
        )
    if ports.get("chief_busy"):
        found.append(
            Finding(
                "ports",
                Severity.FATAL,
                host,
                f"{port_name} {ports['chief_port']} is in use on the first host",
                "a free port",
                "choose another port in env: CM_CHIEF_PORT"
                if port_name == "CM_CHIEF_PORT"
                else "choose another with framework.master_port (or --master-port)",
            )
        )
    return found


def _ranges(ports: Sequence[int]) -> str:
    return compact(ports)


def _skipped(host: str, health: Mapping[str, Any]) -> List[Finding]:
    found = []
    for check, device, why in health.get("skipped") or []:
        label = SKIPPED_LABELS.get(check, check)
        devices = () if device is None else (int(device),)
        found.append(Finding(check, Severity.NOT_CHECKED, host, f"{label}: {why}", devices=devices))
    return found
