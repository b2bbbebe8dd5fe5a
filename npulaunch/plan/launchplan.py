"""The plan's types: ``LaunchPlan`` (what every rank of a job runs, and how the job is watched and
stopped), ``Discovery`` (how planning learns about the hosts' NPUs), and the default job id.
Built by plan/build.py; read by the launch stage and the views. Pure.
"""

from __future__ import annotations

import time
from dataclasses import dataclass, field
from typing import Any, Callable, Dict, Mapping, Optional, Sequence, Tuple

from npulaunch.config.cluster import ConsoleMode
from npulaunch.host.spec import HostPlan, RankSpec
from npulaunch.plan.layout import JobLayout

LOCAL_HOST_NAMES = ("localhost", "127.0.0.1", "::1")


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
    # A host name's address (rank-table-free jobs under a scheduler: CM_WORKER_IP); None if unknown.
    resolve: Callable[[str], Optional[str]] = lambda host: None


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
