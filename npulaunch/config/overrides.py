"""Command-line flags over a ClusterConfig: ``apply_overrides``, and the config of a job given
by flags alone (``npulaunch run --nproc-per-node 4 -- cmd``). Pure: no files, no processes.
"""

from __future__ import annotations

import os
from dataclasses import dataclass, replace
from typing import TYPE_CHECKING, Any, Dict, Optional, Tuple

from npulaunch.config.cluster import (
    ALL_DEVICES,
    DEFAULT_LOG_DIR,
    ClusterConfig,
    ConsoleMode,
    HostConfig,
    JobConfig,
    RankTableMode,
)
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
    max_restarts: Optional[int] = None
    cpu_binding: Optional[str] = None  # --cpu-binding: none | blocks | auto | '{"0": "0-23", ...}'


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
    job = JobConfig(name="job", command=overrides.command, workdir=cwd, log_dir=os.path.join(cwd, DEFAULT_LOG_DIR))
    config = ClusterConfig(
        source="command line",
        job=job,
        hosts=(HostConfig("localhost", ALL_DEVICES),),
        env={},
        session_options={},
        sources={key: "default" for key in ("job.log_dir", "hosts[0].devices")},
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
    rank_table = config.rank_table
    if flags.rank_table is not None:
        rank_table, sources["rank_table"] = flags.rank_table, "cli"
    monitor = dict(config.monitor)
    if flags.hang_timeout_s is not None:
        monitor["hang_timeout_s"], sources["monitor.hang_timeout_s"] = flags.hang_timeout_s, "cli"
    return replace(config, job=job, hosts=hosts, rank_table=rank_table, sources=sources, monitor=monitor)


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
    from npulaunch.config.values import placeholder_problem

    problems = [placeholder_problem(arg) for arg in command]
    found = [ConfigProblem("command line", None, "command", p.found, p.allowed, p.hint) for p in problems if p]
    if found:
        raise ConfigError(found)


def _binding(text: str) -> "Binding":
    """``--cpu-binding``: a mode, or a mapping as JSON (``{"0": "0-23"}``) or ``0=0-23;1=24-47``."""
    import json

    from npulaunch.config.sections import binding_from_value
    from npulaunch.config.values import ValueProblem

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
