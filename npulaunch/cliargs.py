"""The command line's arguments: ``build_parser`` (every command, its flags and their help) and
the parsing of the flags' own values, up to the YAML's ``Overrides``. The commands themselves are
cli.py's.
"""

from __future__ import annotations

import argparse
from typing import TYPE_CHECKING, List, Optional, Set, Tuple

from npulaunch import __version__
from npulaunch.host.errors import ConfigError, ConfigProblem

if TYPE_CHECKING:
    from npulaunch.config.overrides import Overrides

DESCRIPTION = """\
Launch distributed TensorFlow training on Ascend NPUs: one process per NPU ("rank"),
each with its Ascend environment, logs per rank, and the whole job stopped the moment
one rank fails."""

EPILOG = """\
examples:
  npulaunch run cluster_configs/local-4.yaml
  npulaunch run --nproc-per-node 4 -- python3 train.py --epochs 3
  npulaunch run --nproc-per-node 8 train.py --lr 0.1          (as torchrun: framework from the imports)
  npulaunch plan cluster_configs/server-8npu.yaml --json
exit codes: 0 all ranks succeeded; 1 a rank failed; 2 bad configuration or usage
(nothing started); 93 a crash loop: attempts failed the same way without progress
(job.crash_loop_limit), do not requeue; 128+N npulaunch was stopped by signal N."""


def _add_job_flags(parser: argparse.ArgumentParser) -> None:
    parser.add_argument(
        "config",
        nargs="?",
        help="cluster YAML file; or a Python script and its arguments, run with this Python as torchrun "
        "does (or a command after '--')",
    )
    parser.add_argument(
        "--nproc-per-node",
        "--nproc_per_node",
        metavar="N",
        help="ranks per host: devices 0..N-1 (overrides hosts[].devices); auto: every NPU npu-smi lists (on a "
        "host without NPUs, a rank per CPU, as torchrun falls back), gpu: every NPU, cpu: a rank per CPU",
    )
    parser.add_argument(
        "--framework",
        choices=("tensorflow", "pytorch", "mindspore"),
        help="whose start-up contract the ranks get (framework; default tensorflow, or what the script imports)",
    )
    parser.add_argument(
        "-m",
        "--module",
        action="store_true",
        help="the script is a module name: python -m MODULE (as torchrun's -m)",
    )
    parser.add_argument(
        "--master-addr",
        "--master_addr",
        metavar="ADDR",
        help="where the processes meet: rank 0's host (MASTER_ADDR, MS_SCHED_HOST; framework.master_addr)",
    )
    parser.add_argument(
        "--master-port",
        "--master_port",
        type=int,
        metavar="PORT",
        help="the meeting point's port (MASTER_PORT, MS_SCHED_PORT; framework.master_port)",
    )
    parser.add_argument(
        "--nnodes",
        metavar="N",
        help="the job runs on N nodes, one npulaunch each, started by a scheduler (as torchrun's --nnodes; "
        "MIN:MAX with MAX 1 is one node)",
    )
    parser.add_argument(
        "--node-rank", "--node_rank", type=int, metavar="K", help="this node's index, 0..N-1 (with --nnodes)"
    )
    parser.add_argument("--devices", metavar="IDS", help="comma-separated device ids, e.g. 0,1,2,3")
    parser.add_argument("--log-dir", "--log_dir", metavar="DIR", help="where job directories are created (job.log_dir)")
    parser.add_argument("--job-id", "--job_id", metavar="ID", help="JOB_ID and job directory name (job.id)")
    parser.add_argument(
        "--grace-period",
        "--grace_period",
        type=float,
        metavar="S",
        help="seconds between SIGTERM and SIGKILL when stopping ranks (job.grace_period_s)",
    )
    parser.add_argument("--console", choices=("all", "rank0", "none"), help="which ranks' output to show")
    parser.add_argument(
        "--rank-table", "--rank_table", choices=("auto", "required", "none", "cm"), help="HCCL rank table policy"
    )
    parser.add_argument(
        "--max-restarts",
        "--max_restarts",
        type=int,
        metavar="N",
        help="restart the whole job up to N times after a failure --restart-on names (job.max_restarts)",
    )
    parser.add_argument(
        "--restart-on",
        "--restart_on",
        choices=("any", "retryable"),
        help="which failures --max-restarts restarts after: any (torchrun's meaning, the default of a job given "
        "by flags), or retryable only (a YAML's default) (job.restart_on)",
    )
    parser.add_argument(
        "--hang-timeout",
        "--hang_timeout",
        type=float,
        metavar="S",
        help="declare a hang after S seconds without output (monitor.hang_timeout_s; 0 = off)",
    )
    parser.add_argument(
        "--stragglers",
        choices=("off", "warn", "exclude"),
        help="time each rank's steps and name a slow rank (warn, the default), also exclude its NPU after "
        "monitor.stragglers.exclude_after_s (exclude), or not time them (off) (monitor.stragglers)",
    )
    parser.add_argument(
        "--cpu-binding",
        "--cpu_binding",
        metavar="MODE",
        help="bind each rank to CPUs: none, blocks, auto (near its NPU), or device=CPUs pairs "
        "such as 0=0-23;1=24-47 (job.cpu_binding)",
    )
    parser.add_argument(
        "--scheduler",
        choices=("auto", "slurm", "mpi", "volcano", "k8s", "none"),
        default="auto",
        help="whose environment gives the hosts and this node's place (default: detected)",
    )
    from npulaunch.dropin import add_torchrun_flags
    from npulaunch.msrunflags import add_msrun_flags

    add_torchrun_flags(parser)
    add_msrun_flags(parser)


def _add_transport_flag(parser: argparse.ArgumentParser) -> None:
    """For the commands that reach the remote hosts (run, check)."""
    parser.add_argument(
        "--transport",
        choices=("ssh", "mpirun"),
        help="how each remote host's agent is started: an SSH session (default), or Open MPI's mpirun with "
        "one process on that host (transport; mpi.mpirun_options)",
    )


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(
        prog="npulaunch", description=DESCRIPTION, epilog=EPILOG, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("--version", action="version", version=f"npulaunch {__version__}")
    commands = parser.add_subparsers(dest="command", metavar="COMMAND")
    run = commands.add_parser(
        "run",
        help="start the job and watch it until it ends",
        description="Start every rank, watch them, stop all on the first failure. Exit 93: a crash loop "
        "(the same failure without progress, job.crash_loop_limit times in a row): do not requeue.",
    )
    _add_job_flags(run)
    _add_transport_flag(run)
    run.add_argument("--ranks", metavar="IDS", help="show only these ranks' output, e.g. 0,3 (all go to files)")
    run.add_argument("--no-live", action="store_true", help="no live status view, even on a terminal")
    run.add_argument(
        "--nohup",
        action="store_true",
        help="keep the job running when the terminal hangs up (SIGHUP is ignored, as under nohup); "
        "without it a hang-up stops the job like SIGTERM (exit 129)",
    )
    run.add_argument(
        "--debug",
        action="store_true",
        help="log every decision (spawns, signals, events, teardown) to launcher.log in the job "
        "directory (also NPULAUNCH_DEBUG=1)",
    )
    plan = commands.add_parser(
        "plan",
        help="show what would run: ranks, devices, environment",
        description="Print the launch plan without starting anything.",
    )
    _add_job_flags(plan)
    plan.add_argument("--json", action="store_true", help="the full plan as JSON (environments included)")
    plan.add_argument(
        "--rank",
        type=int,
        metavar="N",
        help="only rank N, with its complete environment and where each value comes from",
    )
    execute = commands.add_parser(
        "exec",
        help="rank mode: become one rank of a job the scheduler started",
        description="Under srun -n N / mpirun -n N: derive this task's rank, device and "
        "environment from the scheduler and the YAML, write the rank table "
        "once per node, then exec the command (no process stays between).",
    )
    _add_job_flags(execute)
    batch = commands.add_parser(
        "sbatch",
        help="print (or submit) a Slurm batch script for the job",
        description="Render a ready sbatch script: the header from the YAML's slurm section or these flags; "
        "by default its one npulaunch holds the allocation and runs each node's ranks as a job step, moving "
        "them to a spare node or requeueing the job when a node or an NPU breaks.",
    )
    batch.add_argument("config", help="cluster YAML file")
    batch.add_argument("--nodes", type=int, metavar="N", help="nodes the job runs on (slurm.nodes; default: the hosts)")
    batch.add_argument(
        "--spare-nodes", type=int, metavar="K", help="nodes allocated beyond them and held back (slurm.spare_nodes)"
    )
    batch.add_argument("--time", metavar="LIMIT", help="time limit, e.g. 2:00:00 (slurm.time)")
    batch.add_argument("--partition", metavar="NAME", help="partition (slurm.partition)")
    batch.add_argument("--account", metavar="NAME", help="account (slurm.account)")
    batch.add_argument(
        "--mode",
        choices=("steps", "node", "rank"),
        default="steps",
        help="steps: one npulaunch holds the allocation, each node's ranks a job step (default); node: one "
        "npulaunch per node; rank: one npulaunch exec per rank",
    )
    batch.add_argument("--job-id", metavar="ID", help="JOB_ID (default: SLURM_JOB_ID)")
    batch.add_argument("--submit", action="store_true", help="submit it with sbatch instead of printing it")
    check = commands.add_parser(
        "check",
        help="validate the configuration and every host; start nothing",
        description="Validate and plan the job, and check this host (or every host "
        "over SSH: the same preflight as run), its NPUs included: chip health, busy devices, "
        "NIC link, health, address, gateway and TLS, versions, HCCL's host side, and NPU-to-NPU "
        "pings between hosts; exit 0, or 2 when something would make the job fail.",
    )
    _add_job_flags(check)
    _add_transport_flag(check)
    check.add_argument(
        "--offline", action="store_true", help="do not connect to remote hosts: check the config and the plan only"
    )
    check.add_argument("--json", action="store_true", help="what was checked and every finding as JSON")
    check.add_argument(
        "--network",
        action=argparse.BooleanOptionalAction,
        default=None,
        help="NPU-to-NPU pings from every NPU to its peer on the next host (default: on for a job on "
        "several hosts; --no-network skips them)",
    )
    check.add_argument(
        "--tool-timeout",
        type=float,
        default=10.0,
        metavar="S",
        help="seconds each npu-smi / hccn_tool call may take before it counts as not answering (default 10)",
    )
    for name, what in (
        ("status", "print each rank's state, last line and silence, running or finished"),
        ("report", "print a finished job's report again"),
        ("stop", "stop a running job from another terminal, on every host"),
    ):
        view = commands.add_parser(name, help=what, description=what[0].upper() + what[1:] + ".")
        view.add_argument("job_dir", help="the job directory (<log_dir>/<job_id>)")
        if name == "report":
            view.add_argument("--json", action="store_true", help="summary.json as it is")
            view.add_argument(
                "--html", action="store_true", help="the report as one self-contained HTML page (as report.html)"
            )
    faults = commands.add_parser(
        "faults",
        help="list the fault history (the NPUs and hosts it keeps off) or clear entries",
        description="The NPU faults and lost hosts the jobs of a log directory saw (recovery.ledger), and what they "
        "keep off new placements now: a fault for recovery.ledger_window_h, a code repeated on an NPU "
        "(ManuallySeparateNPU) until a person clears it. --clear appends a clearing; nothing is ever removed.",
    )
    faults.add_argument(
        "target", nargs="?", help="a cluster YAML, a log directory, or a ledger .jsonl (default: ./npulaunch-logs)"
    )
    faults.add_argument(
        "--clear", action="append", default=[], metavar="HOST[:NPU]", help="place it again (repeatable)"
    )
    faults.add_argument("--all", action="store_true", help="clear everything recorded so far")
    faults.add_argument("--json", action="store_true", help="the entries and what they keep off, as JSON")
    explain = commands.add_parser(
        "explain",
        help="what a CANN error code means (E-code, ACL code, HCCL/driver result, ERRxxxxx, fault code)",
        description="What a code means: module, CANN's title, user or internal error, whether a retry can help, "
        "cause or symptom, what to check, and CANN's page. From the catalog generated from Huawei's sources; "
        "a code no catalog lists is explained by its shape.",
    )
    explain.add_argument(
        "codes",
        nargs="+",
        metavar="CODE",
        help="EZ9999, 507035, HCCL_E_TIMEOUT or hccl:9, DRV_ERROR_OUT_OF_MEMORY or drv:6, ERR00100, 0x80E18402",
    )
    explain.add_argument("--json", action="store_true", help="as JSON, one object per code")
    diagnose = commands.add_parser(
        "diagnose",
        help="name the root cause in the logs of any job (files, job or plog directories)",
        description="The diagnosis npulaunch makes of its own jobs, for any job's logs: every file given, and "
        "the logs and plogs under every directory given (several ranks at once). The root cause is the earliest "
        "cause by the lines' own time stamps across the files, then the symptoms it explains.",
    )
    diagnose.add_argument("paths", nargs="+", metavar="PATH", help="a log file, a job directory, a plog directory")
    diagnose.add_argument("--json", action="store_true", help="the diagnosis as JSON, every finding included")
    for name, what in (("options", "TF Adapter session options"), ("env-vars", "environment variables")):
        catalog = commands.add_parser(
            name,
            help=f"list the {what} npulaunch knows and checks",
            description=f"The catalog of {what}, from CANN's documentation.",
        )
        catalog.add_argument("name", nargs="?", help="show this entry in full")
        catalog.add_argument("--area", help="only this area (e.g. dump, memory, profiling)")
        catalog.add_argument("--search", metavar="WORD", help="only entries mentioning WORD")
        catalog.add_argument("--json", action="store_true", help="the whole (selected) catalog as JSON")
        if name == "options":
            catalog.add_argument("--env", action="store_true", help="environment variables instead of options")
    return parser


def parse_devices(text: str, flag: str = "--devices", limit: int = 63) -> Tuple[int, ...]:
    try:
        ids = tuple(int(part) for part in text.split(",") if part.strip() != "")
    except ValueError:
        ids = ()
    if not ids or len(set(ids)) != len(ids) or any(i < 0 or i > limit for i in ids):
        raise ConfigError(
            [
                ConfigProblem(
                    "command line",
                    None,
                    flag,
                    repr(text),
                    f"distinct {'device ' if flag == '--devices' else ''}ids 0-{limit} "
                    "separated by commas, e.g. 0,1,2,3",
                )
            ]
        )
    return ids


SCRIPT_COMMANDS = ("run", "plan", "check", "exec")


def split_script(parser: argparse.ArgumentParser, words: List[str]) -> Tuple[List[str], Optional[List[str]]]:
    """torchrun's form, ``npulaunch run [flags] train.py --lr 0.1``: the words up to the script (a
    ``.py`` file, or the module of ``-m``) are npulaunch's, the rest the script's own arguments.
    ``(npulaunch's words, the script and its arguments)``, or ``(words, None)`` when the first
    positional word is something else (a cluster YAML) or there is none."""
    if not words or words[0] not in SCRIPT_COMMANDS:
        return words, None
    takes_value = _flags_with_values(parser, words[0])
    index, module, program = 1, False, False
    while index < len(words):
        word = words[index]
        if word.startswith("-") and word != "-":
            module = module or word in ("-m", "--module")
            program = program or word in ("--no-python", "--no_python", "--run-path", "--run_path")
            index += 2 if word in takes_value else 1
            continue
        if module or word.endswith(".py") or program:
            return words[: index + 1], words[index:]
        return words, None
    return words, None


def _flags_with_values(parser: argparse.ArgumentParser, command: str) -> Set[str]:
    """The option strings of ``command`` that take a value as the next word."""
    for action in parser._actions:  # argparse keeps its subparsers here; no public accessor exists
        if isinstance(action, argparse._SubParsersAction) and command in action.choices:
            sub = action.choices[command]
            return {name for a in sub._actions if a.nargs != 0 for name in a.option_strings}
    return set()


def node_flag_problems(args: argparse.Namespace) -> List[ConfigProblem]:
    """torchrun's node flags: ranges, and what they need together."""
    problems = []

    def bad(flag: str, found: object, allowed: str, hint: str = "") -> None:
        problems.append(ConfigProblem("command line", None, flag, str(found), allowed, hint))

    if args.master_port is not None and not 1 <= args.master_port <= 65535:
        bad("--master-port", args.master_port, "a port from 1 to 65535")
    if args.node_rank is not None:
        if args.nnodes is None:
            bad("--node-rank", args.node_rank, "--node-rank with --nnodes", "one npulaunch per node: both flags")
        elif not 0 <= args.node_rank < args.nnodes:
            bad("--node-rank", args.node_rank, f"0 to {args.nnodes - 1} (--nnodes {args.nnodes})")
    if args.nnodes is not None and args.nnodes > 1:
        if args.node_rank is None and getattr(args, "rendezvous", None) is None:
            bad(
                "--nnodes",
                args.nnodes,
                "--nnodes with --node-rank, or --rdzv-backend c10d",
                "each node's npulaunch says which node it is, or they meet at --rdzv-endpoint and are told",
            )
        if args.master_addr is None:
            bad(
                "--nnodes",
                args.nnodes,
                "--nnodes with --master-addr",
                "the nodes meet at the first node's address: the same --master-addr on every node",
            )
        if args.config:
            bad(
                "--nnodes",
                args.nnodes,
                "--nnodes without a cluster YAML",
                "a YAML lists its hosts (npulaunch reaches them over SSH, or reads a scheduler's)",
            )
    return problems


def overrides_from(args: argparse.Namespace, command: Optional[List[str]]) -> "Overrides":
    """The flags a job's commands share (and the command after ``--``) as ``Overrides`` of the YAML;
    ConfigError naming every flag whose value is out of its range, or that contradicts another."""
    import os
    from dataclasses import replace

    from npulaunch.config.cluster import ConsoleMode, RankTableMode, RestartOn, Transport
    from npulaunch.config.overrides import Overrides
    from npulaunch.dropin import read_torchrun
    from npulaunch.host.trace import debug
    from npulaunch.msrunflags import read_msrun

    torchrun = read_torchrun(args, os.environ, torchrun_form=args.config is None)
    msrun = read_msrun(args)
    if msrun.shown_local is not None and torchrun.shown_local is None:
        torchrun = replace(torchrun, shown_local=msrun.shown_local)
    args.torchrun = torchrun  # cli.py's console shows the local ranks it says
    for note in torchrun.notes + msrun.notes:
        debug(__name__, "torchrun's and msrun's flags: %s", note)
    problems = []
    if args.grace_period is not None and not 0 <= args.grace_period <= 3600:
        problems.append(
            ConfigProblem("command line", None, "--grace-period", str(args.grace_period), "seconds from 0 to 3600")
        )
    if args.max_restarts is not None and not 0 <= args.max_restarts <= 100:
        problems.append(
            ConfigProblem("command line", None, "--max-restarts", str(args.max_restarts), "an integer from 0 to 100")
        )
    if args.hang_timeout is not None and not 0 <= args.hang_timeout < float("inf"):  # nan fails both
        problems.append(
            ConfigProblem(
                "command line",
                None,
                "--hang-timeout",
                str(args.hang_timeout),
                "a finite number of seconds >= 0 (0 turns the watchdog off)",
            )
        )
    if (args.nproc_per_node is not None or torchrun.all_devices) and args.devices is not None:
        problems.append(
            ConfigProblem("command line", None, "--devices", "both --devices and --nproc-per-node", "one of them")
        )
    if command is not None and not command:
        problems.append(ConfigProblem("command line", None, "--", "nothing after '--'", "the command to run"))
    problems += node_flag_problems(args)
    if problems:
        raise ConfigError(problems)
    return Overrides(
        command=tuple(command) if command else None,
        nproc_per_node=args.nproc_per_node,
        devices=parse_devices(args.devices) if args.devices is not None else None,
        log_dir=args.log_dir,
        job_id=args.job_id,
        grace_period_s=args.grace_period,
        console=ConsoleMode(args.console) if args.console else None,
        rank_table=RankTableMode(args.rank_table) if args.rank_table else None,
        hang_timeout_s=args.hang_timeout,
        stragglers=getattr(args, "stragglers", None),
        max_restarts=args.max_restarts,
        restart_on=RestartOn(args.restart_on) if args.restart_on else None,
        all_devices=torchrun.all_devices,
        notes=torchrun.notes + msrun.notes,
        env=msrun.env,
        cpu_binding=args.cpu_binding,
        framework=args.framework,
        master_addr=args.master_addr,
        master_port=args.master_port,
        nnodes=args.nnodes,
        node_rank=args.node_rank,
        rendezvous=getattr(args, "rendezvous", None),
        role=args.role,
        script=getattr(args, "script", None),
        transport=Transport(args.transport) if getattr(args, "transport", None) else None,
    )
