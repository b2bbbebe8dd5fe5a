"""Identity variables the launcher itself inherited (from the user's shell, a container image, a pod
spec) that would change who a rank is if they reached it: which npulaunch replaces, which it
removes, which it passes on, and what each would have done. Pure: the environment comes in.

What wins, and why (sources in catalog/RULES.md, "Run-time facts beyond the seeds", item 10):
- RANK_ID, RANK_SIZE, DEVICE_ID, ASCEND_DEVICE_ID, JOB_ID, RANK_TABLE_FILE: npulaunch's per-rank
  values replace inherited ones (an inherited value would be the same for every rank).
- POD_NAME: removed. With RANK_TABLE_FILE set, the TF Adapter releases up to r1.15 / r3.x look the
  rank up by POD_NAME and never read RANK_ID (Ascend/tensorflow tf_adapter/util/ge_plugin.cc
  @ 085a7b2, lines 346-375); npulaunch's rank table names ranks by id.
- CM_*: removed in rank-table modes (CM_WORKER_SIZE turns rank-table mode off, CM_CHIEF_IP beside
  RANK_TABLE_FILE turns both off: hicann/tensorflow tf_adapter/util/ge_plugin.cc @ 82957b9, 213-228),
  replaced in rank_table: cm.
- TF_CONFIG: passed on (a script may use it), but the adapter reads it: task type "ps" makes
  GePlugin::Init return without initialising GE, "evaluator" turns HCCL off (ge_plugin.cc 171-192).
  An inherited "ps" task would leave every rank without an NPU: refused. npulaunch sets its own
  TF_CONFIG with cpu_fallback.
- HELP_CLUSTER: passed on; a non-empty value turns HCCL on (ge_plugin.cc 230-236).
"""

from __future__ import annotations

import json
from typing import List, Mapping, Tuple

REPLACED = ("RANK_ID", "RANK_SIZE", "DEVICE_ID", "ASCEND_DEVICE_ID", "JOB_ID", "RANK_TABLE_FILE")
REMOVED = ("POD_NAME",)
CM_PREFIX = "CM_"


def identity_findings(
    environ: Mapping[str, str], yaml_env: Mapping[str, object], cm_mode: bool, cpu_fallback: bool
) -> Tuple[List[str], List[str]]:
    """``(errors, warnings)`` for the identity variables in the launcher's environment ``environ``
    (what its local ranks inherit). Variables the YAML's env sets or removes are the user's
    choice and not reported."""
    errors: List[str] = []
    warnings: List[str] = []
    present = {name: value for name, value in environ.items() if name not in yaml_env and value != ""}
    replaced = [name for name in REPLACED if name in present]
    cm = sorted(name for name in present if name.startswith(CM_PREFIX))
    if replaced or (cm and cm_mode):
        shown = ", ".join(f"{name}={present[name]}" for name in replaced + (cm if cm_mode else []))
        warnings.append(
            f"warning: the launcher's environment has {shown}: each rank gets npulaunch's own value instead "
            "(an inherited one would be the same for every rank)"
        )
    removed = [name for name in REMOVED if name in present] + ([] if cm_mode else cm)
    if removed:
        warnings.append(
            f"warning: the launcher's environment has {', '.join(removed)}: removed from every rank "
            "(POD_NAME makes the TF Adapter look the rank up by pod name instead of RANK_ID; CM_* turns "
            "rank-table mode off)"
        )
    if "TF_CONFIG" in present and not cpu_fallback:
        task = _task_type(present["TF_CONFIG"])
        if task == "ps":
            errors.append(
                'the launcher\'s environment has TF_CONFIG with task type "ps": the TF Adapter then never '
                "initialises GE, so no rank would use its NPU; unset it, or set TF_CONFIG in the YAML's env "
                "(null removes it)"
            )
        else:
            effect = "turns HCCL off in every rank" if task == "evaluator" else "reaches every rank unchanged"
            warnings.append(
                f"warning: the launcher's environment has TF_CONFIG (task type {task or 'not given'}): it {effect}; "
                "the TF Adapter reads it (ps: no GE, evaluator: no HCCL)"
            )
    if present.get("HELP_CLUSTER"):
        warnings.append(
            "warning: the launcher's environment has HELP_CLUSTER: it reaches every rank and makes the "
            "TF Adapter use HCCL"
        )
    return errors, warnings


def _task_type(text: str) -> str:
    try:
        task = json.loads(text).get("task", {})
    except (ValueError, AttributeError):
        return ""
    return str(task.get("type", "")) if isinstance(task, dict) else ""
