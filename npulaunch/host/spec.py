"""What one rank and one host's agent are told to run: the blueprint shared by plan and agent.

Standard library only, Python 3.7+: the agent imports this on compute hosts. The plan builds these
values; the agent only reads them. No decisions are made here.
"""

from __future__ import annotations

import os
from dataclasses import asdict, dataclass, field
from typing import Any, Dict, Iterator, Mapping, Optional, Tuple

# The zero-code injection hook: a directory holding only sitecustomize.py, put first on PYTHONPATH.
INJECT_DIR = os.path.join(os.path.dirname(os.path.abspath(__file__)), "inject")
FORWARDABLE_SIGNALS = ("SIGUSR1", "SIGUSR2", "SIGWINCH")  # what the launcher passes on to every rank
INJECTION_TOKEN = "{npulaunch_inject}"  # in a remote rank's env_prepend: the agent's own copy of INJECT_DIR
# The number of a framework's extra process (MindSpore's scheduler): started, watched and stopped like a
# rank by its host's agent, but not a rank (not in world_size, holds no NPU); its directory is scheduler/.
HELPER_RANK = -1


def process_name(rank: Optional[int]) -> str:
    """How messages name a process of the job: ``rank 3``, or ``the scheduler``."""
    return "the scheduler" if rank == HELPER_RANK else "rank %s" % rank


class RankEnv(Mapping[str, str]):
    """A rank's variables: its own values over the ones every rank of its host shares. The shared
    mapping is one object for all those ranks: 32,768 ranks hold 32,768 small dictionaries of what
    differs (RANK_ID, DEVICE_ID, its directories, ...), not 32,768 copies of the whole environment."""

    __slots__ = ("own", "shared")

    def __init__(self, own: Mapping[str, str], shared: Mapping[str, str]) -> None:
        self.own = own
        self.shared = shared

    def __getitem__(self, name: str) -> str:
        own = self.own.get(name)
        return self.shared[name] if own is None else own

    def __contains__(self, name: object) -> bool:
        return name in self.own or name in self.shared

    def __iter__(self) -> Iterator[str]:
        own = self.own
        for name in self.shared:
            if name not in own:
                yield name
        yield from own

    def __len__(self) -> int:
        return len(self.own) + sum(1 for name in self.shared if name not in self.own)

    def __repr__(self) -> str:
        return "RankEnv(%r)" % dict(self.items())


@dataclass(frozen=True)
class RankSpec:
    """Everything needed to start one rank, decided before launch."""

    rank: int
    local_rank: int
    world_size: int
    host: str
    node_rank: int
    device_id: int
    argv: Tuple[str, ...]
    cwd: str
    env: Mapping[str, str]  # the variables npulaunch sets, applied over the host's environment (often a RankEnv)
    env_unset: Tuple[str, ...]  # launcher-owned names removed from the inherited environment
    env_sources: Mapping[str, str]  # name -> "default" | "yaml" | "cli" | ...; a name not listed: "launcher"
    session_options: Dict[str, Any]
    rank_dir: str
    stdout_path: str
    stderr_path: str
    plog_dir: str
    # path-like variables to put entries in front of, keeping the host's own value after them
    env_prepend: Dict[str, str] = field(default_factory=dict)
    # Directories the rank's session options make CANN write to (dump_path, work_path, compile caches,
    # profiling output, ...), absolute: some must exist before the session starts, so they are made first.
    make_dirs: Tuple[Tuple[str, str], ...] = ()  # (option, directory)
    # job.cpu_binding: the CPUs the rank runs on (None: not bound), applied by the agent as it starts
    # the rank; or, when the plan had no facts of the rank's host, the binding the agent decides there
    # (host/topology.py: Binding.to_dict)
    cpus: Optional[Tuple[int, ...]] = None
    cpu_request: Optional[Dict[str, Any]] = None

    @property
    def label(self) -> str:
        """Short console prefix, e.g. ``r3 d3`` (``sched`` for the framework's extra process)."""
        return "sched" if self.rank == HELPER_RANK else "r%d d%d" % (self.rank, self.device_id)

    def to_dict(self) -> Dict[str, Any]:
        data = asdict(self)
        data["env"] = dict(self.env)
        data["env_sources"] = dict(self.env_sources)
        data["argv"] = list(self.argv)
        data["env_unset"] = list(self.env_unset)
        data["make_dirs"] = [list(pair) for pair in self.make_dirs]
        data["cpus"] = None if self.cpus is None else list(self.cpus)
        return data

    @classmethod
    def from_dict(cls, data: Dict[str, Any]) -> "RankSpec":
        values = dict(data)
        values["argv"] = tuple(values["argv"])
        values["env_unset"] = tuple(values["env_unset"])
        values["make_dirs"] = tuple((str(a), str(b)) for a, b in values.get("make_dirs", ()))
        if values.get("cpus") is not None:
            values["cpus"] = tuple(int(cpu) for cpu in values["cpus"])
        return cls(**values)


@dataclass(frozen=True)
class HostPlan:
    """One agent's share of a job: the ranks of one host and how to stop them."""

    job_id: str
    job_uuid: str  # marks every process of the job (NPULAUNCH_JOB_UUID) for orphan sweeps
    host: str
    node_rank: int
    job_dir: str
    grace_period_s: float
    forward_signals: Tuple[str, ...] = ("SIGUSR1", "SIGUSR2")
    ranks: Tuple[RankSpec, ...] = field(default_factory=tuple)
    patterns: Tuple[Dict[str, Any], ...] = ()  # the job's own signatures (monitor.patterns)
    hang_startup_s: float = 0.0  # launch -> first line; 0 = not watched
    hang_steady_s: float = 0.0  # between lines once started; 0 = not watched
    progress_regex: str = ""  # when set, only lines matching it (and heartbeats) count as progress
    rank_table: Optional[Dict[str, Any]] = None  # written by the agent at rank_table_path when missing
    rank_table_path: Optional[str] = None
    # the live NPU health watch (host/health/watch.py): {"interval_s": float, "tool_timeout_s": float,
    # "devices": [physical ids], "nics": bool (the NICs' links too: a job across hosts)}; None = off
    health_watch: Optional[Dict[str, Any]] = None
    store_port: Optional[int] = None  # serve torch's TCPStore on this port before the ranks start (tcpstore.py)
    timing: Dict[str, float] = field(default_factory=dict)  # the launcher's intervals not at their default (timing.py)

    def to_dict(self) -> Dict[str, Any]:
        data = asdict(self)
        data["forward_signals"] = list(self.forward_signals)
        data["patterns"] = list(self.patterns)
        data["ranks"] = [r.to_dict() for r in self.ranks]
        return data

    @classmethod
    def from_dict(cls, data: Dict[str, Any]) -> "HostPlan":
        values = dict(data)
        values["forward_signals"] = tuple(values["forward_signals"])
        values["ranks"] = tuple(RankSpec.from_dict(r) for r in values["ranks"])
        values["patterns"] = tuple(values.get("patterns", ()))
        values["timing"] = dict(values.get("timing") or {})
        return cls(**values)


def compose_env(
    spec: RankSpec, inherited: Mapping[str, str], inject_dir: Optional[str] = INJECT_DIR
) -> Tuple[Dict[str, str], Dict[str, str]]:
    """The one place a rank's environment is composed: ``inherited`` without what the plan unsets,
    the plan's values over it, then the prepended paths (``inject_dir``, this host's copy of the
    injection hook, in place of INJECTION_TOKEN; None leaves the token as the plan shows it).
    Returns the environment and where each variable came from."""
    env = {k: v for k, v in inherited.items() if k not in spec.env_unset}
    sources = dict.fromkeys(env, "inherited")
    own, own_sources = set_by_npulaunch(spec, inherited, inject_dir)
    env.update(own)
    sources.update(own_sources)
    return env, sources


def set_by_npulaunch(
    spec: RankSpec, inherited: Mapping[str, str], inject_dir: Optional[str] = INJECT_DIR
) -> Tuple[Dict[str, str], Dict[str, str]]:
    """What compose_env gives the variables the plan sets or prepends to (the rest of the rank's
    environment is ``inherited`` less ``env_unset``), and where each came from."""
    env: Dict[str, str] = {}
    sources: Dict[str, str] = {}
    for name, value in spec.env.items():
        source = spec.env_sources.get(name, "launcher")
        if name in inherited and inherited[name] != value:
            source += " (replaces the inherited value)"
        env[name], sources[name] = value, source
    for name, first in spec.env_prepend.items():
        if inject_dir is not None:
            first = first.replace(INJECTION_TOKEN, inject_dir)
        if name not in env and name in inherited and name not in spec.env_unset:
            env[name], sources[name] = inherited[name], "inherited"
        env[name] = first + os.pathsep + env[name] if env.get(name) else first
        sources[name] = sources[name] + ", launcher (prepended)" if name in sources else "launcher (prepended)"
    return env, sources
