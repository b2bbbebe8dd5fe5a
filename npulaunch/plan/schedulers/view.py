"""What a batch scheduler says about a job and the process npulaunch runs as (``SchedulerView``), and the
draft each scheduler's reader fills in from its environment, every value with the variable it came from.
One module per scheduler reads its own variables (``slurm``, ``mpi``, ``volcano``, ``k8s``); ``detect``
picks the scheduler. Pure: the environment is passed in.
"""

from __future__ import annotations

import re
from dataclasses import dataclass, field
from enum import Enum
from typing import Any, Callable, Dict, Mapping, Optional, Sequence, Tuple

from npulaunch.host.errors import SchedulerError


def invalid_value(where: str, found: str, allowed: str, hint: str = "") -> SchedulerError:
    text = f"{where}: found {found}; allowed: {allowed}"
    return SchedulerError(text + (f" ({hint})" if hint else ""))


class SchedulerKind(str, Enum):
    SLURM = "slurm"
    MPI = "mpi"
    VOLCANO = "volcano"
    K8S = "k8s"
    FLAGS = "--nnodes"  # torchrun's node flags: a scheduler started one npulaunch per node with them
    NONE = "none"


@dataclass(frozen=True)
class SchedulerView:
    """What the scheduler says about this job and this process; None where it says nothing.

    ``sources`` maps a field name to where it came from (``"SLURM_NODEID=2"``); ``sources["kind"]``
    says why this scheduler was chosen. The sources of ``hosts`` and ``job_id`` are the same on
    every node of the job, so they can name the job's run.
    """

    kind: SchedulerKind
    hosts: Optional[Tuple[str, ...]]
    node_index: Optional[int]
    node_count: Optional[int]
    rank: Optional[int]
    world_size: Optional[int]
    local_rank: Optional[int]
    local_size: Optional[int]
    tasks_per_node: Optional[Tuple[int, ...]]
    job_id: Optional[str]
    sources: Dict[str, str]


VIEW_FIELDS = (
    "hosts",
    "node_index",
    "node_count",
    "rank",
    "world_size",
    "local_rank",
    "local_size",
    "tasks_per_node",
    "job_id",
)


# --- reading variables into a draft view


def value_of(env: Mapping[str, str], name: str) -> Optional[str]:
    """A variable's value; exported but empty counts as absent (wrappers export empty variables)."""
    text = env.get(name, "").strip()
    return text or None


def first_set(env: Mapping[str, str], names: Sequence[str]) -> Optional[str]:
    return next((name for name in names if value_of(env, name) is not None), None)


@dataclass
class Draft:
    """A view being assembled, each value with where it came from."""

    kind: SchedulerKind
    values: Dict[str, Any] = field(default_factory=dict)
    sources: Dict[str, str] = field(default_factory=dict)

    def put(self, name: str, value: Any, source: str) -> None:
        if value is not None:
            self.values[name] = value
            self.sources[name] = source

    def put_int(self, name: str, env: Mapping[str, str], var: str, minimum: int = 0) -> None:
        text = value_of(env, var)
        if text is None:
            return
        if not re.fullmatch(r"[0-9]+", text) or int(text) < minimum:
            raise invalid_value(var, repr(text), f"a whole number >= {minimum}")
        self.put(name, int(text), f"{var}={text}")

    def put_text(self, name: str, env: Mapping[str, str], names: Sequence[str]) -> None:
        var = first_set(env, names)
        if var is not None:
            self.put(name, value_of(env, var), f"{var}={value_of(env, var)}")

    def get(self, name: str) -> Any:
        return self.values.get(name)

    def view(self) -> SchedulerView:
        return SchedulerView(
            self.kind, **{name: self.values.get(name) for name in VIEW_FIELDS}, sources=dict(self.sources)
        )


def settle_nodes(draft: Draft) -> None:
    """node_count defaults to the number of hosts and must agree with it."""
    hosts, count = draft.get("hosts"), draft.get("node_count")
    if hosts is not None and count is None:
        draft.put("node_count", len(hosts), f"{draft.sources['hosts']} ({len(hosts)} hosts)")
    elif hosts is not None and count != len(hosts):
        raise invalid_value(
            draft.sources["node_count"], f"{count} nodes", f"{len(hosts)}, as many as {draft.sources['hosts']} lists"
        )
    check_bounds(draft)


def check_bounds(draft: Draft) -> None:
    for small, big in (("node_index", "node_count"), ("rank", "world_size"), ("local_rank", "local_size")):
        value, limit = draft.get(small), draft.get(big)
        if value is not None and limit is not None and value >= limit:
            raise invalid_value(
                draft.sources[small], f"{small} {value}", f"0 to {limit - 1}, since {draft.sources[big]}"
            )


Reader = Callable[[Mapping[str, str], str], Optional[Draft]]
"""A scheduler's reader: its draft from the environment and this host's name, or None when its variables are absent."""
