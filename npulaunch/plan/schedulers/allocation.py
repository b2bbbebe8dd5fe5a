"""The cluster config as a scheduler allocated it. The job's hosts come from the scheduler (Slurm's
node list, Volcano's task hosts) or, when it does not list them (MPI, plain Kubernetes), from the
YAML in order; this node's index and, in rank mode, each node's task count come from the
scheduler too.

Pure: every node computes the same config from the same YAML and the same scheduler view, so every
node builds the same plan and the same rank table without talking to the others.
"""

from __future__ import annotations

from dataclasses import replace
from typing import Callable, List, Sequence, Tuple

from npulaunch.config.cluster import ALL_DEVICES, ClusterConfig, HostConfig, RankTableMode
from npulaunch.host.errors import ConfigError, SchedulerError
from npulaunch.plan.schedulers.view import SchedulerView


def scheduler_config(
    config: ClusterConfig, view: SchedulerView, local_devices: Callable[[], Sequence[int]], rank_mode: bool = False
) -> Tuple[ClusterConfig, int]:
    """``(config with the allocation's hosts, this node's index)``.

    A YAML host entry named like an allocated node gives that node's devices and device IPs;
    otherwise a single YAML entry is the template of every node (its devices, not its IPs).
    ``devices: all`` means the NPUs this node's npu-smi lists, on every node (nodes of one
    allocation are alike). In rank mode each node gets one device per task the scheduler put
    there: the first N of its devices."""
    names, source = _node_names(config, view)
    node = view.node_index
    if node is None or not 0 <= node < len(names):
        raise SchedulerError(
            f"{view.kind.value}: this node's index is unknown or outside the {len(names)} nodes ({view_sources(view)})"
        )
    sources = dict(
        config.sources,
        hosts=source,
        node=view.sources.get("node_index", "the scheduler"),
        scheduler=f"{view.kind.value} ({view.sources.get('kind', 'detected')})",
    )
    if rank_mode:
        sources["rank"] = view.sources.get("rank", "the scheduler")
    by_name = {h.host: h for h in config.hosts}
    template = config.hosts[0] if len(config.hosts) == 1 else None
    hosts: List[HostConfig] = []
    for index, name in enumerate(names):
        entry = by_name.get(name)
        if entry is None:
            if template is None:
                raise ConfigError(
                    [
                        config.problem(
                            ("hosts",),
                            f"no entry for node {name}",
                            "one entry per allocated node (by name), or a single entry that every node follows",
                        )
                    ]
                )
            entry = replace(template, device_ips=None)
        host = replace(entry, host=name)
        if host.devices == ALL_DEVICES:
            host = replace(host, devices=tuple(local_devices()))
            sources[f"hosts[{index}].devices"] = "discovery on this node (npu-smi info), the same on every node"
        if rank_mode:
            host = _one_device_per_task(config, host, tasks_on(view, index))
            sources[f"hosts[{index}].devices"] = "scheduler (one device per task)"
        hosts.append(host)
    return replace(config, hosts=tuple(hosts), sources=sources), node


def _node_names(config: ClusterConfig, view: SchedulerView) -> Tuple[Tuple[str, ...], str]:
    if view.hosts is not None:
        names, source = view.hosts, f"scheduler ({view.sources.get('hosts', view.kind.value)})"
    else:
        names, source = tuple(h.host for h in config.hosts), "yaml, in order (the scheduler does not list its nodes)"
    if view.node_count is not None and view.node_count != len(names):
        raise SchedulerError(
            f"{view.kind.value} runs {view.node_count} nodes ({view_sources(view)}), but the YAML "
            f"lists {len(names)} hosts; under {view.kind.value} list the nodes in order, one hosts "
            "entry each"
        )
    return tuple(names), source


def controller_config(config: ClusterConfig, view: SchedulerView) -> ClusterConfig:
    """The config as a Slurm allocation holds it when one npulaunch (the batch script's) runs the whole job as
    job steps: the job's hosts are the first ``slurm.nodes`` nodes (by default all but ``slurm.spare_nodes``),
    the nodes beyond them its spare hosts, each following the YAML's entry of its name, or the single entry
    every node follows. npulaunch places the job, as over SSH: the node index is no longer the scheduler's."""
    names, source = _node_names(config, replace(view, node_count=None))
    spare = int(config.slurm.get("spare_nodes", 0))
    wanted = int(config.slurm.get("nodes") or len(names) - spare)
    if wanted < 1 or wanted + spare > len(names):
        raise SchedulerError(
            f"slurm: the allocation has {len(names)} nodes ({view_sources(view)}); the job needs {wanted} "
            f"(slurm.nodes) and {spare} spare (slurm.spare_nodes): allocate {max(wanted, 1) + spare} nodes "
            "(npulaunch sbatch asks for them)"
        )
    entries = [_entry_for(config, name, index) for index, name in enumerate(names)]
    sources = dict(
        config.sources,
        hosts=f"{source}, the first {wanted}",
        scheduler=f"slurm ({view.sources.get('kind', 'detected')}): the batch script runs the job as job steps",
    )
    if len(names) > wanted:
        sources["spares"] = f"{source}: the {len(names) - wanted} nodes beyond the job's {wanted}"
    return replace(config, hosts=tuple(entries[:wanted]), spares=tuple(entries[wanted:]), sources=sources)


def _entry_for(config: ClusterConfig, name: str, index: int) -> HostConfig:
    """The YAML's entry of node ``name``, or the single entry every node follows (without its device IPs)."""
    by_name = {h.host: h for h in config.hosts}
    if name in by_name:
        return by_name[name]
    if len(config.hosts) != 1:
        raise ConfigError(
            [
                config.problem(
                    ("hosts",),
                    f"no entry for node {name} (node {index} of the allocation)",
                    "one entry per allocated node (by name), or a single entry that every node follows",
                )
            ]
        )
    return replace(config.hosts[0], host=name, device_ips=None)


def tasks_on(view: SchedulerView, index: int) -> int:
    """How many tasks the scheduler starts on node ``index``."""
    if view.tasks_per_node is not None:
        return view.tasks_per_node[index]
    if view.local_size is not None:  # MPI maps by slot: the same number of ranks on every node
        return view.local_size
    raise SchedulerError(f"{view.kind.value}: how many tasks run on each node is unknown ({view_sources(view)})")


def _one_device_per_task(config: ClusterConfig, host: HostConfig, tasks: int) -> HostConfig:
    assert isinstance(host.devices, tuple)
    if len(host.devices) < tasks:
        raise ConfigError(
            [
                config.problem(
                    host.path + ("devices",),
                    f"{len(host.devices)} devices",
                    f"at least {tasks}, one per task the scheduler starts on {host.host}",
                )
            ]
        )
    ips = host.device_ips[:tasks] if host.device_ips is not None else None
    return replace(host, devices=host.devices[:tasks], device_ips=ips)


def rank_mode_view(view: SchedulerView) -> SchedulerView:
    """Fill in what rank mode needs and a scheduler may leave out: Open MPI does not say which
    node a rank is on; mapped by slot, it is rank // ranks per node."""
    if view.rank is None or view.world_size is None or view.local_rank is None:
        raise SchedulerError(
            f"{view.kind.value}: this process's rank is unknown ({view_sources(view)}); "
            "npulaunch exec runs as one of the scheduler's tasks (srun -n N ..., mpirun -n N ...)"
        )
    if view.node_index is not None and view.node_count is not None and view.node_count > 1:
        return view
    if not view.local_size or view.world_size % view.local_size:
        raise SchedulerError(
            f"{view.kind.value}: cannot place {view.world_size} ranks on nodes of "
            f"{view.local_size} ({view_sources(view)})"
        )
    return replace(view, node_index=view.rank // view.local_size, node_count=view.world_size // view.local_size)


def view_sources(view: SchedulerView) -> str:
    return ", ".join(view.sources.values()) or "no scheduler variables found"


def exchange_needed(config: ClusterConfig, node: int) -> bool:
    """Whether the nodes must swap device IPs: a rank table is wanted (the framework needs one, or
    rank_table: required) and another node's IPs are not in the YAML (each node can only ask its own
    hccn_tool). A framework that forms its cluster without one starts at once (no shared directory)."""
    from npulaunch.plan.frameworks import contract_of

    wanted = config.rank_table is RankTableMode.REQUIRED or (
        config.rank_table is RankTableMode.AUTO and contract_of(config).table_needed(config)
    )
    return (
        wanted and len(config.hosts) > 1 and any(h.device_ips is None for i, h in enumerate(config.hosts) if i != node)
    )
