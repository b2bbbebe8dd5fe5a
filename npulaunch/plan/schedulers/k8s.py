"""Plain Kubernetes: an Indexed Job (JOB_COMPLETION_INDEX) or a StatefulSet's ordinal hostname. Pure."""

from __future__ import annotations

from typing import Mapping, Optional

from npulaunch.host.lazyre import lazy_re
from npulaunch.plan.schedulers.view import Draft, SchedulerKind

_ORDINAL = lazy_re(r"(.+)-(0|[1-9][0-9]*)")


def read(env: Mapping[str, str], hostname: str) -> Optional[Draft]:
    """An Indexed Job (JOB_COMPLETION_INDEX) or a StatefulSet (hostname ``train-3``); the node count
    is NPULAUNCH_NNODES, which the pod spec must set, since Kubernetes exports none."""
    draft = Draft(SchedulerKind.K8S)
    label, _, domain = hostname.partition(".")
    ordinal = _ORDINAL.fullmatch(label)
    draft.put_int("node_index", env, "JOB_COMPLETION_INDEX")
    if draft.get("node_index") is None and ordinal:
        draft.put("node_index", int(ordinal.group(2)), f"hostname {hostname}")
    if draft.get("node_index") is None:
        return None
    draft.put_int("node_count", env, "NPULAUNCH_NNODES", 1)
    count = draft.get("node_count")
    # pods of a StatefulSet, and of an Indexed Job, are named <base>-<index>
    if ordinal and int(ordinal.group(2)) == draft.get("node_index") and count is not None:
        suffix = f".{domain}" if domain else ""
        hosts = tuple(f"{ordinal.group(1)}-{index}{suffix}" for index in range(count))
        # the same text on every node: it names the job's run
        draft.put("hosts", hosts, f"pods {ordinal.group(1)}-<0..{count - 1}>{suffix} (NPULAUNCH_NNODES={count})")
    return draft
