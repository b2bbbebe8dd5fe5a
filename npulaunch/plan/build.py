"""build_plan: ClusterConfig (+ job id, discovery results) -> LaunchPlan, one RankSpec per rank.

Pure and deterministic: the same inputs give the same plan on every node. Discovery is passed
in as data-returning callables; nothing here spawns ranks or writes files.
"""

from __future__ import annotations

import json
import time
from dataclasses import dataclass, field
from typing import Any, Callable, Dict, List, Mapping, Optional, Sequence, Tuple

from npulaunch.config.cluster import (
    ClusterConfig,
    ConsoleMode,
    HostConfig,
    Injection,
    RankTableMode,
    validate_job_id,
)
from npulaunch.host.discovery import USABLE_HEALTH
from npulaunch.host.errors import ConfigError, ConfigProblem, PlanError
from npulaunch.host.spec import INJECT_DIR, INJECTION_TOKEN, HostPlan, RankSpec
from npulaunch.plan.layout import JobLayout
from npulaunch.plan.rankenv import RankContext, build_rank_env
from npulaunch.plan.ranktable import build_rank_table, rank_table_problems

LOCAL_HOST_NAMES = ("localhost", "127.0.0.1", "::1")
PRECEDENCE_VAR = "NPULAUNCH_SESSION_PRECEDENCE"
ATTEMPT_VAR = "NPULAUNCH_ATTEMPT"  # 1 for the first run of the job, 2 after the first restart, ...


@dataclass(frozen=True)
class Discovery:
    """How the plan learns about this host's NPUs; replaced by stand-ins in tests."""

    devices: Callable[[], Sequence[int]]  # logical ids of this host's devices
    device_ips: Callable[[Sequence[int]], Optional[Sequence[str]]]  # None when unknown
    local_names: Tuple[str, ...] = LOCAL_HOST_NAMES
    free_ports: Callable[[int], Sequence[int]] = lambda count: tuple(range(29500, 29500 + count))
    npu_present: Callable[[], bool] = lambda: False
    # What each remote host's preflight probe found ("npus": [[id, health], ...] or None,
    # "device_ips": {"id": address or None} or None); None when no host was probed (``plan``).
    remote: Optional[Mapping[str, Mapping[str, Any]]] = None


@dataclass(frozen=True)
class LaunchPlan:
    job_id: str
    job_uuid: str
    job_name: str
    job_dir: str
    config_source: str
    world_size: int
    hosts: Tuple[str, ...]
    ranks: Tuple[RankSpec, ...]
    rank_table: Optional[Dict[str, Any]]
    rank_table_path: Optional[str]
    grace_period_s: float
    console: ConsoleMode
    forward_signals: Tuple[str, ...]
    sources: Dict[str, str] = field(default_factory=dict)  # "job_id" -> "cli", "hosts[0].devices" -> ...
    notes: Tuple[str, ...] = ()  # decisions the user should know about (printed by plan/check/run)
    warnings: Tuple[str, ...] = ()  # likely mistakes that do not stop the job (printed, kept in plan.json)
    hang_startup_s: float = 0.0  # the hang watchdog's limits (0 = not watched)
    hang_steady_s: float = 0.0
    patterns: Tuple[Dict[str, Any], ...] = ()  # the job's own error signatures
    progress_regex: str = ""  # lines that count as progress (default: any line)
    attempt: int = 0  # 0: the job is not restarted; else the attempt number, 1 first
    max_restarts: int = 0
    local_names: Tuple[str, ...] = LOCAL_HOST_NAMES  # the hosts that are this machine
    node: Optional[int] = None  # under a scheduler (node mode): this node's index; only its ranks run here

    @property
    def layout(self) -> JobLayout:
        """Where every file of this attempt goes, as this launcher (this node) sees the job directory."""
        return JobLayout(self.job_dir, self.node, self.attempt)

    @property
    def attempt_dir(self) -> str:
        """Where this attempt's ranks, events and summary go: the job directory itself without
        restarts; under a scheduler, each node's own directory in it (nodes may share the file system)."""
        return self.layout.attempt_dir

    def host_plan(self, node_rank: int) -> HostPlan:
        """The share of one host's agent."""
        return HostPlan(
            job_id=self.job_id,
            job_uuid=self.job_uuid,
            host=self.hosts[node_rank],
            node_rank=node_rank,
            job_dir=self.job_dir,
            grace_period_s=self.grace_period_s,
            forward_signals=self.forward_signals,
            ranks=tuple(r for r in self.ranks if r.node_rank == node_rank),
            patterns=self.patterns,
            hang_startup_s=self.hang_startup_s,
            hang_steady_s=self.hang_steady_s,
            progress_regex=self.progress_regex,
            rank_table=self.rank_table,
            rank_table_path=self.rank_table_path,
        )

    def log_paths(self, spec: RankSpec) -> Tuple[str, str]:
        """Where the launcher finds a rank's stdout and stderr: its own files for a local rank, the
        copies gathered from the agent's stream for a remote one (both in the attempt's rank-N/)."""
        paths = self.layout.rank_paths(spec.rank)
        return paths.stdout, paths.stderr

    def is_local_only(self) -> bool:
        return all(host in self.local_names for host in self.hosts)

    @property
    def own_dir(self) -> str:
        """This launcher's part of the job directory: all of it, or this node's directory in it."""
        return self.layout.own_dir

    @property
    def this_host_plan(self) -> HostPlan:
        """What runs on this machine: the whole job on one host, or this node's share."""
        return self.host_plan(self.node or 0)


def default_job_id(name: str, now: float, exists: Callable[[str], bool], log_dir: str) -> str:
    """``<name>-<YYYYmmdd-HHMMSS>``, with ``-2``, ``-3``... when that job directory already exists."""
    base = f"{name}-{time.strftime('%Y%m%d-%H%M%S', time.localtime(now))}"
    candidate, suffix = base, 1
    while exists(JobLayout.under(log_dir, candidate).job_dir):
        suffix += 1
        candidate = f"{base}-{suffix}"
    return candidate


def build_plan(
    config: ClusterConfig,
    job_id: str,
    job_uuid: str,
    discovery: Discovery,
    job_id_source: str = "default",
    attempt: int = 0,
    node: Optional[int] = None,
) -> LaunchPlan:
    """Expand the config into ranks. Raises ConfigError/PlanError; never starts anything.
    ``node``: under a scheduler, the index of the node this plan is run on."""
    problems: List[ConfigProblem] = []
    validate_job_id(
        job_id, lambda found, allowed, hint: problems.append(config.problem(("job", "id"), found, allowed, hint))
    )
    if problems:
        raise ConfigError(problems)

    sources: Dict[str, str] = {"job_id": job_id_source}
    sources.update(config.sources)
    notes: List[str] = []
    devices_by_host = [
        _resolve_devices(config, index, host, discovery, sources) for index, host in enumerate(config.hosts)
    ]
    ips_by_host = [
        _resolve_ips(host, devices, discovery, sources, index)
        for index, (host, devices) in enumerate(zip(config.hosts, devices_by_host))
    ]

    layout = JobLayout.under(config.job.log_dir, job_id, node, attempt)
    job_dir = layout.job_dir
    unprobed = discovery.remote is None and any(
        ips is None and host.host not in discovery.local_names for host, ips in zip(config.hosts, ips_by_host)
    )
    table, table_path = _decide_rank_table(config, devices_by_host, ips_by_host, layout, notes, unprobed)
    world_size = sum(len(devices) for devices in devices_by_host)
    warnings: List[str] = []
    if config.session_options or config.env or config.warnings:  # the catalog costs ~15 ms to import
        from npulaunch.plan.rankoptions import check_job_options, shared_dir_warnings

        errors, warnings = check_job_options(config, world_size)
        if errors:
            raise ConfigError(errors)
    tf_configs = _cpu_fallback(config, devices_by_host, discovery, notes, warnings) if config.cpu_fallback else []
    job = _Job(config, job_id, job_uuid, layout, table_path, world_size)
    ranks: List[RankSpec] = []
    for node_rank, (host, devices) in enumerate(zip(config.hosts, devices_by_host)):
        for local_rank, device_id in enumerate(devices):
            slot = _Slot(
                len(ranks), host.host, node_rank, local_rank, device_id, devices, host.host in discovery.local_names
            )
            ranks.append(_rank_spec(job, slot, tf_configs[slot.rank] if tf_configs else {}))
    startup_s, steady_s = hang_limits(config, sources)
    if config.data_preprocess:
        notes.append(
            "data_preprocess: host_main: every rank gets local_rank_id (its rank on its host) and "
            "local_device_list (its host's devices, which the host's main process feeds)"
        )
    if config.session_options:
        warnings.extend(shared_dir_warnings([(r.host, r.rank, r.session_options) for r in ranks]))
    _session_notes(config, devices_by_host, notes, warnings)
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
        local_names=tuple(discovery.local_names),
        node=node,
    )


def _session_notes(
    config: ClusterConfig, devices_by_host: Sequence[Tuple[int, ...]], notes: List[str], warnings: List[str]
) -> None:
    """What the plan says about how the session options reach the ranks."""
    if config.session_injection is Injection.AUTO:
        notes.append(
            f"session_injection: auto: ranks start with {INJECT_DIR} first on PYTHONPATH; its "
            "sitecustomize merges the options into every TensorFlow session"
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
    env = {"HCCL_CONNECT_TIMEOUT": "600", "HCCL_EXEC_TIMEOUT": "1800"}
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


@dataclass(frozen=True)
class _Job:
    """What every rank of the job shares."""

    config: ClusterConfig
    job_id: str
    job_uuid: str
    layout: JobLayout  # of this attempt
    table_path: Optional[str]
    world_size: int


@dataclass(frozen=True)
class _Slot:
    """Where one rank sits."""

    rank: int
    host: str
    node_rank: int
    local_rank: int
    device_id: int
    host_devices: Tuple[int, ...]
    local: bool = True  # on the launcher's own host


def _rank_spec(job: _Job, slot: _Slot, extra_env: Dict[str, str]) -> RankSpec:
    config = job.config
    # a remote host keeps its own copy under hosts/<host>/; the launcher gathers rank-N/ (log_paths)
    paths = job.layout.rank_paths(slot.rank, None if slot.local else slot.host)
    options: Dict[str, Any] = {}
    if config.session_options:
        from npulaunch.plan.rankoptions import options_for_rank

        options = options_for_rank(
            config.session_options,
            {
                "job_id": job.job_id,
                "rank": slot.rank,
                "local_rank": slot.local_rank,
                "device_id": slot.device_id,
                "host": slot.host,
            },
        )
    if config.data_preprocess:  # one main process per host feeds the host's devices (seeds: Data Augmentation)
        options["local_rank_id"] = slot.local_rank
        options["local_device_list"] = ",".join(str(d) for d in slot.host_devices)
    ctx = RankContext(
        rank=slot.rank,
        local_rank=slot.local_rank,
        world_size=job.world_size,
        local_world_size=len(slot.host_devices),
        node_rank=slot.node_rank,
        host=slot.host,
        device_id=slot.device_id,
        job_id=job.job_id,
        job_uuid=job.job_uuid,
        job_dir=job.layout.job_dir,
        rank_dir=paths.dir,
        plog_dir=paths.plog_dir,
        rank_table_path=job.table_path,
        session_options=options,
    )
    env, unset, env_sources = build_rank_env(ctx, config.env)
    env[PRECEDENCE_VAR], env_sources[PRECEDENCE_VAR] = config.session_precedence.value, "launcher"
    env[ATTEMPT_VAR], env_sources[ATTEMPT_VAR] = str(max(job.layout.attempt, 1)), "launcher"
    for name, value in extra_env.items():
        env[name], env_sources[name] = value, "launcher (cpu_fallback)"
    inject = INJECT_DIR if slot.local else INJECTION_TOKEN
    prepend = {"PYTHONPATH": inject} if config.session_injection is Injection.AUTO else {}
    return RankSpec(
        rank=slot.rank,
        local_rank=slot.local_rank,
        world_size=job.world_size,
        host=slot.host,
        node_rank=slot.node_rank,
        device_id=slot.device_id,
        argv=config.job.command,
        cwd=config.job.workdir,
        env=env,
        env_unset=unset,
        env_sources=env_sources,
        session_options=options,
        rank_dir=paths.dir,
        stdout_path=paths.stdout,
        stderr_path=paths.stderr,
        plog_dir=paths.plog_dir,
        env_prepend=prepend,
    )


def _resolve_devices(
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


def _resolve_ips(
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


def _decide_rank_table(
    config: ClusterConfig,
    devices_by_host: Sequence[Tuple[int, ...]],
    ips_by_host: Sequence[Optional[Tuple[str, ...]]],
    layout: JobLayout,
    notes: List[str],
    unprobed: bool = False,
) -> Tuple[Optional[Dict[str, Any]], Optional[str]]:
    """The HCCL rank table and its path. ``unprobed``: remote hosts' device IPs are read by their
    preflight when the job starts, so the plan alone shows where the table goes, not what it holds."""
    mode = config.rank_table
    if mode is RankTableMode.NONE:
        notes.append("no rank table (rank_table: none): RANK_TABLE_FILE is not set")
        return None, None
    missing = [config.hosts[i].host for i, ips in enumerate(ips_by_host) if ips is None]
    if missing and unprobed:
        notes.append(
            f"rank table: the device IPs of {', '.join(missing)} are read with hccn_tool on each host "
            "when the job starts"
        )
        return None, layout.rank_table_path
    if missing:
        if mode is RankTableMode.REQUIRED or len(config.hosts) > 1:
            why = "rank_table: required" if mode is RankTableMode.REQUIRED else "a job on several hosts"
            path = config.hosts[ips_by_host.index(None)].path + ("device_ips",)
            raise ConfigError(
                [
                    config.problem(
                        path,
                        "no device IPs for " + ", ".join(missing),
                        "device_ips for every host (or hccn_tool on the host)",
                        f"{why} needs an HCCL rank table, which needs every NPU's IP",
                    )
                ]
            )
        notes.append(
            "no rank table: device IPs unknown (no device_ips in the YAML, no hccn_tool); "
            "a single-host job runs without one (rank_table: auto)"
        )
        return None, None
    servers = []
    rank = 0
    for host, devices, ips in zip(config.hosts, devices_by_host, ips_by_host):
        assert ips is not None
        if len(ips) != len(devices):
            raise ConfigError(
                [
                    config.problem(
                        host.path + ("device_ips",), f"{len(ips)} addresses", f"{len(devices)}, one per device"
                    )
                ]
            )
        servers.append((host.host, [(d, ip, rank + i) for i, (d, ip) in enumerate(zip(devices, ips))]))
        rank += len(devices)
    table = build_rank_table(servers)
    problems = rank_table_problems(table)
    if problems:
        raise PlanError("the rank table would be invalid: " + "; ".join(problems))
    return table, layout.rank_table_path
