"""The cluster YAML (version 1) read into a ClusterConfig: ``load_config`` / ``parse_config``.

config <- yamlsource: this layer checks shapes, types and ranges and resolves paths; it never
looks at devices or the machine (that is the plan's job) and never starts anything. Every problem
of the file is collected and reported at once.
"""

from __future__ import annotations

import os
import re
import shlex
from typing import TYPE_CHECKING, Any, Dict, List, Optional, Tuple

from npulaunch.config.checker import Checker, describe, did_you_mean
from npulaunch.config.cluster import (
    ALL_DEVICES,
    DEFAULT_GRACE_PERIOD_S,
    DEFAULT_LOG_DIR,
    HOST_PATTERN,
    JOB_ID_PATTERN,
    MAX_DEVICE_ID,
    ClusterConfig,
    ConsoleMode,
    Devices,
    HostConfig,
    Injection,
    JobConfig,
    Precedence,
    RankTableMode,
    validate_job_id,
)
from npulaunch.config.sections import (
    check_rank_text,
    check_super_pods,
    parse_cpu_binding,
    parse_env,
    parse_make_dirs,
    parse_monitor,
    parse_session_options,
    parse_slurm,
    parse_super_pod,
)
from npulaunch.host.errors import ConfigError, ConfigProblem, YamlPath, render_path
from npulaunch.host.lazyre import lazy_re
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
    "slurm",
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
    "make_dirs",
    "cpu_binding",
)
MAX_RESTARTS = 100
HOST_KEYS = ("host", "devices", "device_ips", "super_pod_id", "super_device_ids", "user", "port", "identity_file")
SSH_KEYS = (
    "user",
    "identity_file",
    "known_hosts",
    "config",
    "accept_unknown_hosts",
    "connect_timeout_s",
    "parallel",
    "python",
)


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
    hosts = _parse_hosts(check, top.get("hosts"))
    env = parse_env(check, top.get("env"))
    options = parse_session_options(check, top.get("session_options"))
    switches = _parse_switches(check, top)
    check_super_pods(check, hosts, switches["product"])
    monitor = parse_monitor(check, top.get("monitor"))
    ssh = _parse_ssh(check, top.get("ssh"))
    slurm = parse_slurm(check, top.get("slurm"))
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
        )
    }
    for index, entry in enumerate(top.get("hosts") or [{}]):
        given = isinstance(entry, dict) and "devices" in entry
        sources[f"hosts[{index}].devices"] = "yaml" if given else "default"
    return ClusterConfig(
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
        slurm=slurm,
        **switches,
    )


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
    cpu_fallback, data_preprocess, product, cann_version (ClusterConfig keyword arguments)."""
    found: Dict[str, Any] = {
        "rank_table": RankTableMode.AUTO,
        "session_injection": Injection.OFF,
        "session_precedence": Precedence.SCRIPT,
        "cpu_fallback": False,
        "product": None,
    }
    if "rank_table" in top:
        found["rank_table"] = check.choice(top["rank_table"], ("rank_table",), RankTableMode) or RankTableMode.AUTO
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
        make_dirs=make_dirs,
        cpu_binding=binding,
    )


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


def _parse_hosts(check: Checker, value: Any) -> Tuple[HostConfig, ...]:
    if value is None:
        return (HostConfig("localhost", ALL_DEVICES, None, ("hosts", 0)),)
    if not isinstance(value, list) or not value:
        check.add(("hosts",), describe(value), "a non-empty list of {host, devices, device_ips} entries")
        return ()
    hosts = []
    seen: Dict[str, int] = {}
    for index, entry in enumerate(value):
        path: YamlPath = ("hosts", index)
        if isinstance(entry, str):
            entry = {"host": entry}
        item = check.mapping(entry, path, HOST_KEYS)
        if not item:
            if isinstance(entry, dict) or entry is None:
                check.add(path, "an empty host entry", "a mapping with at least 'host'")
            continue
        name = check.string(item.get("host"), path + ("host",), "a host name or address")
        if name is not None and not HOST_PATTERN.match(name):
            check.add(path + ("host",), describe(name), "a host name or address (letters, digits, . - _ :)")
            name = None
        if name is not None:
            if name in seen:
                check.add(path + ("host",), describe(name), "each host once", f"also hosts[{seen[name]}]")
            seen[name] = index
        devices = _parse_devices(check, item.get("devices", ALL_DEVICES), path + ("devices",))
        ips = _parse_device_ips(check, item.get("device_ips"), path + ("device_ips",), devices)
        login = _parse_login(check, item, path)
        pod, super_ids = parse_super_pod(check, item, path, devices)
        if name is not None and devices is not None:
            hosts.append(HostConfig(name, devices, ips, path, login, pod, super_ids))
    return tuple(hosts)


def _parse_login(check: Checker, item: Dict[str, Any], path: YamlPath) -> Dict[str, Any]:
    """user / port / identity_file of a host entry or of the ssh section."""
    login: Dict[str, Any] = {}
    for key in ("user", "identity_file"):
        if key in item:
            login[key] = check.string(item[key], path + (key,), "a string")
    if "port" in item:
        port = check.integer(item["port"], path + ("port",), 1, 65535, "a TCP port 1-65535")
        if port is not None:
            login["port"] = port
    return login


def _parse_ssh(check: Checker, value: Any) -> Dict[str, Any]:
    section = check.mapping(value, ("ssh",), SSH_KEYS)
    result = _parse_login(check, section, ("ssh",))
    for key in ("known_hosts", "config", "python"):
        if key in section:
            result[key] = check.string(section[key], ("ssh", key), "a path" if key != "python" else "a command")
    if "accept_unknown_hosts" in section:
        if not isinstance(section["accept_unknown_hosts"], bool):
            check.add(("ssh", "accept_unknown_hosts"), describe(section["accept_unknown_hosts"]), "true or false")
        else:
            result["accept_unknown_hosts"] = section["accept_unknown_hosts"]
    if "connect_timeout_s" in section:
        result["connect_timeout_s"] = check.number(section["connect_timeout_s"], ("ssh", "connect_timeout_s"), 1, 600)
    if "parallel" in section:
        parallel = check.integer(section["parallel"], ("ssh", "parallel"), 1, 1024)
        if parallel is not None:
            result["parallel"] = parallel
    return result


def _parse_devices(check: Checker, value: Any, path: YamlPath) -> Optional[Devices]:
    allowed = f'a list of device ids 0-{MAX_DEVICE_ID}, a count 1-{MAX_DEVICE_ID + 1}, or "all"'
    if value == ALL_DEVICES:
        return ALL_DEVICES
    if isinstance(value, int) and not isinstance(value, bool):
        if 1 <= value <= MAX_DEVICE_ID + 1:
            return tuple(range(value))
        check.add(path, describe(value), allowed)
        return None
    if isinstance(value, list) and value:
        ids: List[int] = []
        for i, item in enumerate(value):
            if not isinstance(item, int) or isinstance(item, bool) or not 0 <= item <= MAX_DEVICE_ID:
                check.add(path + (i,), describe(item), f"a device id 0-{MAX_DEVICE_ID}")
            elif item in ids:
                check.add(
                    path + (i,), describe(item), "each device once", f"also {render_path(path + (ids.index(item),))}"
                )
            else:
                ids.append(item)
        return tuple(ids) if len(ids) == len(value) else None
    check.add(path, describe(value), allowed)
    return None


_OCTET = r"(?:25[0-5]|2[0-4][0-9]|1[0-9][0-9]|[1-9]?[0-9])"
_DOTTED_QUAD = lazy_re(r"%s(?:\.%s){3}" % (_OCTET, _OCTET), re.ASCII)  # no leading zeros, as IPv4Address


def _parse_device_ips(
    check: Checker, value: Any, path: YamlPath, devices: Optional[Devices]
) -> Optional[Tuple[str, ...]]:
    if value is None:
        return None
    if not isinstance(value, list) or not value:
        check.add(path, describe(value), "a list of IPv4 addresses, one per device")
        return None
    import ipaddress  # only when addresses are given

    ips: List[str] = []
    for i, item in enumerate(value):
        if isinstance(item, str) and _DOTTED_QUAD.fullmatch(item):
            ips.append(item)  # already as ipaddress writes it: 0.1 s less for 32,768 addresses
            continue
        try:
            ips.append(str(ipaddress.IPv4Address(item)))
        except (ipaddress.AddressValueError, ValueError):
            check.add(path + (i,), describe(item), "an IPv4 address such as 192.168.100.101")
    if len(ips) != len(value):
        return None
    if len(set(ips)) != len(ips):
        check.add(path, "a repeated address", "one distinct address per device")
        return None
    if isinstance(devices, tuple) and len(ips) != len(devices):
        check.add(path, f"{len(ips)} addresses", f"{len(devices)}, one per device in devices")
        return None
    return tuple(ips)
