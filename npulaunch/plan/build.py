"""build_plan: ClusterConfig (+ job id, discovery results) -> LaunchPlan, one RankSpec per rank.

Pure and deterministic: the same inputs give the same plan on every node. Discovery is passed
in as data-returning callables; nothing here spawns ranks or writes files.
"""

from __future__ import annotations

import json
from dataclasses import replace
from typing import Any, Callable, Dict, List, Optional, Sequence, Tuple

from npulaunch.config.cluster import (
    ClusterConfig,
    Framework,
    Injection,
    RankTableMode,
    RestartOn,
    validate_job_id,
)
from npulaunch.config.sections import DEFAULT_HEALTH_INTERVAL_S, DEFAULT_STRAGGLERS
from npulaunch.host import timing
from npulaunch.host.errors import ConfigError, ConfigProblem
from npulaunch.host.spec import INJECT_DIR, INJECTION_TOKEN, RankSpec
from npulaunch.host.topology import BindingError, HostCpus, plan_cpus, read_host_cpus
from npulaunch.plan.frameworks import contract_of
from npulaunch.plan.hosts import check_device_groups, map_devices, resolve_devices, resolve_ips
from npulaunch.plan.launchplan import Discovery, HostDevices, LaunchPlan
from npulaunch.plan.layout import JobLayout
from npulaunch.plan.placement import Arrangement, Exclusion, arrange, needs_arranging
from npulaunch.plan.rankenv import Meeting
from npulaunch.plan.rankfree import CM_VARIABLES, ClusterInfo, cm_env_problems, decide_cluster_info
from npulaunch.plan.rankspecs import HostSlot, RankJob, job_specs, shared_options
from npulaunch.plan.tabledecision import decide_rank_table


def build_plan(
    config: ClusterConfig,
    job_id: str,
    job_uuid: str,
    discovery: Discovery,
    job_id_source: str = "default",
    attempt: int = 0,
    node: Optional[int] = None,
    host_cpus: Optional[Callable[[bool], HostCpus]] = None,
    exclusions: Sequence[Exclusion] = (),
    agents: bool = True,
) -> LaunchPlan:
    """Expand the config into ranks. Raises ConfigError/PlanError; never starts anything.
    ``node``: under a scheduler, the index of the node this plan is run on. ``host_cpus``: this
    host's CPU facts (host/topology.py; the argument says whether the NPUs' places are needed),
    read from the machine by default. ``exclusions``: NPUs and hosts a recovery took out of the job:
    spares take their place (plan/placement.py; NoSpare when none fits). ``agents``: npulaunch's agents start
    the ranks (not ``npulaunch exec``'s rank mode), so the first host's may serve the job's TCPStore."""
    problems: List[ConfigProblem] = []
    validate_job_id(
        job_id, lambda found, allowed, hint: problems.append(config.problem(("job", "id"), found, allowed, hint))
    )
    framework = contract_of(config)
    problems += framework.refuse(config)
    if problems:
        raise ConfigError(problems)

    sources: Dict[str, str] = {"job_id": job_id_source}
    sources.update(config.sources)
    notes: List[str] = []
    device_warnings: List[str] = []
    arrangement = None
    if needs_arranging(config, exclusions):
        arrangement = arrange(
            config, exclusions, lambda index, host: resolve_devices(config, index, host, discovery, sources)
        )
        config = replace(config, hosts=arrangement.hosts)
        notes += [f"recovery: {change}" for change in arrangement.changes]
    host_devices = tuple(  # physical -> logical -> ASCEND_DEVICE_ID (plan/hosts.py)
        map_devices(config, host, resolve_devices(config, index, host, discovery, sources), discovery, device_warnings)
        for index, host in enumerate(config.hosts)
    )
    devices_by_host = [mapped.physical for mapped in host_devices]
    check_device_groups(config, devices_by_host, device_warnings)
    ips_by_host = [
        resolve_ips(host, devices, discovery, sources, index)
        for index, (host, devices) in enumerate(zip(config.hosts, devices_by_host))
    ]

    layout = JobLayout.under(config.job.log_dir, job_id, node, attempt)
    job_dir = layout.job_dir
    unprobed = discovery.remote is None and any(
        ips is None and host.host not in discovery.local_names for host, ips in zip(config.hosts, ips_by_host)
    )
    needed = framework.table_needed(config)
    # under a scheduler nothing reads the other nodes' device IPs later: a table the framework can do
    # without is left out at once
    table, table_path, table_version, table_reason = decide_rank_table(
        config, devices_by_host, ips_by_host, layout, notes, discovery, unprobed and (node is None or needed), needed
    )
    world_size = sum(len(devices) for devices in devices_by_host)
    # CM_CHIEF_DEVICE: the chief rank's own device as its process opens it (ASCEND_DEVICE_ID)
    user_devices = [mapped.user for mapped in host_devices]
    cluster = _cluster_info(config, user_devices, discovery, sources, notes, unprobed=node is None)
    warnings: List[str] = []
    if config.session_options or config.env or config.warnings:  # the catalog costs ~15 ms to import
        from npulaunch.plan.rankoptions import check_job_options, shared_dir_warnings

        errors, warnings = check_job_options(config, world_size)
        if errors:
            raise ConfigError(errors)
    warnings = device_warnings + list(warnings)
    tf_configs = _cpu_fallback(config, devices_by_host, discovery, notes, warnings) if config.cpu_fallback else []
    cpus_by_host = _bind_cpus(config, host_devices, discovery, host_cpus or read_host_cpus, notes)
    texts = [*config.job.command, config.job.workdir, *config.job.make_dirs, *(v for v in config.env.values() if v)]
    templated = any("{" in text for text in texts)
    hooks = rank_hooks(config)
    meeting = None
    if framework.meets(config):
        from npulaunch.plan.frameworks.meeting import decide_meeting

        meeting = decide_meeting(config, discovery, framework.DEFAULT_PORT or 0, sources, notes, node)
        if agents and config.framework.name is Framework.PYTORCH:
            from dataclasses import replace as replaced

            from npulaunch.plan.frameworks.pytorch import agent_store

            serve, why = agent_store()
            meeting = replaced(meeting, served=serve)
            sources["TORCHELASTIC_USE_AGENT_STORE"] = why
    job = RankJob(
        config,
        job_id,
        job_uuid,
        layout,
        table_path,
        world_size,
        cluster,
        templated,
        shared_options(config),
        cpu_request=config.job.cpu_binding.to_dict(),
        prepend=({"PYTHONPATH": INJECTION_TOKEN} if hooks else {}, {"PYTHONPATH": INJECT_DIR} if hooks else {}),
        hooks=hooks,
        framework=framework,
        meeting=meeting,
        node_count=config.framework.nnodes or len(config.hosts),
        inherited=discovery.environ(),
    )
    slots = [
        HostSlot(host.host, node_rank, mapped.user, host.host in discovery.local_names, cpus, mapped.logical)
        for node_rank, (host, mapped, cpus) in enumerate(zip(config.hosts, host_devices, cpus_by_host))
    ]
    ranks, helpers = job_specs(job, slots, [mapped.physical for mapped in host_devices], tf_configs)
    if config.framework.name is Framework.TENSORFLOW:
        from npulaunch.plan.frameworks.tensorflow import shard_formula_note

        shard_note = shard_formula_note([(r.rank, r.node_rank, r.device_id) for r in ranks], world_size)
        if shard_note:
            notes.append(shard_note)
    notes.extend(_framework_notes(config, meeting, helpers))
    if config.session_options or config.data_preprocess:  # the rules again, on what each rank will get
        from npulaunch.plan.rankoptions import check_rank_options

        rank_errors = check_rank_options(config, world_size, [(r.rank, r.session_options) for r in ranks])
        if rank_errors:
            raise ConfigError(rank_errors)
    startup_s, steady_s = hang_limits(config, sources)
    if config.data_preprocess:
        notes.append(
            "data_preprocess: host_main: every rank gets local_rank_id (its rank on its host) and "
            "local_device_list (its host's devices, which the host's main process feeds)"
        )
    if config.session_options:
        warnings.extend(shared_dir_warnings([(r.host, r.rank, r.session_options) for r in ranks]))
    _session_notes(config, devices_by_host, notes, warnings)
    notes.extend(restart_notes(config))
    notes.extend(config.notes)
    return LaunchPlan(
        job_id=job_id,
        job_uuid=job_uuid,
        job_name=config.job.name,
        job_dir=job_dir,
        config_source=config.source,
        world_size=world_size,
        hosts=tuple(h.host for h in config.hosts),
        ranks=tuple(ranks),
        rank_table=table,
        rank_table_path=table_path,
        grace_period_s=config.job.grace_period_s,
        console=config.job.console,
        forward_signals=config.job.forward_signals,
        sources=sources,
        notes=tuple(notes),
        warnings=tuple(warnings),
        hang_startup_s=startup_s,
        hang_steady_s=steady_s,
        patterns=tuple(config.monitor.get("patterns", ())),
        attempt=attempt,
        progress_regex=config.monitor.get("progress_regex") or "",
        max_restarts=config.job.max_restarts,
        restart_on=config.job.restart_on.value,
        crash_loop_limit=config.job.crash_loop_limit,
        local_names=tuple(discovery.local_names),
        node=node,
        host_devices=host_devices,
        rank_table_version=table_version,
        rank_table_reason=table_reason,
        health_interval_s=_health_interval(config),
        stragglers=stragglers_of(config),
        recovery=_recovery_facts(config, arrangement, exclusions),
        helpers=tuple(helpers),
        framework=config.framework.name.value,
        meeting=None if meeting is None else (meeting.address, meeting.port),
        store_port=meeting.port if meeting is not None and meeting.served else None,
        timing=timing.overrides(),
    )


def _framework_notes(config: ClusterConfig, meeting: Optional[Meeting], helpers: Sequence[RankSpec]) -> List[str]:
    """What the plan says of the framework's start-up (`npulaunch plan` lists its variables)."""
    framework = config.framework
    if framework.name is Framework.TENSORFLOW:
        return []
    notes = []
    if meeting is not None:
        what = "the scheduler"
        if framework.name is Framework.PYTORCH:
            what = "the TCPStore rank 0 hosts"
            if meeting.served:
                what = f"the TCPStore npulaunch's agent on {config.hosts[0].host} serves before any rank starts"
        notes.append(f"the processes meet at {what}: {meeting.address}:{meeting.port}")
    for helper in helpers:
        notes.append(
            f"msrun's scheduler runs on {helper.host} (MS_ROLE=MS_SCHED, the same command, not a rank): "
            f"its output is in {helper.rank_dir}"
        )
    return notes


def stragglers_of(config: ClusterConfig) -> Optional[Dict[str, Any]]:
    """monitor.stragglers: on (warn) unless the YAML turns it off."""
    given = config.monitor.get("stragglers", DEFAULT_STRAGGLERS)
    return None if given is None else dict(given)


def rank_hooks(config: ClusterConfig) -> Tuple[str, ...]:
    """What the ranks' injection hook installs (host/inject/sitecustomize.py): the session options'
    merge (session_injection: auto) and the pace of each step (monitor.stragglers)."""
    wanted = (("session", config.session_injection is Injection.AUTO), ("pace", stragglers_of(config) is not None))
    return tuple(name for name, on in wanted if on)


def _health_interval(config: ClusterConfig) -> float:
    """monitor.health_interval_s: by default 0 (off) for a job that uses no NPU (cpu_fallback)."""
    if config.cpu_fallback and "health_interval_s" not in config.monitor:
        return 0.0
    return float(config.monitor.get("health_interval_s", DEFAULT_HEALTH_INTERVAL_S))


def _recovery_facts(
    config: ClusterConfig, arrangement: Optional[Arrangement], exclusions: Sequence[Exclusion]
) -> Dict[str, Any]:
    """What plan.json, ``npulaunch plan`` and the recovery loop know of the job's recovery: its settings,
    the spares still held back, what was excluded and what moved."""
    recovery = config.recovery
    facts: Dict[str, Any] = {
        "max_recoveries": recovery.max_recoveries,
        "checkpoint_dir": recovery.checkpoint_dir,
        "shrink_min_ranks": recovery.shrink_min_ranks,
        "excluded": [e.to_json() for e in exclusions],
    }
    if arrangement is not None:
        facts.update(arrangement.to_json())
    return facts


def _cluster_info(
    config: ClusterConfig,
    devices_by_host: Sequence[Tuple[int, ...]],
    discovery: Discovery,
    sources: Dict[str, str],
    notes: List[str],
    unprobed: bool,
) -> Optional[ClusterInfo]:
    """Rank-table-free jobs: the CM_* values (plan/rankfree.py). Other jobs: refuse CM_* in the env."""
    if config.rank_table is not RankTableMode.CM:
        if any(name in config.env for name in CM_VARIABLES):
            raise ConfigError(cm_env_problems(config, False))
        return None
    local_only = all(h.host in discovery.local_names for h in config.hosts)
    remote = discovery.remote or {}
    addresses = {h.host: remote[h.host]["address"] for h in config.hosts if remote.get(h.host, {}).get("address")}
    for host in config.hosts:
        if host.host not in discovery.local_names and host.host not in addresses:
            found = discovery.resolve(host.host)
            if found is not None:
                addresses[host.host] = found
    free = discovery.free_ports(1)[0] if local_only and "CM_CHIEF_PORT" not in config.env else None
    unprobed = unprobed and discovery.remote is None  # over SSH, without the preflight yet (npulaunch plan)
    cluster = decide_cluster_info(config, devices_by_host, discovery.local_names, addresses, free, sources, unprobed)
    notes.append(
        f"rank-table-free (rank_table: cm): HCCL forms the cluster from CM_CHIEF_IP={cluster.chief_ip}, "
        f"CM_CHIEF_PORT={cluster.chief_port}, CM_CHIEF_DEVICE={cluster.chief_device} (the first host's first "
        f"device), CM_WORKER_SIZE={cluster.worker_size} and each host's CM_WORKER_IP; RANK_ID, RANK_SIZE and "
        "RANK_TABLE_FILE are not set, and HCCL numbers the ranks itself (by host address, then device): a script "
        "reads its rank from HCCL (get_rank_id), not from the environment"
    )
    notes.append(
        "rank_table: cm: a script that reads RANK_SIZE or RANK_ID must read something else: the world size is "
        f"CM_WORKER_SIZE (also RANK_SIZES={cluster.worker_size}, the name ModelZoo's rank-table-free scripts "
        "switch their models to), the data shard DEVICE_INDEX (also RANK_IDS): npulaunch's rank 0..N-1, which "
        "need not be HCCL's rank id"
    )
    return cluster


def _session_notes(
    config: ClusterConfig, devices_by_host: Sequence[Tuple[int, ...]], notes: List[str], warnings: List[str]
) -> None:
    """What the plan says about how the session options reach the ranks."""
    if config.session_injection is Injection.AUTO:
        notes.append(
            f"session_injection: auto: ranks start with {INJECT_DIR} first on PYTHONPATH; its "
            "sitecustomize merges the options into every TensorFlow session"
        )
    stragglers = stragglers_of(config)
    if stragglers is not None:
        notes.append(
            f"monitor.stragglers ({stragglers['action']}): ranks start with {INJECT_DIR} first on "
            "PYTHONPATH; its sitecustomize times each step (torch DDP, TensorFlow's MonitoredSession, MindSpore's "
            "Model.train; any loop that calls npulaunch.session.step()), and the launcher names a rank slower than "
            "its peers (off: monitor.stragglers: off)"
        )
    if "session_device_id" in config.session_options:
        device = config.session_options["session_device_id"]
        notes.append(
            f"session_device_id {device} overrides ASCEND_DEVICE_ID: every rank's session uses device "
            f"{device}, whatever its DEVICE_ID"
        )
        if any(len(devices) > 1 for devices in devices_by_host):
            warnings.append(f"warning: session_device_id {device} puts every rank of a host on the same device")


COMPILE_ALLOWANCE_S = 1800  # graph compilation before the first line, on top of HCCL's connect timeout
STEADY_MARGIN_S = 60  # beyond the job's own longest timeout


def hang_limits(config: ClusterConfig, sources: Dict[str, str]) -> Tuple[float, float]:
    """(start-up, steady) limits of the hang watchdog: the YAML's / CLI's, or derived from the job's
    own timeouts, so that npulaunch never declares a hang before CANN itself would time out."""
    from npulaunch.config.timeouts import exec_timeout, parse_version  # small, no further imports

    version = parse_version(config.cann_version) if config.cann_version else None
    env = {"HCCL_CONNECT_TIMEOUT": "600", "HCCL_EXEC_TIMEOUT": str(exec_timeout(config.product, version).default_s)}
    env.update({k: v for k, v in config.env.items() if v is not None})
    startup = config.monitor.get("startup_timeout_s")
    if startup is None:
        startup = float(env["HCCL_CONNECT_TIMEOUT"]) + 20 + COMPILE_ALLOWANCE_S
        sources["monitor.startup_timeout_s"] = "derived (HCCL_CONNECT_TIMEOUT + 20 s + compilation allowance)"
    steady = config.monitor.get("hang_timeout_s")
    if steady is None:
        options = config.session_options
        collective_s = float(options.get("hccl_timeout", env["HCCL_EXEC_TIMEOUT"]))
        stream_s = float(options.get("stream_sync_timeout", -1)) / 1000.0
        steady = max(collective_s, stream_s) + STEADY_MARGIN_S
        sources["monitor.hang_timeout_s"] = "derived (the job's longest collective / stream-sync timeout + 60 s)"
    return float(startup), float(steady)


def _cpu_fallback(
    config: ClusterConfig,
    devices_by_host: Sequence[Tuple[int, ...]],
    discovery: Discovery,
    notes: List[str],
    warnings: List[str],
) -> List[Dict[str, str]]:
    """TF_CONFIG for every rank: one TensorFlow worker per rank, on a free port of its host."""
    world_size = sum(len(d) for d in devices_by_host)
    ports = list(discovery.free_ports(world_size))
    workers: List[str] = []
    for host, devices in zip(config.hosts, devices_by_host):
        address = "127.0.0.1" if host.host in discovery.local_names else host.host
        workers.extend(f"{address}:{ports[len(workers)]}" for _ in devices)
    notes.append(f"cpu_fallback: ranks train on the CPU with TensorFlow collectives; workers {', '.join(workers)}")
    if discovery.npu_present():
        warnings.append(
            "warning: cpu_fallback is on although this host has NPUs (npu-smi is on PATH): the job trains on the CPU"
        )
    return [
        {
            "TF_CONFIG": json.dumps(
                {"cluster": {"worker": workers}, "task": {"type": "worker", "index": rank}}, separators=(",", ":")
            ),
            "NPULAUNCH_CPU_FALLBACK": "1",
        }
        for rank in range(world_size)
    ]


def _bind_cpus(
    config: ClusterConfig,
    host_devices: Sequence[HostDevices],
    discovery: Discovery,
    read_local: Callable[[bool], HostCpus],
    notes: List[str],
) -> List[Optional[List[Tuple[int, ...]]]]:
    """job.cpu_binding: each host's ranks' CPUs (() unbound), or None for a host whose CPUs are not known
    here (a remote host not probed): its agent decides with the same rules when the job starts."""
    binding = config.job.cpu_binding
    local: List[HostCpus] = []
    result: List[Optional[List[Tuple[int, ...]]]] = []
    problems: List[ConfigProblem] = []
    for host, mapped in zip(config.hosts, host_devices):
        facts: Optional[HostCpus] = None
        if host.host in discovery.local_names:
            local = local or [read_local(binding.mode == "auto")]
            facts = local[0]
        elif (discovery.remote or {}).get(host.host, {}).get("cpu_topology"):
            facts = HostCpus.from_dict((discovery.remote or {})[host.host]["cpu_topology"])
        try:
            cpus, said = plan_cpus(binding, host.host, mapped.physical, facts)
        except BindingError as exc:
            where = ("command line", None, "--cpu-binding") if config.sources.get("job.cpu_binding") == "cli" else None
            problems.append(
                ConfigProblem(*where, exc.found, exc.allowed, exc.hint)
                if where
                else config.problem(("job", "cpu_binding"), exc.found, exc.allowed, exc.hint)
            )
            continue
        notes.extend(said)
        result.append(cpus)
    if problems:
        raise ConfigError(problems)
    return result


def restart_notes(config: ClusterConfig) -> List[str]:
    """What job.max_restarts restarts after, said whenever it may restart (and which rule decides)."""
    restarts, on = config.job.max_restarts, config.job.restart_on
    if restarts == 0:
        return []
    times = f"up to {restarts} time{'' if restarts == 1 else 's'}"
    if on is RestartOn.ANY:
        return [
            f"restarts: {times} after any failure of a rank (job.restart_on: any, torchrun's meaning); "
            f"each rank's TORCHELASTIC_RESTART_COUNT counts them"
        ]
    return [
        f"restarts: {times}, only after a failure whose root cause a restart may cure (job.restart_on: retryable, "
        "the YAML's default; not after a Python exception or a killed rank: restart_on: any restarts after "
        "every failure, as torchrun does)"
    ]
