"""The validated cluster YAML (version 1) as values: ``ClusterConfig``, its hosts and job, the
modes and their allowed values. config/load.py builds it from the YAML; the plan reads it.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from enum import Enum
from typing import TYPE_CHECKING, Any, Callable, Dict, Optional, Tuple, Union

from npulaunch.config.checker import describe
from npulaunch.host.errors import ConfigProblem, YamlPath, render_path
from npulaunch.host.lazyre import lazy_re
from npulaunch.host.topology import Binding

if TYPE_CHECKING:  # yaml is imported only when a file is read
    from npulaunch.config.yamlsource import YamlDocument

MAX_DEVICE_ID = 63
DEFAULT_GRACE_PERIOD_S = 5.0
DEFAULT_LOG_DIR = "npulaunch-logs"
JOB_ID_PATTERN = lazy_re(r"^[A-Za-z0-9_-]+$")
HOST_PATTERN = lazy_re(r"^[A-Za-z0-9_.:%-]+$")


class RankTableMode(str, Enum):
    AUTO = "auto"  # write one when it can be built; without one, more than one rank on NPUs is an error
    REQUIRED = "required"  # refuse to start without one
    NONE = "none"  # never write one: the ranks cannot use HCCL together (plan/hosts.py)
    CM = "cm"  # rank-table-free: HCCL forms the cluster from the CM_* variables npulaunch sets (plan/rankfree.py)


class Injection(str, Enum):
    OFF = "off"  # the script calls npulaunch.session itself (or ignores the options)
    AUTO = "auto"  # a sitecustomize hook merges the options into every TensorFlow session


class Precedence(str, Enum):
    SCRIPT = "script"  # an option the script sets itself keeps the script's value (with a warning)
    YAML = "yaml"


class Framework(str, Enum):
    """Whose start-up contract the ranks get (plan/frameworks/: one module each)."""

    TENSORFLOW = "tensorflow"  # the TF Adapter's: RANK_ID, RANK_SIZE, DEVICE_ID, ... and the session options
    PYTORCH = "pytorch"  # torchrun's: RANK, LOCAL_RANK, WORLD_SIZE, MASTER_ADDR, ... (torch_npu)
    MINDSPORE = "mindspore"  # msrun's dynamic cluster (a scheduler process and workers), or a rank table


class StartMode(str, Enum):
    """How a MindSpore job forms its cluster."""

    MSRUN = "msrun"  # dynamic cluster: MS_ROLE, MS_SCHED_HOST, ... and a scheduler process npulaunch starts
    RANK_TABLE = "rank_table"  # RANK_TABLE_FILE, RANK_ID, RANK_SIZE, DEVICE_ID


@dataclass(frozen=True)
class Rendezvous:
    """torchrun's c10d rendezvous (``--rdzv-backend c10d --rdzv-endpoint HOST:PORT --nnodes MIN:MAX``): one
    npulaunch per node, with no node rank; they meet at a TCPStore on the endpoint, which the npulaunch
    of the endpoint's host serves, and are given their node ranks there (plan/schedulers/c10d.py)."""

    host: str
    port: int
    run_id: str  # --rdzv-id ("none", as torchrun's default)
    min_nodes: int
    max_nodes: int
    join_timeout_s: float = 600.0  # torchrun's defaults (dynamic_rendezvous.py RendezvousTimeout)
    last_call_s: float = 30.0
    is_host: Optional[bool] = None  # --rdzv-conf is_host: None: this host serves when the endpoint is its own


@dataclass(frozen=True)
class FrameworkConfig:
    """The ``framework`` section (or its short form ``framework: pytorch``)."""

    name: Framework = Framework.TENSORFLOW
    mode: Optional[StartMode] = None  # mindspore only; None: msrun
    master_addr: Optional[str] = None  # MASTER_ADDR / MS_SCHED_HOST; None: the first host, as the others reach it
    master_port: Optional[int] = None  # MASTER_PORT / MS_SCHED_PORT; None: a free port (one host) or the default
    role: str = "default"  # pytorch: ROLE_NAME (torchrun's --role)
    # pytorch: the collectives' backend when the script says it ("gloo": on the CPU, no HCCL: the plan says
    # nothing of rank tables or HCCL's NIC); None: not known (HCCL on NPUs, as torch_npu's scripts use)
    backend: Optional[str] = None
    # a job that runs on one node of several (--nnodes / --node-rank, one npulaunch per node, torchrun's
    # way): how many nodes, and which one this is. None: npulaunch sees every host of the job
    nnodes: Optional[int] = None
    node_rank: Optional[int] = None
    rendezvous: Optional[Rendezvous] = None  # c10d: nnodes and node_rank are decided where the nodes meet

    @property
    def start_mode(self) -> Optional[StartMode]:
        if self.name is Framework.MINDSPORE:
            return self.mode or StartMode.MSRUN
        return None


class Transport(str, Enum):
    """How the launcher starts the agent of each remote host (launch/fleet/: one module each)."""

    SSH = "ssh"  # an SSH session per agent (Fabric: fleet/ssh.py)
    MPIRUN = "mpirun"  # Open MPI's mpirun per agent, one process on that host (fleet/mpirun.py)


class RestartOn(str, Enum):
    """Which failures job.max_restarts restarts after (job.restart_on)."""

    RETRYABLE = "retryable"  # npulaunch's: only a failure whose root cause a restart may cure
    ANY = "any"  # torchrun's: every failure of a rank


class ConsoleMode(str, Enum):
    ALL = "all"
    RANK0 = "rank0"
    NONE = "none"


ALL_DEVICES = "all"
# Device ids are physical: the ids of /dev/davinci<N> and npu-smi, which HCCL's rank table and hccn_tool
# use (hicann/hccl docs/zh/user_guide/cluster_info_config/rank_table_config_*.md @ 09300b7, device_id).
# The plan maps them to the id each rank opens (ASCEND_DEVICE_ID) through ASCEND_VISIBLE_DEVICES and
# ASCEND_RT_VISIBLE_DEVICES (plan/hosts.py).
Devices = Union[Tuple[int, ...], str]  # a tuple of physical ids, or ALL_DEVICES


@dataclass(frozen=True)
class HostConfig:
    host: str
    devices: Devices
    device_ips: Optional[Tuple[str, ...]] = None
    path: YamlPath = ()  # where the entry is in the YAML, for later errors
    ssh: Dict[str, Any] = field(default_factory=dict)  # user, port, identity_file of this host
    # Atlas A3 super-node networking (rank table version 1.2): the host's super pod and each device's
    # super_device_id, keyed by device id so that --devices / --nproc-per-node keep the right ones.
    super_pod_id: Optional[str] = None
    super_device_ids: Optional[Dict[int, int]] = None
    # NPUs of this host held back for recovery (plan/placement.py): a spare takes the place of an excluded NPU
    spare_devices: Tuple[int, ...] = ()
    # device_ips of the spare NPUs, when the YAML lists them after the devices' own
    spare_device_ips: Optional[Tuple[str, ...]] = None


@dataclass(frozen=True)
class JobConfig:
    name: str
    command: Tuple[str, ...]
    workdir: str  # absolute
    log_dir: str  # absolute
    id: Optional[str] = None
    grace_period_s: float = DEFAULT_GRACE_PERIOD_S
    console: ConsoleMode = ConsoleMode.ALL
    forward_signals: Tuple[str, ...] = ("SIGUSR1", "SIGUSR2")
    max_restarts: int = 0  # whole-job restarts, after the failures restart_on names
    restart_on: RestartOn = RestartOn.RETRYABLE  # the YAML's default; torchrun's form (no YAML): any
    # attempts failing the same way without a step advanced before the job stops as a crash loop (0: never)
    crash_loop_limit: int = 3
    # per-rank directories made (mode 0700) before each rank starts; placeholders expanded, relative
    # paths from the rank's working directory
    make_dirs: Tuple[str, ...] = ()
    cpu_binding: Binding = field(default_factory=Binding)  # none | blocks | auto | device -> CPUs (host/topology.py)


@dataclass(frozen=True)
class RecoveryConfig:
    """The ``recovery`` section: how often a job may continue past an NPU or host fault by excluding what
    broke (separate from job.max_restarts), where its ranks' checkpoints are, whether it may shrink, and the
    fault history the jobs of its log_dir share."""

    max_recoveries: int = 3
    checkpoint_dir: Optional[str] = None  # per rank, placeholders allowed; relative to the rank's workdir
    shrink_min_ranks: Optional[int] = None  # None: never shrink
    ledger: Optional[str] = None  # the fault history's file (absolute); None: <log_dir>/faults.jsonl
    ledger_window_h: float = 24.0  # how long a fault in it keeps its NPU or host off (plan/faulthistory.py)


@dataclass(frozen=True)
class ClusterConfig:
    """The validated cluster description. ``sources`` says where each overridable value came from."""

    source: str  # the YAML file, or "command line"
    job: JobConfig
    hosts: Tuple[HostConfig, ...]
    env: Dict[str, Optional[str]]  # None removes an inherited variable
    session_options: Dict[str, Any]
    rank_table: RankTableMode = RankTableMode.AUTO
    sources: Dict[str, str] = field(default_factory=dict)  # "job.command" -> "yaml" | "cli" | "default"
    document: Optional["YamlDocument"] = None
    product: Optional[str] = None  # the Ascend product line, for options whose range depends on it
    cann_version: Optional[str] = None  # "8.0.RC2": for ranges and defaults that changed (config/timeouts.py)
    warnings: Tuple[ConfigProblem, ...] = ()
    notes: Tuple[str, ...] = ()  # what the command line's torchrun flags came to (npulaunch/dropin.py)
    session_injection: Injection = Injection.OFF
    session_precedence: Precedence = Precedence.SCRIPT
    cpu_fallback: bool = False  # train on the CPU with TensorFlow collectives (TF_CONFIG per rank)
    data_preprocess: bool = False  # host_main: one process per host preprocesses for the host's devices
    monitor: Dict[str, Any] = field(default_factory=lambda: {"patterns": ()})  # sections.parse_monitor
    ssh: Dict[str, Any] = field(default_factory=dict)  # the ssh section: defaults for every host
    transport: Transport = Transport.SSH  # how the remote hosts' agents are started
    mpi: Dict[str, Any] = field(default_factory=dict)  # the mpi section: the mpirun transport's command and options
    slurm: Dict[str, Any] = field(default_factory=dict)  # the slurm section: npulaunch sbatch's header
    spares: Tuple[HostConfig, ...] = ()  # hosts held back for recovery, in the form of hosts
    recovery: RecoveryConfig = field(default_factory=RecoveryConfig)
    framework: FrameworkConfig = field(default_factory=FrameworkConfig)

    def problem(self, path: YamlPath, found: str, allowed: str, hint: str = "") -> ConfigProblem:
        """A problem located in this config's YAML (or on the command line)."""
        line = self.document.line_of(path) if self.document else None
        return ConfigProblem(self.source, line, render_path(path), found, allowed, hint)


def validate_job_id(value: Any, report: Callable[[str, str, str], None]) -> Optional[str]:
    """CANN's JOB_ID rule: letters, digits, '-' and '_'; not a pure number starting with 0."""
    if isinstance(value, int) and not isinstance(value, bool):
        value = str(value)
    allowed = "letters, digits, '-' and '_', not a number with a leading 0"
    if not isinstance(value, str) or not JOB_ID_PATTERN.match(value):
        report(describe(value), allowed, "CANN restricts JOB_ID to these characters")
        return None
    if value.isdigit() and value.startswith("0"):
        report(describe(value), allowed, "CANN advises against a pure number starting with 0")
        return None
    return value
