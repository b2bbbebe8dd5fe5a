"""The command line: parses arguments and hands each command to its stage (config and plan for
``plan``/``check``, launch for ``run``/``exec``/``stop``, views for ``status``/``report``/catalogs).
The only module that prints errors or chooses the process's exit code. Each command imports what
it uses, so ``npulaunch --help`` stays fast.
"""

from __future__ import annotations

import argparse
import os
import sys
from typing import TYPE_CHECKING, Callable, Dict, List, Optional, Sequence, Set, Tuple, Union

from npulaunch.cliargs import build_parser, overrides_from, parse_devices, split_script
from npulaunch.host.errors import NpulaunchError, UsageError

if TYPE_CHECKING:  # the commands import what they use, so that --help stays fast
    from npulaunch.dropin import Torchrun
    from npulaunch.plan.launchplan import LaunchPlan
    from npulaunch.plan.prepare import Loaded
    from npulaunch.views.console import Console

EXIT_USAGE = 2


def _load(
    args: argparse.Namespace, command: Optional[List[str]], rank_mode: bool = False, starting: bool = False
) -> "Loaded":
    from npulaunch.plan.prepare import load

    return load(args.config, overrides_from(args, command), args.scheduler, rank_mode, starting)


def _prepare(args: argparse.Namespace, command: Optional[List[str]]) -> "LaunchPlan":
    """Config -> plan, for the commands that only look (plan)."""
    from npulaunch.plan.prepare import planner

    return planner(_load(args, command))(1)


def cmd_plan(args: argparse.Namespace, command: Optional[List[str]]) -> int:
    from npulaunch.plan.planjson import write_plan_json
    from npulaunch.views.planview import render_plan_table

    plan = _prepare(args, command)
    inherited = {host: dict(os.environ) for host in plan.hosts if host in plan.local_names}
    if args.rank is not None:
        import json

        from npulaunch.plan.planjson import rank_to_dict
        from npulaunch.views.planview import render_rank

        spec = next((spec for spec in plan.ranks if spec.rank == args.rank), None)
        if spec is None:
            raise UsageError(f"--rank {args.rank}: the job has ranks 0 to {plan.world_size - 1}")
        entry = rank_to_dict(spec, inherited.get(spec.host, {}), plan.rank_device(spec))
        sys.stdout.write(
            json.dumps(entry, indent=2) + "\n" if args.json else render_rank(entry, spec.host in inherited)
        )
    elif args.json:
        write_plan_json(sys.stdout, plan, inherited)
    else:
        sys.stdout.write(render_plan_table(plan))
    return 0


def cmd_check(args: argparse.Namespace, command: Optional[List[str]]) -> int:
    from npulaunch.launch.job import check_job
    from npulaunch.plan.checks.findings import CheckFailed, Severity
    from npulaunch.plan.checks.health import HealthSettings
    from npulaunch.plan.prepare import is_remote
    from npulaunch.views.checkview import across_hosts, inventory, preflight_findings, render_json, render_text
    from npulaunch.views.planview import history_lines

    loaded = _load(args, command)
    hosts = [h.host for h in loaded.config.hosts]
    job: Dict[str, object] = {"id": loaded.job_id, "hosts": hosts}
    try:
        if not 0 < args.tool_timeout < float("inf"):
            raise UsageError(f"--tool-timeout {args.tool_timeout}: a number of seconds above 0")
        settings = HealthSettings(ping=args.network, tool_timeout_s=args.tool_timeout, ping_timeout_s=args.tool_timeout)
        checked = check_job(loaded, offline=args.offline, settings=settings)
    except CheckFailed as failed:
        findings = preflight_findings(failed.problems, [], hosts) + list(failed.findings)
        counts = inventory(loaded.config, None, failed.checked, True, is_remote(loaded))
        fatal = len(across_hosts([f for f in findings if f.severity is Severity.FATAL]))  # as the lines show
        if args.json:
            sys.stdout.write(render_json(counts, findings, failed.exit_code, [], job))
            return failed.exit_code
        verdict = f"the job would not start ({fatal} fatal); nothing was started"
        sys.stdout.write(render_text(counts, findings, verdict))
        sys.stderr.write(f"npulaunch: error: {failed.args[0].splitlines()[0][:-1]} ({fatal} fatal, listed above)\n")
        return failed.exit_code
    plan = checked.plan
    counts = inventory(loaded.config, plan, checked.checked, checked.health, checked.over_ssh)
    if args.json:
        findings = preflight_findings([], checked.warnings, hosts)
        job.update(ranks=plan.world_size, job_dir=plan.job_dir, fault_history=plan.recovery.get("history"))
        sys.stdout.write(render_json(counts, findings + list(checked.findings), 0, plan.notes, job))
        return 0
    for line in history_lines(plan):
        print(line)
    for note in plan.notes:
        print(f"note: {note}")
    for warning in checked.warnings:
        print(warning)
    reached = "with mpirun" if loaded.config.transport.value == "mpirun" else "over SSH"
    from npulaunch.host.words import counted

    where = counted(len(plan.hosts), "host") + (f", each checked {reached}" if checked.over_ssh else "")
    sys.stdout.write(
        render_text(counts, checked.findings, f"ok: {counted(plan.world_size, 'rank')} on {where}; nothing was started")
    )
    return 0


def _console(plan: "LaunchPlan", ranks: Optional[Set[int]], live: bool) -> "Console":
    """The live view on a terminal (rich is imported only then), plain prefixed lines elsewhere."""
    from npulaunch.config.cluster import ConsoleMode
    from npulaunch.views.console import Console

    if live and plan.console is not ConsoleMode.NONE and sys.stdout.isatty():
        from npulaunch.views.liveview import LiveConsole

        return LiveConsole(plan, plan.console, ranks)
    return Console(plan.console, ranks=ranks, show_host=len(plan.hosts) > 1)


def cmd_run(args: argparse.Namespace, command: Optional[List[str]]) -> int:
    from npulaunch.host import timing

    with timing.applied(_timing_variable()):  # before the rendezvous: its store is polled too
        return _run(args, command)


def _timing_variable() -> Dict[str, float]:
    """NPULAUNCH_TIMING's intervals (host/timing.py), checked before anything starts."""
    from npulaunch.host import timing

    values, wrong = timing.parse_variable(os.environ.get(timing.VARIABLE, ""))
    if wrong is not None:
        item, name, allowed = wrong
        what = f"{name!r}: " if name in timing.BY_NAME else f"{name!r} is not one of the launcher's intervals; "
        form = "the form is name=seconds,name=seconds"
        raise UsageError(f"{timing.VARIABLE}: {item!r}: {what}allowed: {allowed}; {form}")
    return values


def _run(args: argparse.Namespace, command: Optional[List[str]]) -> int:
    from npulaunch.launch import debuglog
    from npulaunch.launch.job import run_job

    if debuglog.wanted(args.debug, os.environ):
        debuglog.enable()
    loaded = _load(args, command, starting=True)
    shown = set(parse_devices(args.ranks, "--ranks", 100000)) if args.ranks else None
    if args.nohup:  # before any rank starts: they inherit it, and the agent leaves SIGHUP alone
        import signal

        signal.signal(signal.SIGHUP, signal.SIG_IGN)
    from npulaunch.views.jobview import write_html_report

    phase = _phase_spinner() if not args.no_live and sys.stdout.isatty() else (lambda text: None)

    def console(plan: "LaunchPlan") -> "Console":
        return _console(plan, _shown_ranks(plan, shown, args.torchrun), live=not args.no_live)

    try:
        return run_job(loaded, console, write_html_report, phase)
    finally:
        phase(None)


def _shown_ranks(plan: "LaunchPlan", shown: Optional[Set[int]], torchrun: "Torchrun") -> Optional[Set[int]]:
    """--ranks, narrowed by torchrun's --local-ranks-filter and --redirects (local ranks of this node)."""
    if torchrun.shown_local is None and not torchrun.hidden_local:
        return shown
    local = {spec.rank: spec.local_rank for spec in plan.this_host_plan.ranks}
    keep = {
        rank
        for rank, index in local.items()
        if (torchrun.shown_local is None or index in torchrun.shown_local) and index not in torchrun.hidden_local
    }
    return keep if shown is None else keep & shown


def _phase_spinner() -> Callable[[Optional[str]], None]:
    """What happens before the ranks start, as a spinner on the terminal (rich, imported here)."""
    from rich.console import Console as RichConsole
    from rich.status import Status

    shown: List[Status] = []

    def phase(text: Optional[str]) -> None:
        while shown:
            shown.pop().stop()
        if text:
            status = RichConsole(stderr=True).status(f"npulaunch: {text} ...")
            status.start()
            shown.append(status)

    return phase


def cmd_exec(args: argparse.Namespace, command: Optional[List[str]]) -> int:
    """Rank mode: this process becomes the rank the scheduler made it (exec, nothing in between)."""
    from npulaunch.launch.rankmode import exec_rank

    return exec_rank(_load(args, command, rank_mode=True, starting=True))


def cmd_sbatch(args: argparse.Namespace, command: Optional[List[str]]) -> int:
    from npulaunch.config.load import load_config
    from npulaunch.config.sections import SLURM_TIME
    from npulaunch.plan.schedulers.slurm import BatchOptions, render_sbatch, submit

    if args.nodes is not None and not 1 <= args.nodes <= 100000:
        raise UsageError("--nodes: an integer from 1 to 100000")
    if args.spare_nodes is not None and not 0 <= args.spare_nodes <= 10000:
        raise UsageError("--spare-nodes: an integer from 0 to 10000")
    if args.time is not None and not SLURM_TIME.match(args.time):
        raise UsageError(f"--time {args.time!r}: minutes, MM:SS, HH:MM:SS, D-HH, D-HH:MM or D-HH:MM:SS")
    config = load_config(args.config)
    from npulaunch.plan.faulthistory import read_kept_off

    kept, warnings = read_kept_off(config)  # the fault history keeps broken nodes out of the allocation
    for warning in warnings:
        sys.stderr.write(f"npulaunch: warning: {warning}\n")
    options = BatchOptions(
        nodes=args.nodes,
        spare_nodes=args.spare_nodes,
        time=args.time,
        partition=args.partition,
        account=args.account,
        mode=args.mode,
        job_id=args.job_id,
        exclude=tuple(sorted(set(kept.hosts) | set(kept.hosts_with_npus))),
    )
    script = render_sbatch(config, args.config, options, sys.executable)
    if not args.submit:
        sys.stdout.write(script)
        return 0
    import shutil

    if shutil.which("sbatch") is None:  # before any side effect
        raise UsageError(
            "sbatch is not on the PATH: is this a Slurm login node? (without --submit the script is printed)"
        )
    os.makedirs(config.job.log_dir, exist_ok=True)  # sbatch opens --output there before the script runs
    status, said = submit(script)
    print(said)
    return 0 if status == 0 else 1


def cmd_catalog(args: argparse.Namespace, command: Optional[List[str]]) -> int:
    from npulaunch.config.catalog import EnvVarSpec, OptionSpec
    from npulaunch.config.catalog.envvars import ENV_VARS
    from npulaunch.config.catalog.options import OPTIONS
    from npulaunch.config.checker import did_you_mean
    from npulaunch.views.catalogview import render_entry, render_json, render_table, select

    wants_env = args.command == "env-vars" or getattr(args, "env", False)
    specs: Sequence[Union[OptionSpec, EnvVarSpec]] = ENV_VARS if wants_env else OPTIONS
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


def cmd_explain(args: argparse.Namespace, command: Optional[List[str]]) -> int:
    import json

    from npulaunch.host.cann.codes import canonical
    from npulaunch.host.cann.lookup import describe
    from npulaunch.views.codeview import explain_lines, shape_of

    infos = []
    for text in args.codes:
        code = canonical(text)
        info = describe(code) if code else None
        if info is None:
            raise UsageError(
                f"{text!r} is not a code npulaunch can read: a six-character CANN code (EZ9999), an ACL return code "
                "(six digits, 507035), HCCL_E_... or hccl:N, DRV_ERROR_... or drv:N, ERRxxxxx, or a hardware fault "
                "code (eight hex digits, 0x80E18402)"
            )
        infos.append(info)
    if args.json:
        documents = [dict(info.to_json(), shape=None if info.known else shape_of(info)) for info in infos]
        sys.stdout.write(json.dumps(documents, indent=2) + "\n")
    else:
        sys.stdout.write(explain_lines(infos))
    return 0


def cmd_diagnose(args: argparse.Namespace, command: Optional[List[str]]) -> int:
    import json

    from npulaunch.diagnose.offline import diagnose
    from npulaunch.views.codeview import render_diagnosis

    found = diagnose(args.paths)
    sys.stdout.write(json.dumps(found.to_json(), indent=2) + "\n" if args.json else render_diagnosis(found))
    return 0


def cmd_view(args: argparse.Namespace, command: Optional[List[str]]) -> int:
    from npulaunch.views.jobview import report_text, status_text

    if not os.path.isdir(args.job_dir):
        raise UsageError(f"no job directory {args.job_dir}")
    if args.command == "stop":
        from npulaunch.launch.control import stop_job

        print(stop_job(args.job_dir))
        return 0
    if args.command == "report" and args.html:
        from npulaunch.views.jobview import report_html

        sys.stdout.write(report_html(args.job_dir))
        return 0
    sys.stdout.write(status_text(args.job_dir) if args.command == "status" else report_text(args.job_dir, args.json))
    return 0


def cmd_faults(args: argparse.Namespace, command: Optional[List[str]]) -> int:
    """The fault history: its entries and what it keeps off now; ``--clear`` appends clearings first."""
    import time

    from npulaunch.plan.faulthistory import kept_off, ledger_of
    from npulaunch.plan.ledger import load_ledger
    from npulaunch.views.columns import terminal_width
    from npulaunch.views.faultsview import cleared_lines, render_faults, render_json

    path, window_h = ledger_of(args.target, os.getcwd())
    said: List[str] = []
    if args.clear or args.all:
        from npulaunch.launch.ledgerwrite import append_entries, clearing

        targets = [clearing(None, None)] if args.all else [clearing(*_host_npu(text)) for text in args.clear]
        before = kept_off(load_ledger(path).entries, time.time(), window_h)
        try:
            append_entries(path, targets)
        except OSError as exc:
            raise UsageError(f"cannot write the fault history {path}: {exc.strerror or exc}") from None
        said = cleared_lines(targets, before)
    ledger = load_ledger(path)
    kept = kept_off(ledger.entries, time.time(), window_h)
    sys.stdout.write(render_json(ledger, kept) if args.json else render_faults(ledger, kept, terminal_width(), said))
    return 0


def _host_npu(text: str) -> Tuple[str, Optional[int]]:
    """``HOST`` or ``HOST:NPU`` of ``--clear``."""
    host, sep, npu = text.rpartition(":")
    if not sep or (not npu.isdigit() and text.count(":") > 1):  # a host alone (an IPv6 address has colons)
        host, npu = text, ""
    elif not npu.isdigit():
        host = ""  # "h1:" or "h1:x"
    if not host or any(c.isspace() for c in host):
        raise UsageError(f"--clear {text!r}: HOST or HOST:NPU, e.g. node3 or node3:5")
    return host, int(npu) if npu else None


COMMANDS: Dict[str, Callable[[argparse.Namespace, Optional[List[str]]], int]] = {
    "run": cmd_run,
    "exec": cmd_exec,
    "plan": cmd_plan,
    "check": cmd_check,
    "sbatch": cmd_sbatch,
    "options": cmd_catalog,
    "env-vars": cmd_catalog,
    "explain": cmd_explain,
    "diagnose": cmd_diagnose,
    "status": cmd_view,
    "report": cmd_view,
    "stop": cmd_view,
    "faults": cmd_faults,
}


def entry() -> None:
    """The ``npulaunch`` command and ``python -m npulaunch``: ``main``, then a fast exit."""
    exit_now(main())


def exit_now(code: int) -> None:
    """Leave without tearing the interpreter down, which costs the launcher ~13 ms after a job (its
    modules and heap freed one by one) and would come after the job's end: the exit handlers run
    first (the console's last output, ``--debug``'s log file), then the standard streams are flushed.
    Everything npulaunch writes is closed by then; nothing is left to the garbage collector."""
    import atexit

    run_exit_handlers = getattr(atexit, "_run_exitfuncs", None)
    if run_exit_handlers is None:  # not CPython: the ordinary exit
        sys.exit(code)
    run_exit_handlers()
    for stream in (sys.stdout, sys.stderr):
        try:
            stream.flush()
        except (OSError, ValueError):
            pass
    os._exit(code)


def main(argv: Optional[Sequence[str]] = None) -> int:
    words = list(sys.argv[1:] if argv is None else argv)
    command: Optional[List[str]] = None
    parser = build_parser()
    script: Optional[List[str]] = None
    if "--" in words:
        split = words.index("--")
        words, command = words[:split], words[split + 1 :]
    else:
        words, script = split_script(parser, words)
    args = parser.parse_args(words)
    if script is not None:  # torchrun's form: a script (or -m module) and its arguments, run with this Python
        args.config = None
        python = [] if args.no_python and not args.run_path else [sys.executable, *(["-m"] if args.module else [])]
        command = [*python, *script]
        args.script = script[0]
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
    except BrokenPipeError:  # the reader went away (npulaunch plan --json | head): as a shell tool would
        devnull = os.open(os.devnull, os.O_WRONLY)
        os.dup2(devnull, sys.stdout.fileno())  # Python's final flush must not fail again
        return 128 + 13
