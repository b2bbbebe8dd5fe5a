"""The cluster YAML (version 1) read into a ClusterConfig: ``load_config`` / ``parse_config``.

config <- yamlsource: this layer checks shapes, types and ranges and resolves paths; it never
looks at devices or the machine (that is the plan's job) and never starts anything. Every problem
of the file is collected and reported at once.
"""

from __future__ import annotations

import os
import re
import shlex
from dataclasses import replace
from typing import TYPE_CHECKING, Any, Dict, List, Optional, Tuple

from npulaunch.config.checker import Checker, describe, did_you_mean
from npulaunch.config.cluster import (
    DEFAULT_GRACE_PERIOD_S,
    DEFAULT_LOG_DIR,
    JOB_ID_PATTERN,
    ClusterConfig,
    ConsoleMode,
    Injection,
    JobConfig,
    Precedence,
    RankTableMode,
    RestartOn,
    Transport,
    validate_job_id,
)
from npulaunch.config.framework import parse_framework
from npulaunch.config.hostentries import check_spare_hosts, parse_hosts, parse_mpi, parse_ssh, unused_logins
from npulaunch.config.recovery import parse_recovery
from npulaunch.config.sections import (
    check_rank_text,
    check_super_pods,
    parse_cpu_binding,
    parse_env,
    parse_make_dirs,
    parse_monitor,
    parse_session_options,
    parse_slurm,
)
from npulaunch.host.errors import ConfigError, ConfigProblem, YamlPath, render_path
from npulaunch.host.spec import FORWARDABLE_SIGNALS

if TYPE_CHECKING:  # yaml is imported only when a file is read
    from npulaunch.config.yamlsource import YamlDocument

TOP_KEYS = (
    "version",
    "job",
    "hosts",
    "env",
    "session_options",
    "rank_table",
    "product",
    "cann_version",
    "session_injection",
    "session_precedence",
    "cpu_fallback",
    "data_preprocess",
    "monitor",
    "ssh",
    "transport",
    "mpi",
    "slurm",
    "spares",
    "recovery",
    "framework",
)
PRODUCTS = ("atlas-training", "atlas-a2", "atlas-a3", "atlas-inference", "atlas-300i-duo")
JOB_KEYS = (
    "name",
    "id",
    "command",
    "workdir",
    "log_dir",
    "grace_period_s",
    "console",
    "forward_signals",
    "max_restarts",
    "restart_on",
    "crash_loop_limit",
    "make_dirs",
    "cpu_binding",
)
MAX_RESTARTS = 100
DEFAULT_CRASH_LOOP_LIMIT = JobConfig.crash_loop_limit  # launch/crashloop.py says why 3


def load_config(path: str) -> ClusterConfig:
    """Read, validate and resolve a cluster YAML file."""
    from npulaunch.config.yamlsource import load_yaml_file

    doc = load_yaml_file(path)
    return parse_config(doc, base_dir=os.path.dirname(os.path.abspath(path)))


def parse_config(doc: "YamlDocument", base_dir: str) -> ClusterConfig:
    """Validate a parsed YAML document. Relative paths are resolved against ``base_dir``."""
    check = Checker(doc)
    top = check.mapping(doc.value, (), TOP_KEYS)
    if doc.value is None:
        check.add((), "an empty file", "a mapping with at least job.command")
    if "version" in top and top["version"] != 1:
        check.add(("version",), describe(top["version"]), "1")
    job = _parse_job(check, top.get("job"), base_dir, doc.source)
    hosts = parse_hosts(check, top.get("hosts"))
    spares = parse_hosts(check, top.get("spares"), "spares")
    check_spare_hosts(check, hosts, spares)
    env = parse_env(check, top.get("env"))
    options = parse_session_options(check, top.get("session_options"))
    switches = _parse_switches(check, top)
    check_super_pods(check, hosts, switches["product"])
    monitor = parse_monitor(check, top.get("monitor"))
    ssh = parse_ssh(check, top.get("ssh"))
    mpi = parse_mpi(check, top.get("mpi"))
    recovery = parse_recovery(check, top.get("recovery"), base_dir)
    slurm = parse_slurm(check, top.get("slurm"))
    if slurm.get("spare_nodes") and not recovery.checkpoint_dir:
        check.add(
            ("slurm", "spare_nodes"),
            f"{slurm['spare_nodes']} spare nodes without recovery.checkpoint_dir",
            "spare nodes with recovery.checkpoint_dir set: a spare takes a lost node's ranks, which resume from "
            "the newest checkpoint there (without one every rank would start again from step 0)",
        )
    framework = parse_framework(check, top.get("framework"))
    if check.problems:  # the rules too, on the options that are valid, so every problem shows at once
        raise ConfigError(check.problems + _rule_problems(doc, options, env, hosts, switches))
    assert job is not None
    sources = {
        key: ("yaml" if present else "default")
        for key, present in (
            ("job.command", True),
            ("job.log_dir", "log_dir" in (top.get("job") or {})),
            ("job.grace_period_s", "grace_period_s" in (top.get("job") or {})),
            ("rank_table", "rank_table" in top),
            ("framework", "framework" in top),
            ("transport", "transport" in top),
        )
    }
    for index, entry in enumerate(top.get("hosts") or [{}]):
        given = isinstance(entry, dict) and "devices" in entry
        sources[f"hosts[{index}].devices"] = "yaml" if given else "default"
    config = ClusterConfig(
        source=doc.source,
        job=job,
        hosts=hosts,
        env=env,
        session_options=options,
        sources=sources,
        document=doc,
        warnings=tuple(check.warnings),
        monitor=monitor,
        ssh=ssh,
        mpi=mpi,
        slurm=slurm,
        spares=spares,
        recovery=recovery,
        framework=framework,
        **switches,
    )
    unused = unused_logins(config)
    return replace(config, warnings=config.warnings + tuple(unused)) if unused else config


def _rule_problems(
    doc: "YamlDocument", options: Dict[str, Any], env: Dict[str, Any], hosts: Any, switches: Dict[str, Any]
) -> List[ConfigProblem]:
    """The errors of the rules between options, found on the options and variables that passed
    their own checks: reported with the type and range errors, not after they are fixed. The job's
    size is counted from the hosts that list their devices (1 when none does)."""
    if not options and not env:
        return []
    from npulaunch.config.rules import ERROR, RuleContext, check_rules

    sizes = [len(h.devices) for h in hosts or () if isinstance(h.devices, tuple)]
    effective = {k: v for k, v in env.items() if v is not None}
    ctx = RuleContext(options, env, effective, sum(sizes) or 1, switches.get("product"), switches.get("cann_version"))
    problems = []
    for finding in check_rules(ctx):
        if finding.level != ERROR:
            continue
        first = finding.names[0]
        path = ("env", first[4:]) if first.startswith("env:") else ("session_options", first)
        others = " and ".join(n.replace("env:", "env.") for n in finding.names)
        hint = "; ".join(h for h in (finding.hint, f"rule between {others}" if len(finding.names) > 1 else "") if h)
        problems.append(
            ConfigProblem(doc.source, doc.line_of(path), render_path(path), finding.found, finding.allowed, hint)
        )
    return problems


def _parse_switches(check: Checker, top: Dict[str, Any]) -> Dict[str, Any]:
    """The top-level settings that pick a mode: rank_table, session_injection, session_precedence,
    cpu_fallback, data_preprocess, product, cann_version, transport (ClusterConfig keyword arguments)."""
    found: Dict[str, Any] = {
        "transport": Transport.SSH,
        "rank_table": RankTableMode.AUTO,
        "session_injection": Injection.OFF,
        "session_precedence": Precedence.SCRIPT,
        "cpu_fallback": False,
        "product": None,
    }
    if "rank_table" in top:
        found["rank_table"] = check.choice(top["rank_table"], ("rank_table",), RankTableMode) or RankTableMode.AUTO
    if "transport" in top:
        found["transport"] = check.choice(top["transport"], ("transport",), Transport) or Transport.SSH
    if "session_injection" in top:
        given = {True: "auto", False: "off"}.get(top["session_injection"], top["session_injection"])  # YAML on/off
        found["session_injection"] = check.choice(given, ("session_injection",), Injection) or Injection.OFF
    if "session_precedence" in top:
        found["session_precedence"] = (
            check.choice(top["session_precedence"], ("session_precedence",), Precedence) or Precedence.SCRIPT
        )
    if not isinstance(top.get("cpu_fallback", False), bool):
        check.add(("cpu_fallback",), describe(top["cpu_fallback"]), "true or false")
    else:
        found["cpu_fallback"] = top.get("cpu_fallback", False)
    data_preprocess = top.get("data_preprocess", "off")
    data_preprocess = "off" if data_preprocess is False else data_preprocess  # YAML reads off as false
    if data_preprocess not in ("off", "host_main"):
        check.add(("data_preprocess",), describe(top["data_preprocess"]), "one of off, host_main")
    elif data_preprocess == "host_main":
        for name in ("local_rank_id", "local_device_list"):
            if name in (top.get("session_options") or {}):
                check.add(
                    ("session_options", name),
                    f"{name} with data_preprocess: host_main",
                    "one of them",
                    "data_preprocess: host_main sets it for every rank",
                )
    found["data_preprocess"] = data_preprocess == "host_main"
    if "product" in top:
        if top["product"] in PRODUCTS:
            found["product"] = top["product"]
        else:
            hint = did_you_mean(top["product"], PRODUCTS) if isinstance(top["product"], str) else ""
            check.add(("product",), describe(top["product"]), "one of " + ", ".join(PRODUCTS), hint)
    if "cann_version" in top:  # ranges and defaults that changed between versions (config/timeouts.py)
        from npulaunch.config.timeouts import VERSION_FORMS, parse_version

        text = top["cann_version"]
        text = str(text) if isinstance(text, (str, float)) and not isinstance(text, bool) else None
        if text is None or parse_version(text) is None:
            check.add(("cann_version",), describe(top["cann_version"]), VERSION_FORMS, 'quote it: "8.0.RC2"')
        else:
            found["cann_version"] = text
    return found


def _parse_job(check: Checker, value: Any, base_dir: str, source: str) -> Optional[JobConfig]:
    path: YamlPath = ("job",)
    if value is None:
        check.add(path, "no job section", "a mapping with at least 'command'")
        return None
    job = check.mapping(value, path, JOB_KEYS)
    default_name = re.sub(r"[^A-Za-z0-9_-]", "-", os.path.splitext(os.path.basename(source))[0]) or "job"
    name = default_name
    if "name" in job:
        name = check.string(job["name"], path + ("name",), "letters, digits, '-' and '_'") or name
        if not JOB_ID_PATTERN.match(name):
            check.add(
                path + ("name",),
                describe(name),
                "letters, digits, '-' and '_'",
                "the name becomes part of JOB_ID, which CANN restricts to these characters",
            )
    job_id = None
    if "id" in job:
        job_id = validate_job_id(
            check.source_text(job["id"], path + ("id",)),
            lambda found, allowed, hint: check.add(path + ("id",), found, allowed, hint),
        )
    command = _parse_command(check, job.get("command"), path + ("command",))
    given = job.get("workdir", ".")
    workdir = _parse_dir(check, given, path + ("workdir",), base_dir)
    if workdir is not None:
        check_rank_text(check, workdir, path + ("workdir",))
        if given.startswith("{job_dir}"):  # absolute once the plan expands it for each rank
            workdir = os.path.normpath(given)
    log_dir = _parse_dir(check, job.get("log_dir", DEFAULT_LOG_DIR), path + ("log_dir",), base_dir)
    grace = DEFAULT_GRACE_PERIOD_S
    if "grace_period_s" in job:
        checked = check.number(job["grace_period_s"], path + ("grace_period_s",), 0, 3600)
        grace = grace if checked is None else checked
    console = ConsoleMode.ALL
    if "console" in job:
        console = check.choice(job["console"], path + ("console",), ConsoleMode) or console
    signals: Tuple[str, ...] = ("SIGUSR1", "SIGUSR2")
    if "forward_signals" in job:
        signals = _parse_signals(check, job["forward_signals"], path + ("forward_signals",))
    restarts = check.integer(job.get("max_restarts", 0), path + ("max_restarts",), 0, MAX_RESTARTS) or 0
    restart_on = RestartOn.RETRYABLE
    if "restart_on" in job:
        restart_on = check.choice(job["restart_on"], path + ("restart_on",), RestartOn) or restart_on
    loops = _parse_crash_loop_limit(check, job.get("crash_loop_limit", DEFAULT_CRASH_LOOP_LIMIT), path)
    make_dirs = parse_make_dirs(check, job.get("make_dirs"), path + ("make_dirs",))
    binding = parse_cpu_binding(check, job.get("cpu_binding", "none"), path + ("cpu_binding",))
    if command is None or workdir is None or log_dir is None:
        return None
    return JobConfig(
        name=name,
        id=job_id,
        command=command,
        workdir=workdir,
        log_dir=log_dir,
        grace_period_s=grace,
        console=console,
        forward_signals=signals,
        max_restarts=restarts,
        restart_on=restart_on,
        crash_loop_limit=loops,
        make_dirs=make_dirs,
        cpu_binding=binding,
    )


def _parse_crash_loop_limit(check: Checker, value: Any, path: YamlPath) -> int:
    """0 (never) or 2 or more: one failed attempt is never a loop."""
    allowed = f"0 (never stop a crash loop) or 2 to {MAX_RESTARTS + 1} attempts"
    given = check.integer(value, path + ("crash_loop_limit",), 0, MAX_RESTARTS + 1, allowed)
    if given == 1:
        check.add(path + ("crash_loop_limit",), describe(value), allowed, "one failed attempt is not a loop")
        return DEFAULT_CRASH_LOOP_LIMIT
    return DEFAULT_CRASH_LOOP_LIMIT if given is None else given


def _parse_command(check: Checker, value: Any, path: YamlPath) -> Optional[Tuple[str, ...]]:
    allowed = "a non-empty list of strings, or one string split like a shell would"
    if isinstance(value, str):
        try:
            argv = shlex.split(value)
        except ValueError as exc:
            check.add(path, describe(value), allowed, f"shlex could not split it: {exc}")
            return None
        if argv:
            for arg in argv:
                check_rank_text(check, arg, path)
            return tuple(argv)
    elif isinstance(value, list) and value:
        bad = [i for i, item in enumerate(value) if not isinstance(item, str)]
        for i in bad:
            check.add(path + (i,), describe(value[i]), "a string", f'quote it: "{value[i]}"')
        for i, item in enumerate(value):
            if i not in bad:
                check_rank_text(check, item, path + (i,))
        return None if bad else tuple(value)
    check.add(path, describe(value), allowed)
    return None


def _parse_dir(check: Checker, value: Any, path: YamlPath, base_dir: str) -> Optional[str]:
    text = check.string(value, path, "a directory path (relative paths start at the YAML file's directory)")
    if text is None:
        return None
    return os.path.normpath(os.path.join(base_dir, os.path.expanduser(text)))


def _parse_signals(check: Checker, value: Any, path: YamlPath) -> Tuple[str, ...]:
    if not isinstance(value, list):
        check.add(path, describe(value), "a list of " + ", ".join(FORWARDABLE_SIGNALS) + " (may be empty)")
        return ()
    names = []
    for i, item in enumerate(value):
        name = item.upper() if isinstance(item, str) else item
        if isinstance(name, str) and not name.startswith("SIG"):
            name = "SIG" + name
        if name not in FORWARDABLE_SIGNALS:
            check.add(path + (i,), describe(item), "one of " + ", ".join(FORWARDABLE_SIGNALS))
        else:
            names.append(name)
    return tuple(names)
