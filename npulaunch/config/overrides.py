"""Command-line flags over a ClusterConfig: ``apply_overrides``, and the config of a job given
by flags alone (``npulaunch run --nproc-per-node 4 -- cmd``). Pure: no files, no processes.
"""

from __future__ import annotations

import os
from dataclasses import dataclass, replace
from typing import TYPE_CHECKING, Any, Dict, Optional, Set, Tuple

from npulaunch.config.cluster import (
    ALL_DEVICES,
    DEFAULT_LOG_DIR,
    ClusterConfig,
    ConsoleMode,
    Framework,
    FrameworkConfig,
    HostConfig,
    JobConfig,
    RankTableMode,
    Rendezvous,
    RestartOn,
    StartMode,
    Transport,
)
from npulaunch.config.sections import DEFAULT_STRAGGLERS
from npulaunch.host.errors import ConfigError, ConfigProblem

if TYPE_CHECKING:
    from npulaunch.host.topology import Binding


@dataclass(frozen=True)
class Overrides:
    """Command-line values that replace the YAML's (``None`` = not given)."""

    command: Optional[Tuple[str, ...]] = None
    nproc_per_node: Optional[int] = None
    devices: Optional[Tuple[int, ...]] = None
    log_dir: Optional[str] = None
    job_id: Optional[str] = None
    grace_period_s: Optional[float] = None
    console: Optional[ConsoleMode] = None
    rank_table: Optional[RankTableMode] = None
    hang_timeout_s: Optional[float] = None
    stragglers: Optional[str] = None  # --stragglers: off | warn | exclude (monitor.stragglers' action)
    max_restarts: Optional[int] = None
    restart_on: Optional[RestartOn] = None  # --restart-on
    all_devices: bool = False  # --nproc-per-node auto / gpu on a host with NPUs: every NPU of the host
    notes: Tuple[str, ...] = ()  # what torchrun's and msrun's flags came to (dropin.py, msrunflags.py)
    env: Tuple[Tuple[str, str], ...] = ()  # variables for every process (msrun's --cluster_time_out, ...)
    cpu_binding: Optional[str] = None  # --cpu-binding: none | blocks | auto | '{"0": "0-23", ...}'
    framework: Optional[str] = None  # --framework
    master_addr: Optional[str] = None
    master_port: Optional[int] = None
    nnodes: Optional[int] = None  # torchrun's --nnodes / --node-rank: one npulaunch per node
    node_rank: Optional[int] = None
    rendezvous: Optional[Rendezvous] = None  # torchrun's c10d rendezvous, with no --node-rank
    role: Optional[str] = None  # torchrun's --role: ROLE_NAME
    script: Optional[str] = None  # torchrun's form: the script (or -m module) the command runs
    transport: Optional[Transport] = None  # --transport: how the remote hosts' agents are started


def config_from_cli(overrides: Overrides, cwd: str) -> ClusterConfig:
    """A one-host config built from flags alone (``npulaunch run --nproc-per-node 4 -- cmd``)."""
    if not overrides.command:
        raise ConfigError(
            [
                ConfigProblem(
                    "command line",
                    None,
                    "command",
                    "no command",
                    "a command after '--', or a cluster YAML file",
                    "e.g. npulaunch run --nproc-per-node 4 -- python3 train.py",
                )
            ]
        )
    job = JobConfig(
        name="job",
        command=overrides.command,
        workdir=cwd,
        log_dir=os.path.join(cwd, DEFAULT_LOG_DIR),
        restart_on=RestartOn.ANY,  # torchrun's --max-restarts: every failure
    )
    sources = {key: "default" for key in ("job.log_dir", "hosts[0].devices")}
    sources["job.restart_on"] = "torchrun's form: any failure, as torchrun restarts"
    config = ClusterConfig(
        source="command line",
        job=job,
        hosts=(HostConfig("localhost", ALL_DEVICES),),
        env={},
        session_options={},
        sources=sources,
    )
    return apply_overrides(config, overrides)


def apply_overrides(config: ClusterConfig, flags: Overrides) -> ClusterConfig:
    """Command-line flags win over the YAML; ``sources`` records which values they replaced."""
    job, hosts, sources = config.job, config.hosts, dict(config.sources)
    job_changes: Dict[str, Any] = {}
    for attr, key in (
        ("command", "command"),
        ("log_dir", "log_dir"),
        ("job_id", "id"),
        ("grace_period_s", "grace_period_s"),
        ("console", "console"),
        ("max_restarts", "max_restarts"),
        ("restart_on", "restart_on"),
    ):
        value = getattr(flags, attr)
        if value is not None:
            job_changes[key] = os.path.abspath(value) if attr == "log_dir" else value
            sources[f"job.{key}"] = "cli"
    if flags.command is not None:
        _check_command(flags.command)
    if flags.cpu_binding is not None:
        job_changes["cpu_binding"], sources["job.cpu_binding"] = _binding(flags.cpu_binding), "cli"
    if job_changes:
        job = replace(job, **job_changes)
    devices: Optional[Tuple[int, ...]] = flags.devices
    if devices is None and flags.nproc_per_node is not None:
        devices = tuple(range(flags.nproc_per_node))
    if devices is not None:
        hosts = tuple(_with_devices(host, devices) for host in hosts)
        for index in range(len(hosts)):
            sources[f"hosts[{index}].devices"] = "cli"
    elif flags.all_devices:
        hosts = tuple(replace(host, devices=ALL_DEVICES, device_ips=None) for host in hosts)
        for index in range(len(hosts)):
            sources[f"hosts[{index}].devices"] = "cli: --nproc-per-node (every NPU npu-smi lists)"
    rank_table = config.rank_table
    if flags.rank_table is not None:
        rank_table, sources["rank_table"] = flags.rank_table, "cli"
    monitor = dict(config.monitor)
    if flags.hang_timeout_s is not None:
        monitor["hang_timeout_s"], sources["monitor.hang_timeout_s"] = flags.hang_timeout_s, "cli"
    if flags.stragglers is not None:
        given = monitor.get("stragglers", DEFAULT_STRAGGLERS) or DEFAULT_STRAGGLERS
        monitor["stragglers"] = None if flags.stragglers == "off" else dict(given, action=flags.stragglers)
        sources["monitor.stragglers"] = "cli"
    framework = _framework(config, flags, sources)
    env = config.env
    if flags.env:
        env = dict(env, **dict(flags.env))
        for name, _ in flags.env:
            sources[f"env.{name}"] = "cli"
    changed = replace(
        config,
        job=job,
        hosts=hosts,
        rank_table=rank_table,
        sources=sources,
        monitor=monitor,
        framework=framework,
        notes=config.notes + flags.notes,
        env=env,
    )
    if flags.transport is not None:
        changed = _with_transport(changed, flags.transport)
    return changed


def _with_transport(config: ClusterConfig, transport: Transport) -> ClusterConfig:
    """--transport over the YAML's, with the warnings of the transport it now has (not of the one it had)."""
    from npulaunch.config.hostentries import unused_logins

    stale = set(unused_logins(config))
    changed = replace(config, transport=transport, sources=dict(config.sources, transport="cli"))
    warnings = tuple(w for w in config.warnings if w not in stale) + tuple(unused_logins(changed))
    return replace(changed, warnings=warnings)


def _framework(config: ClusterConfig, flags: Overrides, sources: Dict[str, str]) -> FrameworkConfig:
    """--framework and the meeting point's flags over the YAML's framework section."""
    framework = config.framework
    changes: Dict[str, Any] = {}
    if flags.framework is not None:
        changes["name"], sources["framework"] = Framework(flags.framework), "cli"
        if Framework(flags.framework) is not Framework.MINDSPORE:
            changes["mode"] = None
    elif flags.script is not None and "framework" not in config.sources:
        name, why = detect_framework(flags.script, config.job.workdir)
        changes["name"], sources["framework"] = name, why
    if flags.script is not None and changes.get("name", framework.name) is Framework.PYTORCH:
        backend = detect_cpu_backend(flags.script, config.job.workdir)
        if backend:
            changes["backend"], sources["framework.backend"] = backend, f"{flags.script} uses {backend}"
    for attr in ("master_addr", "master_port", "nnodes", "node_rank", "rendezvous", "role"):
        value = getattr(flags, attr)
        if value is not None:
            changes[attr], sources[f"framework.{attr}"] = value, "cli"
    if not changes:
        return framework
    framework = replace(framework, **changes)
    if (framework.master_addr or framework.master_port) and not _meets(framework):
        flag = "--master-addr" if framework.master_addr else "--master-port"
        raise ConfigError(
            [
                ConfigProblem(
                    "command line",
                    None,
                    flag,
                    f"{flag} with framework {framework.name.value}",
                    "framework pytorch, or mindspore in msrun mode",
                    "only they meet at an address and port (the TF Adapter and a rank table need none)",
                )
            ]
        )
    return framework


def _meets(framework: FrameworkConfig) -> bool:
    return framework.name is Framework.PYTORCH or framework.start_mode is StartMode.MSRUN


# what a script's imports say of its framework (torchrun's form, when --framework is not given): the
# top-level packages it imports
IMPORT_MARKERS = (
    (Framework.PYTORCH, ("torch", "torch_npu")),
    (Framework.MINDSPORE, ("mindspore",)),
    (Framework.TENSORFLOW, ("tensorflow", "npu_bridge")),
)
SCRIPT_READ_BYTES = 1 << 20


def imported_packages(text: str) -> Set[str]:
    """The top-level packages of every ``import a, b.c as d`` and ``from a.b import c`` line (at any
    indentation; a relative import names none)."""
    found: Set[str] = set()
    for line in text.splitlines():
        words = line.split("#", 1)[0].replace(",", " , ").split()
        if len(words) < 2:
            continue
        if words[0] == "from":
            found.add(words[1].split(".")[0])
        elif words[0] == "import":
            names = " ".join(words[1:]).split(",")
            found.update(name.split()[0].split(".")[0] for name in names if name.split())
    found.discard("")
    return found


def _script_text(script: str, workdir: str) -> Optional[str]:
    try:
        with open(os.path.join(workdir, script), encoding="utf-8", errors="replace") as handle:
            return handle.read(SCRIPT_READ_BYTES)
    except OSError:
        return None


def detect_cpu_backend(script: str, workdir: str) -> Optional[str]:
    """ "gloo" when a torch script names gloo and neither HCCL nor NCCL (a job on the CPU), else None."""
    text = (_script_text(script, workdir) or "").lower()
    if "gloo" in text and "hccl" not in text and "nccl" not in text:
        return "gloo"
    return None


def detect_framework(script: str, workdir: str) -> Tuple[Framework, str]:
    """torchrun's form (``npulaunch run --nproc-per-node 8 train.py``): the framework the script imports,
    when exactly one; else pytorch, whose launcher's command line this is. ``(framework, why)``."""
    text = _script_text(script, workdir)
    if text is None:
        return Framework.PYTORCH, "default for torchrun's form (the script could not be read)"
    packages = imported_packages(text)
    found = [name for name, names in IMPORT_MARKERS if packages.intersection(names)]
    if len(found) == 1:
        return found[0], f"{script} imports {found[0].value}"
    if not found:
        return Framework.PYTORCH, f"default for torchrun's form ({script} imports no framework)"
    return Framework.PYTORCH, (
        f"default for torchrun's form ({script} imports {', '.join(f.value for f in found)}: --framework says which)"
    )


def _with_devices(host: HostConfig, devices: Tuple[int, ...]) -> HostConfig:
    """Device IPs belong to device ids: keep those of the devices still selected."""
    ips = None
    if host.device_ips and isinstance(host.devices, tuple):
        by_device = dict(zip(host.devices, host.device_ips))
        if all(d in by_device for d in devices):
            ips = tuple(by_device[d] for d in devices)
    # a spare the command line asks to use is a spare no more (the flag wins, as it does over devices)
    spare = tuple(d for d in host.spare_devices if d not in devices)
    spare_ips = host.spare_device_ips
    if spare_ips is not None and spare != host.spare_devices:
        spare_ips = tuple(ip for d, ip in zip(host.spare_devices, spare_ips) if d in spare)
    return replace(host, devices=devices, device_ips=ips, spare_devices=spare, spare_device_ips=spare_ips)


def _check_command(command: Tuple[str, ...]) -> None:
    """A command given after '--' may use the per-rank placeholders, and only those."""
    from npulaunch.config.placeholders import placeholder_problem

    problems = [placeholder_problem(arg) for arg in command]
    found = [ConfigProblem("command line", None, "command", p.found, p.allowed, p.hint) for p in problems if p]
    if found:
        raise ConfigError(found)


def _binding(text: str) -> "Binding":
    """``--cpu-binding``: a mode, or a mapping as JSON (``{"0": "0-23"}``) or ``0=0-23;1=24-47``."""
    import json

    from npulaunch.config.checker import ValueProblem
    from npulaunch.config.sections import binding_from_value

    value: Any = text.strip()
    try:
        if value.startswith("{"):
            value = json.loads(value)
        elif "=" in value:
            value = dict(item.split("=", 1) for item in value.split(";") if item.strip())
            value = {key.strip(): cpus.strip() for key, cpus in value.items()}
        return binding_from_value(value)
    except (ValueError, ValueProblem) as exc:
        found, allowed, hint = repr(text), "", ""
        if isinstance(exc, ValueProblem):
            where = f"device {exc.key[0]}: {exc.found}" if exc.key else ""
            allowed, hint = exc.allowed, "; ".join(part for part in (where, exc.hint) if part)
        raise ConfigError(
            [
                ConfigProblem(
                    "command line",
                    None,
                    "--cpu-binding",
                    found,
                    allowed or "none, blocks, auto, or device=CPUs pairs: 0=0-23;1=24-47 (or that mapping as JSON)",
                    hint,
                )
            ]
        ) from None
