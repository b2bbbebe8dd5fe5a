"""From the command line's config and flags to a job ready to plan: the YAML with the flags'
overrides; under a scheduler, the allocation's hosts, this node's place, and the device IPs the
nodes exchange; over SSH, the connected and checked hosts (Fabric is imported only then); and the
function that plans each attempt.
"""

from __future__ import annotations

import os
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any, Callable, Dict, List, Mapping, Optional, Sequence, Tuple

from npulaunch.config.overrides import Overrides
from npulaunch.host.errors import UsageError

if TYPE_CHECKING:  # imported by the functions that use them: a plain run never loads the scheduler module
    from npulaunch.config.cluster import ClusterConfig
    from npulaunch.plan.launchplan import LaunchPlan
    from npulaunch.plan.layout import JobLayout
    from npulaunch.plan.placement import Exclusion
    from npulaunch.plan.schedulers.c10d import Membership
    from npulaunch.plan.schedulers.view import SchedulerView

# Any of these in the environment may mean a scheduler started npulaunch (scheduler.detect's
# automatic detection looks for the same ones first; a test keeps the two in step).
SCHEDULER_MARKERS = (
    "SLURM_JOB_ID",
    "SLURM_JOBID",
    "OMPI_COMM_WORLD_RANK",
    "PMI_RANK",
    "VC_TASK_INDEX",
    "KUBERNETES_SERVICE_HOST",
)


@dataclass(frozen=True)
class Loaded:
    """A config ready to plan: overrides applied and, under a scheduler, the allocation's hosts."""

    config: "ClusterConfig"
    job_id: str
    job_id_source: str
    node: Optional[int] = None  # under a scheduler: this node's index
    local_names: Tuple[str, ...] = ()
    view: "Optional[SchedulerView]" = None  # None without a scheduler
    # how the other hosts' agents are started: "" over SSH; "srun": as Slurm job steps; "mpirun": by Open MPI's mpirun
    transport: str = ""
    rank_mode: bool = False  # npulaunch exec: each rank is its own process, no agent serves a store
    # torchrun's c10d rendezvous (one npulaunch per node, no node rank): this node's membership, and how to
    # load the job again after the nodes re-form the world (a restart, a node joining)
    membership: "Optional[Membership]" = None
    again: "Optional[Callable[[], Loaded]]" = None
    attempt: int = 1  # the first attempt's number (a node joining a running job takes node 0's)


def load(
    config_path: Optional[str],
    overrides: Overrides,
    scheduler: str = "auto",
    rank_mode: bool = False,
    starting: bool = False,
    membership: "Optional[Membership]" = None,
) -> Loaded:
    """The config with the command line's overrides and the scheduler's allocation, its job id
    and where that id came from. ``starting``: the job is about to start here, so under a
    scheduler the nodes swap their device IPs (plan and check only look)."""
    import time

    from npulaunch.config.load import load_config
    from npulaunch.config.overrides import apply_overrides, config_from_cli
    from npulaunch.plan.launchplan import LOCAL_HOST_NAMES, default_job_id

    if config_path:
        config = apply_overrides(load_config(config_path), overrides)
    else:
        config = config_from_cli(overrides, os.getcwd())
    view = None  # without a scheduler's variables the scheduler module is not even imported (~10 ms)
    met_job_id = None
    if config.framework.rendezvous is not None and config.framework.node_rank is None:
        if starting and membership is None:
            from npulaunch.plan.schedulers.c10d import Membership

            membership = Membership(config.framework.rendezvous)
        config, met_job_id = _meet(config, overrides, membership)
    nodes = config.framework
    nnodes = nodes.nnodes or 1
    several = nnodes > 1 or nodes.rendezvous is not None  # c10d: node 0 of its world, even alone
    if several and nodes.node_rank is not None and nodes.master_addr:
        from npulaunch.plan.schedulers.detect import flags_view

        met_at = config.sources.get("framework.node_rank", "") if nodes.rendezvous is not None else ""
        view = flags_view(nnodes, nodes.node_rank, nodes.master_addr, met_at)
    elif scheduler != "auto" or any(os.environ.get(name) for name in SCHEDULER_MARKERS):
        import socket

        from npulaunch.plan.schedulers.detect import detect
        from npulaunch.plan.schedulers.view import SchedulerKind

        view = detect(os.environ, socket.gethostname(), None if scheduler == "auto" else scheduler)
        if view.kind is SchedulerKind.NONE:
            view = None
    node, local_names = None, tuple(LOCAL_HOST_NAMES)
    if view is not None and view.kind in ("volcano", "k8s") and os.environ.get("RANK_TABLE_FILE"):
        config, view = _mindx(config, view, os.environ["RANK_TABLE_FILE"])
    mpirun = config.transport.value == "mpirun"
    transport = "mpirun" if mpirun and view is None else ""  # one node of a scheduler's job reaches no host
    if view is not None and not rank_mode and holds_allocation(config, view):
        from npulaunch.plan.schedulers.allocation import controller_config

        if mpirun:
            raise UsageError(
                f"transport mpirun ({config.sources.get('transport', 'yaml')}) in a Slurm allocation npulaunch "
                "holds: it starts its nodes' agents as job steps (srun); drop transport: mpirun (--transport)"
            )
        config, transport = controller_config(config, view), "srun"
    elif view is not None:
        config, node, view = _allocated(config, view, rank_mode)
        # this node is its own host; another node's, even when named 127.0.0.1 (--master-addr), is not
        others = {h.host for index, h in enumerate(config.hosts) if index != node}
        local_names = (config.hosts[node].host,) + tuple(name for name in local_names if name not in others)
    if met_job_id is not None and met_job_id != overrides.job_id:
        job_id, source = met_job_id, "node 0's, at the c10d rendezvous"
    elif overrides.job_id is not None:
        job_id, source = overrides.job_id, "cli"
    elif config.job.id is not None:
        job_id, source = config.job.id, "yaml"
    elif view is not None and view.job_id is not None:
        job_id, source = view.job_id, f"scheduler ({view.sources.get('job_id', view.kind.value)})"
    elif node is not None and len(config.hosts) > 1:
        raise UsageError(
            f"under {view.kind.value if view else 'a scheduler'} every node must use the same job id, "
            "and the scheduler gives none: pass --job-id or set job.id"
        )
    else:
        job_id = default_job_id(config.job.name, time.time(), os.path.exists, config.job.log_dir)
        source = "default (job.name and the time)"
    if starting and node is not None and view is not None and _exchange_needed(config, node):
        from npulaunch.plan.layout import JobLayout

        config = _exchange_device_ips(config, node, JobLayout.under(config.job.log_dir, job_id, node), view)
    if membership is None or membership.met is None:
        return Loaded(config, job_id, source, node, local_names, view, transport, rank_mode)

    def again() -> Loaded:
        return load(config_path, overrides, scheduler, rank_mode, starting, membership)

    return Loaded(
        config, job_id, source, node, local_names, view, transport, rank_mode, membership, again, membership.attempt
    )


def _meet(
    config: "ClusterConfig", overrides: Overrides, membership: "Optional[Membership]"
) -> "Tuple[ClusterConfig, Optional[str]]":
    """torchrun's c10d rendezvous (one npulaunch per node, no node rank): when the job starts, meet the
    other nodes and take the node rank, the number of nodes, node 0's store address and the job id they
    agree on (plan/schedulers/c10d.py); for plan and check, this node shown as node 0, the rest unknown."""
    import sys
    import time
    from dataclasses import replace

    from npulaunch.plan.launchplan import default_job_id

    rdzv = config.framework.rendezvous
    assert rdzv is not None
    where = f"the c10d rendezvous {rdzv.run_id!r} at {rdzv.host}:{rdzv.port}"
    sources = dict(config.sources)
    if membership is None:
        later = f"decided at {where} when the job starts"
        sources["framework.node_rank"] = f"{later} (shown: node 0)"
        sources["framework.nnodes"] = f"{later}, {rdzv.min_nodes} to {rdzv.max_nodes} (shown: {rdzv.max_nodes})"
        sources["framework.master_addr"] = f"{later}: node 0's address (shown: the endpoint's)"
        sources["framework.master_port"] = f"{later}: a free port of node 0"
        framework = replace(config.framework, node_rank=0)
        nodes = f"{rdzv.min_nodes} to {rdzv.max_nodes}" if rdzv.min_nodes < rdzv.max_nodes else str(rdzv.max_nodes)
        note = (
            f"torchrun's c10d rendezvous: when the job starts, this node meets the others at {rdzv.host}:{rdzv.port} "
            f"(the npulaunch of that host serves it) and is given its node rank, the number of nodes ({nodes}) and "
            f"node 0's store address (join_timeout {rdzv.join_timeout_s:g} s, last call {rdzv.last_call_s:g} s): "
            "shown here as node 0"
        )
        return replace(config, framework=framework, sources=sources, notes=config.notes + (note,)), None
    devices = config.hosts[0].devices
    nproc = len(devices) if isinstance(devices, tuple) else 0  # 0: every NPU of the host
    proposed = overrides.job_id or config.job.id
    if proposed is None:
        proposed = default_job_id(config.job.name, time.time(), os.path.exists, config.job.log_dir)
    met = membership.meet(nproc, proposed, say=lambda line: print(f"npulaunch: {line}", file=sys.stderr, flush=True))
    node0 = met.nodes[0]
    serving = ", this npulaunch, which serves the rendezvous' store" if met.served else ""
    again = f" (round {met.round})" if met.round else ""
    said = (
        f"{where}{again}: node {met.node_rank} of {met.nnodes} after {met.waited_s:.1f} s; node 0 is "
        f"{node0['addr']} (pid {node0['pid']}){serving}"
    )
    print(f"npulaunch: {said}", file=sys.stderr, flush=True)
    for name in ("node_rank", "nnodes", "master_addr", "master_port"):
        sources[f"framework.{name}"] = where
    framework = replace(
        config.framework,
        nnodes=met.nnodes,
        node_rank=met.node_rank,
        master_addr=met.master_addr,
        master_port=met.master_port,
    )
    return replace(config, framework=framework, sources=sources), met.job_id


def holds_allocation(config: "ClusterConfig", view: "SchedulerView") -> bool:
    """Whether this npulaunch is the one that holds a Slurm allocation (the batch script's, or salloc's shell:
    no job step of its own) and runs the job on its nodes as job steps: when the job has several nodes or
    spare nodes. On one node without spares it runs the job there itself, as node mode does."""
    from npulaunch.plan.schedulers.view import SchedulerKind

    in_step = any(os.environ.get(name) for name in ("SLURM_STEP_ID", "SLURM_STEPID"))
    if view.kind is not SchedulerKind.SLURM or in_step:
        return False
    return (view.node_count or 1) > 1 or bool(config.slurm.get("spare_nodes"))


RANK_TABLE_WAIT_S = 600.0  # how long the MindX operator may take to fill in its rank table


def _exchange_needed(config: "ClusterConfig", node: int) -> bool:
    from npulaunch.plan.schedulers.allocation import exchange_needed

    return exchange_needed(config, node)


def _mindx(config: "ClusterConfig", view: "SchedulerView", path: str) -> "Tuple[ClusterConfig, SchedulerView]":
    """Under Volcano / Kubernetes with Ascend's MindX operator: wait until the rank table it mounts
    is complete, then take the job's hosts, devices and device IPs from it."""
    import socket

    from npulaunch.plan.schedulers.volcano import hosts_from_rank_table, node_in_rank_table, wait_for_rank_table

    table = wait_for_rank_table(path, float(os.environ.get("NPULAUNCH_RANK_TABLE_WAIT_S", RANK_TABLE_WAIT_S)))
    config = hosts_from_rank_table(config, table, path)
    names = [socket.gethostname()]
    try:
        names.append(socket.gethostbyname(socket.gethostname()))
    except OSError:
        pass
    return config, node_in_rank_table(config, view, names)


RENDEZVOUS_TIMEOUT_S = 600.0  # nodes of one allocation start within seconds; 10 min covers slow file systems


def _exchange_device_ips(
    config: "ClusterConfig", node: int, layout: "JobLayout", view: "SchedulerView"
) -> "ClusterConfig":
    """Every node reads its own NPUs' addresses and they swap them through the job directory."""
    from dataclasses import replace

    from npulaunch.host.discovery import discover_device_ips
    from npulaunch.plan.schedulers.rendezvous import exchange

    me = config.hosts[node]
    assert isinstance(me.devices, tuple), "the allocation's config lists every node's devices"
    ips = me.device_ips if me.device_ips is not None else discover_device_ips(me.devices)
    epoch = "/".join(v for k, v in sorted(view.sources.items()) if k in ("job_id", "hosts"))
    timeout = float(os.environ.get("NPULAUNCH_RENDEZVOUS_TIMEOUT_S", RENDEZVOUS_TIMEOUT_S))
    records = exchange(
        layout, node, len(config.hosts), {"host": me.host, "device_ips": list(ips) if ips else None}, timeout, epoch
    )
    hosts = tuple(
        replace(h, device_ips=tuple(r["device_ips"])) if h.device_ips is None and r["device_ips"] else h
        for h, r in zip(config.hosts, records)
    )
    sources = dict(config.sources)
    for index, (before, after) in enumerate(zip(config.hosts, hosts)):
        if before.device_ips is None and after.device_ips is not None:
            sources[f"hosts[{index}].device_ips"] = f"hccn_tool on {after.host}, exchanged in {layout.rendezvous_dir}"
    return replace(config, hosts=hosts, sources=sources)


def _allocated(
    config: "ClusterConfig", view: "SchedulerView", rank_mode: bool
) -> "Tuple[ClusterConfig, int, SchedulerView]":
    """The config on the scheduler's nodes, refusing the ways of starting npulaunch that would run
    ranks twice or on one node only."""
    from npulaunch.host.discovery import discover_usable_devices
    from npulaunch.plan.schedulers.allocation import rank_mode_view, scheduler_config, view_sources

    if rank_mode:
        view = rank_mode_view(view)
    else:
        if view.local_size not in (None, 1):
            raise UsageError(
                f"{view.kind.value} started {view.local_size} tasks on this node ({view_sources(view)}); "
                "npulaunch run starts a node's ranks itself: one task per node (srun "
                "--ntasks-per-node=1, mpirun --map-by ppr:1:node), or npulaunch exec for one task per "
                "rank"
            )
    return scheduler_config(config, view, discover_usable_devices, rank_mode) + (view,)


def _resolve_host(name: str) -> Optional[str]:
    """A host name's IPv4 address from this machine's name service, or None."""
    import socket

    try:
        return socket.gethostbyname(name)
    except OSError:
        return None


def address_toward(address: str) -> Optional[str]:
    """This host's own address on the route to ``address`` (a UDP socket's connect sends nothing), or None."""
    import socket

    try:
        target = socket.gethostbyname(address)
        with socket.socket(socket.AF_INET, socket.SOCK_DGRAM) as sock:
            sock.connect((target, 9))
            return str(sock.getsockname()[0])
    except OSError:
        return None


def planner(loaded: Loaded, remote: Optional[Mapping[str, Mapping[str, Any]]] = None) -> "Callable[..., LaunchPlan]":
    """(attempt, exclusions) -> plan (a restarted job is planned again: fresh ports, its own directory; a
    recovered one without what was excluded). ``remote``: what the remote hosts' preflight found (their
    NPUs and device IPs)."""
    import shutil

    from npulaunch.host.discovery import (
        discover_device_ips,
        discover_usable_devices,
        free_loopback_ports,
    )
    from npulaunch.plan.build import build_plan
    from npulaunch.plan.faulthistory import job_history
    from npulaunch.plan.launchplan import Discovery

    config, job_id, source = loaded.config, loaded.job_id, loaded.job_id_source
    known_ips: "Dict[int, str]" = {}

    def device_ips(devices: "Sequence[int]") -> "Optional[Tuple[str, ...]]":
        """This host's NPU addresses, each asked of hccn_tool once in the job (a re-planned attempt
        after a recovery asks only for the spares it now uses)."""
        wanted = [d for d in devices if d not in known_ips]
        found = discover_device_ips(wanted) if wanted else ()
        if found is None:
            return None
        known_ips.update(zip(wanted, found))
        return tuple(known_ips[d] for d in devices)

    discovery = Discovery(
        devices=discover_usable_devices,
        device_ips=device_ips,
        free_ports=free_loopback_ports,
        npu_present=lambda: shutil.which("npu-smi") is not None,
        remote=remote,
        local_names=loaded.local_names,
        resolve=_resolve_host,
        address_toward=address_toward,
    )
    # attempts have directories of their own when there may be more than one: restarts, recoveries, and the
    # c10d rendezvous, whose world may re-form
    restarted = (
        config.job.max_restarts > 0
        or recoverable(config, loaded.node, loaded.transport)
        or loaded.membership is not None
    )
    first: "List[LaunchPlan]" = []  # attempt 1 is planned once, whoever asks first
    history = job_history(config, loaded.node)  # what the fault history keeps off, read once for every attempt

    def build(attempt: int, exclusions: "Sequence[Exclusion]") -> "LaunchPlan":
        plan = build_plan(
            config,
            job_id,
            os.urandom(16).hex(),
            discovery,
            job_id_source=source,
            attempt=attempt,
            node=loaded.node,
            exclusions=[*history.exclusions(), *exclusions],
            agents=not loaded.rank_mode,
        )
        return _checked_identity(loaded, history.told(plan))

    def plan_for(attempt: int, exclusions: "Sequence[Exclusion]" = ()) -> "LaunchPlan":
        if attempt > 1:
            return build(attempt, exclusions)
        if not first:
            first.append(build(max(1, loaded.attempt) if restarted else 0, ()))
        return first[0]

    return plan_for


def _checked_identity(loaded: Loaded, plan: "LaunchPlan") -> "LaunchPlan":
    """The plan with warnings about identity variables the launcher inherited and its local ranks
    would see (plan/identity.py); a PlanError when one would make the job wrong. Under a scheduler
    the environment is the scheduler's own and is read by the scheduler support instead."""
    from dataclasses import replace

    from npulaunch.config.cluster import RankTableMode
    from npulaunch.host.errors import PlanError
    from npulaunch.plan.identity import identity_findings

    config = loaded.config
    if loaded.node is not None or not any(host.host in loaded.local_names for host in config.hosts):
        return plan
    errors, warnings = identity_findings(
        os.environ, config.env, config.rank_table is RankTableMode.CM, config.cpu_fallback
    )
    if errors:
        raise PlanError("; ".join(errors))
    return replace(plan, warnings=plan.warnings + tuple(warnings)) if warnings else plan


def recoverable(config: "ClusterConfig", node: Optional[int] = None, transport: str = "") -> bool:
    """Whether a fault of the hardware can be recovered from: there are spares to take what broke, or the
    job may shrink, and npulaunch places the whole job (over SSH or with mpirun: each attempt's agents are
    started on the hosts it has; under a scheduler the scheduler places the nodes); or npulaunch holds a Slurm
    allocation, and requeues the job without what broke."""
    if node is not None or config.recovery.max_recoveries == 0:
        return False
    if transport == "srun":
        return True
    spares = bool(config.spares) or any(h.spare_devices for h in config.hosts)
    return spares or config.recovery.shrink_min_ranks is not None


def is_remote(loaded: Loaded) -> bool:
    """Whether npulaunch starts ranks on other hosts itself, over SSH, as Slurm job steps or with mpirun (not as
    one node of a scheduler's job)."""
    return loaded.node is None and any(host.host not in loaded.local_names for host in loaded.config.hosts)
