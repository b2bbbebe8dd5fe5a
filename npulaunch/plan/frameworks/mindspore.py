"""MindSpore's start-up contracts (``framework: mindspore``), in two modes (``framework.mode``):

- ``msrun`` (the default): the dynamic cluster, as msrun starts it. Every worker gets MS_ROLE=MS_WORKER,
  MS_WORKER_NUM, MS_SCHED_HOST, MS_SCHED_PORT, MS_TOPO_TIMEOUT and MS_NODE_ID, and RANK_ID, RANK_SIZE,
  DEVICE_ID as msrun exports them; one more process, the scheduler (MS_ROLE=MS_SCHED, the same script,
  RANK_ID=0), runs on the first host and is not a rank. Source: mindspore-ai/mindspore_test @ 019ff922,
  mindspore/python/mindspore/parallel/cluster/process_entity/_api.py (``_Node.run``, ``_MetaServerNode``,
  ``_ComputeGraphNode``, ``_ProcessManager.run`` / ``start_scheduler`` / ``_start_single_worker``).
  msrun's DEVICE_ID is the worker's local index; npulaunch lists the host's job NPUs in ascending order
  in ASCEND_RT_VISIBLE_DEVICES so that the index opens the rank's NPU.
- ``rank_table``: one process per NPU with RANK_TABLE_FILE, DEVICE_ID (the physical id), RANK_ID and
  RANK_SIZE (mindspore-ai/docs @ 9e844dc6, tutorials/source_en/parallel/rank_table.md); HCCL reads the
  table, as the TF Adapter's does.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Dict, List, Optional, Tuple

from npulaunch.config.cluster import StartMode
from npulaunch.plan.frameworks import Variable, refuse_owned, refuse_tf_settings
from npulaunch.plan.rankenv import HostContext, RankPlace

if TYPE_CHECKING:
    from npulaunch.config.cluster import ClusterConfig
    from npulaunch.host.errors import ConfigProblem

SUMMARY = "msrun's dynamic cluster (MS_ROLE, MS_SCHED_HOST, ... and a scheduler process) or a rank table"
DEFAULT_PORT = 8118  # msrun's --master_port default (parallel/cluster/run.py)
TOPO_TIMEOUT_S = 600  # msrun's --cluster_time_out default, exported as MS_TOPO_TIMEOUT

_API = "_api.py"
_TABLE = "rank_table.md"
SOURCES = (
    "mindspore-ai/mindspore_test @ 019ff922 mindspore/python/mindspore/parallel/cluster/process_entity/_api.py",
    "mindspore-ai/docs @ 9e844dc6 tutorials/source_en/parallel/rank_table.md",
    "CANN 8.5.0 HCCL user guide: hcclug_000088 (HCCL_IF_IP)",
)
VARIABLES = (
    Variable("MS_ROLE", "MS_WORKER for ranks, MS_SCHED for the scheduler (msrun)", f"{_API} _ComputeGraphNode.run"),
    Variable("MS_WORKER_NUM", "the number of workers (ranks) (msrun)", f"{_API} _Node.run"),
    Variable("MS_SCHED_HOST", "the scheduler's address: the first host's (msrun)", f"{_API} _Node.run"),
    Variable("MS_SCHED_PORT", "the scheduler's port, checked free before start (msrun)", f"{_API} _Node.run"),
    Variable("MS_TOPO_TIMEOUT", "how long the cluster may take to form, s (msrun: 600)", f"{_API} _Node.run"),
    Variable("MS_NODE_ID", "the worker's id: its rank (msrun)", f"{_API} _ComputeGraphNode.run"),
    Variable("RANK_ID", "the rank (the scheduler: 0)", f"{_API} _start_single_worker; {_TABLE}"),
    Variable("RANK_SIZE", "the number of ranks", f"{_API} _ProcessManager.run; {_TABLE}"),
    Variable(
        "DEVICE_ID",
        "msrun: the index of the rank's NPU in ASCEND_RT_VISIBLE_DEVICES; rank_table: its physical id",
        f"{_API} _start_single_worker; {_TABLE}",
    ),
    Variable("ASCEND_RT_VISIBLE_DEVICES", "the host's job NPUs, ascending (msrun)", "npulaunch"),
    Variable("RANK_TABLE_FILE", "the HCCL rank table npulaunch wrote (rank_table)", _TABLE),
    Variable("HCCL_IF_IP", "the host's address toward the first host, where known (msrun)", "hcclug_000088"),
)
OWNED = tuple(v.name for v in VARIABLES if v.name not in ("MS_TOPO_TIMEOUT", "HCCL_IF_IP"))
FOREIGN = ("RANK", "LOCAL_RANK", "WORLD_SIZE", "MASTER_ADDR", "MASTER_PORT", "POD_NAME")


def _msrun(mode: str) -> bool:
    """HostContext.mode: msrun's dynamic cluster unless the rank table's."""
    return mode != StartMode.RANK_TABLE.value


def refuse(config: "ClusterConfig") -> List["ConfigProblem"]:
    from npulaunch.config.cluster import RankTableMode

    problems = refuse_tf_settings(config, "mindspore", "MindSpore") + refuse_owned(config, OWNED, "mindspore")
    if config.framework.start_mode is StartMode.RANK_TABLE and config.rank_table is RankTableMode.NONE:
        problems.append(
            config.problem(
                ("rank_table",),
                "none with framework mode rank_table",
                "auto or required",
                "MindSpore's rank-table start-up reads RANK_TABLE_FILE; framework.mode: msrun needs none",
            )
        )
    return problems


def table_needed(config: "ClusterConfig") -> bool:
    """In rank_table mode; msrun's cluster forms through the scheduler."""
    return config.framework.start_mode is StartMode.RANK_TABLE


def meets(config: "ClusterConfig") -> bool:
    return config.framework.start_mode is not StartMode.RANK_TABLE  # at the scheduler


def host_env(ctx: HostContext) -> Tuple[Dict[str, str], Dict[str, str], List[str]]:
    defaults: Dict[str, str] = {}
    launcher = {"RANK_SIZE": str(ctx.world_size)}
    unset = [name for name in FOREIGN if name not in ctx.yaml_env]
    if ctx.rank_table_path is not None:
        launcher["RANK_TABLE_FILE"] = ctx.rank_table_path
    else:
        unset.append("RANK_TABLE_FILE")
    if not _msrun(ctx.mode):
        unset.extend(name for name in ("MS_ROLE", "MS_SCHED_HOST", "MS_SCHED_PORT") if name not in ctx.yaml_env)
        return defaults, launcher, unset
    meeting = ctx.meeting
    assert meeting is not None, "an msrun job meets at its scheduler (plan/frameworks/meeting.py)"
    defaults["MS_TOPO_TIMEOUT"] = str(TOPO_TIMEOUT_S)
    if ctx.node_rank < len(meeting.host_ips) and meeting.host_ips[ctx.node_rank]:
        defaults["HCCL_IF_IP"] = str(meeting.host_ips[ctx.node_rank])
    launcher.update(
        {
            "MS_ROLE": "MS_WORKER",
            "MS_WORKER_NUM": str(ctx.world_size),
            "MS_SCHED_HOST": meeting.address,
            "MS_SCHED_PORT": str(meeting.port),
            "ASCEND_RT_VISIBLE_DEVICES": ",".join(str(d) for d in ctx.visible),
        }
    )
    return defaults, launcher, unset


def rank_env(place: RankPlace, ctx: HostContext) -> Dict[str, str]:
    if not _msrun(ctx.mode):
        return {"RANK_ID": str(place.rank), "DEVICE_ID": str(place.device_id)}
    return {"MS_NODE_ID": str(place.rank), "RANK_ID": str(place.rank), "DEVICE_ID": str(ctx.visible_index(place))}


def helper_env(ctx: HostContext) -> Optional[Dict[str, str]]:
    """The scheduler, on the first host of an msrun job: the same script with MS_ROLE=MS_SCHED and RANK_ID
    0 (``start_scheduler``); it holds no NPU and is not counted in MS_WORKER_NUM."""
    if not _msrun(ctx.mode) or ctx.node_rank != 0:
        return None
    return {"MS_ROLE": "MS_SCHED", "RANK_ID": "0"}
