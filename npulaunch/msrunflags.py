"""msrun's command line, read with msrun's meaning (MindSpore 2.10.0, mindspore/parallel/cluster/run.py
``get_args`` and process_entity/_api.py): ``npulaunch run --worker_num 8 --local_worker_num 8 train.py`` does
what ``msrun`` does with it. msrun's flags that npulaunch has under the same name (``--master_addr``,
``--master_port``, ``--node_rank``, ``--log_dir``) are npulaunch's own; the others are read here and mapped
onto npulaunch's settings, or accepted and named in the plan when they have no use here.

What msrun does, and so what npulaunch does: ``--local_worker_num`` workers on this node out of
``--worker_num`` in all, so ``worker_num / local_worker_num`` nodes, this one ``--node_rank`` (msrun lets
MindSpore number the nodes when it is not given; npulaunch needs it on several nodes); the scheduler at
``--master_addr:--master_port``, started by node 0; ``MS_TOPO_TIMEOUT`` from ``--cluster_time_out`` (600);
each worker bound to CPUs with ``--bind_core`` /
``--bind_numa``. msrun's dry run (``--sim_level``, ``--sim_rank_id``: processes that form no cluster) is
refused with what to run instead: there is nothing for a launcher to do.
"""

from __future__ import annotations

import argparse
from dataclasses import dataclass
from typing import Callable, List, Optional, Tuple

from npulaunch.host.errors import ConfigError, ConfigProblem

MSRUN = "MindSpore 2.10.0, mindspore/parallel/cluster/run.py"


@dataclass(frozen=True)
class MsrunFlag:
    """One flag of msrun's that npulaunch has no flag of its own for."""

    name: str
    dest: str
    meaning: str
    used: bool = True  # False: accepted, no use here (named in the plan and --debug)


FLAGS = (
    MsrunFlag("--worker_num", "worker_num", "the workers of every node together: the job's ranks"),
    MsrunFlag("--local_worker_num", "local_worker_num", "this node's workers: --nproc-per-node"),
    MsrunFlag("--cluster_time_out", "cluster_time_out", "seconds the cluster may take to form: MS_TOPO_TIMEOUT"),
    MsrunFlag("--bind_core", "bind_core", "True: each worker bound to CPUs near its NPU (job.cpu_binding auto)"),
    MsrunFlag("--bind_numa", "bind_numa", "True: the same as --bind_core True (cpu_binding auto binds by NUMA)"),
    MsrunFlag("--sim_level", "sim_level", "MindSpore's dry run (no cluster): refused, with what to run instead"),
    MsrunFlag("--sim_rank_id", "sim_rank_id", "a dry run of one rank: refused, with what to run instead"),
    MsrunFlag(
        "--rank_table_file",
        "rank_table_file",
        "no use here: npulaunch writes the job's rank table (RANK_TABLE_FILE) when the NPUs' addresses are known",
        used=False,
    ),
    MsrunFlag(
        "--join",
        "join",
        "no use here: npulaunch always waits for every worker and names the one that failed",
        used=False,
    ),
    MsrunFlag(
        "--worker_log_name",
        "worker_log_name",
        "no use here: each rank's log is LOG_DIR/JOB/rank-N/stdout.log",
        used=False,
    ),
    MsrunFlag(
        "--tail_worker_log",
        "tail_worker_log",
        "-1 (every worker) or local worker indices: the workers shown on the console",
    ),
)


@dataclass(frozen=True)
class Msrun:
    """What msrun's flags came to: values set on the parsed arguments, and what the config gets beyond them."""

    given: bool = False  # any of msrun's own flags was given: framework mindspore, msrun mode
    env: Tuple[Tuple[str, str], ...] = ()  # (name, value) for every process of the job
    notes: Tuple[str, ...] = ()
    shown_local: Optional[Tuple[int, ...]] = None  # --tail_worker_log


def add_msrun_flags(parser: argparse.ArgumentParser) -> None:
    group = parser.add_argument_group(f"msrun's flags ({MSRUN})")
    for flag in FLAGS:
        group.add_argument(flag.name, dest=flag.dest, metavar="VALUE", help=flag.meaning)


def read_msrun(args: argparse.Namespace) -> Msrun:
    """Normalise msrun's flags on ``args`` in place (``nproc_per_node``, ``nnodes``, ``cpu_binding``,
    ``framework``); ConfigError naming each flag that cannot be read."""
    if all(getattr(args, flag.dest, None) is None for flag in FLAGS):
        return Msrun()
    problems: List[ConfigProblem] = []

    def bad(flag: str, found: object, allowed: str, hint: str = "") -> None:
        problems.append(ConfigProblem("command line", None, flag, str(found), allowed, hint))

    env: List[Tuple[str, str]] = []
    notes: List[str] = []
    total = _whole(args.worker_num, "--worker_num", 1, bad)
    local = _whole(args.local_worker_num, "--local_worker_num", 1, bad)
    if total is not None or local is not None:  # msrun's default for the one not given is 8
        total, local = total or 8, local or 8
        if args.nproc_per_node is not None:
            bad("--local_worker_num", local, "one of --local_worker_num and --nproc-per-node")
        elif total % local or local > total:
            bad(
                "--worker_num",
                f"{total} with --local_worker_num {local}",
                "a multiple of --local_worker_num: every node runs as many workers",
            )
        else:
            args.nproc_per_node = local
            if total > local:
                args.nnodes = total // local
                if args.node_rank is None:
                    bad(
                        "--node_rank",
                        "none",
                        f"this node's index, 0 to {total // local - 1}, with {total // local} nodes",
                        "msrun lets MindSpore number the nodes when it is not given; npulaunch needs it",
                    )
                if args.master_addr is None:
                    bad("--master_addr", "none", "the scheduler's host, the same on every node", "node 0's address")
            elif args.node_rank not in (None, 0, -1):  # msrun ignores it on one node
                notes.append(f"--node_rank {args.node_rank} is ignored on one node, as msrun ignores it")
                args.node_rank = None
            elif args.node_rank == -1:
                args.node_rank = None
    timeout = _whole(args.cluster_time_out, "--cluster_time_out", None, bad)
    if timeout is not None:
        env.append(("MS_TOPO_TIMEOUT", str(timeout)))
    for name in ("bind_core", "bind_numa"):
        value = getattr(args, name)
        if value is None:
            continue
        word = value.strip()
        if word == "True" and args.cpu_binding is None:
            args.cpu_binding = "auto"
            notes.append(f"--{name} True: each worker is bound to the CPUs near its NPU (cpu_binding auto)")
        elif word not in ("True", "False"):
            bad(
                f"--{name}",
                value,
                "True or False",
                "for CPU lists per NPU use --cpu-binding '0=0-23;1=24-47' (job.cpu_binding)",
            )
    for name, value in (("--sim_level", args.sim_level), ("--sim_rank_id", args.sim_rank_id)):
        if value is not None:  # a dry run forms no cluster: nothing for a launcher to watch
            bad(
                name,
                value,
                "not given: npulaunch runs a real cluster; MindSpore's dry run needs no launcher",
                "run the script with MS_SIMULATION_LEVEL=0..3, RANK_SIZE=N and RANK_ID=K in its environment, "
                "as msrun's dry run does",
            )
    shown = _tail(args.tail_worker_log, bad)
    for flag in FLAGS:
        if not flag.used and getattr(args, flag.dest) is not None:
            notes.append(f"msrun's {flag.name} {getattr(args, flag.dest)} is accepted and has {flag.meaning}")
    if args.framework not in (None, "mindspore"):
        bad("--framework", args.framework, "mindspore (or none) with msrun's flags")
    args.framework = "mindspore"
    if problems:
        raise ConfigError(problems)
    return Msrun(True, tuple(env), tuple(notes), shown)


def _whole(text: Optional[str], flag: str, low: Optional[int], bad: Callable[..., None]) -> Optional[int]:
    if text is None:
        return None
    try:
        value = int(str(text).strip())
    except ValueError:
        bad(flag, text, "a whole number")
        return None
    if low is not None and value < low:
        bad(flag, text, f"a whole number from {low}")
        return None
    return value


def _tail(text: Optional[str], bad: Callable[..., None]) -> Optional[Tuple[int, ...]]:
    if text is None or text.strip() == "-1":
        return None
    try:
        return tuple(sorted({int(part) for part in text.split(",")}))
    except ValueError:
        bad("--tail_worker_log", text, "-1 (every worker) or local worker indices such as 0,1")
        return None
