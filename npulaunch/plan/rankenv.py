"""The per-rank environment: the one place where the rank vocabulary (rank, local_rank,
world_size, device_id, ...) becomes variable names. The framework's names (RANK_ID for the TF
Adapter, RANK for torchrun, MS_NODE_ID for msrun, ...) are its module's (plan/frameworks/); npulaunch's
own (JOB_ID, NPULAUNCH_*, ASCEND_PROCESS_LOG_PATH, HCCL's timeouts) are here, alike for every framework.

Pure: takes values, returns the variables npulaunch sets, the inherited ones it removes, and
where each came from. Layering, lowest first: inherited < npulaunch's and the framework's defaults <
YAML env < the launcher's values (which the YAML may not set at all).
"""

from __future__ import annotations

import json
from dataclasses import dataclass, field
from typing import Any, Dict, List, Mapping, Optional, Tuple

SESSION_OPTIONS_VAR = "NPULAUNCH_SESSION_OPTIONS"
JOB_UUID_VAR = "NPULAUNCH_JOB_UUID"

# HCCL_CONNECT_TIMEOUT: CANN's default is 120 s, too short when hosts finish graph compilation
# minutes apart. HCCL_EXEC_TIMEOUT is left to CANN, whose default depends on the version (600, 1800,
# 1836 s: config/timeouts.py); a fixed 1800 would be rounded to 1768 s on Atlas training products.
# PYTHONUNBUFFERED: a rank that crashes must not take its last printed lines with it.
DEFAULT_ENV: Dict[str, str] = {
    "HCCL_CONNECT_TIMEOUT": "600",
    "PYTHONUNBUFFERED": "1",
}


@dataclass(frozen=True)
class Meeting:
    """Where a job's processes meet to form the cluster (torch's TCPStore on rank 0, MindSpore's
    scheduler): an address every host reaches, and a port. plan/frameworks/meeting.py decides it."""

    address: str
    port: int
    # each host's own address on the network that reaches the meeting point (HCCL_IF_IP), None: unknown
    host_ips: Tuple[Optional[str], ...] = ()
    served: bool = False  # pytorch: the first host's agent serves the TCPStore (host/tcpstore.py), not rank 0


@dataclass(frozen=True)
class HostContext:
    """What the plan decided for one host's ranks alike, in npulaunch's own vocabulary."""

    world_size: int
    local_world_size: int
    node_rank: int
    host: str
    job_id: str
    job_uuid: str
    job_dir: str
    rank_table_path: Optional[str]
    cluster_env: Optional[Mapping[str, str]] = None  # rank-table-free (rank_table: cm): the host's CM_* values
    session_options_text: Optional[str] = None  # the session options every rank gets, as text; None: each its own
    node_count: int = 1
    # the host's job NPUs as the runtime numbers them (logical ids), ascending: ASCEND_RT_VISIBLE_DEVICES
    visible: Tuple[int, ...] = ()
    meeting: Optional[Meeting] = None
    restart_count: int = 0  # npulaunch's restarts and recoveries before this attempt
    max_restarts: int = 0
    role: str = "default"  # pytorch: ROLE_NAME
    mode: str = ""  # mindspore: msrun | rank_table
    yaml_env: Mapping[str, Optional[str]] = field(default_factory=dict)  # the YAML's env (what the user set)
    inherited: Mapping[str, str] = field(default_factory=dict)  # what the ranks inherit, where known

    def visible_index(self, place: "RankPlace") -> int:
        """The index of the rank's NPU in ``visible`` (ASCEND_RT_VISIBLE_DEVICES): the device a process of
        that variable opens as its index (torch's LOCAL_RANK, msrun's DEVICE_ID)."""
        return self.visible.index(place.logical) if place.logical in self.visible else place.local_rank


def session_options_text(options: Mapping[str, Any]) -> str:
    """NPULAUNCH_SESSION_OPTIONS: the options as the rank-side helper reads them."""
    return json.dumps(dict(options), sort_keys=True, separators=(",", ":"))


def host_env(
    ctx: HostContext,
    yaml_env: Mapping[str, Optional[str]],
    contract: Tuple[Dict[str, str], Dict[str, str], List[str]],
    env_source: str = "yaml",
) -> Tuple[Dict[str, str], Tuple[str, ...], Dict[str, str]]:
    """What every rank of the host gets alike: npulaunch's defaults and the framework's, the YAML's
    env, and the launcher's values that do not depend on the rank (the framework's contract among
    them: ``contract`` is its ``host_env``, ``(defaults, launcher, unset)``); ``(env, unset, sources)``.
    The values that do are rank_own_env's, and win (the YAML may not set them at all)."""
    defaults, launcher, unset = contract
    env: Dict[str, str] = {}
    sources: Dict[str, str] = {}
    for name, value in DEFAULT_ENV.items():
        env[name], sources[name] = value, "default"
    for name, value in defaults.items():
        env[name], sources[name] = value, "default"
    for name, given in yaml_env.items():
        if given is None:
            env.pop(name, None)
            sources.pop(name, None)
            unset.append(name)
        else:
            env[name], sources[name] = given, env_source
    launcher.update(
        {
            "JOB_ID": ctx.job_id,
            "NPULAUNCH_LOCAL_WORLD_SIZE": str(ctx.local_world_size),
            "NPULAUNCH_NODE_RANK": str(ctx.node_rank),
            "NPULAUNCH_HOST": ctx.host,
            "NPULAUNCH_JOB_DIR": ctx.job_dir,
            JOB_UUID_VAR: ctx.job_uuid,
        }
    )
    env.update(launcher)
    for name in launcher:  # a name without a source is the launcher's (RankSpec.env_sources): 1 KB a rank less
        sources.pop(name, None)
    return env, tuple(unset), sources


class RankPlace:
    """Where one rank sits on its host, and its directories: what its own variables are made of."""

    __slots__ = ("rank", "local_rank", "device_id", "ascend_device_id", "rank_dir", "plog_dir", "logical")

    def __init__(
        self,
        rank: int,
        local_rank: int,
        device_id: int,
        ascend_device_id: int,
        rank_dir: str,
        plog_dir: str,
        logical: Optional[int] = None,
    ) -> None:
        self.rank = rank
        self.local_rank = local_rank
        self.device_id = device_id  # physical
        self.ascend_device_id = ascend_device_id  # as the rank's process opens it
        self.rank_dir = rank_dir
        self.plog_dir = plog_dir
        self.logical = device_id if logical is None else logical  # as the runtime numbers the host's devices


def rank_own_env(
    place: RankPlace, contract: Dict[str, str], options: Optional[Mapping[str, Any]] = None
) -> Dict[str, str]:
    """The launcher's values that differ from rank to rank of a host: the framework's (``contract``, its
    ``rank_env``) and npulaunch's own. ``options``: the rank's session options when they are its own
    (else host_env gives every rank the same text)."""
    own = contract
    own["ASCEND_PROCESS_LOG_PATH"] = place.plog_dir
    own["NPULAUNCH_LOCAL_RANK"] = str(place.local_rank)
    own["NPULAUNCH_RANK_DIR"] = place.rank_dir
    if options is not None:
        own[SESSION_OPTIONS_VAR] = session_options_text(options)
    return own
