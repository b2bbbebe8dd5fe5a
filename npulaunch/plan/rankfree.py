"""Rank-table-free jobs (``rank_table: cm``): HCCL forms the cluster from the ``CM_*`` variables
instead of a rank table. This module decides them: the chief (the first host, its first device),
its port, every host's address, the number of devices. Pure: host facts come in as data.

Facts, from the TF Adapter (hicann/tensorflow @ 82957b9): ``tf_adapter/util/ge_plugin.cc``
(``GePlugin::Init``, ``SetCmChiefWorkSizeEnv``) uses the CM_* variables only when CM_CHIEF_IP,
CM_CHIEF_PORT and CM_CHIEF_DEVICE are set and RANK_SIZE is not, and configures neither mode when
CM_CHIEF_IP and RANK_TABLE_FILE are both set; its rank-table mode needs CM_WORKER_SIZE unset.
``docs/en/tfa_env/CM_*.md``: CM_CHIEF_PORT 0-65520, CM_WORKER_SIZE 0-32768 (the total number of
devices), CM_CHIEF_DEVICE a logical device id, none to be mixed with RANK_TABLE_FILE, RANK_ID or
RANK_SIZE; Atlas training and Atlas A2 products only.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Dict, List, Mapping, Optional, Sequence, Tuple

from npulaunch.config.cluster import ClusterConfig
from npulaunch.host.errors import ConfigError, ConfigProblem

CM_VARIABLES = ("CM_CHIEF_IP", "CM_CHIEF_PORT", "CM_CHIEF_DEVICE", "CM_WORKER_IP", "CM_WORKER_SIZE")
CHIEF_PORT_MAX = 65520  # TFA docs/en/tfa_env/CM_CHIEF_PORT.md: "an integer ranging from 0 to 65520"
WORKER_SIZE_MAX = 32768  # TFA docs/en/tfa_env/CM_WORKER_SIZE.md (CANN 6.0.1's guide said 0~4096)
CM_PRODUCTS = ("atlas-training", "atlas-a2")  # TFA docs/en/tfa_env/CM_*.md, "Applicability"
LOOPBACK = "127.0.0.1"


@dataclass(frozen=True)
class ClusterInfo:
    """What every rank of a rank-table-free job is told (CM_WORKER_IP differs by host)."""

    chief_ip: str
    chief_port: int
    chief_device: int
    worker_size: int
    worker_ips: Tuple[str, ...]  # one per host, in the config's order

    def rank_env(self, node_rank: int) -> Dict[str, str]:
        return {
            "CM_CHIEF_IP": self.chief_ip,
            "CM_CHIEF_PORT": str(self.chief_port),
            "CM_CHIEF_DEVICE": str(self.chief_device),
            "CM_WORKER_IP": self.worker_ips[node_rank],
            "CM_WORKER_SIZE": str(self.worker_size),
        }


def cm_env_problems(config: ClusterConfig, cm_mode: bool) -> List[ConfigProblem]:
    """The YAML's env against the mode: with a rank table no CM_* variable may reach the ranks (the
    TF Adapter then configures neither mode, or skips the rank table); in cm mode npulaunch sets
    them all but the chief's port."""
    problems = []
    for name in CM_VARIABLES:
        if name not in config.env:
            continue
        path = ("env", name)
        if not cm_mode:
            problems.append(
                config.problem(
                    path,
                    f"{name} with rank_table: {config.rank_table.value}",
                    "no CM_* variable when a rank table is used",
                    "CM_* and RANK_TABLE_FILE cannot be used together; for a rank-table-free "
                    "job set rank_table: cm and npulaunch sets CM_* for every rank",
                )
            )
        elif name != "CM_CHIEF_PORT":
            problems.append(
                config.problem(
                    path,
                    f"{name} in env",
                    "only CM_CHIEF_PORT (the chief's port)",
                    "with rank_table: cm npulaunch sets it for every rank",
                )
            )
    return problems


def decide_cluster_info(
    config: ClusterConfig,
    devices_by_host: Sequence[Tuple[int, ...]],
    local_names: Sequence[str],
    addresses: Mapping[str, str],
    free_port: Optional[int],
    sources: Dict[str, str],
    unprobed: bool = False,
) -> ClusterInfo:
    """The CM_* values of a rank-table-free job. ``addresses``: what the remote hosts' names
    resolved to (the address npulaunch reached each over SSH, or the scheduler's name service);
    ``free_port``: a free port of this host, for a job that runs only here; ``unprobed``: the
    remote hosts are reached over SSH when the job starts, so a name's address may be known only then."""
    problems = cm_env_problems(config, True)
    if config.product is not None and config.product not in CM_PRODUCTS:
        problems.append(
            config.problem(
                ("rank_table",),
                f"cm with product {config.product}",
                "a rank table (rank_table: auto or required)",
                "rank-table-free set-up is documented for Atlas training and Atlas A2 products only",
            )
        )
    world_size = sum(len(d) for d in devices_by_host)
    if world_size > WORKER_SIZE_MAX:
        problems.append(
            config.problem(
                ("rank_table",), f"cm with {world_size} devices", f"at most {WORKER_SIZE_MAX} devices (CM_WORKER_SIZE)"
            )
        )
    ips: List[str] = []
    for index, host in enumerate(config.hosts):
        address = _address(host.host, local_names, addresses)
        if address is None and unprobed:
            address = f"(the address {host.host} is reached at, when the job starts)"
        elif address is None:
            problems.append(
                config.problem(
                    host.path + ("host",),
                    repr(host.host),
                    "an IP address, or a name that resolves",
                    "CM_WORKER_IP needs the address of each host's NIC",
                )
            )
            address = ""
        ips.append(address)
        sources[f"hosts[{index}].cm_worker_ip"] = "the host itself" if address == host.host else "resolved"
    port = _chief_port(config, free_port, problems)
    if problems:
        raise ConfigError(problems)
    sources["CM_CHIEF_PORT"] = "yaml" if "CM_CHIEF_PORT" in config.env else "a free port of this host"
    return ClusterInfo(ips[0], port, devices_by_host[0][0], world_size, tuple(ips))


def _address(host: str, local_names: Sequence[str], addresses: Mapping[str, str]) -> Optional[str]:
    import ipaddress

    if host in local_names:
        return LOOPBACK
    try:
        return str(ipaddress.ip_address(host))
    except ValueError:
        return addresses.get(host)


def _chief_port(config: ClusterConfig, free_port: Optional[int], problems: List[ConfigProblem]) -> int:
    given = config.env.get("CM_CHIEF_PORT")
    if given is not None:
        port = int(given)  # the catalog checked it is an integer in range
        if not 0 <= port <= CHIEF_PORT_MAX:
            problems.append(config.problem(("env", "CM_CHIEF_PORT"), given, f"0 to {CHIEF_PORT_MAX}"))
        return port
    if free_port is None:
        problems.append(
            config.problem(
                ("rank_table",),
                "cm on several hosts without a chief port",
                "env: CM_CHIEF_PORT (a port free on the first host)",
                "npulaunch can pick a free port only when the whole job runs on this host",
            )
        )
        return 0
    return free_port
