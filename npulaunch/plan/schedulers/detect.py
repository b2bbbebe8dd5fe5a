"""Which batch scheduler runs this process, and what it says: each scheduler's reader tried in ``ORDER``
(mpirun inside Slurm first), or the one ``--scheduler`` forces; torchrun's node flags make a view of their own.
Pure: the environment and hostname are passed in; it never reads ``os.environ``.
"""

from __future__ import annotations

from typing import Dict, Mapping, Optional

from npulaunch.plan.schedulers import k8s, mpi, slurm, volcano
from npulaunch.plan.schedulers.view import (
    Draft,
    Reader,
    SchedulerKind,
    SchedulerView,
    check_bounds,
    first_set,
    invalid_value,
    value_of,
)

_READERS: Dict[SchedulerKind, Reader] = {
    SchedulerKind.SLURM: slurm.read,
    SchedulerKind.MPI: mpi.read,
    SchedulerKind.VOLCANO: volcano.read,
    SchedulerKind.K8S: k8s.read,
}
_EXPECTED = {
    SchedulerKind.SLURM: "SLURM_JOB_ID or SLURM_JOBID",
    SchedulerKind.MPI: "OMPI_COMM_WORLD_RANK (Open MPI) or PMI_RANK (MPICH, Intel MPI)",
    SchedulerKind.VOLCANO: "VC_TASK_INDEX",
    SchedulerKind.K8S: "JOB_COMPLETION_INDEX (Indexed Job) or a hostname ending in -<ordinal> (StatefulSet)",
}


def flags_view(nnodes: int, node_rank: int, master_addr: str, met_at: str = "") -> SchedulerView:
    """torchrun's ``--nnodes N --node-rank K --master-addr A``: node K of N, started by a scheduler that
    names no hosts. The first node is the master address; the others are known only by their index.
    ``met_at``: the c10d rendezvous that gave the three (plan/schedulers/c10d.py), not the flags."""
    draft = Draft(SchedulerKind.FLAGS)
    hosts = (master_addr,) + tuple(f"node-{index}" for index in range(1, nnodes))
    draft.put("hosts", hosts, met_at or f"--nnodes {nnodes} --master-addr {master_addr}")
    draft.put("node_count", nnodes, met_at or f"--nnodes {nnodes}")
    draft.put("node_index", node_rank, met_at or f"--node-rank {node_rank}")
    draft.sources["kind"] = "torchrun's c10d rendezvous" if met_at else "torchrun's node flags"
    return draft.view()


def detect(env: Mapping[str, str], hostname: str = "", forced: Optional[str] = None) -> SchedulerView:
    """The scheduler running this process and what it says. Without ``forced``, the first found of:
    mpirun inside Slurm, Slurm, MPI, Volcano, Kubernetes (KUBERNETES_SERVICE_HOST and an index).
    ``forced`` names one of them (or "none") and takes its variables only."""
    kind = _forced_kind(forced)
    if kind is SchedulerKind.FLAGS:
        raise invalid_value("scheduler", repr(forced), "auto, slurm, mpi, volcano, k8s or none")
    if kind is SchedulerKind.NONE:
        return Draft(kind).view()
    if kind is not None:
        draft = _READERS[kind](env, hostname)
        if draft is None:
            raise invalid_value(
                f"scheduler {kind.value} (forced)",
                f"none of its variables, for hostname {hostname!r}",
                f"a {kind.value} environment with {_EXPECTED[kind]}",
            )
        draft.sources["kind"] = f"forced: {kind.value}"
    else:
        draft = _autodetect(env, hostname)
        if draft is None:
            return Draft(SchedulerKind.NONE).view()
    check_bounds(draft)
    return draft.view()


def _forced_kind(forced: Optional[str]) -> Optional[SchedulerKind]:
    if forced is None:
        return None
    try:
        return SchedulerKind(forced)
    except ValueError:
        choices = [kind.value for kind in SchedulerKind if kind is not SchedulerKind.FLAGS]
        import difflib

        close = difflib.get_close_matches(str(forced), choices, n=1)
        raise invalid_value(
            "scheduler", repr(forced), ", ".join(choices), f"did you mean {close[0]}?" if close else ""
        ) from None


def _autodetect(env: Mapping[str, str], hostname: str) -> Optional[Draft]:
    draft = mpi.read_in_slurm(env)
    if draft is not None:
        return draft
    markers = [
        (SchedulerKind.SLURM, slurm.JOB_VARS),
        (SchedulerKind.MPI, ("OMPI_COMM_WORLD_RANK", "PMI_RANK")),
        (SchedulerKind.VOLCANO, ("VC_TASK_INDEX",)),
        (SchedulerKind.K8S, ("KUBERNETES_SERVICE_HOST",)),
    ]
    for kind, names in markers:
        var = first_set(env, names)
        if var is None:
            continue
        draft = _READERS[kind](env, hostname)
        if draft is not None:
            draft.sources["kind"] = f"{var}={value_of(env, var)}"
            return draft
    return None
