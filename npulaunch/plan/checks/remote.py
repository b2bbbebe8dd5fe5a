"""Preflight of every remote host, before anything starts: what to ask each host's agent
(``agent.probe`` gathers the facts there) and how to judge its answer — python3 and its version,
the working directory and the command's script, the NPUs npu-smi lists, the NPU addresses
hccn_tool reports when the rank table needs them, free disk for the job directory, and the clock
against the launcher's; with the NPU health check (plan/checks/health.py, plan/checks/net.py) reviewed
over every answer, and the NPU-to-NPU pings it asks for in a second round. Pure functions (the
second round is asked through a function passed in): the fleet gathers every host's answer, then
reports every host's problems together.
"""

from __future__ import annotations

from typing import Any, Callable, Dict, List, Mapping, Optional, Tuple

from npulaunch.config.cluster import ALL_DEVICES, ClusterConfig, RankTableMode
from npulaunch.plan.checks.findings import Finding, fatal, merged
from npulaunch.plan.checks.health import HealthSettings, health_ask, judge_health, yaml_ips
from npulaunch.plan.checks.net import ping_findings, ping_pairs
from npulaunch.plan.checks.preflight import python_script
from npulaunch.plan.layout import JobLayout

AskRound = Callable[[Dict[str, Dict[str, Any]], float], Dict[str, Optional[Dict[str, Any]]]]

MIN_PYTHON = (3, 7)
MAX_CLOCK_SKEW_S = 2.0  # ranks' timestamps are compared when choosing the root cause
MIN_FREE_BYTES = 1 << 30


def probe_asks(
    config: ClusterConfig, job_id: str, settings: Optional[HealthSettings] = None
) -> Dict[str, Dict[str, Any]]:
    """Host -> what its agent's probe is asked. Built from the config: the plan comes after the
    probe, since ``devices: all`` and device IPs of a remote host are only known there.
    ``settings``: the NPU health check's (None: no health check)."""
    from npulaunch.plan.frameworks import contract_of

    command = config.job.command
    # a framework that forms its cluster without a rank table (torch_npu, msrun) is asked for the NPUs'
    # addresses (a table speeds its start-up) but does not need them
    table_needed = config.rank_table is RankTableMode.REQUIRED or contract_of(config).table_needed(config)
    asks = {}
    for index, host in enumerate(config.hosts):
        # a working directory with a per-rank placeholder ({rank}, {device_id}, ...) has no one path
        # to look at before the plan: each rank's is made or checked when it starts
        workdir, script = config.job.workdir, python_script(command)
        if "{" in workdir:
            workdir, script = "/", None
        asks[host.host] = {
            "workdir": workdir,
            "script": script,
            "program": command[0],
            "job_dir": JobLayout.under(config.job.log_dir, job_id).job_dir,
            "devices": None if host.devices == ALL_DEVICES else sorted(host.devices),
            "need_ips": host.device_ips is None and config.rank_table not in (RankTableMode.NONE, RankTableMode.CM),
            "ips_required": config.rank_table is RankTableMode.REQUIRED or (len(config.hosts) > 1 and table_needed),
            "health": None if settings is None else health_ask(config, index, settings),
        }
    return asks


def judge(
    host: str, ask: Dict[str, Any], found: Dict[str, Any], sent: float, received: float
) -> Tuple[List[str], List[str]]:
    """``(problems, warnings)`` of one host, from its probe's answer."""
    python = found["python"]
    if tuple(python[:2]) < MIN_PYTHON:
        return [f"{host}: python3 is {'.'.join(map(str, python))}; the agent needs 3.7 or newer"], []
    problems, warnings = [], []
    if not found["workdir"]:
        problems.append(f"{host}: working directory {ask['workdir']} does not exist")
    elif not found["script"]:
        problems.append(f"{host}: script {ask['script']} does not exist in {ask['workdir']}")
    if not found["program"]:
        problems.append(f"{host}: command {ask['program']!r} is not on the PATH")
    problems.extend(_npu_problems(host, ask, found))
    skew = found["time"] - (sent + received) / 2
    if abs(skew) > MAX_CLOCK_SKEW_S + (received - sent) / 2:
        warnings.append(
            f"{host}: its clock is {skew:+.1f} s off the launcher's; root-cause ordering across "
            "hosts relies on timestamps"
        )
    if found["free_bytes"] < MIN_FREE_BYTES:
        warnings.append(f"{host}: only {found['free_bytes'] >> 20} MB free for {ask['job_dir']}")
    warnings.extend(f"{host}: {error}" for error in found.get("errors", []))
    return problems, warnings


def _npu_problems(host: str, ask: Dict[str, Any], found: Dict[str, Any]) -> List[str]:
    npus: Optional[List[List[Any]]] = found.get("npus")
    devices = ask["devices"]
    problems = []
    if npus is not None and devices:  # physical ids (a container's may start anywhere): look them up
        listed = {int(npu[0]) for npu in npus}
        missing = [device for device in devices if device not in listed]
        if missing:
            shown = ", ".join(map(str, sorted(listed))) or "none"
            problems.append(
                f"{host}: npu-smi lists devices {shown}; the plan uses {', '.join(map(str, missing))}, not among them"
            )
    if ask["need_ips"] and ask["ips_required"]:
        ips = found.get("device_ips")
        if ips is None:
            problems.append(
                f"{host}: no device_ips in the YAML and no hccn_tool on the host; the rank table "
                "needs every NPU's address"
            )
        else:
            silent = [device for device, ip in sorted(ips.items(), key=lambda item: int(item[0])) if ip is None]
            if silent:
                problems.append(
                    f"{host}: hccn_tool -i <id> -ip -g gave no address for devices "
                    f"{', '.join(silent)}; give device_ips in the YAML or configure the NPU NICs"
                )
    return problems


def remote_facts(found: Dict[str, Any]) -> Dict[str, Any]:
    """What the plan uses of a host's answer: its NPU ids and health, device addresses, the
    visible-devices variables of its environment (what its ranks inherit), and its CPUs."""
    return {
        "npus": found.get("npus"),
        "device_ips": found.get("device_ips"),
        "visible": found.get("visible"),
        "cpu_topology": found.get("cpu_topology"),  # the host's allowed CPUs and NUMA nodes (cpu_binding)
    }


def review_health(
    config: ClusterConfig,
    answers: Mapping[str, Mapping[str, Any]],
    asks: Mapping[str, Mapping[str, Any]],
    settings: HealthSettings,
    ask_round: Optional[AskRound] = None,
) -> Tuple[List[Finding], Dict[str, Any]]:
    """Every health finding over the hosts' answers, the pings included when ``settings`` wants them
    (asked through ``ask_round``), and what was checked: tool calls per tool, pings."""
    findings = judge_health(config, answers, asks)
    calls: Dict[str, int] = {}
    for facts in answers.values():
        health = facts.get("health") or {}
        if (health.get("tools") or {}).get("npu-smi"):
            calls["npu-smi"] = calls.get("npu-smi", 0) + 1  # the probe's npu-smi info
        for tool, count in (health.get("calls") or {}).items():
            calls[tool] = calls.get(tool, 0) + count
    npus = sum(len((facts.get("health") or {}).get("devices") or []) for facts in answers.values())
    checked: Dict[str, Any] = {"tool_calls": calls, "npus": npus, "pings": 0, "ping": False}
    pinging = ask_round is not None and not config.cpu_fallback and settings.pings_for(len(config.hosts))
    if pinging and fatal(findings):  # the pings would mostly echo them, at the cost of another round
        checked["ping_skipped"] = "the job cannot start anyway: fix the fatal findings first"
    elif pinging and ask_round is not None:
        pairs = ping_pairs(_addresses(config, answers))
        checked["ping"] = bool(pairs)
        if not pairs:
            checked["ping_skipped"] = "no two hosts with hccn_tool and NPU addresses"
        if pairs:
            wanted = {
                host: {"ping": {"pairs": [p[:2] for p in pair], "timeout_s": settings.ping_timeout_s}}
                for host, pair in pairs.items()
            }
            got = ask_round(wanted, settings.ping_timeout_s * 2 + 30.0)
            pinged = {host: (answer or {}).get("ping") for host, answer in got.items()}
            findings += ping_findings(pairs, pinged)
            for answer in pinged.values():
                for tool, count in ((answer or {}).get("calls") or {}).items():
                    calls[tool] = calls.get(tool, 0) + count
            checked["pings"] = sum(
                1 for a in pinged.values() for r in (a or {}).get("results") or [] if r[2] is not None
            )
    return merged(findings), checked


def _addresses(config: ClusterConfig, answers: Mapping[str, Mapping[str, Any]]) -> Dict[str, List[Tuple[int, Any]]]:
    """host -> [(device, its address: the YAML's device_ip, else what hccn_tool reported)] in device order."""
    found: Dict[str, List[Tuple[int, Any]]] = {}
    for host in config.hosts:
        facts = answers.get(host.host) or {}
        health = facts.get("health") or {}
        if not (health.get("tools") or {}).get("hccn_tool"):
            continue  # it cannot ping (its NICs are "not checked" already); it is not pinged either
        given, nics, probed = yaml_ips(host), health.get("nics") or {}, facts.get("device_ips") or {}
        found[host.host] = [
            (int(d), given.get(int(d)) or (nics.get(str(d)) or {}).get("ip") or probed.get(str(d)))
            for d in health.get("devices") or []
        ]
    return found
