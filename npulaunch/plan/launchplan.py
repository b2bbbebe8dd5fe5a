"""The plan's types: ``LaunchPlan`` (what every rank of a job runs, and how the job is watched and
stopped), ``Discovery`` (how planning learns about the hosts' NPUs), and the default job id.
Built by plan/build.py; read by the launch stage and the views. Pure.
"""

from __future__ import annotations

import os
import time
from dataclasses import dataclass, field
from typing import Any, Callable, Dict, List, Mapping, Optional, Sequence, Tuple

from npulaunch.config.cluster import ConsoleMode
from npulaunch.host.spec import HostPlan, RankSpec
from npulaunch.plan.layout import JobLayout

LOCAL_HOST_NAMES = ("localhost", "127.0.0.1", "::1")
HEALTH_TOOL_TIMEOUT_S = 10.0  # one npu-smi / hccn_tool call of the live health watch, as in check


def launcher_environ() -> Mapping[str, str]:
    """The environment this launcher runs in, which its local ranks inherit."""
    return os.environ


@dataclass(frozen=True)
class Discovery:
    """How the plan learns about this host's NPUs; replaced by stand-ins in tests."""

    devices: Callable[[], Sequence[int]]  # physical ids of this host's devices
    device_ips: Callable[[Sequence[int]], Optional[Sequence[str]]]  # None when unknown
    local_names: Tuple[str, ...] = LOCAL_HOST_NAMES
    free_ports: Callable[[int], Sequence[int]] = lambda count: tuple(range(29500, 29500 + count))
    npu_present: Callable[[], bool] = lambda: False
    # What each remote host's preflight probe found ("npus": [[id, health], ...] or None,
    # "device_ips": {"id": address or None} or None, "visible": {"ASCEND_VISIBLE_DEVICES": value or
    # None, "ASCEND_RT_VISIBLE_DEVICES": ...}); None when no host was probed (``plan``).
    remote: Optional[Mapping[str, Mapping[str, Any]]] = None
    # A host name's address (rank-table-free jobs under a scheduler: CM_WORKER_IP); None if unknown.
    resolve: Callable[[str], Optional[str]] = lambda host: None
    # This host's own address on the route to another (HCCL_IF_IP under a scheduler); None if unknown.
    address_toward: Callable[[str], Optional[str]] = lambda address: None
    # The environment local ranks inherit: its ASCEND_VISIBLE_DEVICES / ASCEND_RT_VISIBLE_DEVICES decide
    # their ASCEND_DEVICE_ID (plan/hosts.py). The real one by default, as prepare.planner plans with it.
    environ: Callable[[], Mapping[str, str]] = launcher_environ


@dataclass(frozen=True)
class HostDevices:
    """One host's devices in the three numberings, index by index (local rank): ``physical`` (the
    YAML's, /dev/davinci<N>, the rank table's device_id and DEVICE_ID), ``logical`` (the runtime's
    numbering of the devices it has: 0..k-1 inside a container, else the physical id) and ``user``
    (what each rank opens, ASCEND_DEVICE_ID: its index in ASCEND_RT_VISIBLE_DEVICES, else the
    logical id); and the variables that decided it, each ``(value, where it came from)``."""

    host: str
    physical: Tuple[int, ...]
    logical: Tuple[int, ...]
    user: Tuple[int, ...]
    container_visible: Optional[Tuple[str, str]] = None  # ASCEND_VISIBLE_DEVICES
    rt_visible: Optional[Tuple[str, str]] = None  # ASCEND_RT_VISIBLE_DEVICES

    def describe(self) -> str:
        """The variables, for the plan's notes ("" when neither is set)."""
        parts = [
            f"{name}={given[0]} ({given[1]})"
            for name, given in (
                ("ASCEND_VISIBLE_DEVICES", self.container_visible),
                ("ASCEND_RT_VISIBLE_DEVICES", self.rt_visible),
            )
            if given is not None
        ]
        return "; ".join(parts)


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
    restart_on: str = "retryable"  # job.restart_on: which failures max_restarts restarts after
    store_port: Optional[int] = None  # pytorch: the TCPStore the first host's agent serves (host/tcpstore.py)
    crash_loop_limit: int = 3  # job.crash_loop_limit (launch/crashloop.py)
    local_names: Tuple[str, ...] = LOCAL_HOST_NAMES  # the hosts that are this machine
    node: Optional[int] = None  # under a scheduler (node mode): this node's index; only its ranks run here
    host_devices: Tuple[HostDevices, ...] = ()  # one per host: physical -> logical -> ASCEND_DEVICE_ID
    rank_table_version: str = ""  # "1.0" or "1.2" ("" without a table)
    rank_table_reason: str = ""  # why that version, or why no table
    health_interval_s: float = 0.0  # the live NPU health watch's period on every host (0 = off)
    stragglers: Optional[Dict[str, Any]] = None  # monitor.stragglers: {action, factor, exclude_after_s}; None = off
    # recovery: its settings, the spares left, what was excluded and what moved (plan/build.py)
    recovery: Dict[str, Any] = field(default_factory=dict)
    # the framework's extra processes, not ranks (MindSpore's scheduler: host/spec.py HELPER_RANK)
    helpers: Tuple[RankSpec, ...] = ()
    framework: str = "tensorflow"  # whose start-up contract the ranks got (plan/frameworks/)
    meeting: Optional[Tuple[str, int]] = None  # pytorch / msrun: where the processes meet (address, port)
    timing: Dict[str, float] = field(default_factory=dict)  # intervals not at their default (host/timing.py)

    @property
    def processes(self) -> Tuple[RankSpec, ...]:
        """Every process the agents start: the ranks, then the framework's extra ones."""
        return self.ranks + self.helpers if self.helpers else self.ranks

    def rank_device(self, spec: RankSpec) -> Tuple[int, int, int]:
        """``(physical, logical, ASCEND_DEVICE_ID)`` of a rank."""
        if spec.node_rank < len(self.host_devices):
            mapped = self.host_devices[spec.node_rank]
            if spec.local_rank < len(mapped.physical):
                i = spec.local_rank
                return mapped.physical[i], mapped.logical[i], mapped.user[i]
        return spec.device_id, spec.device_id, spec.device_id

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
            ranks=tuple(r for r in self.processes if r.node_rank == node_rank),
            patterns=self.patterns,
            hang_startup_s=self.hang_startup_s,
            hang_steady_s=self.hang_steady_s,
            progress_regex=self.progress_regex,
            rank_table=self.rank_table,
            rank_table_path=self.rank_table_path,
            health_watch=self.health_watch(node_rank),
            store_port=self.store_port if node_rank == 0 else None,
            timing=dict(self.timing),
        )

    def devices_by_host(self) -> Dict[str, Tuple[int, ...]]:
        """Each host's NPUs (physical ids) in the order of its ranks."""
        found: Dict[str, List[int]] = {}
        for spec in self.ranks:
            found.setdefault(spec.host, []).append(spec.device_id)
        return {host: tuple(ids) for host, ids in found.items()}

    def health_watch(self, node_rank: int) -> Optional[Dict[str, Any]]:
        """What one host's agent watches of its NPUs while the job runs (host/health/watch.py)."""
        if self.health_interval_s <= 0:
            return None
        devices = sorted({r.device_id for r in self.ranks if r.node_rank == node_rank})
        return {
            "interval_s": self.health_interval_s,
            "tool_timeout_s": HEALTH_TOOL_TIMEOUT_S,
            "devices": devices,
            "nics": len(self.hosts) > 1,
        }

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
