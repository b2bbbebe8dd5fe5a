"""The command line: ``npulaunch run | plan | check``. The only module that prints errors or
chooses the process's exit code. Heavy modules are imported inside the commands, so
``npulaunch --help`` stays fast.
"""

from __future__ import annotations

import argparse
import os
import sys
from typing import Any, Callable, Dict, List, Optional, Sequence, Tuple

from . import __version__
from .errors import ConfigError, ConfigProblem, NpulaunchError, UsageError

EXIT_USAGE = 2

DESCRIPTION = """\
Launch distributed TensorFlow training on Ascend NPUs: one process per NPU ("rank"),
each with its Ascend environment, logs per rank, and the whole job stopped the moment
one rank fails."""

EPILOG = """\
examples:
  npulaunch run cluster_configs/local-4.yaml
  npulaunch run --nproc-per-node 4 -- python3 train.py --epochs 3
  npulaunch plan cluster_configs/server-8npu.yaml --json
exit codes: 0 all ranks succeeded; 1 a rank failed; 2 bad configuration or usage
(nothing started); 128+N npulaunch was stopped by signal N."""


def _add_job_flags(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("config", nargs="?", help="cluster YAML file (optional when a command follows '--')")
    parser.add_argument("--nproc-per-node", type=int, metavar="N",
                        help="ranks per host: devices 0..N-1 (overrides hosts[].devices)")
    parser.add_argument("--devices", metavar="IDS", help="comma-separated device ids, e.g. 0,1,2,3")
    parser.add_argument("--log-dir", metavar="DIR", help="where job directories are created (job.log_dir)")
    parser.add_argument("--job-id", metavar="ID", help="JOB_ID and job directory name (job.id)")
    parser.add_argument("--grace-period", type=float, metavar="S",
                        help="seconds between SIGTERM and SIGKILL when stopping ranks (job.grace_period_s)")
    parser.add_argument("--console", choices=("all", "rank0", "none"), help="which ranks' output to show")
    parser.add_argument("--rank-table", choices=("auto", "required", "none"), help="HCCL rank table policy")
    parser.add_argument("--max-restarts", type=int, metavar="N",
                        help="restart the whole job up to N times after a retryable failure (job.max_restarts)")
    parser.add_argument("--hang-timeout", type=float, metavar="S",
                        help="declare a hang after S seconds without output (monitor.hang_timeout_s; 0 = off)")


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(prog="npulaunch", description=DESCRIPTION, epilog=EPILOG,
                                     formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--version", action="version", version=f"npulaunch {__version__}")
    commands = parser.add_subparsers(dest="command", metavar="COMMAND")
    run = commands.add_parser("run", help="start the job and watch it until it ends",
                              description="Start every rank, watch them, stop all on the first failure.")
    _add_job_flags(run)
    run.add_argument("--ranks", metavar="IDS", help="show only these ranks' output, e.g. 0,3 (all go to files)")
    run.add_argument("--no-live", action="store_true", help="no live status view, even on a terminal")
    plan = commands.add_parser("plan", help="show what would run: ranks, devices, environment",
                               description="Print the launch plan without starting anything.")
    _add_job_flags(plan)
    plan.add_argument("--json", action="store_true", help="the full plan as JSON (environments included)")
    check = commands.add_parser("check", help="validate the configuration and every host; start nothing",
                                description="Validate and plan the job, and check this host (or every host "
                                            "over SSH: the same preflight as run); exit 0 or 2.")
    _add_job_flags(check)
    check.add_argument("--offline", action="store_true",
                       help="do not connect to remote hosts: check the config and the plan only")
    for name, what in (("status", "print each rank's state, last line and silence, running or finished"),
                       ("report", "print a finished job's report again"),
                       ("stop", "stop a running job from another terminal, on every host")):
        view = commands.add_parser(name, help=what, description=what[0].upper() + what[1:] + ".")
        view.add_argument("job_dir", help="the job directory (<log_dir>/<job_id>)")
        if name == "report":
            view.add_argument("--json", action="store_true", help="summary.json as it is")
    for name, what in (("options", "TF Adapter session options"), ("env-vars", "environment variables")):
        catalog = commands.add_parser(name, help=f"list the {what} npulaunch knows and checks",
                                      description=f"The catalog of {what}, from CANN's documentation.")
        catalog.add_argument("name", nargs="?", help="show this entry in full")
        catalog.add_argument("--area", help="only this area (e.g. dump, memory, profiling)")
        catalog.add_argument("--search", metavar="WORD", help="only entries mentioning WORD")
        catalog.add_argument("--json", action="store_true", help="the whole (selected) catalog as JSON")
        if name == "options":
            catalog.add_argument("--env", action="store_true", help="environment variables instead of options")
    return parser


def _parse_devices(text: str, flag: str = "--devices", limit: int = 63) -> Tuple[int, ...]:
    try:
        ids = tuple(int(part) for part in text.split(",") if part.strip() != "")
    except ValueError:
        ids = ()
    if not ids or len(set(ids)) != len(ids) or any(i < 0 or i > limit for i in ids):
        raise ConfigError([ConfigProblem("command line", None, flag, repr(text),
                                         f"distinct {'device ' if flag == '--devices' else ''}ids 0-{limit} "
                                         "separated by commas, e.g. 0,1,2,3")])
    return ids


def _overrides(args: argparse.Namespace, command: Optional[List[str]]) -> Any:
    from .config import ConsoleMode, RankTableMode
    from .overrides import Overrides

    problems = []
    if args.nproc_per_node is not None and not 1 <= args.nproc_per_node <= 64:
        problems.append(ConfigProblem("command line", None, "--nproc-per-node", str(args.nproc_per_node),
                                      "an integer from 1 to 64"))
    if args.grace_period is not None and not 0 <= args.grace_period <= 3600:
        problems.append(ConfigProblem("command line", None, "--grace-period", str(args.grace_period),
                                      "seconds from 0 to 3600"))
    if args.max_restarts is not None and not 0 <= args.max_restarts <= 100:
        problems.append(ConfigProblem("command line", None, "--max-restarts", str(args.max_restarts),
                                      "an integer from 0 to 100"))
    if args.hang_timeout is not None and args.hang_timeout < 0:
        problems.append(ConfigProblem("command line", None, "--hang-timeout", str(args.hang_timeout),
                                      "seconds >= 0 (0 turns the watchdog off)"))
    if args.nproc_per_node is not None and args.devices is not None:
        problems.append(ConfigProblem("command line", None, "--devices", "both --devices and --nproc-per-node",
                                      "one of them"))
    if command is not None and not command:
        problems.append(ConfigProblem("command line", None, "--", "nothing after '--'", "the command to run"))
    if problems:
        raise ConfigError(problems)
    return Overrides(
        command=tuple(command) if command else None, nproc_per_node=args.nproc_per_node,
        devices=_parse_devices(args.devices) if args.devices is not None else None, log_dir=args.log_dir,
        job_id=args.job_id, grace_period_s=args.grace_period,
        console=ConsoleMode(args.console) if args.console else None,
        rank_table=RankTableMode(args.rank_table) if args.rank_table else None, hang_timeout_s=args.hang_timeout,
        max_restarts=args.max_restarts)


def _load(args: argparse.Namespace, command: Optional[List[str]]) -> Tuple[Any, str, str]:
    """The config with the command line's overrides, its job id and where that id came from."""
    import time

    from .config import load_config
    from .overrides import apply_overrides, config_from_cli
    from .plan import default_job_id

    overrides = _overrides(args, command)
    if args.config:
        config = apply_overrides(load_config(args.config), overrides)
    else:
        config = config_from_cli(overrides, os.getcwd())
    if overrides.job_id is not None:
        return config, overrides.job_id, "cli"
    if config.job.id is not None:
        return config, config.job.id, "yaml"
    job_id = default_job_id(config.job.name, time.time(), os.path.exists, config.job.log_dir)
    return config, job_id, "default (job.name and the time)"


def _planner(config: Any, job_id: str, source: str, remote: Any = None) -> Callable[[int], Any]:
    """attempt -> plan (a restarted job is planned again: fresh ports, its own directory).
    ``remote``: what the remote hosts' preflight found (their NPUs and device IPs)."""
    import shutil

    from .discovery import (
        discover_device_ips,
        discover_usable_devices,
        free_loopback_ports,
    )
    from .plan import Discovery, build_plan

    discovery = Discovery(devices=discover_usable_devices, device_ips=discover_device_ips,
                          free_ports=free_loopback_ports, npu_present=lambda: shutil.which("npu-smi") is not None,
                          remote=remote)
    restarted = config.job.max_restarts > 0
    first: List[Any] = []  # attempt 1 is planned once, whoever asks first

    def plan_for(attempt: int) -> Any:
        if attempt > 1:
            return build_plan(config, job_id, os.urandom(16).hex(), discovery, job_id_source=source, attempt=attempt)
        if not first:
            first.append(build_plan(config, job_id, os.urandom(16).hex(), discovery, job_id_source=source,
                                    attempt=1 if restarted else 0))
        return first[0]

    return plan_for


def _prepare(args: argparse.Namespace, command: Optional[List[str]]) -> Any:
    """Config -> plan, for the commands that only look (plan)."""
    return _planner(*_load(args, command))(1)


def cmd_plan(args: argparse.Namespace, command: Optional[List[str]]) -> int:
    from .plan import LOCAL_HOST_NAMES
    from .planview import render_plan_json, render_plan_table

    plan = _prepare(args, command)
    if args.json:
        inherited = {host: dict(os.environ) for host in plan.hosts if host in LOCAL_HOST_NAMES}
        sys.stdout.write(render_plan_json(plan, inherited))
    else:
        sys.stdout.write(render_plan_table(plan))
    return 0


def cmd_check(args: argparse.Namespace, command: Optional[List[str]]) -> int:
    from .preflight import check_local

    config, job_id, source = _load(args, command)
    fleet = _open_fleet(config, job_id, source) if _is_remote(config) and not args.offline else None
    try:
        plan = _planner(config, job_id, source, fleet.facts if fleet else None)(1)
    finally:
        if fleet is not None:
            fleet.close()
    if plan.is_local_only():
        check_local(plan, os.environ)
    for note in plan.notes:
        print(f"note: {note}")
    for warning in plan.warnings + tuple(fleet.warnings if fleet else ()):
        print(warning)
    hosts = f"{len(plan.hosts)} host(s)" + (", each checked over SSH" if fleet else "")
    print(f"ok: {plan.world_size} ranks on {hosts}; nothing was started")
    return 0


def _console(plan: Any, ranks: Optional[set], live: bool) -> Any:
    """The live view on a terminal (rich is imported only then), plain prefixed lines elsewhere."""
    from .config import ConsoleMode
    from .console import Console

    if live and plan.console is not ConsoleMode.NONE and sys.stdout.isatty():
        from .liveview import LiveConsole

        return LiveConsole(plan, plan.console, ranks)
    return Console(plan.console, ranks=ranks, show_host=len(plan.hosts) > 1)


def _is_remote(config: Any) -> bool:
    from .plan import LOCAL_HOST_NAMES

    return any(host.host not in LOCAL_HOST_NAMES for host in config.hosts)


def _open_fleet(config: Any, job_id: str, source: str) -> Any:
    """Connect to every host, ship the agent and run the preflight probe there (Fabric is
    imported only now). Raises BackendError, listing every host's problem, if any host fails.
    What can be checked offline is checked first: a plan without the hosts' facts (unless a
    remote host's devices are only known from its npu-smi), so a bad config never waits on SSH."""
    from .config import ALL_DEVICES
    from .plan import LOCAL_HOST_NAMES

    if not any(h.devices == ALL_DEVICES and h.host not in LOCAL_HOST_NAMES for h in config.hosts):
        _planner(config, job_id, source)(1)

    from .backends.fleet import Fleet
    from .backends.remotecheck import probe_asks
    from .backends.sshchannel import SshTarget

    ssh = config.ssh
    targets = {}
    for host in config.hosts:
        login = dict(ssh, **host.ssh)
        paths = {key: os.path.expanduser(login[key]) if login.get(key) else None
                 for key in ("identity_file", "known_hosts", "config")}
        targets[host.host] = SshTarget(host.host, user=login.get("user"), port=login.get("port"),
                                       identity_file=paths["identity_file"], known_hosts=paths["known_hosts"],
                                       ssh_config=paths["config"],
                                       accept_unknown_hosts=bool(login.get("accept_unknown_hosts", False)),
                                       connect_timeout_s=float(login.get("connect_timeout_s", 10.0)))
    return Fleet(targets, parallel=int(ssh.get("parallel", 32))).open(probe_asks(config, job_id))


def cmd_run(args: argparse.Namespace, command: Optional[List[str]]) -> int:
    from .preflight import check_local
    from .supervisor import run_with_restarts

    config, job_id, source = _load(args, command)
    fleet = _open_fleet(config, job_id, source) if _is_remote(config) else None
    try:
        plan_for = _planner(config, job_id, source, fleet.facts if fleet else None)
        plan = plan_for(1)
        make_agents = None
        if fleet is None:
            check_local(plan, os.environ)
        else:
            from .backends.fleet import RemoteFleet

            def make_agents(plan: Any, on_event: Any, on_output: Any) -> Any:
                return RemoteFleet(plan, on_event, on_output, fleet)

        shown = set(_parse_devices(args.ranks, "--ranks", 100000)) if args.ranks else None
        console = _console(plan, shown, live=not args.no_live)
        for note in plan.notes:
            console.message(f"note: {note}")
        for warning in plan.warnings:
            console.message(warning)
        return run_with_restarts(plan_for, console, plan.max_restarts, make_agents=make_agents).exit_code
    finally:
        if fleet is not None:
            fleet.close()


def cmd_catalog(args: argparse.Namespace, command: Optional[List[str]]) -> int:
    from .catalog.envvars import ENV_VARS
    from .catalog.options import OPTIONS
    from .catalogview import render_entry, render_json, render_table, select
    from .checker import did_you_mean

    specs: Sequence[Any] = ENV_VARS if args.command == "env-vars" or getattr(args, "env", False) else OPTIONS
    if args.name:
        found = [s for s in specs if s.name == args.name]
        if not found:
            hint = did_you_mean(args.name, [s.name for s in specs])
            raise UsageError(f"no entry named {args.name!r}" + (f"; {hint}" if hint else ""))
        sys.stdout.write(render_json(found) if args.json else render_entry(found[0]))
        return 0
    areas = sorted({s.area for s in specs})
    if args.area and args.area not in areas:
        raise UsageError(f"no area {args.area!r}; areas: {', '.join(areas)}")
    chosen = select(specs, args.area, args.search)
    sys.stdout.write(render_json(chosen) if args.json else render_table(chosen))
    return 0


def cmd_view(args: argparse.Namespace, command: Optional[List[str]]) -> int:
    from .jobview import report_text, status_text, stop_job

    if not os.path.isdir(args.job_dir):
        raise UsageError(f"no job directory {args.job_dir}")
    if args.command == "stop":
        print(stop_job(args.job_dir))
        return 0
    sys.stdout.write(status_text(args.job_dir) if args.command == "status" else report_text(args.job_dir, args.json))
    return 0


COMMANDS: Dict[str, Callable[[argparse.Namespace, Optional[List[str]]], int]] = {
    "run": cmd_run, "plan": cmd_plan, "check": cmd_check, "options": cmd_catalog, "env-vars": cmd_catalog,
    "status": cmd_view, "report": cmd_view, "stop": cmd_view}


def main(argv: Optional[Sequence[str]] = None) -> int:
    words = list(sys.argv[1:] if argv is None else argv)
    command: Optional[List[str]] = None
    if "--" in words:
        split = words.index("--")
        words, command = words[:split], words[split + 1:]
    parser = build_parser()
    args = parser.parse_args(words)
    if args.command is None:
        parser.print_help()
        return EXIT_USAGE
    try:
        return COMMANDS[args.command](args, command)
    except NpulaunchError as exc:
        sys.stderr.write(f"npulaunch: error: {exc}\n")
        return exc.exit_code
    except KeyboardInterrupt:  # before any rank started: nothing to stop
        return 130
