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


def session_options_text(options: Mapping[str, Any]) -> str:
    """NPULAUNCH_SESSION_OPTIONS: the options as the rank-side helper reads them."""
    return json.dumps(dict(options), sort_keys=True, separators=(",", ":"))


def host_env(
    ctx: HostContext, yaml_env: Mapping[str, Optional[str]], env_source: str = "yaml"
) -> Tuple[Dict[str, str], Tuple[str, ...], Dict[str, str]]:
    """What every rank of the host gets alike: npulaunch's defaults, the YAML's env, and the
    launcher's values that do not depend on the rank; ``(env, unset, sources)``. The values that do
    are rank_own_env's, and win (the YAML may not set them at all)."""
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
        "RANK_SIZE": str(ctx.world_size),
        "JOB_ID": ctx.job_id,
        "NPULAUNCH_LOCAL_WORLD_SIZE": str(ctx.local_world_size),
        "NPULAUNCH_NODE_RANK": str(ctx.node_rank),
        "NPULAUNCH_HOST": ctx.host,
        "NPULAUNCH_JOB_DIR": ctx.job_dir,
        JOB_UUID_VAR: ctx.job_uuid,
        # What Ascend ModelZoo's TF1 models read (Ascend/ModelZoo-TensorFlow @ a2c3332): RANK_INDEX is the
        # server index (Bert_Google run_pretraining.py: shard RANK_INDEX * 8 + DEVICE_ID); DEVICE_INDEX,
        # the rank's own, is rank_own_env's. The TF Adapter reads neither (hicann/tensorflow @ 82957b9).
        "RANK_INDEX": str(ctx.node_rank),
    }
    if ctx.session_options_text is not None:  # one text for every rank (else each rank's own)
        launcher[SESSION_OPTIONS_VAR] = ctx.session_options_text
    unset.extend(IDENTITY_OVERRIDES)
    if ctx.cluster_env is not None:
        # The TF Adapter uses CM_* only without RANK_SIZE, and the docs forbid RANK_ID / RANK_SIZE /
        # RANK_TABLE_FILE beside them (plan/rankfree.py has the sources): HCCL numbers the ranks.
        del launcher["RANK_SIZE"]
        launcher.update(ctx.cluster_env)
        # What a script reads instead: the world size is CM_WORKER_SIZE; ModelZoo's rank-table-free
        # scripts switch their models to RANK_SIZES / RANK_IDS with sed (ResNet50_ID0058 test/
        # train_performance_bs256_hw192_16p.sh @ 22c93f5), so these are offered too (RANK_IDS is
        # rank_own_env's). DEVICE_INDEX and RANK_IDS follow npulaunch's order (HCCL numbers CM ranks
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
        unset.extend(name for name in CM_VARIABLES if name not in yaml_env)
    env.update(launcher)
    for name in launcher:  # a name without a source is the launcher's (RankSpec.env_sources): 1 KB a rank less
        sources.pop(name, None)
    return env, tuple(unset), sources


class RankPlace:
    """Where one rank sits on its host, and its directories: what its own variables are made of."""

    __slots__ = ("rank", "local_rank", "device_id", "ascend_device_id", "rank_dir", "plog_dir")

    def __init__(
        self, rank: int, local_rank: int, device_id: int, ascend_device_id: int, rank_dir: str, plog_dir: str
    ) -> None:
        self.rank = rank
        self.local_rank = local_rank
        self.device_id = device_id  # physical
        self.ascend_device_id = ascend_device_id  # as the rank's process opens it
        self.rank_dir = rank_dir
        self.plog_dir = plog_dir


def rank_own_env(place: RankPlace, cm_mode: bool, options: Optional[Mapping[str, Any]] = None) -> Dict[str, str]:
    """The launcher's values that differ from rank to rank of a host. ``options``: the rank's session
    options when they are its own (else host_env gives every rank the same text)."""
    rank = str(place.rank)
    device = str(place.device_id)
    own = {
        "RANK_IDS" if cm_mode else "RANK_ID": rank,
        # DEVICE_ID the physical id (the rank table's device_id), ASCEND_DEVICE_ID the id the process opens:
        # the TF Adapter uses ASCEND_DEVICE_ID whenever it is set (npu_attrs.cc GetEnvDeviceID)
        "DEVICE_ID": device,
        "ASCEND_DEVICE_ID": device if place.ascend_device_id == place.device_id else str(place.ascend_device_id),
        "ASCEND_PROCESS_LOG_PATH": place.plog_dir,
        "NPULAUNCH_LOCAL_RANK": str(place.local_rank),
        "NPULAUNCH_RANK_DIR": place.rank_dir,
        # ModelZoo's DEVICE_INDEX is the data-shard index, int() with no default (ResNet50_ID0058
        # src/data_loader/resnet50/data_loader.py: d.shard(RANK_SIZE, DEVICE_INDEX)), so the global rank
        "DEVICE_INDEX": rank,
    }
    if options is not None:
        own[SESSION_OPTIONS_VAR] = session_options_text(options)
    return own


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
