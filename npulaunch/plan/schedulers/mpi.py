"""MPI launchers: Open MPI's and PMI's (MPICH, Intel MPI) variables, mpirun inside a Slurm allocation, and the
mpirun transport's command line (one agent per mpirun: launch/fleet/mpirun.py runs it). Pure."""

from __future__ import annotations

from typing import List, Mapping, Optional, Sequence

from npulaunch.plan.schedulers import slurm
from npulaunch.plan.schedulers.view import Draft, SchedulerKind, first_set, settle_nodes, value_of

_OMPI = ("OMPI_COMM_WORLD_RANK", "OMPI_COMM_WORLD_SIZE", "OMPI_COMM_WORLD_LOCAL_RANK", "OMPI_COMM_WORLD_LOCAL_SIZE")
_PMI = ("PMI_RANK", "PMI_SIZE", "MPI_LOCALRANKID", "MPI_LOCALNRANKS")


def read(env: Mapping[str, str], hostname: str) -> Optional[Draft]:
    """Open MPI's or PMI's (MPICH, Intel MPI) variables. One process per node (``--map-by
    ppr:1:node``) is node mode: the world rank is the node's index."""
    names = _OMPI if value_of(env, _OMPI[0]) is not None else _PMI
    if value_of(env, names[0]) is None:
        return None
    draft = Draft(SchedulerKind.MPI)
    for name, var, minimum in zip(("rank", "world_size", "local_rank", "local_size"), names, (0, 1, 0, 1)):
        draft.put_int(name, env, var, minimum)
    if draft.get("local_size") in (None, 1) and draft.get("world_size") is not None:
        draft.put("node_index", draft.get("rank"), f"{draft.sources['rank']} (one process per node)")
        draft.put("node_count", draft.get("world_size"), f"{draft.sources['world_size']} (one process per node)")
    draft.put_text("job_id", env, ("PMIX_NAMESPACE",))  # Open MPI 4/5: the same in every process
    return draft


def read_in_slurm(env: Mapping[str, str]) -> Optional[Draft]:
    """mpirun inside a Slurm allocation started this process through its daemons' srun step, whose
    SLURM_NODEID, SLURM_NNODES and SLURM_TASKS_PER_NODE count daemons, not ranks: take the ranks from
    MPI and only the allocation's node list and job id from Slurm. srun's own PMI plugin
    (``srun --mpi=pmi2``) also sets PMI_RANK, but without hydra's MPI_LOCALRANKID: that stays Slurm."""
    hydra = value_of(env, "PMI_RANK") is not None and value_of(env, "MPI_LOCALRANKID") is not None
    if first_set(env, slurm.JOB_VARS) is None or not (value_of(env, "OMPI_COMM_WORLD_RANK") is not None or hydra):
        return None
    draft = read(env, "")
    if draft is None:
        return None
    draft.values.pop("job_id", None)
    draft.sources.pop("job_id", None)
    draft.put_text("job_id", env, slurm.JOB_VARS)
    slurm.put_hosts(draft, env, ("SLURM_JOB_NODELIST", "SLURM_NODELIST"))
    settle_nodes(draft)
    marker = "OMPI_COMM_WORLD_RANK" if value_of(env, "OMPI_COMM_WORLD_RANK") is not None else "PMI_RANK"
    draft.sources["kind"] = (
        f"{marker} inside Slurm job {draft.get('job_id')}: mpirun started this process, "
        "so rank, world_size, local_rank and local_size are MPI's"
    )
    return draft


# --- the mpirun transport: one mpirun per host carries its agent (launch/fleet/mpirun.py runs it)

# What Open MPI's mpirun gives the one process it starts (4.1.4: `env` under agent_argv with the rsh launcher,
# against `env` over plain ssh on the same host): OMPI_* (the process's place in its MPI job, the job's wiring
# to mpirun and its orted, the MCA parameters of mpirun's options and of its own environment), PMIX_* (PMIx's),
# and two variables of its PSM components. The agent is no MPI process: they are unset before it starts, so
# none reaches a rank, which would take OMPI_COMM_WORLD_* or PMIX_RANK for its own (plan/schedulers/detect.py)
# or whose MPI_Init would join the agent's one-process job. Over SSH no such variable reaches a rank either.
AGENT_VARIABLE_PREFIXES = ("OMPI_", "PMIX_")
AGENT_VARIABLES = ("HFI_NO_BACKTRACE", "IPATH_NO_BACKTRACE")


def unset_agent_variables() -> str:
    """The shell words that unset AGENT_VARIABLES and every variable named with AGENT_VARIABLE_PREFIXES (found
    in ``env``'s output by name alone: a value's line that looks like a name unsets nothing that exists)."""
    found = " ".join(f"-e 's/^\\({prefix}[A-Za-z0-9_]*\\)=.*/\\1/p'" for prefix in AGENT_VARIABLE_PREFIXES)
    return f'for v in $(env | sed -n {found}); do unset "$v"; done; unset {" ".join(AGENT_VARIABLES)}'


# The host's SSH_CONNECTION ("CLIENT_IP CLIENT_PORT SERVER_IP SERVER_PORT", ssh(1)) when mpirun's rsh agent is
# ssh, as a JSON line ahead of the agent's: the host's address and this machine's toward it, as ssh reached it
# (a name only the rsh agent's ssh_config knows resolves nowhere else). Addresses and ports: no quoting needed.
REACHED = 'printf \'{"type": "reached", "ssh": "%s"}\\n\' "$SSH_CONNECTION"'


def agent_argv(mpirun: str, host: str, options: Sequence[str], command: str) -> List[str]:
    """The mpirun that runs the shell ``command`` on ``host`` alone: one process there (``--host HOST:1 -np 1``),
    mpirun's stdin forwarded to it (``--stdin 0``, rank 0: mpirun(1), "Standard I/O"), bound to no CPU (Open MPI
    binds to a core by default, mpirun(1) ``--bind-to``, and the ranks would inherit that one core: they bind
    their own, job.cpu_binding), without Open MPI's help banners (``-q``: stderr keeps the rsh agent's own
    words), the YAML's ``options`` (mpi.mpirun_options) next; in the shell, the REACHED line is written and
    Open MPI's variables are unset before ``command`` runs (unset_agent_variables)."""
    return [
        mpirun,
        "--host",
        f"{host}:1",
        "-np",
        "1",
        "--stdin",
        "0",
        "--bind-to",
        "none",
        "-q",
        *options,
        "/bin/sh",
        "-c",
        f"{REACHED}; {unset_agent_variables()}; {command}",
    ]
