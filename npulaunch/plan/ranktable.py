"""The HCCL rank table (version "1.0"): built from the plan's ranks, checked, rendered as JSON.

Pure: no files are written here (the supervisor writes the rendered text into the job directory).
"""

from __future__ import annotations

import json
from typing import Any, Dict, List, Sequence, Tuple


def build_rank_table(servers: Sequence[Tuple[str, Sequence[Tuple[int, str, int]]]]) -> Dict[str, Any]:
    """``servers``: ``(server_id, [(device_id, device_ip, rank), ...])`` in plan order.

    Every value is a string, as HCCL expects.
    """
    server_list: List[Dict[str, Any]] = []
    for server_id, devices in servers:
        server_list.append(
            {
                "server_id": server_id,
                "device": [
                    {"device_id": str(device), "device_ip": ip, "rank_id": str(rank)} for device, ip, rank in devices
                ],
            }
        )
    return {"version": "1.0", "server_count": str(len(server_list)), "server_list": server_list, "status": "completed"}


def rank_table_problems(table: Dict[str, Any]) -> List[str]:
    """What is wrong with a rank table (empty when it is sound)."""
    problems = []
    ranks: List[int] = []
    ips: Dict[str, str] = {}
    if table.get("version") != "1.0":
        problems.append(f'version is {table.get("version")!r}, expected "1.0"')
    servers = table.get("server_list", [])
    if table.get("server_count") != str(len(servers)):
        problems.append(f"server_count {table.get('server_count')!r} but {len(servers)} servers listed")
    for server in servers:
        seen_devices = set()
        for device in server.get("device", []):
            for key in ("device_id", "device_ip", "rank_id"):
                if not isinstance(device.get(key), str):
                    problems.append(f"{server.get('server_id')}: {key} {device.get(key)!r} is not a string")
            if device.get("device_id") in seen_devices:
                problems.append(f"{server.get('server_id')}: device {device.get('device_id')} listed twice")
            seen_devices.add(device.get("device_id"))
            owner = ips.setdefault(device.get("device_ip"), f"{server.get('server_id')}/{device.get('device_id')}")
            if owner != f"{server.get('server_id')}/{device.get('device_id')}":
                problems.append(
                    f"device_ip {device.get('device_ip')} used by {owner} and "
                    f"{server.get('server_id')}/{device.get('device_id')}"
                )
            if str(device.get("rank_id", "")).isdigit():
                ranks.append(int(device["rank_id"]))
    if sorted(ranks) != list(range(len(ranks))):
        problems.append("rank_id values are not unique and contiguous from 0")
    return problems


def render_rank_table(table: Dict[str, Any]) -> str:
    return json.dumps(table, indent=2) + "\n"
