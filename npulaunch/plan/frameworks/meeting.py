"""Where the processes of a pytorch or msrun job meet: ``decide_meeting``. torch's ranks meet at the
TCPStore rank 0 hosts (MASTER_ADDR, MASTER_PORT), msrun's at the scheduler on the first host
(MS_SCHED_HOST, MS_SCHED_PORT). The address is the first host's as the other hosts reach it; each
host's own address toward it becomes that host's HCCL_IF_IP, the host NIC HCCL uses to reach the root
when it negotiates without a rank table ("IP address used by the host during HCCL initialization ... to
communicate with the root node": CANN 8.5.0, hcclug_000088). Pure: host facts come in as data.
"""

from __future__ import annotations

from typing import Dict, List, Optional

from npulaunch.config.cluster import ClusterConfig
from npulaunch.host.errors import ConfigError
from npulaunch.plan.launchplan import Discovery
from npulaunch.plan.rankenv import Meeting

LOOPBACK = "127.0.0.1"
MAX_PORT = 65535


def decide_meeting(
    config: ClusterConfig,
    discovery: Discovery,
    default_port: int,
    sources: Dict[str, str],
    notes: List[str],
    node: Optional[int] = None,
) -> Meeting:
    """The meeting point and every host's HCCL_IF_IP (None where unknown). On one machine a free port
    of it unless the YAML or the command line names one; on several hosts, or on one node of a
    scheduler's job (``node``: every node must name the same port), the framework's default port,
    which the preflight checks free on the first host."""
    framework = config.framework
    local = [host.host in discovery.local_names for host in config.hosts]
    remote = discovery.remote or {}
    host_ips: List[Optional[str]] = [None] * len(config.hosts)
    if all(local):
        address, said = LOOPBACK, "loopback: every rank runs on this host"
    else:
        # the launcher's own address toward the remote hosts (its end of their SSH connection)
        mine = next((facts.get("launcher_address") for facts in remote.values() if facts.get("launcher_address")), None)
        for index, host in enumerate(config.hosts):
            facts = remote.get(host.host) or {}
            host_ips[index] = (mine if local[index] else facts.get("address")) or discovery.resolve(host.host)
        first = config.hosts[0].host
        target = framework.master_addr or host_ips[0]
        for index in range(1, len(config.hosts)):  # a node of a scheduler's job: its address on the route there
            if local[index] and host_ips[index] is None and target:
                host_ips[index] = discovery.address_toward(target)
        address = host_ips[0] or first
        if host_ips[0]:
            said = f"{first}'s address toward the other hosts"
        else:
            said = f"the first host's name ({first}): its address is known when the job starts"
    if framework.master_addr is not None:
        address, said = framework.master_addr, config.sources.get("framework.master_addr", "yaml")
    sources["framework.master_addr"] = said
    if framework.master_port is not None:
        port = framework.master_port
        sources["framework.master_port"] = config.sources.get("framework.master_port", "yaml")
    elif all(local) and node is None:
        port = discovery.free_ports(1)[0]
        sources["framework.master_port"] = "a free port of this host"
    else:
        port = default_port
        sources["framework.master_port"] = "the framework's default (checked free on the first host)"
    if not 0 < port <= MAX_PORT:
        raise ConfigError([config.problem(("framework", "master_port"), str(port), f"1 to {MAX_PORT}")])
    unknown = [h.host for h, ip in zip(config.hosts, host_ips) if ip is None]
    if len(config.hosts) > 1 and unknown and framework.backend != "gloo":
        notes.append(
            "HCCL_IF_IP is not set on " + ", ".join(unknown) + ": their address toward the first host is not "
            "known here (over SSH it is, when the job starts); HCCL then picks a NIC itself: set HCCL_IF_IP or "
            "HCCL_SOCKET_IFNAME in env if it picks the wrong one"
        )
    return Meeting(address, port, tuple(host_ips))
