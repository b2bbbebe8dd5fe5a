"""torchrun's start-up contract (``framework: pytorch``), with what torch_npu needs beside it.

Each rank gets the variables torchrun's agent gives a worker, with torchrun's meanings
(pytorch/pytorch @ cf30153c, torch/distributed/elastic/agent/server/local_elastic_agent.py
``_start_workers`` L415-436): ``init_process_group("env://")`` needs RANK, WORLD_SIZE, MASTER_ADDR
and MASTER_PORT (torch/distributed/rendezvous.py ``_env_rendezvous_handler`` L242-287), and rank 0
hosts the TCPStore unless TORCHELASTIC_USE_AGENT_STORE is "True" (L158-205): npulaunch runs no
store, so it says "False".

Ascend (Ascend/pytorch @ 9e73e708): torch_npu never picks the device from LOCAL_RANK, a script calls
``torch.npu.set_device(LOCAL_RANK)``; the device it opens is that index in ASCEND_RT_VISIBLE_DEVICES,
whose ids must be strictly ascending or torch_npu sees no device (torch_npu/npu/__init__.py L411-496).
So each host's job NPUs are listed in ascending order, and LOCAL_RANK is the index of the rank's NPU
in that list. RANK_TABLE_FILE selects torch_npu's rank-table start-up (ProcessGroupHCCL.cpp
L2756-2804: its rank_id must equal RANK, as npulaunch's tables have it), a real file, not a symlink
(docs/zh/api/environment_variable/collective_communication/RANK_TABLE_FILE.md).
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Dict, List, Optional, Tuple

from npulaunch.plan.frameworks import Variable, refuse_owned, refuse_tf_settings
from npulaunch.plan.rankenv import HostContext, RankPlace

if TYPE_CHECKING:
    from npulaunch.config.cluster import ClusterConfig
    from npulaunch.host.errors import ConfigProblem

SUMMARY = "torchrun's: RANK, LOCAL_RANK, WORLD_SIZE, MASTER_ADDR, MASTER_PORT, ... (torch_npu)"
DEFAULT_PORT = 29500  # torchrun's --master-port default (torch/distributed/run.py L1015-1016)

_AGENT = "local_elastic_agent.py"
_NPU = "torch_npu"
SOURCES = (
    "pytorch/pytorch @ cf30153c torch/distributed/elastic/agent/server/local_elastic_agent.py, "
    "torch/distributed/{rendezvous.py, run.py, elastic/multiprocessing/api.py}",
    "Ascend/pytorch @ 9e73e708 (torch_npu): torch_npu/npu/__init__.py, torch_npu/csrc/distributed/ProcessGroupHCCL.cpp",
    "CANN 8.5.0 HCCL user guide: hcclug_000088 (HCCL_IF_IP)",
)
VARIABLES = (
    Variable("RANK", "the global rank, 0..WORLD_SIZE-1", f"{_AGENT} L416"),
    Variable("LOCAL_RANK", "the index of the rank's NPU in ASCEND_RT_VISIBLE_DEVICES", f"{_AGENT} L487"),
    Variable("WORLD_SIZE", "the number of ranks", f"{_AGENT} L421"),
    Variable("LOCAL_WORLD_SIZE", "the ranks of this host", f"{_AGENT} L420"),
    Variable("GROUP_RANK", "the host's index (torchrun's node rank)", f"{_AGENT} L417"),
    Variable("GROUP_WORLD_SIZE", "the number of hosts", f"{_AGENT} L422"),
    Variable("ROLE_RANK", "the rank among ranks of its role (all: one role)", f"{_AGENT} L418"),
    Variable("ROLE_WORLD_SIZE", "the ranks of the role", f"{_AGENT} L423"),
    Variable("ROLE_NAME", "framework.role (torchrun's --role, default 'default')", f"{_AGENT} L419"),
    Variable("MASTER_ADDR", "rank 0's host, as the other hosts reach it: the TCPStore", f"{_AGENT} L424"),
    Variable("MASTER_PORT", "the TCPStore's port, checked free before start", f"{_AGENT} L425"),
    Variable("TORCHELASTIC_RESTART_COUNT", "npulaunch's restarts before this attempt (0 first)", f"{_AGENT} L426"),
    Variable("TORCHELASTIC_MAX_RESTARTS", "job.max_restarts", f"{_AGENT} L427"),
    Variable("TORCHELASTIC_RUN_ID", "the job id", f"{_AGENT} L428"),
    Variable(
        "TORCHELASTIC_USE_AGENT_STORE",
        "True: npulaunch's agent on the first host serves the TCPStore before any rank starts, every rank is "
        "a client (as torchrun's agent); False: rank 0 hosts it",
        "rendezvous.py L158-205",
    ),
    Variable(
        "TORCHELASTIC_ERROR_FILE",
        "where a @record main writes its exception (the rank's error.json)",
        "multiprocessing/api.py L390",
    ),
    Variable("OMP_NUM_THREADS", "1 when a host runs several ranks and none is set", "run.py L872-884"),
    Variable(
        "ASCEND_RT_VISIBLE_DEVICES",
        "the host's job NPUs, ascending: LOCAL_RANK indexes them",
        f"{_NPU} npu/__init__.py L411-496",
    ),
    Variable(
        "HCCL_IF_IP",
        "the host's address toward rank 0's host, where known (HCCL's root-info NIC)",
        "hcclug_000088",
    ),
    Variable(
        "RANK_TABLE_FILE",
        "the rank table, when the job has one: torch_npu's rank-table start-up",
        f"{_NPU} ProcessGroupHCCL.cpp L2756-2804",
    ),
)

# what torchrun's contract owns: the YAML's env may not set them (framework.master_addr / master_port do)
OWNED = tuple(v.name for v in VARIABLES if v.name not in ("OMP_NUM_THREADS", "HCCL_IF_IP"))
# the TF Adapter's names: a stale value inherited from an Ascend shell would mislead a script reading them
FOREIGN = ("RANK_ID", "RANK_SIZE", "DEVICE_ID", "ASCEND_DEVICE_ID", "RANK_INDEX", "DEVICE_INDEX", "POD_NAME")
ERROR_FILENAME = "error.json"


AGENT_STORE_SINCE = (2, 4)  # torch's client of this protocol (VALIDATE, then PING) as host/tcpstore.py serves it


def agent_store() -> Tuple[bool, str]:
    """Whether npulaunch serves the TCPStore (torch's agent store), and why: for torch 2.4 and later, the
    version the launcher's Python has (the one torchrun's form runs the script with); tested with 2.13."""
    from importlib import metadata

    try:
        version = metadata.version("torch")
    except metadata.PackageNotFoundError:
        return False, "rank 0 hosts the TCPStore: torch is not installed beside npulaunch (its version unknown)"
    numbers = tuple(int(part) for part in version.split("+")[0].split(".")[:2] if part.isdigit())
    if numbers < AGENT_STORE_SINCE:
        return False, f"rank 0 hosts the TCPStore: torch {version} (npulaunch serves it for torch 2.4 and later)"
    return True, f"npulaunch's agent serves the TCPStore (torch {version}, as torchrun's agent store)"


def refuse(config: "ClusterConfig") -> List["ConfigProblem"]:
    return refuse_tf_settings(config, "pytorch", "torch_npu") + refuse_owned(config, OWNED, "pytorch")


def table_needed(config: "ClusterConfig") -> bool:
    """No: without a table torch_npu negotiates through the TCPStore (root info); the table is faster."""
    return False


def meets(config: "ClusterConfig") -> bool:
    return True  # at rank 0's TCPStore


def host_env(ctx: HostContext) -> Tuple[Dict[str, str], Dict[str, str], List[str]]:
    meeting = ctx.meeting
    assert meeting is not None, "a pytorch job meets at rank 0's TCPStore (plan/frameworks/meeting.py)"
    defaults: Dict[str, str] = {}
    if ctx.local_world_size > 1 and "OMP_NUM_THREADS" not in ctx.inherited:
        defaults["OMP_NUM_THREADS"] = "1"  # torchrun's default for several workers (run.py L872-884)
    if ctx.node_rank < len(meeting.host_ips) and meeting.host_ips[ctx.node_rank]:
        defaults["HCCL_IF_IP"] = str(meeting.host_ips[ctx.node_rank])
    launcher = {
        "WORLD_SIZE": str(ctx.world_size),
        "LOCAL_WORLD_SIZE": str(ctx.local_world_size),
        "GROUP_RANK": str(ctx.node_rank),
        "GROUP_WORLD_SIZE": str(ctx.node_count),
        "ROLE_NAME": ctx.role,
        "ROLE_WORLD_SIZE": str(ctx.world_size),
        "MASTER_ADDR": meeting.address,
        "MASTER_PORT": str(meeting.port),
        "TORCHELASTIC_RESTART_COUNT": str(ctx.restart_count),
        "TORCHELASTIC_MAX_RESTARTS": str(ctx.max_restarts),
        "TORCHELASTIC_RUN_ID": ctx.job_id,
        "TORCHELASTIC_USE_AGENT_STORE": str(meeting.served),
        "ASCEND_RT_VISIBLE_DEVICES": ",".join(str(d) for d in ctx.visible),
    }
    unset = [name for name in FOREIGN if name not in ctx.yaml_env]
    if ctx.rank_table_path is not None:
        launcher["RANK_TABLE_FILE"] = ctx.rank_table_path
    else:
        unset.append("RANK_TABLE_FILE")  # an inherited one would switch torch_npu to a table of another job
    return defaults, launcher, unset


def rank_env(place: RankPlace, ctx: HostContext) -> Dict[str, str]:
    return {
        "RANK": str(place.rank),
        "ROLE_RANK": str(place.rank),
        "LOCAL_RANK": str(ctx.visible_index(place)),
        "TORCHELASTIC_ERROR_FILE": f"{place.rank_dir}/{ERROR_FILENAME}",
    }


def helper_env(ctx: HostContext) -> Optional[Dict[str, str]]:
    return None
