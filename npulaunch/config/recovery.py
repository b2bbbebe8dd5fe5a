"""The YAML's ``recovery`` section: how a job continues past an NPU or host fault (launch/recovery.py).

    recovery:
      max_recoveries: 3               # faults the job continues past (separate from job.max_restarts)
      checkpoint_dir: output/{device_id}/ckpt   # each rank's TF (or torch) checkpoint directory: resumed from
      shrink: {min_ranks: 4}          # without a spare, continue on fewer ranks, never fewer than this

Part of the config layer: shapes, types and ranges only.
"""

from __future__ import annotations

from typing import Any

from npulaunch.config.checker import Checker
from npulaunch.config.cluster import RecoveryConfig
from npulaunch.config.sections import check_rank_text

RECOVERY_KEYS = ("max_recoveries", "checkpoint_dir", "shrink")
SHRINK_KEYS = ("min_ranks",)
MAX_RECOVERIES = 100
DEFAULT_MAX_RECOVERIES = RecoveryConfig.max_recoveries


def parse_recovery(check: Checker, value: Any) -> RecoveryConfig:
    section = check.mapping(value, ("recovery",), RECOVERY_KEYS)
    limit = DEFAULT_MAX_RECOVERIES
    if "max_recoveries" in section:
        given = check.integer(section["max_recoveries"], ("recovery", "max_recoveries"), 0, MAX_RECOVERIES)
        limit = limit if given is None else given
    directory = None
    if "checkpoint_dir" in section:
        path = ("recovery", "checkpoint_dir")
        directory = check.string(
            section["checkpoint_dir"],
            path,
            "a directory per rank (placeholders such as {rank} or {device_id}; relative to the rank's workdir)",
        )
        if directory is not None:
            check_rank_text(check, directory, path)
    min_ranks = None
    if "shrink" in section:
        shrink = check.mapping(section["shrink"], ("recovery", "shrink"), SHRINK_KEYS)
        if "min_ranks" not in shrink and isinstance(section["shrink"], dict):
            check.add(("recovery", "shrink"), "no min_ranks", "{min_ranks: N}: the fewest ranks the job may go on with")
        elif "min_ranks" in shrink:
            min_ranks = check.integer(shrink["min_ranks"], ("recovery", "shrink", "min_ranks"), 1, 1 << 20)
    return RecoveryConfig(max_recoveries=limit, checkpoint_dir=directory, shrink_min_ranks=min_ranks)
