"""Read a batch scheduler's environment (Slurm, an MPI launcher, Volcano, plain Kubernetes) so that
npulaunch can be the entrypoint of a scheduler's job: the job's hosts, this node's index, this
task's rank. Slurm's compact host lists are parsed by plan/hostlist.py.

Pure: the environment, hostname, clock, sleep and file reader are passed in. It never reads
``os.environ``, never runs ``scontrol`` and imports only the standard library.
"""

from __future__ import annotations

import re
from dataclasses import dataclass, field
from enum import Enum
from typing import Any, Callable, Dict, Mapping, Optional, Sequence, Tuple

from npulaunch.host.lazyre import lazy_re
from npulaunch.plan.hostlist import expand_hostlist, invalid_value, parse_tasks_per_node


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


_VIEW_FIELDS = (
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


def _value(env: Mapping[str, str], name: str) -> Optional[str]:
    """A variable's value; exported but empty counts as absent (wrappers export empty variables)."""
    text = env.get(name, "").strip()
    return text or None


def _first(env: Mapping[str, str], names: Sequence[str]) -> Optional[str]:
    return next((name for name in names if _value(env, name) is not None), None)


@dataclass
class _Draft:
    """A view being assembled, each value with where it came from."""

    kind: SchedulerKind
    values: Dict[str, Any] = field(default_factory=dict)
    sources: Dict[str, str] = field(default_factory=dict)

    def put(self, name: str, value: Any, source: str) -> None:
        if value is not None:
            self.values[name] = value
            self.sources[name] = source

    def put_int(self, name: str, env: Mapping[str, str], var: str, minimum: int = 0) -> None:
        text = _value(env, var)
        if text is None:
            return
        if not re.fullmatch(r"[0-9]+", text) or int(text) < minimum:
            raise invalid_value(var, repr(text), f"a whole number >= {minimum}")
        self.put(name, int(text), f"{var}={text}")

    def put_text(self, name: str, env: Mapping[str, str], names: Sequence[str]) -> None:
        var = _first(env, names)
        if var is not None:
            self.put(name, _value(env, var), f"{var}={_value(env, var)}")

    def get(self, name: str) -> Any:
        return self.values.get(name)

    def view(self) -> SchedulerView:
        return SchedulerView(
            self.kind, **{name: self.values.get(name) for name in _VIEW_FIELDS}, sources=dict(self.sources)
        )


def _settle_nodes(draft: _Draft) -> None:
    """node_count defaults to the number of hosts and must agree with it."""
    hosts, count = draft.get("hosts"), draft.get("node_count")
    if hosts is not None and count is None:
        draft.put("node_count", len(hosts), f"{draft.sources['hosts']} ({len(hosts)} hosts)")
    elif hosts is not None and count != len(hosts):
        raise invalid_value(
            draft.sources["node_count"], f"{count} nodes", f"{len(hosts)}, as many as {draft.sources['hosts']} lists"
        )
    _check_bounds(draft)


def _check_bounds(draft: _Draft) -> None:
    for small, big in (("node_index", "node_count"), ("rank", "world_size"), ("local_rank", "local_size")):
        value, limit = draft.get(small), draft.get(big)
        if value is not None and limit is not None and value >= limit:
            raise invalid_value(
                draft.sources[small], f"{small} {value}", f"0 to {limit - 1}, since {draft.sources[big]}"
            )


# --- one reader per scheduler: None when its variables are absent

_SLURM_JOB = ("SLURM_JOB_ID", "SLURM_JOBID")
# A step's nodes first: SLURM_NODEID, SLURM_NNODES and SLURM_TASKS_PER_NODE describe the step under srun.
_SLURM_NODELISTS = ("SLURM_STEP_NODELIST", "SLURM_JOB_NODELIST", "SLURM_NODELIST")
_OMPI = ("OMPI_COMM_WORLD_RANK", "OMPI_COMM_WORLD_SIZE", "OMPI_COMM_WORLD_LOCAL_RANK", "OMPI_COMM_WORLD_LOCAL_SIZE")
_PMI = ("PMI_RANK", "PMI_SIZE", "MPI_LOCALRANKID", "MPI_LOCALNRANKS")
_VOLCANO_HOSTS = lazy_re(r"VC_(.+)_HOSTS")
_ORDINAL = lazy_re(r"(.+)-(0|[1-9][0-9]*)")

Reader = Callable[[Mapping[str, str], str], Optional[_Draft]]


def _put_hosts(draft: _Draft, env: Mapping[str, str], names: Sequence[str]) -> None:
    var = _first(env, names)
    if var is not None:
        text = env[var].strip()
        draft.put("hosts", tuple(expand_hostlist(text, var)), f"{var}={text}")


def _read_slurm(env: Mapping[str, str], hostname: str) -> Optional[_Draft]:
    """srun's task variables or, in the batch script itself, the job's (no SLURM_PROCID there)."""
    if _first(env, _SLURM_JOB) is None:
        return None
    draft = _Draft(SchedulerKind.SLURM)
    draft.put_text("job_id", env, _SLURM_JOB)
    _put_hosts(draft, env, _SLURM_NODELISTS)
    draft.put_int("node_index", env, "SLURM_NODEID")
    draft.put_int("node_count", env, "SLURM_NNODES", 1)
    _settle_nodes(draft)
    _put_tasks_per_node(draft, env)
    draft.put_int("rank", env, "SLURM_PROCID")
    draft.put_int("local_rank", env, "SLURM_LOCALID")
    draft.put_int("world_size", env, "SLURM_NTASKS", 1)
    return draft


def _put_tasks_per_node(draft: _Draft, env: Mapping[str, str]) -> None:
    var = "SLURM_TASKS_PER_NODE"
    text = _value(env, var)
    if text is None:
        return
    counts = tuple(parse_tasks_per_node(text, var))
    count, index = draft.get("node_count"), draft.get("node_index")
    if count is not None and len(counts) != count:
        raise invalid_value(
            var, f"{text!r} ({len(counts)} nodes)", f"one entry per node: {count}, since {draft.sources['node_count']}"
        )
    if index is not None and index >= len(counts):
        raise invalid_value(
            var, f"{text!r} ({len(counts)} nodes)", f"an entry for node {index}, since {draft.sources['node_index']}"
        )
    draft.put("tasks_per_node", counts, f"{var}={text}")
    if index is not None:
        draft.put("local_size", counts[index], f"{var}={text} (node {index})")


def _read_mpi(env: Mapping[str, str], hostname: str) -> Optional[_Draft]:
    """Open MPI's or PMI's (MPICH, Intel MPI) variables. One process per node (``--map-by
    ppr:1:node``) is node mode: the world rank is the node's index."""
    names = _OMPI if _value(env, _OMPI[0]) is not None else _PMI
    if _value(env, names[0]) is None:
        return None
    draft = _Draft(SchedulerKind.MPI)
    for name, var, minimum in zip(("rank", "world_size", "local_rank", "local_size"), names, (0, 1, 0, 1)):
        draft.put_int(name, env, var, minimum)
    if draft.get("local_size") in (None, 1) and draft.get("world_size") is not None:
        draft.put("node_index", draft.get("rank"), f"{draft.sources['rank']} (one process per node)")
        draft.put("node_count", draft.get("world_size"), f"{draft.sources['world_size']} (one process per node)")
    draft.put_text("job_id", env, ("PMIX_NAMESPACE",))  # Open MPI 4/5: the same in every process
    return draft


def _mpirun_in_slurm(env: Mapping[str, str]) -> Optional[_Draft]:
    """mpirun inside a Slurm allocation started this process through its daemons' srun step, whose
    SLURM_NODEID, SLURM_NNODES and SLURM_TASKS_PER_NODE count daemons, not ranks: take the ranks from
    MPI and only the allocation's node list and job id from Slurm. srun's own PMI plugin
    (``srun --mpi=pmi2``) also sets PMI_RANK, but without hydra's MPI_LOCALRANKID: that stays Slurm."""
    hydra = _value(env, "PMI_RANK") is not None and _value(env, "MPI_LOCALRANKID") is not None
    if _first(env, _SLURM_JOB) is None or not (_value(env, "OMPI_COMM_WORLD_RANK") is not None or hydra):
        return None
    draft = _read_mpi(env, "")
    if draft is None:
        return None
    draft.values.pop("job_id", None)
    draft.sources.pop("job_id", None)
    draft.put_text("job_id", env, _SLURM_JOB)
    _put_hosts(draft, env, ("SLURM_JOB_NODELIST", "SLURM_NODELIST"))
    _settle_nodes(draft)
    marker = "OMPI_COMM_WORLD_RANK" if _value(env, "OMPI_COMM_WORLD_RANK") is not None else "PMI_RANK"
    draft.sources["kind"] = (
        f"{marker} inside Slurm job {draft.get('job_id')}: mpirun started this process, "
        "so rank, world_size, local_rank and local_size are MPI's"
    )
    return draft


def _read_volcano(env: Mapping[str, str], hostname: str) -> Optional[_Draft]:
    """Volcano's env plugin (VC_TASK_INDEX) and svc plugin (VC_<TASK>_HOSTS, VC_<TASK>_NUM). Volcano
    sets no job id: VOLCANO_JOB_NAME / VC_JOB_NAME only if the job spec exports one (else --job-id)."""
    if _value(env, "VC_TASK_INDEX") is None:
        return None
    draft = _Draft(SchedulerKind.VOLCANO)
    draft.put_int("node_index", env, "VC_TASK_INDEX")
    task = _volcano_task(env, hostname)
    if task is not None:
        var, text = f"VC_{task}_HOSTS", env[f"VC_{task}_HOSTS"].strip()
        hosts = tuple(name.strip() for name in text.split(","))
        if not all(hosts):
            raise invalid_value(var, repr(text), "comma-separated pod host names, none empty")
        draft.put("hosts", hosts, f"{var}={text}")
        draft.put_int("node_count", env, f"VC_{task}_NUM", 1)
    draft.put_text("job_id", env, ("VOLCANO_JOB_NAME", "VC_JOB_NAME"))
    _settle_nodes(draft)
    return draft


def _volcano_task(env: Mapping[str, str], hostname: str) -> Optional[str]:
    """The task whose hosts list this pod: the only one, or the one naming ``hostname``."""
    tasks = sorted(m.group(1) for m in map(_VOLCANO_HOSTS.fullmatch, env) if m and _value(env, m.group(0)))
    if len(tasks) <= 1:
        return tasks[0] if tasks else None
    mine = [task for task in tasks if _lists_host(env[f"VC_{task}_HOSTS"], hostname)]
    if len(mine) == 1:
        return mine[0]
    listed = ", ".join(f"VC_{task}_HOSTS={env[f'VC_{task}_HOSTS'].strip()}" for task in tasks)
    raise invalid_value(
        "VC_<TASK>_HOSTS",
        f"{len(tasks)} tasks ({listed}), {len(mine)} of them listing hostname {hostname!r}",
        "exactly one task listing this pod's hostname",
        "a pod with hostNetwork: true reports its node's hostname, which no task lists",
    )


def _lists_host(text: str, hostname: str) -> bool:
    wanted = hostname.lower()
    names = [name.strip().lower() for name in text.split(",")]
    return bool(wanted) and any(n == wanted or n.split(".")[0] == wanted.split(".")[0] for n in names)


def _read_k8s(env: Mapping[str, str], hostname: str) -> Optional[_Draft]:
    """An Indexed Job (JOB_COMPLETION_INDEX) or a StatefulSet (hostname ``train-3``); the node count
    is NPULAUNCH_NNODES, which the pod spec must set, since Kubernetes exports none."""
    draft = _Draft(SchedulerKind.K8S)
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


_READERS: Dict[SchedulerKind, Reader] = {
    SchedulerKind.SLURM: _read_slurm,
    SchedulerKind.MPI: _read_mpi,
    SchedulerKind.VOLCANO: _read_volcano,
    SchedulerKind.K8S: _read_k8s,
}
_EXPECTED = {
    SchedulerKind.SLURM: "SLURM_JOB_ID or SLURM_JOBID",
    SchedulerKind.MPI: "OMPI_COMM_WORLD_RANK (Open MPI) or PMI_RANK (MPICH, Intel MPI)",
    SchedulerKind.VOLCANO: "VC_TASK_INDEX",
    SchedulerKind.K8S: "JOB_COMPLETION_INDEX (Indexed Job) or a hostname ending in -<ordinal> (StatefulSet)",
}


def flags_view(nnodes: int, node_rank: int, master_addr: str) -> SchedulerView:
    """torchrun's ``--nnodes N --node-rank K --master-addr A``: node K of N, started by a scheduler that
    names no hosts. The first node is the master address; the others are known only by their index."""
    draft = _Draft(SchedulerKind.FLAGS)
    hosts = (master_addr,) + tuple(f"node-{index}" for index in range(1, nnodes))
    draft.put("hosts", hosts, f"--nnodes {nnodes} --master-addr {master_addr}")
    draft.put("node_count", nnodes, f"--nnodes {nnodes}")
    draft.put("node_index", node_rank, f"--node-rank {node_rank}")
    draft.sources["kind"] = "torchrun's node flags"
    return draft.view()


def detect(env: Mapping[str, str], hostname: str = "", forced: Optional[str] = None) -> SchedulerView:
    """The scheduler running this process and what it says. Without ``forced``, the first found of:
    mpirun inside Slurm, Slurm, MPI, Volcano, Kubernetes (KUBERNETES_SERVICE_HOST and an index).
    ``forced`` names one of them (or "none") and takes its variables only."""
    kind = _forced_kind(forced)
    if kind is SchedulerKind.FLAGS:
        raise invalid_value("scheduler", repr(forced), "auto, slurm, mpi, volcano, k8s or none")
    if kind is SchedulerKind.NONE:
        return _Draft(kind).view()
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
            return _Draft(SchedulerKind.NONE).view()
    _check_bounds(draft)
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


def _autodetect(env: Mapping[str, str], hostname: str) -> Optional[_Draft]:
    draft = _mpirun_in_slurm(env)
    if draft is not None:
        return draft
    markers = [
        (SchedulerKind.SLURM, _SLURM_JOB),
        (SchedulerKind.MPI, ("OMPI_COMM_WORLD_RANK", "PMI_RANK")),
        (SchedulerKind.VOLCANO, ("VC_TASK_INDEX",)),
        (SchedulerKind.K8S, ("KUBERNETES_SERVICE_HOST",)),
    ]
    for kind, names in markers:
        var = _first(env, names)
        if var is None:
            continue
        draft = _READERS[kind](env, hostname)
        if draft is not None:
            draft.sources["kind"] = f"{var}={_value(env, var)}"
            return draft
    return None
