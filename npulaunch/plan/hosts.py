"""Each host's devices and device IPs (from the YAML, this host's npu-smi / hccn_tool, or a
remote host's preflight probe), and the HCCL rank table decided from them. Part of build_plan;
pure: discovery comes in as callables and data.
"""

from __future__ import annotations

from typing import Any, Dict, List, Optional, Sequence, Tuple

from npulaunch.config.cluster import ClusterConfig, HostConfig, RankTableMode
from npulaunch.host.discovery import USABLE_HEALTH
from npulaunch.host.errors import ConfigError, PlanError
from npulaunch.plan.launchplan import Discovery
from npulaunch.plan.layout import JobLayout
from npulaunch.plan.ranktable import build_rank_table, rank_table_problems


def resolve_devices(
    config: ClusterConfig, index: int, host: HostConfig, discovery: Discovery, sources: Dict[str, str]
) -> Tuple[int, ...]:
    if isinstance(host.devices, tuple):
        return host.devices
    key = f"hosts[{index}].devices"
    if host.host not in discovery.local_names:
        return _remote_devices(config, host, discovery, sources, key)
    try:
        found = tuple(discovery.devices())
    except PlanError as exc:
        given = config.document is not None and host.path + ("devices",) in config.document.lines
        what = '"all"' if given else '"all" (the default without a hosts section)'
        raise ConfigError(
            [config.problem(host.path + ("devices",), what, "a list of device ids or a count", str(exc))]
        ) from None
    sources[key] = "discovery (npu-smi info)"
    return found


def _remote_devices(
    config: ClusterConfig, host: HostConfig, discovery: Discovery, sources: Dict[str, str], key: str
) -> Tuple[int, ...]:
    """``devices: all`` of a remote host, from its preflight probe's npu-smi."""
    path = host.path + ("devices",)
    if discovery.remote is None:
        raise ConfigError(
            [
                config.problem(
                    path,
                    '"all" on a remote host',
                    "a list of device ids or a count",
                    "a remote host's NPUs are listed by its npu-smi when the job starts "
                    "(npulaunch run or check); the plan alone cannot know them",
                )
            ]
        )
    npus = discovery.remote[host.host].get("npus")
    if not npus:
        raise ConfigError(
            [
                config.problem(
                    path, '"all"', "a list of device ids or a count", f"{host.host} has no npu-smi that lists NPUs"
                )
            ]
        )
    bad = [f"device {chip_id} health {health}" for chip_id, health in npus if health not in USABLE_HEALTH]
    if bad:
        raise ConfigError(
            [
                config.problem(
                    path,
                    '"all"',
                    "a list of the healthy devices",
                    f"npu-smi info on {host.host} reports {', '.join(bad)}",
                )
            ]
        )
    sources[key] = f"discovery on {host.host} (npu-smi info)"
    return tuple(chip_id for chip_id, _ in npus)


def resolve_ips(
    host: HostConfig, devices: Tuple[int, ...], discovery: Discovery, sources: Dict[str, str], index: int
) -> Optional[Tuple[str, ...]]:
    key = f"hosts[{index}].device_ips"
    if host.device_ips is not None:
        sources.setdefault(key, "yaml")  # or where the config got them (a scheduler's nodes exchanging them)
        return host.device_ips
    if host.host in discovery.local_names:
        found = discovery.device_ips(devices)
        if found is not None:
            sources[key] = "discovery (hccn_tool)"
            return tuple(found)
    elif discovery.remote is not None:
        by_device = discovery.remote[host.host].get("device_ips") or {}
        ips = [by_device.get(str(device)) for device in devices]
        if all(ips):
            sources[key] = f"discovery on {host.host} (hccn_tool)"
            return tuple(str(ip) for ip in ips)
    return None


def decide_rank_table(
    config: ClusterConfig,
    devices_by_host: Sequence[Tuple[int, ...]],
    ips_by_host: Sequence[Optional[Tuple[str, ...]]],
    layout: JobLayout,
    notes: List[str],
    unprobed: bool = False,
) -> Tuple[Optional[Dict[str, Any]], Optional[str]]:
    """The HCCL rank table and its path. ``unprobed``: remote hosts' device IPs are read by their
    preflight when the job starts, so the plan alone shows where the table goes, not what it holds."""
    mode = config.rank_table
    if mode is RankTableMode.NONE:
        notes.append("no rank table (rank_table: none): RANK_TABLE_FILE is not set")
        return None, None
    if mode is RankTableMode.CM:
        return None, None  # rank-table-free: plan/rankfree.py decides the CM_* variables
    missing = [config.hosts[i].host for i, ips in enumerate(ips_by_host) if ips is None]
    if missing and unprobed:
        notes.append(
            f"rank table: the device IPs of {', '.join(missing)} are read with hccn_tool on each host "
            "when the job starts"
        )
        return None, layout.rank_table_path
    if missing:
        if mode is RankTableMode.REQUIRED or len(config.hosts) > 1:
            why = "rank_table: required" if mode is RankTableMode.REQUIRED else "a job on several hosts"
            path = config.hosts[ips_by_host.index(None)].path + ("device_ips",)
            raise ConfigError(
                [
                    config.problem(
                        path,
                        "no device IPs for " + ", ".join(missing),
                        "device_ips for every host (or hccn_tool on the host)",
                        f"{why} needs an HCCL rank table, which needs every NPU's IP",
                    )
                ]
            )
        notes.append(
            "no rank table: device IPs unknown (no device_ips in the YAML, no hccn_tool); "
            "a single-host job runs without one (rank_table: auto)"
        )
        return None, None
    servers = []
    rank = 0
    for host, devices, ips in zip(config.hosts, devices_by_host, ips_by_host):
        assert ips is not None
        if len(ips) != len(devices):
            raise ConfigError(
                [
                    config.problem(
                        host.path + ("device_ips",), f"{len(ips)} addresses", f"{len(devices)}, one per device"
                    )
                ]
            )
        servers.append((host.host, [(d, ip, rank + i) for i, (d, ip) in enumerate(zip(devices, ips))]))
        rank += len(devices)
    table = build_rank_table(servers)
    problems = rank_table_problems(table)
    if problems:
        raise PlanError("the rank table would be invalid: " + "; ".join(problems))
    return table, layout.rank_table_path
