"""The TF Adapter's start-up contract (``framework: tensorflow``, the default): RANK_ID, RANK_SIZE,
DEVICE_ID, ASCEND_DEVICE_ID and RANK_TABLE_FILE, or the CM_* variables of a rank-table-free job;
the names Ascend ModelZoo's TF models read; and the session options for the rank-side helper.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Dict, List, Optional, Sequence, Tuple

from npulaunch.plan.frameworks import Variable
from npulaunch.plan.rankenv import SESSION_OPTIONS_VAR, HostContext, RankPlace
from npulaunch.plan.rankfree import CM_VARIABLES

if TYPE_CHECKING:
    from npulaunch.config.cluster import ClusterConfig
    from npulaunch.host.errors import ConfigProblem

SUMMARY = "the TF Adapter's: RANK_ID, RANK_SIZE, DEVICE_ID, ASCEND_DEVICE_ID, RANK_TABLE_FILE (or CM_*)"
DEFAULT_PORT = None

_TFA = "tf_adapter/util"
SOURCES = (
    "hicann/tensorflow @ 82957b92 (TF Adapter): tf_adapter/util/ge_plugin.cc, tf_adapter/util/npu_attrs.cc",
    "Ascend/ModelZoo-TensorFlow @ a2c3332 (RANK_INDEX, DEVICE_INDEX)",
)
VARIABLES = (
    Variable("RANK_ID", "the rank, 0..RANK_SIZE-1, as the rank table names it", f"{_TFA}/ge_plugin.cc"),
    Variable("RANK_SIZE", "the number of ranks", f"{_TFA}/ge_plugin.cc"),
    Variable(
        "DEVICE_ID",
        "the NPU's physical id (the rank table's device_id)",
        f"{_TFA}/npu_attrs.cc GetEnvDeviceID",
    ),
    Variable(
        "ASCEND_DEVICE_ID",
        "the id the process opens (read first when set)",
        f"{_TFA}/npu_attrs.cc GetEnvDeviceID",
    ),
    Variable("RANK_TABLE_FILE", "the HCCL rank table npulaunch wrote", f"{_TFA}/ge_plugin.cc"),
    Variable("RANK_INDEX", "the server's index (ModelZoo's shard RANK_INDEX * 8 + DEVICE_ID)", "ModelZoo-TensorFlow"),
    Variable("DEVICE_INDEX", "the global rank (ModelZoo's data shard index)", "ModelZoo-TensorFlow"),
)

# Identities the TF Adapter prefers to RANK_ID: with RANK_TABLE_FILE set, a POD_NAME (Kubernetes puts
# one in every pod) makes it look the rank up by pod name and never read RANK_ID (Ascend/tensorflow
# tf_adapter/util/ge_plugin.cc @ 027d64c, GePlugin::Init). npulaunch's rank table names ranks by id.
IDENTITY_OVERRIDES = ("POD_NAME",)


def refuse(config: "ClusterConfig") -> List["ConfigProblem"]:
    return []  # the TF rules are config/rules.py's and the plan's own


def table_needed(config: "ClusterConfig") -> bool:
    """Yes: without a rank table or CM_* the TF Adapter configures no HCCL (plan/hosts.py)."""
    return True


def meets(config: "ClusterConfig") -> bool:
    return False  # HCCL reads the rank table, or meets at CM_CHIEF_IP (plan/rankfree.py)


def host_env(ctx: HostContext) -> Tuple[Dict[str, str], Dict[str, str], List[str]]:
    launcher = {
        "RANK_SIZE": str(ctx.world_size),
        # What Ascend ModelZoo's TF1 models read (Ascend/ModelZoo-TensorFlow @ a2c3332): RANK_INDEX is the
        # server index (Bert_Google run_pretraining.py: shard RANK_INDEX * 8 + DEVICE_ID); DEVICE_INDEX,
        # the rank's own, is rank_env's. The TF Adapter reads neither (hicann/tensorflow @ 82957b9).
        "RANK_INDEX": str(ctx.node_rank),
    }
    if ctx.session_options_text is not None:  # one text for every rank (else each rank's own)
        launcher[SESSION_OPTIONS_VAR] = ctx.session_options_text
    unset = list(IDENTITY_OVERRIDES)
    if ctx.cluster_env is not None:
        # The TF Adapter uses CM_* only without RANK_SIZE, and the docs forbid RANK_ID / RANK_SIZE /
        # RANK_TABLE_FILE beside them (plan/rankfree.py has the sources): HCCL numbers the ranks.
        del launcher["RANK_SIZE"]
        launcher.update(ctx.cluster_env)
        # What a script reads instead: the world size is CM_WORKER_SIZE; ModelZoo's rank-table-free
        # scripts switch their models to RANK_SIZES / RANK_IDS with sed (ResNet50_ID0058 test/
        # train_performance_bs256_hw192_16p.sh @ 22c93f5), so these are offered too (RANK_IDS is
        # rank_env's). DEVICE_INDEX and RANK_IDS follow npulaunch's order (HCCL numbers CM ranks
        # itself: get_rank_id for that).
        launcher["RANK_SIZES"] = str(ctx.world_size)
        unset.extend(("RANK_ID", "RANK_SIZE", "RANK_TABLE_FILE"))
    else:
        if ctx.rank_table_path is not None:
            launcher["RANK_TABLE_FILE"] = ctx.rank_table_path
        else:
            unset.append("RANK_TABLE_FILE")  # a stale one from the user's shell would mislead HCCL
        # An inherited CM_WORKER_SIZE turns the TF Adapter's rank-table mode off, an inherited
        # CM_CHIEF_IP beside RANK_TABLE_FILE turns both modes off (ge_plugin.cc, plan/rankfree.py).
        unset.extend(name for name in CM_VARIABLES if name not in ctx.yaml_env)
    return {}, launcher, unset


def rank_env(place: RankPlace, ctx: HostContext) -> Dict[str, str]:
    rank = str(place.rank)
    device = str(place.device_id)
    return {
        "RANK_IDS" if ctx.cluster_env is not None else "RANK_ID": rank,
        # DEVICE_ID the physical id (the rank table's device_id), ASCEND_DEVICE_ID the id the process opens:
        # the TF Adapter uses ASCEND_DEVICE_ID whenever it is set (npu_attrs.cc GetEnvDeviceID)
        "DEVICE_ID": device,
        "ASCEND_DEVICE_ID": device if place.ascend_device_id == place.device_id else str(place.ascend_device_id),
        # ModelZoo's DEVICE_INDEX is the data-shard index, int() with no default (ResNet50_ID0058
        # src/data_loader/resnet50/data_loader.py: d.shard(RANK_SIZE, DEVICE_INDEX)), so the global rank
        "DEVICE_INDEX": rank,
    }


def helper_env(ctx: HostContext) -> Optional[Dict[str, str]]:
    return None


BERT_SERVER_WIDTH = 8  # RANK_INDEX * 8 + DEVICE_ID: ModelZoo's BERT / NEZHA pretraining shard index


def shard_formula_note(ranks: Sequence[Tuple[int, int, int]], world_size: int) -> Optional[str]:
    """Where ModelZoo's ``RANK_INDEX * 8 + DEVICE_ID`` (BERT / NEZHA pretraining: the shard of
    ``d.shard(RANK_SIZE, ...)``) does not give each rank a different shard below RANK_SIZE: hosts
    with other than devices 0-7. ``ranks``: ``(rank, RANK_INDEX, DEVICE_ID)`` of every rank."""
    if world_size < 2:
        return None
    got = [node * BERT_SERVER_WIDTH + device for _, node, device in ranks]
    if sorted(got) == list(range(world_size)):
        return None
    shown = ", ".join(f"rank {rank}: {value}" for (rank, _, _), value in list(zip(ranks, got))[:8])
    more = f", ... ({len(ranks) - 8} more)" if len(ranks) > 8 else ""
    return (
        f"ModelZoo's RANK_INDEX * 8 + DEVICE_ID (BERT / NEZHA pretraining's data shard) assumes devices 0-7 "
        f"on every host; here it gives {shown}{more}, not each of 0..{world_size - 1} once: such a script "
        "reads some shards twice or asks for shards past RANK_SIZE. DEVICE_INDEX is each rank's global rank "
        "(0..RANK_SIZE-1): shard by it instead"
    )
