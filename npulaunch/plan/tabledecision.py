"""The HCCL rank table's decision, from every host's devices and device IPs (plan/hosts.py): none,
rank-table-free (CM_*), a table to build now, or one each host's preflight completes; its version; and
an error or a note when no table can be built. Part of build_plan; pure: discovery comes in as
callables and data. The table's format and rules are plan/ranktable.py's.
"""

from __future__ import annotations

from typing import Any, Dict, List, Optional, Sequence, Tuple

from npulaunch.config.cluster import ClusterConfig, RankTableMode
from npulaunch.host.errors import ConfigError, PlanError
from npulaunch.plan.launchplan import Discovery
from npulaunch.plan.layout import JobLayout
from npulaunch.plan.ranktable import (
    Server,
    build_rank_table,
    choose_version,
    device_ips_optional,
    rank_table_problems,
)


def decide_rank_table(
    config: ClusterConfig,
    devices_by_host: Sequence[Tuple[int, ...]],
    ips_by_host: Sequence[Optional[Tuple[str, ...]]],
    layout: JobLayout,
    notes: List[str],
    discovery: Discovery,
    unprobed: bool = False,
    needed: bool = True,
) -> Tuple[Optional[Dict[str, Any]], Optional[str], str, str]:
    """``(table, path, version, why)``. ``unprobed``: remote hosts' device IPs are read by their
    preflight when the job starts, so the plan alone shows where the table goes, not what it holds.
    ``needed``: whether the framework's ranks need a table to work together (plan/frameworks/); when
    not, a table that cannot be built is left out with a note (rank_table: required still insists)."""
    mode = config.rank_table
    world_size = sum(len(devices) for devices in devices_by_host)
    if mode is RankTableMode.NONE:
        notes.append(
            "no rank table (rank_table: none): RANK_TABLE_FILE is not set"
            + (
                f"; the {world_size} ranks cannot use HCCL together (its collectives would fail): fine only "
                "for a script that does not use HCCL"
                if world_size > 1
                else ""
            )
        )
        return None, None, "", "rank_table: none"
    if mode is RankTableMode.CM:  # rank-table-free: plan/rankfree.py decides the CM_* variables
        return None, None, "", "rank_table: cm (rank-table-free: HCCL forms the cluster from the CM_* variables)"
    version, why = choose_version(config.product, [h.super_pod_id for h in config.hosts])
    pods = len({h.super_pod_id for h in config.hosts})
    optional = device_ips_optional(config.product, version, len(config.hosts), pods, config.env)
    missing = [config.hosts[i].host for i, ips in enumerate(ips_by_host) if ips is None]
    if missing and optional:
        notes.append(f"rank table without device_ip: {optional}")
        ips_by_host = [None] * len(ips_by_host)
    elif missing and unprobed:
        notes.append(
            f"rank table: the device IPs of {', '.join(missing)} are read with hccn_tool on each host "
            "when the job starts"
        )
        return None, layout.rank_table_path, version, why
    elif missing and not needed and mode is not RankTableMode.REQUIRED:
        if config.framework.backend == "gloo":  # collectives on the CPU: no HCCL, no table to speak of
            return None, None, "", f"the script's collectives use {config.framework.backend}, not HCCL"
        notes.append(
            f"no rank table: the device IPs of {', '.join(missing)} are unknown; framework: "
            f"{config.framework.name.value} forms the cluster without one (a rank table only speeds its start-up)"
        )
        return None, None, "", "device IPs unknown; the framework needs no table"
    elif missing:
        _refuse_or_note(config, ips_by_host, missing, world_size, discovery, notes)
        return None, None, "", "device IPs unknown; see the notes"
    table = build_rank_table(_servers(config, devices_by_host, ips_by_host, version), version)
    problems = rank_table_problems(table, config.product)
    if problems:
        raise PlanError("the rank table would be invalid: " + "; ".join(problems))
    return table, layout.rank_table_path, version, why


def _servers(
    config: ClusterConfig,
    devices_by_host: Sequence[Tuple[int, ...]],
    ips_by_host: Sequence[Optional[Tuple[str, ...]]],
    version: str,
) -> List[Server]:
    servers: List[Server] = []
    rank = 0
    for host, devices, ips in zip(config.hosts, devices_by_host, ips_by_host):
        if ips is not None and len(ips) != len(devices):
            raise ConfigError(
                [
                    config.problem(
                        host.path + ("device_ips",), f"{len(ips)} addresses", f"{len(devices)}, one per device"
                    )
                ]
            )
        super_ids = None
        if version == "1.2":
            by_device = host.super_device_ids or {}
            lacking = [d for d in devices if d not in by_device]
            if lacking:
                raise ConfigError(
                    [
                        config.problem(
                            host.path + ("super_device_ids",),
                            "no super_device_id for device " + ", ".join(map(str, lacking)),
                            "a super_device_id for every device of the job",
                        )
                    ]
                )
            super_ids = tuple(by_device[d] for d in devices)
        servers.append(Server(host.host, devices, rank, ips, host.super_pod_id, super_ids))
        rank += len(devices)
    return servers


def _refuse_or_note(
    config: ClusterConfig,
    ips_by_host: Sequence[Optional[Tuple[str, ...]]],
    missing: List[str],
    world_size: int,
    discovery: Discovery,
    notes: List[str],
) -> None:
    """No table can be built (device IPs unknown). HCCL joins ranks into one job only through a rank
    table or the CM_* variables; without either the TF Adapter configures no HCCL at all
    (hicann/tensorflow @ 82957b92 tf_adapter/util/ge_plugin.cc, GePlugin::Init) and each rank trains
    alone. So: an error for rank_table: required, several hosts, or several ranks on a host with NPUs;
    a note otherwise."""
    host = config.hosts[list(ips_by_host).index(None)]
    path = host.path + ("device_ips",)
    found = "no device IPs for " + ", ".join(missing)
    if config.rank_table is RankTableMode.REQUIRED or len(config.hosts) > 1:
        why = "rank_table: required" if config.rank_table is RankTableMode.REQUIRED else "a job on several hosts"
        raise ConfigError(
            [
                config.problem(
                    path,
                    found,
                    "device_ips for every host (or hccn_tool on the host)",
                    f"{why} needs an HCCL rank table, which needs every NPU's IP",
                )
            ]
        )
    if world_size == 1:
        notes.append("no rank table: one rank needs none (device IPs unknown)")
        return
    if config.cpu_fallback:
        notes.append("no rank table: with cpu_fallback the ranks use TensorFlow collectives on the CPU, not HCCL")
        return
    if host.host in discovery.local_names:
        npus, where = discovery.npu_present(), "npu-smi is not on PATH here"
    else:
        npus, where = (
            bool((discovery.remote or {}).get(host.host, {}).get("npus")),
            f"npu-smi lists none on {host.host}",
        )
    if npus:
        product = (
            "; with product: atlas-a2 or atlas-a3 a one-server table needs no device IPs"
            if config.product is None
            else ""
        )
        raise ConfigError(
            [
                config.problem(
                    path,
                    f"{world_size} ranks on {host.host} and no device IPs (none in the YAML, none from hccn_tool)",
                    "device_ips (or hccn_tool on the host), rank_table: cm, or rank_table: none",
                    "HCCL joins ranks into one job only through a rank table or the CM_* variables; without "
                    f"either each rank would train alone{product}. rank_table: none runs without one, for a "
                    "script that does not use HCCL",
                )
            ]
        )
    notes.append(
        f"no rank table: {world_size} ranks with device IPs unknown, and no NPU ({where}), so HCCL cannot run "
        "here anyway; on a host with NPUs this is an error. Set rank_table: none to say so, or give device_ips"
    )
