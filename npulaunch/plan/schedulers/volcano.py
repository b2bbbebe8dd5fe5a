"""Volcano (and Kubernetes jobs run by Ascend's MindX operator): the environment Volcano's plugins set (the
task's index and hosts), and the HCCL rank table MindX mounts into the pods (``hccl.json``): wait until the
operator has filled it in, check it as HCCL would, then read the job's hosts, devices (physical ids), device
IPs and, in a version 1.2 table (Atlas A3 super pods), super pods and super_device_ids from it, and this pod's
place among them.
"""

from __future__ import annotations

import json
import time
from dataclasses import replace
from typing import Any, Callable, Dict, Mapping, Optional, Sequence, Tuple

from npulaunch.config.cluster import ClusterConfig, HostConfig
from npulaunch.host.errors import SchedulerError
from npulaunch.host.lazyre import lazy_re
from npulaunch.plan.ranktable import ATLAS_A3, rank_table_problems
from npulaunch.plan.schedulers.view import (
    Draft,
    SchedulerKind,
    SchedulerView,
    invalid_value,
    settle_nodes,
    value_of,
)

# --- the environment

_VOLCANO_HOSTS = lazy_re(r"VC_(.+)_HOSTS")


def read(env: Mapping[str, str], hostname: str) -> Optional[Draft]:
    """Volcano's env plugin (VC_TASK_INDEX) and svc plugin (VC_<TASK>_HOSTS, VC_<TASK>_NUM). Volcano
    sets no job id: VOLCANO_JOB_NAME / VC_JOB_NAME only if the job spec exports one (else --job-id)."""
    if value_of(env, "VC_TASK_INDEX") is None:
        return None
    draft = Draft(SchedulerKind.VOLCANO)
    draft.put_int("node_index", env, "VC_TASK_INDEX")
    task = _volcano_task(env, hostname)
    if task is not None:
        var, text = f"VC_{task}_HOSTS", env[f"VC_{task}_HOSTS"].strip()
        hosts = tuple(name.strip() for name in text.split(","))
        if not all(hosts):
            raise invalid_value(var, repr(text), "comma-separated pod host names, none empty")
        draft.put("hosts", hosts, f"{var}={text}")
        draft.put_int("node_count", env, f"VC_{task}_NUM", 1)
    draft.put_text("job_id", env, ("VOLCANO_JOB_NAME", "VC_JOB_NAME"))
    settle_nodes(draft)
    return draft


def _volcano_task(env: Mapping[str, str], hostname: str) -> Optional[str]:
    """The task whose hosts list this pod: the only one, or the one naming ``hostname``."""
    tasks = sorted(m.group(1) for m in map(_VOLCANO_HOSTS.fullmatch, env) if m and value_of(env, m.group(0)))
    if len(tasks) <= 1:
        return tasks[0] if tasks else None
    mine = [task for task in tasks if _lists_host(env[f"VC_{task}_HOSTS"], hostname)]
    if len(mine) == 1:
        return mine[0]
    listed = ", ".join(f"VC_{task}_HOSTS={env[f'VC_{task}_HOSTS'].strip()}" for task in tasks)
    raise invalid_value(
        "VC_<TASK>_HOSTS",
        f"{len(tasks)} tasks ({listed}), {len(mine)} of them listing hostname {hostname!r}",
        "exactly one task listing this pod's hostname",
        "a pod with hostNetwork: true reports its node's hostname, which no task lists",
    )


def _lists_host(text: str, hostname: str) -> bool:
    wanted = hostname.lower()
    names = [name.strip().lower() for name in text.split(",")]
    return bool(wanted) and any(n == wanted or n.split(".")[0] == wanted.split(".")[0] for n in names)


# --- MindX's rank table

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
    its order, their devices and device IPs (and super pods for version 1.2, which the operator
    writes for A3 super-pod jobs: mind-cluster component/ascend-operator/pkg/ranktable/factory.go
    @ 22bb3d9). The plan's own rank table then says the same."""
    if not isinstance(table.get("server_list"), list) or not table["server_list"]:
        raise SchedulerError(f"rank table {path}: server_list is missing or empty")
    product = config.product
    if table.get("version") == "1.2" and product is None:
        product = ATLAS_A3  # only A3 super-node networking uses 1.2 (HCCL rank_table_config_a3.md)
    problems = rank_table_problems(table, product)
    if problems:
        raise SchedulerError(f"rank table {path}: HCCL would refuse it: " + "; ".join(problems))
    pods = {
        member["server_id"]: str(pod["super_pod_id"])
        for pod in table.get("super_pod_list") or []
        for member in pod["server_list"]
    }
    hosts = []
    try:
        for server in table["server_list"]:
            devices = sorted(server["device"], key=lambda d: int(d["rank_id"]))
            ids = tuple(int(d["device_id"]) for d in devices)
            pod = pods.get(server["server_id"]) if table.get("version") == "1.2" else None
            hosts.append(
                HostConfig(
                    host=str(server["server_id"]),
                    devices=ids,
                    device_ips=tuple(str(d["device_ip"]) for d in devices)
                    if all("device_ip" in d for d in devices)
                    else None,
                    path=("hosts",),
                    super_pod_id=pod,
                    super_device_ids={i: int(d["super_device_id"]) for i, d in zip(ids, devices)} if pod else None,
                )
            )
    except (KeyError, TypeError, ValueError) as exc:
        raise SchedulerError(
            f"rank table {path}: not an HCCL rank table (server_list with device_id, device_ip, rank_id): {exc!r}"
        ) from None
    sources = dict(config.sources, hosts=f"rank table {path} (MindX)")
    if product != config.product:
        sources["product"] = f"rank table {path} (version 1.2: Atlas A3 super pods)"
    return replace(config, hosts=tuple(hosts), sources=sources, product=product)


def node_in_rank_table(config: ClusterConfig, view: SchedulerView, names: Sequence[str]) -> SchedulerView:
    """This node's place among the rank table's servers: the server named like this host (its
    hostname or an address of it), else the scheduler's index (MindX lists pods in task order)."""
    servers = [h.host for h in config.hosts]
    index = next((servers.index(n) for n in names if n in servers), view.node_index)
    sources = dict(view.sources)
    if index is not None and index != view.node_index:
        sources["node_index"] = f"rank table server_id {servers[index]}"
    return replace(view, hosts=None, node_index=index, node_count=len(servers), sources=sources)
