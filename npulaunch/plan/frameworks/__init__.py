"""Each framework's start-up contract, one module per framework (``config.framework.name`` picks it):
the variables its ranks read, with their sources; what it refuses; and the extra processes it needs.

- ``tensorflow``: the TF Adapter's RANK_ID / RANK_SIZE / DEVICE_ID / RANK_TABLE_FILE (or CM_*), and
  npulaunch's session options.
- ``pytorch``: torchrun's per-worker contract (RANK, LOCAL_RANK, WORLD_SIZE, MASTER_ADDR, ...) and what
  torch_npu needs beside it (ASCEND_RT_VISIBLE_DEVICES in ascending order, RANK_TABLE_FILE).
- ``mindspore``: msrun's dynamic cluster (MS_ROLE, MS_SCHED_HOST, ... and a scheduler process) or the
  rank-table start-up.

A module provides what ``Contract`` lists. rankenv.py layers what it returns with npulaunch's own
variables and the YAML's env; rankspecs.py builds the specs; build.py asks ``refuse`` and ``helpers``.
A fourth framework is one more module, a member of config.cluster.Framework, and its tests.
"""

from __future__ import annotations

import importlib
from dataclasses import dataclass
from typing import TYPE_CHECKING, Dict, List, Optional, Protocol, Tuple

from npulaunch.config.cluster import ClusterConfig, Framework, RankTableMode

if TYPE_CHECKING:
    from npulaunch.host.errors import ConfigProblem
    from npulaunch.plan.rankenv import HostContext, RankPlace


class Contract(Protocol):
    """What a framework's module provides (the modules are its implementations)."""

    SUMMARY: str  # one line for `npulaunch plan`
    VARIABLES: Tuple["Variable", ...]
    SOURCES: Tuple[str, ...]  # the sources VARIABLES cite by file, in full (repository @ commit, path)
    DEFAULT_PORT: Optional[int]  # the meeting point's port on several hosts; None: the ranks meet no process

    def refuse(self, config: ClusterConfig) -> List["ConfigProblem"]:
        """What the framework cannot run: the settings of another framework, its own variables in env."""

    def table_needed(self, config: ClusterConfig) -> bool:
        """Whether ranks on NPUs need a rank table to work together (else it is an optional fast start-up)."""

    def meets(self, config: ClusterConfig) -> bool:
        """Whether the job's processes meet at an address and port (``Meeting``)."""

    def host_env(self, ctx: "HostContext") -> Tuple[Dict[str, str], Dict[str, str], List[str]]:
        """``(defaults, launcher, unset)``: what the YAML's env may replace, what it may not, what to remove."""

    def rank_env(self, place: "RankPlace", ctx: "HostContext") -> Dict[str, str]:
        """What differs from rank to rank of the host."""

    def helper_env(self, ctx: "HostContext") -> Optional[Dict[str, str]]:
        """The variables of the framework's extra process on this host (MindSpore's scheduler), or None."""


@dataclass(frozen=True)
class Variable:
    """One variable of a contract, as `npulaunch plan` explains it."""

    name: str
    meaning: str
    source: str  # where the framework sets or reads it: a file and line of the module's SOURCES


def contract(name: Framework) -> "Contract":
    """The module of framework ``name``."""
    module = importlib.import_module(f"npulaunch.plan.frameworks.{name.value}")
    return module


def contract_of(config: ClusterConfig) -> "Contract":
    return contract(config.framework.name)


def given(config: ClusterConfig, key: str) -> bool:
    """Whether the YAML sets top-level ``key`` (a setting's default is no reason to refuse a framework)."""
    document = config.document
    value = document.value if document is not None else None
    return isinstance(value, dict) and key in value


def meeting_port_var(framework: str, mode: Optional[str] = None) -> str:
    """The variable of the port a framework's processes meet at: MASTER_PORT (torch's TCPStore),
    MS_SCHED_PORT (msrun's scheduler); "" when they meet at none."""
    if framework == Framework.PYTORCH.value:
        return "MASTER_PORT"
    if framework == Framework.MINDSPORE.value and mode != "rank_table":
        return "MS_SCHED_PORT"
    return ""


# the frameworks whose checkpoints recovery.checkpoint_dir finds and places (launch/resume.py)
CHECKPOINT_FRAMEWORKS = ("tensorflow", "pytorch")
# settings of the TF Adapter's session: nothing reads them in a job of another framework
TF_ONLY = ("session_options", "session_injection", "session_precedence", "cpu_fallback", "data_preprocess")


def refuse_tf_settings(config: "ClusterConfig", name: str, reader: str) -> List["ConfigProblem"]:
    """The TF Adapter's settings in a job of another framework: nothing there would read them."""
    problems = []
    for key in TF_ONLY:
        if given(config, key) or (key == "session_options" and config.session_options):
            problems.append(
                config.problem(
                    (key,),
                    f"{key} with framework: {name}",
                    f"no {key} (it configures the TF Adapter's session; framework: tensorflow)",
                    f"{reader} never reads it: set the framework's own options in the script or in env",
                )
            )
    if config.recovery.checkpoint_dir is not None and name not in CHECKPOINT_FRAMEWORKS:
        problems.append(
            config.problem(
                ("recovery", "checkpoint_dir"),
                f"checkpoint_dir with framework: {name}",
                "no checkpoint_dir (npulaunch finds and places the checkpoints of framework: "
                + " and ".join(CHECKPOINT_FRAMEWORKS)
                + ": TensorFlow's, and the files torch.save writes)",
                "recovery itself works: the script resumes from its own checkpoints, and "
                "NPULAUNCH_RESTART_COUNT says it was restarted",
            )
        )
    if config.rank_table is RankTableMode.CM:
        problems.append(
            config.problem(
                ("rank_table",),
                f"cm with framework: {name}",
                "auto, required or none",
                "the CM_* variables are the TF Adapter's rank-table-free start-up",
            )
        )
    return problems


def refuse_owned(config: "ClusterConfig", owned: Tuple[str, ...], name: str) -> List["ConfigProblem"]:
    """The contract's own variables set in env: npulaunch gives every rank its value."""
    problems = []
    for variable in owned:
        if variable in config.env and variable != "ASCEND_RT_VISIBLE_DEVICES":
            hint = f"npulaunch sets it for every rank of framework: {name}"
            if variable in ("MASTER_ADDR", "MASTER_PORT", "MS_SCHED_HOST", "MS_SCHED_PORT"):
                hint = "set framework.master_addr / framework.master_port (or --master-addr / --master-port)"
            problems.append(config.problem(("env", variable), f"{variable} in env", "no " + variable, hint))
    return problems
