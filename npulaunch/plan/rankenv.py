"""The per-rank environment: the one place where the rank vocabulary (rank, local_rank,
world_size, device_id, ...) becomes CANN's variable names (RANK_ID, DEVICE_ID, ...).

Pure: takes values, returns the variables npulaunch sets, the inherited ones it removes, and
where each came from. Layering, lowest first: inherited < npulaunch defaults < YAML env < the
launcher's per-rank values (which the YAML may not set at all).
"""

from __future__ import annotations

import json
from dataclasses import dataclass
from typing import Any, Dict, List, Mapping, Optional, Sequence, Tuple

from npulaunch.plan.rankfree import CM_VARIABLES

# Identities the TF Adapter prefers to RANK_ID: with RANK_TABLE_FILE set, a POD_NAME (Kubernetes puts
# one in every pod) makes it look the rank up by pod name and never read RANK_ID (Ascend/tensorflow
# tf_adapter/util/ge_plugin.cc @ 027d64c, GePlugin::Init). npulaunch's rank table names ranks by id.
IDENTITY_OVERRIDES = ("POD_NAME",)
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
class RankContext:
    """What the plan decided for one rank, in npulaunch's own vocabulary."""

    rank: int
    local_rank: int
    world_size: int
    local_world_size: int
    node_rank: int
    host: str
    device_id: int
    job_id: str
    job_uuid: str
    job_dir: str
    rank_dir: str
    plog_dir: str
    rank_table_path: Optional[str]
    session_options: Mapping[str, Any]
    cluster_env: Optional[Mapping[str, str]] = None  # rank-table-free (rank_table: cm): this rank's CM_* values
    # the device as the rank's process opens it: its index in ASCEND_RT_VISIBLE_DEVICES, or the logical id
    # (plan/hosts.py map_devices); None: the same as device_id (the physical id)
    ascend_device_id: Optional[int] = None
    session_options_text: Optional[str] = None  # session_options_text(session_options), when already made


def session_options_text(options: Mapping[str, Any]) -> str:
    """NPULAUNCH_SESSION_OPTIONS: the options as the rank-side helper reads them."""
    return json.dumps(dict(options), sort_keys=True, separators=(",", ":"))


def build_rank_env(
    ctx: RankContext, yaml_env: Mapping[str, Optional[str]], env_source: str = "yaml"
) -> Tuple[Dict[str, str], Tuple[str, ...], Dict[str, str]]:
    """Return ``(env, unset, sources)`` for one rank; ``sources`` names only what does not come from
    the launcher."""
    env: Dict[str, str] = {}
    sources: Dict[str, str] = {}
    unset: List[str] = []
    for name, value in DEFAULT_ENV.items():
        env[name], sources[name] = value, "default"
    for name, given in yaml_env.items():
        if given is None:
            env.pop(name, None)
            sources.pop(name, None)
            unset.append(name)
        else:
            env[name], sources[name] = given, env_source
    launcher = {
        "RANK_ID": str(ctx.rank),
        "RANK_SIZE": str(ctx.world_size),
        # DEVICE_ID the physical id (the rank table's device_id), ASCEND_DEVICE_ID the id the process opens:
        # the TF Adapter uses ASCEND_DEVICE_ID whenever it is set (npu_attrs.cc GetEnvDeviceID)
        "DEVICE_ID": str(ctx.device_id),
        "ASCEND_DEVICE_ID": str(ctx.device_id if ctx.ascend_device_id is None else ctx.ascend_device_id),
        "JOB_ID": ctx.job_id,
        "ASCEND_PROCESS_LOG_PATH": ctx.plog_dir,
        "NPULAUNCH_LOCAL_RANK": str(ctx.local_rank),
        "NPULAUNCH_LOCAL_WORLD_SIZE": str(ctx.local_world_size),
        "NPULAUNCH_NODE_RANK": str(ctx.node_rank),
        "NPULAUNCH_HOST": ctx.host,
        "NPULAUNCH_JOB_DIR": ctx.job_dir,
        "NPULAUNCH_RANK_DIR": ctx.rank_dir,
        SESSION_OPTIONS_VAR: (
            ctx.session_options_text
            if ctx.session_options_text is not None
            else session_options_text(ctx.session_options)
        ),
        JOB_UUID_VAR: ctx.job_uuid,
        # What Ascend ModelZoo's TF1 models read (Ascend/ModelZoo-TensorFlow @ a2c3332): DEVICE_INDEX is
        # the data-shard index, int() with no default (ResNet50_ID0058 src/data_loader/resnet50/
        # data_loader.py: d.shard(RANK_SIZE, DEVICE_INDEX)), so the global rank; RANK_INDEX is the server
        # index (Bert_Google run_pretraining.py: shard RANK_INDEX * 8 + DEVICE_ID). The TF Adapter reads
        # neither (hicann/tensorflow @ 82957b9).
        "DEVICE_INDEX": str(ctx.rank),
        "RANK_INDEX": str(ctx.node_rank),
    }
    unset.extend(IDENTITY_OVERRIDES)
    if ctx.cluster_env is not None:
        # The TF Adapter uses CM_* only without RANK_SIZE, and the docs forbid RANK_ID / RANK_SIZE /
        # RANK_TABLE_FILE beside them (plan/rankfree.py has the sources): HCCL numbers the ranks.
        for name in ("RANK_ID", "RANK_SIZE"):
            del launcher[name]
        launcher.update(ctx.cluster_env)
        # What a script reads instead: the world size is CM_WORKER_SIZE; ModelZoo's rank-table-free
        # scripts switch their models to RANK_SIZES / RANK_IDS with sed (ResNet50_ID0058 test/
        # train_performance_bs256_hw192_16p.sh @ 22c93f5), so these are offered too. DEVICE_INDEX and
        # RANK_IDS follow npulaunch's order (HCCL numbers CM ranks itself: get_rank_id for that).
        launcher.update({"RANK_SIZES": str(ctx.world_size), "RANK_IDS": str(ctx.rank)})
        unset.extend(("RANK_ID", "RANK_SIZE", "RANK_TABLE_FILE"))
    else:
        if ctx.rank_table_path is not None:
            launcher["RANK_TABLE_FILE"] = ctx.rank_table_path
        else:
            unset.append("RANK_TABLE_FILE")  # a stale one from the user's shell would mislead HCCL
        # An inherited CM_WORKER_SIZE turns the TF Adapter's rank-table mode off, an inherited
        # CM_CHIEF_IP beside RANK_TABLE_FILE turns both modes off (ge_plugin.cc, plan/rankfree.py).
        unset.extend(name for name in CM_VARIABLES if name not in yaml_env)
    env.update(launcher)
    for name in launcher:  # a name without a source is the launcher's (RankSpec.env_sources): 1 KB a rank less
        sources.pop(name, None)
    return env, tuple(unset), sources


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
