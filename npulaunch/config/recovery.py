"""The YAML's ``recovery`` section: how a job continues past an NPU or host fault (launch/recovery.py).

    recovery:
      max_recoveries: 3               # faults the job continues past (separate from job.max_restarts)
      checkpoint_dir: output/{device_id}/ckpt   # each rank's TF (or torch) checkpoint directory: resumed from
      shrink: {min_ranks: 4}          # without a spare, continue on fewer ranks, never fewer than this
      ledger: /shared/faults.jsonl    # the fault history (default <log_dir>/faults.jsonl: plan/ledger.py)
      ledger_window_h: 24             # how long a fault in it keeps its NPU or host off (0: escalated only)

Part of the config layer: shapes, types and ranges only (whether the ledger can be written is the planner's
check, plan/ledger.py ``ledger_problem``, before anything starts).
"""

from __future__ import annotations

import os
from typing import Any, Dict, Optional

from npulaunch.config.checker import Checker
from npulaunch.config.cluster import RecoveryConfig
from npulaunch.config.sections import check_rank_text

RECOVERY_KEYS = ("max_recoveries", "checkpoint_dir", "shrink", "ledger", "ledger_window_h")
SHRINK_KEYS = ("min_ranks",)
MAX_RECOVERIES = 100
DEFAULT_MAX_RECOVERIES = RecoveryConfig.max_recoveries
DEFAULT_LEDGER_WINDOW_H = RecoveryConfig.ledger_window_h
MAX_LEDGER_WINDOW_H = 720  # ClusterD's largest fault_window_hours (plan/faulthistory.py)


def parse_recovery(check: Checker, value: Any, base_dir: str = ".") -> RecoveryConfig:
    """The section; ``base_dir``: where a relative ``ledger`` path starts (the YAML file's directory)."""
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
    return RecoveryConfig(
        max_recoveries=limit,
        checkpoint_dir=directory,
        shrink_min_ranks=min_ranks,
        ledger=_ledger(check, section.get("ledger"), base_dir) if "ledger" in section else None,
        ledger_window_h=_window_h(check, section),
    )


def _window_h(check: Checker, section: Dict[str, Any]) -> float:
    if "ledger_window_h" not in section:
        return DEFAULT_LEDGER_WINDOW_H
    hours = f"a number of hours from 0 to {MAX_LEDGER_WINDOW_H} (0: only escalated NPUs are kept off)"
    given = check.number(section["ledger_window_h"], ("recovery", "ledger_window_h"), 0, MAX_LEDGER_WINDOW_H, hours)
    return DEFAULT_LEDGER_WINDOW_H if given is None else given


def _ledger(check: Checker, value: Any, base_dir: str) -> Optional[str]:
    """The ledger's path, absolute: one file the jobs share, so no placeholders."""
    path = ("recovery", "ledger")
    text = check.string(value, path, "a file path (relative paths start at the YAML file's directory)")
    if text is None:
        return None
    if not text.strip() or "{" in text or text.endswith(("/", os.sep)):
        hint = "one file for every job: no placeholders" if "{" in text else "a file, not a directory"
        check.add(path, repr(text), "a file path (relative paths start at the YAML file's directory)", hint)
        return None
    return os.path.normpath(os.path.join(base_dir, os.path.expanduser(text)))
