"""The HCCL rank table (version "1.0", or "1.2" for Atlas A3 super pods): which version a job needs,
building it from the plan's servers, checking it (npulaunch's own and one a scheduler mounts), and
HCCL's rules on which devices of a server may form a job. Pure: nothing is written here (the
supervisor writes the rendered text into the job directory).

Sources (hicann/hccl @ 09300b70, docs/zh/user_guide/cluster_info_config/): rank_table_config_910.md
(Atlas training), _a2.md, _a3.md. HCCL's parser (HCOMM, read from the mirror
xiaobingling93-pixel/cann-hcomm @ b5f3e5be, src/framework/common/src/config.cc and
topo/topoinfo_ranktableConcise.cc) accepts versions "1.0" and "1.2" and checks the rules below.
"""

from __future__ import annotations

import json
from dataclasses import dataclass
from typing import Any, Dict, List, Mapping, Optional, Sequence, Tuple

ATLAS_TRAINING = "atlas-training"
ATLAS_A2 = "atlas-a2"
ATLAS_A3 = "atlas-a3"
SERVER_ID_MAX = 64  # "字符串类型，长度小于等于64" (every rank_table_config_*.md)
TRAINING_DEVICES = 8  # Atlas 800 training server (model 9000): device_id 0-7 ("[0, 实际Device数量-1]")


@dataclass(frozen=True)
class Server:
    """One server of the table, in plan order; ``ips`` None leaves device_ip out."""

    server_id: str
    devices: Tuple[int, ...]  # physical ids
    first_rank: int
    ips: Optional[Tuple[str, ...]] = None
    super_pod_id: Optional[str] = None  # version 1.2
    super_device_ids: Optional[Tuple[int, ...]] = None  # version 1.2, one per device


def choose_version(product: Optional[str], super_pods: Sequence[Optional[str]]) -> Tuple[str, str]:
    """``(version, why)``. 1.2 is Atlas A3's super-node (SuperPoD) format; without super pods an A3
    job uses 1.0, which HCCL calls "AI Server mode" (rank_table_config_a3.md). The config refuses
    super pods on other products or on only some hosts (config/sections.py)."""
    if product == ATLAS_A3 and super_pods and all(pod is not None for pod in super_pods):
        count = len(set(super_pods))
        return "1.2", (
            f"product atlas-a3 with super_pod_id / super_device_ids on every host ({count} super "
            f"pod{'s' if count > 1 else ''}): super-node networking, super_pod_list"
        )
    if product == ATLAS_A3:
        return "1.0", (
            "product atlas-a3 without super_pod_id / super_device_ids in hosts: HCCL's AI Server mode "
            "(typical networking); give them for a super-node job (version 1.2)"
        )
    if product:
        return "1.0", f"product {product}: HCCL's format there (1.2 is for Atlas A3 super pods only)"
    return "1.0", "no product: set; 1.0 is HCCL's format on every product (1.2 is for Atlas A3 super pods only)"


def device_ips_optional(product: Optional[str], version: str, servers: int, super_pods: int, env: Mapping) -> str:
    """Why device_ip may be left out of this table, or "" when every device needs one.

    Atlas A2 / A3, version 1.0: optional on a single server, required on several (_a2.md, _a3.md:
    "单机场景下，device_ip可不配置"); Atlas training: always required (_910.md). Version 1.2: required
    with several super pods, and within one super pod when HCCL_INTER_HCCS_DISABLE=TRUE (_a3.md)."""
    if version == "1.2":
        if super_pods == 1 and str(env.get("HCCL_INTER_HCCS_DISABLE") or "").upper() != "TRUE":
            return "one super pod (HCCL needs device_ip there only with HCCL_INTER_HCCS_DISABLE=TRUE)"
        return ""
    if product in (ATLAS_A2, ATLAS_A3) and servers == 1:
        return f"one server of {product} (HCCL needs device_ip only across servers there)"
    return ""


def build_rank_table(servers: Sequence[Server], version: str = "1.0") -> Dict[str, Any]:
    """Every value a string, as HCCL expects; 1.2 adds super_device_id and super_pod_list, the
    servers of one super pod listed together in the order they come."""
    server_list: List[Dict[str, Any]] = []
    pods: Dict[str, List[Dict[str, str]]] = {}
    for server in servers:
        devices = []
        for i, device in enumerate(server.devices):
            entry = {"device_id": str(device)}
            if version == "1.2" and server.super_device_ids is not None:
                entry["super_device_id"] = str(server.super_device_ids[i])
            if server.ips is not None:
                entry["device_ip"] = server.ips[i]
            entry["rank_id"] = str(server.first_rank + i)
            devices.append(entry)
        server_list.append({"server_id": server.server_id, "device": devices})
        if version == "1.2":
            pods.setdefault(str(server.super_pod_id), []).append({"server_id": server.server_id})
    table: Dict[str, Any] = {"version": version, "server_count": str(len(server_list)), "server_list": server_list}
    if version == "1.2":
        table["super_pod_list"] = [{"super_pod_id": pod, "server_list": members} for pod, members in pods.items()]
    table["status"] = "completed"
    return table


def rank_table_problems(table: Dict[str, Any], product: Optional[str] = None) -> List[str]:
    """What HCCL would refuse in a rank table of version 1.0 or 1.2 (empty when it is sound)."""
    problems: List[str] = []
    version = table.get("version")
    if version not in ("1.0", "1.2"):
        problems.append(f'version is {version!r}, expected "1.0" or "1.2"')
    if table.get("status") != "completed":
        problems.append(f'status is {table.get("status")!r}, expected "completed"')
    servers = table.get("server_list")
    if not isinstance(servers, list) or not servers:
        return problems + ["server_list is missing or empty"]
    if table.get("server_count") != str(len(servers)) and (version != "1.2" or "server_count" in table):
        problems.append(f"server_count {table.get('server_count')!r} but {len(servers)} servers listed")
    ranks_by_server: List[List[int]] = []
    ips: Dict[Any, str] = {}
    for server in servers:
        ranks_by_server.append(_server_problems(server, version, ips, problems))
    ranks = sorted(r for server_ranks in ranks_by_server for r in server_ranks)
    if ranks != list(range(len(ranks))):  # HCOMM CheckRankListInfo
        problems.append("rank_id values are not unique and contiguous from 0")
    for server, server_ranks in zip(servers, ranks_by_server):
        if server_ranks and max(server_ranks) - min(server_ranks) + 1 != len(server_ranks):
            problems.append(
                f"{server.get('server_id')}: rank_ids {sorted(server_ranks)} interleave with another server's"
            )
    problems.extend(_ip_presence_problems(table, servers, product))
    if product == ATLAS_TRAINING:  # HCOMM CheckDeviceNumValid (skipped for 910B / 910_93); device_id 0-7
        counts = {len(server.get("device") or []) for server in servers}
        if len(counts) > 1:
            problems.append(f"servers have {sorted(counts)} devices; on Atlas training every server the same")
        for server in servers:
            for device in server.get("device") or []:
                if not str(device.get("device_id")).isdigit() or int(device["device_id"]) >= TRAINING_DEVICES:
                    problems.append(
                        f"{server.get('server_id')}: device_id {device.get('device_id')!r} (Atlas training: 0-7)"
                    )
    if version == "1.2":
        problems.extend(_super_pod_problems(table, servers))
    elif "super_pod_list" in table:
        problems.append('super_pod_list needs version "1.2"')
    return problems


def _server_problems(server: Dict[str, Any], version: Any, ips: Dict[Any, str], problems: List[str]) -> List[int]:
    """One server's own problems; returns its rank ids."""
    name = server.get("server_id")
    if not isinstance(name, str) or not 0 < len(name) <= SERVER_ID_MAX:
        problems.append(f"server_id {name!r} is not a string of 1 to {SERVER_ID_MAX} characters")
    ranks: List[int] = []
    seen_devices = set()
    keys = ("device_id", "rank_id", "super_device_id") if version == "1.2" else ("device_id", "rank_id")
    for device in server.get("device") or []:
        for key in keys + (("device_ip",) if "device_ip" in device else ()):
            if not isinstance(device.get(key), str):
                problems.append(f"{name}: {key} {device.get(key)!r} is not a string")
        device_id = device.get("device_id")
        if device_id in seen_devices:  # HCOMM CheckDeviceId
            problems.append(f"{name}: device {device_id} listed twice")
        seen_devices.add(device_id)
        if "device_ip" in device:
            here = f"{name}/{device_id}"
            owner = ips.setdefault(device["device_ip"], here)
            if owner != here:
                problems.append(f"device_ip {device['device_ip']} used by {owner} and {here}")
        rank = device.get("rank_id", "")
        if str(rank).isdigit():
            ranks.append(int(rank))
    return ranks


def _ip_presence_problems(table: Dict[str, Any], servers: List[Dict[str, Any]], product: Optional[str]) -> List[str]:
    """device_ip on every device unless this product and layout let HCCL do without."""
    pods = {p.get("super_pod_id") for p in table.get("super_pod_list") or [] if isinstance(p, dict)}
    if device_ips_optional(product, str(table.get("version")), len(servers), len(pods), {}):
        return []
    missing = [str(s.get("server_id")) for s in servers if any("device_ip" not in d for d in s.get("device") or [])]
    return [f"{', '.join(missing)}: device_ip missing (HCCL needs it here)"] if missing else []


def _super_pod_problems(table: Dict[str, Any], servers: List[Dict[str, Any]]) -> List[str]:
    """HCOMM CheckSuperPodInfo / GetSuperPodServerList: every server in exactly one super pod that
    exists in server_list, super_device_id unique within a pod; _a3.md: a pod's servers together."""
    pods = table.get("super_pod_list")
    if not isinstance(pods, list) or not pods:
        return ['version "1.2" without super_pod_list']
    problems = []
    listed = [s.get("server_id") for s in servers]
    pod_of: Dict[Any, Any] = {}
    for pod in pods:
        pod_id = pod.get("super_pod_id") if isinstance(pod, dict) else None
        if not isinstance(pod_id, str) or not pod_id:
            problems.append(f"super_pod_id {pod_id!r} is not a non-empty string")
        for member in (pod.get("server_list") if isinstance(pod, dict) else None) or []:
            server_id = member.get("server_id") if isinstance(member, dict) else member
            if server_id not in listed:
                problems.append(f"super pod {pod_id}: server {server_id} is not in server_list")
            elif server_id in pod_of:
                problems.append(f"server {server_id} is in super pods {pod_of[server_id]} and {pod_id}")
            pod_of[server_id] = pod_id
    if len(pod_of) != len(listed):
        problems.append(f"super_pod_list holds {len(pod_of)} servers, server_list {len(listed)}")
    order = [pod_of.get(s) for s in listed]
    for i in range(1, len(order)):
        if order[i] != order[i - 1] and order[i] in order[:i]:
            problems.append(f"servers of super pod {order[i]} are not listed together in server_list")
            break
    seen: Dict[Any, set] = {}
    for server in servers:
        for device in server.get("device") or []:
            sdid = device.get("super_device_id")
            if sdid in seen.setdefault(pod_of.get(server.get("server_id")), set()):
                problems.append(f"super_device_id {sdid} twice in super pod {pod_of.get(server.get('server_id'))}")
            seen[pod_of.get(server.get("server_id"))].add(sdid)
    return problems


# Atlas training (Atlas 800 training server, model 9000; 8 NPUs): devices 0-3 and 4-7 are two separate
# networks; a server takes part with 1, 2, 4 or 8 devices, 2 or 4 all inside one group, every server
# with the same count. hicann/tensorflow @ 82957b92 docs/zh/tfadapter_1/migration/model_training/
# distributed_training.md (precaution 3); HCCL create_group, https://www.hiascend.com/document/detail/
# en/canncommercial/800/apiref/hcclapiref/hcclpython_07_0003.html. Known discrepancy: HCOMM's own
# 4-device check (topoinfo_parse.cc, HCCL_AISERVER_VAILD_4P_RANKS, mirror @ b5f3e5be) also accepts the
# cross-group sets {0,1,4,5}, {0,2,4,6}, {0,3,4,7}, {1,2,5,6}, {1,3,5,7}, {2,3,6,7}; npulaunch follows
# the documents. Atlas A2: no restriction on one server, any count 1-8 per server (precaution 4);
# Atlas A3: equal counts only recommended (precaution 5). So only atlas-training is checked.
TRAINING_COUNTS = (1, 2, 4, 8)
TRAINING_GROUPS = (frozenset(range(0, 4)), frozenset(range(4, 8)))
TRAINING_RULE = (
    "1, 2, 4 or 8 devices per server, 2 or 4 all inside 0-3 or all inside 4-7, the same count on "
    "every server (Atlas 800 training server: devices 0-3 and 4-7 are separate networks; TF Adapter "
    "distributed_training.md, HCCL create_group)"
)


def device_group_problem(devices: Sequence[int], counts: Sequence[int]) -> str:
    """What breaks the Atlas training rule in one server's ``devices``, given every server's device
    count ("" when nothing does)."""
    if any(d >= TRAINING_DEVICES for d in devices):
        return f"device ids above {TRAINING_DEVICES - 1} (the server has {TRAINING_DEVICES} NPUs)"
    if len(devices) not in TRAINING_COUNTS:
        return f"{len(devices)} devices"
    if len(devices) in (2, 4) and not any(set(devices) <= group for group in TRAINING_GROUPS):
        return f"devices {', '.join(map(str, devices))} span both groups (0-3 and 4-7)"
    if len(set(counts)) > 1:
        return f"{len(devices)} devices here, {', '.join(map(str, sorted(set(counts))))} across the servers"
    return ""


def render_rank_table(table: Dict[str, Any]) -> str:
    return json.dumps(table, indent=2) + "\n"
