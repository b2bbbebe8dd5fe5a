"""The HCCL rank table Ascend's MindX operator mounts into a Kubernetes / Volcano job's pods
(``hccl.json``): wait until the operator has filled it in, then read the job's hosts, devices and
device IPs from it, and this pod's place among them.
"""

from __future__ import annotations

import json
import time
from dataclasses import replace
from typing import Any, Callable, Dict, Optional, Sequence, Tuple

from npulaunch.config.cluster import ClusterConfig, HostConfig
from npulaunch.host.errors import SchedulerError
from npulaunch.plan.hostlist import invalid_value
from npulaunch.plan.scheduler import SchedulerView

POLL_INTERVAL_S = 0.5

RANK_TABLE_STATUSES = ("initializing", "completed")


def _read_text(path: str) -> str:
    with open(path, encoding="utf-8") as handle:
        return handle.read()


def wait_for_rank_table(
    path: str,
    timeout_s: float,
    clock: Callable[[], float] = time.monotonic,
    sleep: Callable[[float], None] = time.sleep,
    read: Callable[[str], str] = _read_text,
) -> Dict[str, Any]:
    """The HCCL rank table at ``path`` once the MindX operator has filled it in: it mounts the file
    with ``"status": "initializing"`` and rewrites it with ``"completed"`` when every pod has its
    devices. Looks every POLL_INTERVAL_S, at least once, and once more at the deadline."""
    deadline = clock() + timeout_s
    while True:
        seen, table = _look_at_rank_table(path, read)
        if table is not None:
            return table
        remaining = deadline - clock()
        if remaining <= 0:
            raise SchedulerError(
                f"HCCL rank table {path}: not ready after {timeout_s:g} s, last seen: {seen}; "
                'ready means valid JSON with "status": "completed", which the MindX operator '
                "writes once every pod of the job has its NPUs"
            )
        sleep(min(POLL_INTERVAL_S, remaining))


def _look_at_rank_table(path: str, read: Callable[[str], str]) -> Tuple[str, Optional[Dict[str, Any]]]:
    """``(what was seen, the table when it is completed)``; raises when waiting cannot help."""
    where = f"HCCL rank table {path}"
    try:
        table = json.loads(read(path))
    except FileNotFoundError:
        return "missing", None
    except OSError as exc:
        raise invalid_value(where, f"a file that cannot be read ({exc.strerror or exc})", "a readable file") from None
    except ValueError:  # also a file that is not UTF-8
        return "not valid JSON", None
    if not isinstance(table, dict):
        raise invalid_value(where, f"a JSON {type(table).__name__}", 'a JSON object with a "status"')
    status = table.get("status")
    if status == "completed":
        return "completed", table
    if status == "initializing":
        return "status 'initializing'", None
    raise invalid_value(where, f"status {status!r}", " or ".join(repr(s) for s in RANK_TABLE_STATUSES))


def hosts_from_rank_table(config: ClusterConfig, table: Dict[str, Any], path: str) -> ClusterConfig:
    """The job's hosts as a rank table mounted by Ascend's MindX operator lists them: servers in
    its order, their devices and device IPs. The plan's own rank table then says the same."""
    hosts = []
    try:
        for server in table["server_list"]:
            devices = sorted(server["device"], key=lambda d: int(d["rank_id"]))
            hosts.append(
                HostConfig(
                    host=str(server["server_id"]),
                    devices=tuple(int(d["device_id"]) for d in devices),
                    device_ips=tuple(str(d["device_ip"]) for d in devices),
                    path=("hosts",),
                )
            )
    except (KeyError, TypeError, ValueError) as exc:
        raise SchedulerError(
            f"rank table {path}: not an HCCL rank table (server_list with device_id, device_ip, rank_id): {exc!r}"
        ) from None
    if not hosts:
        raise SchedulerError(f"rank table {path}: server_list is empty")
    sources = dict(config.sources, hosts=f"rank table {path} (MindX)")
    return replace(config, hosts=tuple(hosts), sources=sources)


def node_in_rank_table(config: ClusterConfig, view: SchedulerView, names: Sequence[str]) -> SchedulerView:
    """This node's place among the rank table's servers: the server named like this host (its
    hostname or an address of it), else the scheduler's index (MindX lists pods in task order)."""
    servers = [h.host for h in config.hosts]
    index = next((servers.index(n) for n in names if n in servers), view.node_index)
    sources = dict(view.sources)
    if index is not None and index != view.node_index:
        sources["node_index"] = f"rank table server_id {servers[index]}"
    return replace(view, hosts=None, node_index=index, node_count=len(servers), sources=sources)
