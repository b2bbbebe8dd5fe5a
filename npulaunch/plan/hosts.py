"""Each host's devices and device IPs (from the YAML, this host's npu-smi / hccn_tool, or a
remote host's preflight probe), the id each rank opens (ASCEND_DEVICE_ID) and the device-group rule;
plan/tabledecision.py decides the HCCL rank table from them. Part of build_plan; pure: discovery comes
in as callables and data.
"""

from __future__ import annotations

from typing import Any, Dict, List, Mapping, Optional, Sequence, Tuple

from npulaunch.config.cluster import ClusterConfig, HostConfig, RankTableMode
from npulaunch.host.discovery import (
    CONTAINER_VISIBLE_VAR,
    RT_VISIBLE_VAR,
    USABLE_HEALTH,
    parse_container_visible_devices,
    parse_rt_visible_devices,
)
from npulaunch.host.errors import ConfigError, ConfigProblem, PlanError
from npulaunch.plan.launchplan import Discovery, HostDevices
from npulaunch.plan.ranktable import (
    ATLAS_TRAINING,
    TRAINING_RULE,
    device_group_problem,
)


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


# --- physical -> logical -> ASCEND_DEVICE_ID
#
# The YAML's devices are physical ids (/dev/davinci<N>, npu-smi): the rank table's device_id must be
# one ("AI处理器的物理ID", rank_table_config_*.md) and HCCL checks that the rank's device has that
# physical id (EI0014). Inside a container made by Ascend Docker Runtime, ASCEND_VISIBLE_DEVICES lists
# the physical ids it mounted and the runtime numbers them 0..k-1 (logical ids; ascending order
# assumed, no source confirms it: the plan shows the mapping). ASCEND_RT_VISIBLE_DEVICES lists logical
# ids; a process then opens its index in that list, and ASCEND_DEVICE_ID must be that index
# (hicann/runtime @ 681ef76 docs/zh/env_vars/ASCEND_RT_VISIBLE_DEVICES.md, "使用约束"). DEVICE_ID stays
# the physical id: the TF Adapter reads DEVICE_ID only without ASCEND_DEVICE_ID, as a physical id it
# converts (hicann/tensorflow @ 82957b92 tf_adapter/util/npu_attrs.cc, GetEnvDeviceID), and it is the
# id the rank table and the job's logs name. MindX / Volcano give physical ids in the same way
# (ASCEND_VISIBLE_DEVICES, hccl.json's device_id), so a pod is just a container here.


def map_devices(
    config: ClusterConfig,
    host: HostConfig,
    devices: Tuple[int, ...],
    discovery: Discovery,
    warnings: List[str],
) -> HostDevices:
    """The host's devices in the three numberings. Refuses a device the ranks could not open, and an
    ASCEND_RT_VISIBLE_DEVICES the CANN runtime would not read as written. ``devices: all`` keeps only
    the visible devices."""
    inherited: Mapping[str, Any] = {}
    where = ""
    if host.host in discovery.local_names:
        inherited, where = discovery.environ(), "inherited by npulaunch on this host"
    elif discovery.remote is not None:
        inherited, where = discovery.remote.get(host.host, {}).get("visible") or {}, f"inherited on {host.host}"
    if RT_VISIBLE_VAR in config.env:
        rt, rt_where = config.env[RT_VISIBLE_VAR], "set in the YAML's env"  # null: removed
    else:
        rt, rt_where = inherited.get(RT_VISIBLE_VAR), where
    logical, mounted = devices, None
    container = inherited.get(CONTAINER_VISIBLE_VAR)
    if container:
        mounted = parse_container_visible_devices(container)
        if mounted is None:
            warnings.append(
                f"warning: {host.host}: ASCEND_VISIBLE_DEVICES={container} ({where}) is not in Ascend Docker "
                "Runtime's format; the devices are taken as numbered alike inside and outside"
            )
        else:
            outside = [d for d in devices if d not in mounted]
            if outside:
                raise ConfigError(
                    [
                        config.problem(
                            host.path + ("devices",),
                            "device " + ", ".join(map(str, outside)),
                            "the devices mounted in this container: " + (", ".join(map(str, mounted)) or "none"),
                            f"ASCEND_VISIBLE_DEVICES={container}, {where}, lists the physical ids Ascend Docker "
                            "Runtime mounted here, and devices are physical ids",
                        )
                    ]
                )
            logical = tuple(mounted.index(d) for d in devices)
    if rt is None:
        return HostDevices(host.host, devices, logical, logical, _given(container, where, mounted), None)
    visible, problem = parse_rt_visible_devices(rt)
    if problem:
        raise ConfigError([_rt_problem(config, rt_where, rt, problem)])
    if isinstance(host.devices, str):  # devices: all
        kept = [i for i, n in enumerate(logical) if n in visible]
        devices, logical = tuple(devices[i] for i in kept), tuple(logical[i] for i in kept)
    hidden = [d for d, n in zip(devices, logical) if n not in visible]
    if hidden or not devices:
        shown = [f"{mounted[n] if mounted and n < len(mounted) else n}" for n in visible]
        raise ConfigError(
            [
                config.problem(
                    host.path + ("devices",),
                    ("device " + ", ".join(map(str, hidden))) if hidden else "no device",
                    "a device ASCEND_RT_VISIBLE_DEVICES makes visible: physical " + ", ".join(shown),
                    f"ASCEND_RT_VISIBLE_DEVICES={rt}, {rt_where}, lists logical ids"
                    + (", 0..k-1 over this container's devices" if mounted else ", physical ids outside a container")
                    + ", and a rank cannot open any other device",
                )
            ]
        )
    user = tuple(visible.index(n) for n in logical)
    return HostDevices(host.host, devices, logical, user, _given(container, where, mounted), (rt, rt_where))


def _given(value: Optional[str], where: str, understood: Optional[Tuple[int, ...]]) -> Optional[Tuple[str, str]]:
    return (value, where) if value and understood is not None else None


def _rt_problem(config: ClusterConfig, where: str, value: str, problem: str) -> ConfigProblem:
    allowed = "logical device ids in ascending order, each once, separated by single commas (e.g. 0,1,4)"
    if where == "set in the YAML's env":
        return config.problem(("env", RT_VISIBLE_VAR), repr(value), allowed, problem)
    source = "npulaunch's environment" if "npulaunch" in where else "the environment " + where.replace("inherited ", "")
    return ConfigProblem(source, None, RT_VISIBLE_VAR, repr(value), allowed, problem)


def check_device_groups(config: ClusterConfig, devices_by_host: Sequence[Tuple[int, ...]], warnings: List[str]) -> None:
    """HCCL's rule for Atlas training servers (plan/ranktable.py has it and its sources): refused with
    product: atlas-training, a warning without a product, nothing for the others (no such rule). Jobs
    that do not use HCCL (cpu_fallback, rank_table: none) are not checked."""
    if config.cpu_fallback or config.rank_table is RankTableMode.NONE or sum(map(len, devices_by_host)) < 2:
        return
    counts = [len(devices) for devices in devices_by_host]
    found = [(i, device_group_problem(devices, counts)) for i, devices in enumerate(devices_by_host)]
    found = [(i, why) for i, why in found if why]
    if not found:
        return
    if config.product == ATLAS_TRAINING:
        raise ConfigError(
            [
                config.problem(config.hosts[i].path + ("devices",), why, TRAINING_RULE, "HCCL refuses other sets here")
                for i, why in found
            ]
        )
    if config.product is None:
        by_problem: Dict[str, List[int]] = {}  # one warning per problem, not one per host of 2,048
        for i, why in found:
            by_problem.setdefault(why, []).append(i)
        for why, hosts in by_problem.items():
            shown = ", ".join(f"hosts[{i}] ({config.hosts[i].host})" for i in hosts[:SHOWN_HOSTS])
            more = f" and {len(hosts) - SHOWN_HOSTS} more hosts" if len(hosts) > SHOWN_HOSTS else ""
            where = (
                f"hosts[{hosts[0]}].devices ({config.hosts[hosts[0]].host})"
                if len(hosts) == 1
                else (f"the devices of {shown}{more}")
            )
            warnings.append(
                f"warning: {where}: {why}; on an Atlas training server (product: atlas-training) HCCL allows "
                f"{TRAINING_RULE}. Set product: to check your product's rule (atlas-a2 and atlas-a3 have none)"
            )


SHOWN_HOSTS = 3  # a warning about many hosts names the first few
