"""The YAML's ``hosts`` and ``spares`` lists and how they are reached, the ``ssh`` and ``mpi`` sections: each
host entry's name, devices (physical ids, a count or "all"), spare devices, device IPs, super pod and login.
Part of the config layer: shapes, types and ranges only.
"""

from __future__ import annotations

import re
from typing import Any, Dict, List, Optional, Tuple

from npulaunch.config.checker import Checker, describe
from npulaunch.config.cluster import (
    ALL_DEVICES,
    HOST_PATTERN,
    MAX_DEVICE_ID,
    ClusterConfig,
    Devices,
    HostConfig,
    Transport,
)
from npulaunch.config.sections import parse_super_pod
from npulaunch.host.errors import ConfigProblem, YamlPath, render_path
from npulaunch.host.lazyre import lazy_re

HOST_KEYS = (
    "host",
    "devices",
    "device_ips",
    "spare_devices",
    "super_pod_id",
    "super_device_ids",
    "user",
    "port",
    "identity_file",
)
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
MPI_KEYS = ("mpirun", "mpirun_options")
# What npulaunch gives every agent's mpirun itself (plan/schedulers/mpi.py, agent_argv: one process on one
# host, stdin to it, no binding); mpirun_options may not say otherwise. Open MPI 4.1's spellings, mpirun(1).
MPIRUN_OWN_OPTIONS = (
    "-H",
    "-host",
    "--host",
    "-hostfile",
    "--hostfile",
    "-machinefile",
    "--machinefile",
    "-c",
    "-n",
    "--n",
    "-np",
    "--np",
    "-stdin",
    "--stdin",
    "-bind-to",
    "--bind-to",
    "-app",
    "--app",
)
LOGIN_FIELDS = ("user", "port", "identity_file")  # of a host entry: its SSH login


def parse_hosts(check: Checker, value: Any, key: str = "hosts") -> Tuple[HostConfig, ...]:
    """The ``hosts`` list (``key``: or ``spares``, the hosts held back for recovery, in the same form)."""
    if value is None:
        return (HostConfig("localhost", ALL_DEVICES, None, (key, 0)),) if key == "hosts" else ()
    if not isinstance(value, list) or (not value and key == "hosts"):
        allowed = "a list of {host, devices, device_ips} entries" + (" (may be empty)" if key != "hosts" else "")
        check.add((key,), describe(value), allowed if key != "hosts" else "a non-empty " + allowed[2:])
        return ()
    hosts = []
    seen: Dict[str, int] = {}
    for index, entry in enumerate(value):
        path: YamlPath = (key, index)
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
                check.add(path + ("host",), describe(name), "each host once", f"also {key}[{seen[name]}]")
            seen[name] = index
        devices = parse_devices(check, item.get("devices", ALL_DEVICES), path + ("devices",))
        if key != "hosts" and "spare_devices" in item:
            check.add(
                path + ("spare_devices",),
                "spare_devices on a spare host",
                "devices (the NPUs it brings when it takes a host's place)",
                "a spare host is held back whole",
            )
            item = {k: v for k, v in item.items() if k != "spare_devices"}
        spare = _parse_spare_devices(check, item, path, devices)
        ips, spare_ips = _parse_device_ips(check, item.get("device_ips"), path + ("device_ips",), devices, spare)
        login = parse_login(check, item, path)
        pod, super_ids = parse_super_pod(check, item, path, devices)
        if spare and super_ids is not None:
            check.add(
                path + ("spare_devices",),
                "spare_devices with super_device_ids",
                "one of them",
                "a spare NPU's super_device_id is not known: recovery on Atlas A3 super pods is not supported",
            )
        if name is not None and devices is not None:
            hosts.append(HostConfig(name, devices, ips, path, login, pod, super_ids, spare, spare_ips))
    return tuple(hosts)


def check_spare_hosts(check: Checker, hosts: Tuple[HostConfig, ...], spares: Tuple[HostConfig, ...]) -> None:
    """A spare host is none of the job's hosts."""
    names = {h.host: h.path for h in hosts}
    for spare in spares:
        if spare.host in names:
            check.add(
                spare.path + ("host",),
                describe(spare.host),
                "a host that is not in hosts",
                f"also {render_path(names[spare.host])}",
            )


def parse_login(check: Checker, item: Dict[str, Any], path: YamlPath) -> Dict[str, Any]:
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


def parse_ssh(check: Checker, value: Any) -> Dict[str, Any]:
    section = check.mapping(value, ("ssh",), SSH_KEYS)
    result = parse_login(check, section, ("ssh",))
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


def parse_mpi(check: Checker, value: Any) -> Dict[str, Any]:
    """The ``mpi`` section: Open MPI's mpirun for the mpirun transport, and the options every agent's mpirun
    gets (argv words, passed as they are: ``["--mca", "plm_rsh_agent", "ssh -F /etc/npu/ssh_config"]``)."""
    section = check.mapping(value, ("mpi",), MPI_KEYS)
    result: Dict[str, Any] = {}
    if "mpirun" in section:
        command = check.string(
            section["mpirun"], ("mpi", "mpirun"), "Open MPI's mpirun: a command on the PATH or a path"
        )
        if command is not None:
            result["mpirun"] = command
    options = section.get("mpirun_options", [])
    path: YamlPath = ("mpi", "mpirun_options")
    if not isinstance(options, list) or not all(isinstance(o, str) and o and "\0" not in o for o in options):
        check.add(
            path, describe(options), 'a list of mpirun\'s arguments, one word each, e.g. ["--mca", "btl", "tcp,self"]'
        )
        return result
    for index, word in enumerate(options):
        if word.split("=", 1)[0] in MPIRUN_OWN_OPTIONS:
            check.add(
                path + (index,),
                repr(word),
                "mpirun options other than --host (-H), --hostfile, --machinefile, -np (-n, -c), --stdin, "
                "--bind-to, --app",
                "npulaunch starts one agent per mpirun: --host HOST:1 -np 1 --stdin 0 --bind-to none",
            )
    result["mpirun_options"] = tuple(options)
    return result


def unused_logins(config: ClusterConfig) -> List[ConfigProblem]:
    """A warning when the job's hosts are reached with mpirun but the YAML sets SSH logins (the ssh section, a
    host entry's user, port, identity_file): mpirun's own rsh agent reaches the hosts, not npulaunch's SSH."""
    if config.transport is not Transport.MPIRUN:
        return []
    paths: List[YamlPath] = [("ssh", key) for key in config.ssh]
    for kind, entries in (("hosts", config.hosts), ("spares", config.spares)):
        for index, host in enumerate(entries):
            paths += [(kind, index, key) for key in host.ssh if key in LOGIN_FIELDS]
    if not paths:
        return []
    return [
        config.problem(
            paths[0],
            f"{render_path(paths[0])} with transport mpirun" + (f" (and {len(paths) - 1} more)" if paths[1:] else ""),
            "SSH logins apply to transport ssh only",
            "mpirun reaches the hosts through its rsh agent: give it ssh's options in mpi.mpirun_options, e.g. "
            '["--mca", "plm_rsh_agent", "ssh -l USER -i KEY"]',
        )
    ]


def parse_devices(check: Checker, value: Any, path: YamlPath) -> Optional[Devices]:
    allowed = f'a list of device ids 0-{MAX_DEVICE_ID}, a count 1-{MAX_DEVICE_ID + 1}, or "all"'
    if value == ALL_DEVICES:
        return ALL_DEVICES
    if isinstance(value, int) and not isinstance(value, bool):
        if 1 <= value <= MAX_DEVICE_ID + 1:
            return tuple(range(value))
        check.add(path, describe(value), allowed)
        return None
    if isinstance(value, list) and value:
        ids = _id_list(check, value, path)
        return tuple(ids) if len(ids) == len(value) else None
    check.add(path, describe(value), allowed)
    return None


def _id_list(check: Checker, value: List[Any], path: YamlPath) -> List[int]:
    ids: List[int] = []
    for i, item in enumerate(value):
        if not isinstance(item, int) or isinstance(item, bool) or not 0 <= item <= MAX_DEVICE_ID:
            check.add(path + (i,), describe(item), f"a device id 0-{MAX_DEVICE_ID}")
        elif item in ids:
            check.add(path + (i,), describe(item), "each device once", f"also {render_path(path + (ids.index(item),))}")
        else:
            ids.append(item)
    return ids


def _parse_spare_devices(
    check: Checker, item: Dict[str, Any], path: YamlPath, devices: Optional[Devices]
) -> Tuple[int, ...]:
    """``spare_devices``: NPUs of the host held back; with ``devices: all``, the rest of the host's NPUs."""
    if "spare_devices" not in item:
        return ()
    value, where = item["spare_devices"], path + ("spare_devices",)
    if not isinstance(value, list):
        check.add(where, describe(value), f"a list of device ids 0-{MAX_DEVICE_ID} (may be empty)")
        return ()
    ids = _id_list(check, value, where)
    if len(ids) != len(value):
        return ()
    if isinstance(devices, tuple):
        for i, device in enumerate(ids):
            if device in devices:
                check.add(
                    where + (i,),
                    describe(device),
                    "an NPU that is not in devices",
                    f"also {render_path(path + ('devices', devices.index(device)))}: a spare is held back",
                )
    return tuple(ids)


_OCTET = r"(?:25[0-5]|2[0-4][0-9]|1[0-9][0-9]|[1-9]?[0-9])"
_DOTTED_QUAD = lazy_re(r"%s(?:\.%s){3}" % (_OCTET, _OCTET), re.ASCII)  # no leading zeros, as IPv4Address


def _parse_device_ips(
    check: Checker, value: Any, path: YamlPath, devices: Optional[Devices], spare: Tuple[int, ...]
) -> Tuple[Optional[Tuple[str, ...]], Optional[Tuple[str, ...]]]:
    """The devices' addresses, and the spare devices' when the list goes on with them."""
    if value is None:
        return None, None
    if not isinstance(value, list) or not value:
        check.add(path, describe(value), "a list of IPv4 addresses, one per device")
        return None, None
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
        return None, None
    if len(set(ips)) != len(ips):
        check.add(path, "a repeated address", "one distinct address per device")
        return None, None
    if isinstance(devices, tuple):
        if spare and len(ips) == len(devices) + len(spare):
            return tuple(ips[: len(devices)]), tuple(ips[len(devices) :])
        if len(ips) != len(devices):
            allowed = f"{len(devices)}, one per device in devices"
            if spare:
                allowed += f" (or {len(devices) + len(spare)}: then spare_devices' addresses follow)"
            check.add(path, f"{len(ips)} addresses", allowed)
            return None, None
    return tuple(ips), None
