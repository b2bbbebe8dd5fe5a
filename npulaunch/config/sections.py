"""The YAML's ``env`` and ``session_options`` sections, checked against the catalog: each value
typed and rendered (values.py), unknown names refused or warned about; ``monitor``, ``slurm`` and the
hosts' super-pod keys. Part of the config layer.
"""

from __future__ import annotations

import json
import re
from typing import Any, Dict, List, Mapping, Optional, Tuple

from npulaunch.config.checker import Checker, ValueProblem, describe, did_you_mean
from npulaunch.config.cluster import ALL_DEVICES, MAX_DEVICE_ID, Devices, HostConfig
from npulaunch.host.errors import YamlPath
from npulaunch.host.lazyre import lazy_re
from npulaunch.host.topology import MODES, Binding, parse_cpulist

ENV_NAME_PATTERN = lazy_re(r"^[A-Za-z_][A-Za-z0-9_]*$")
# Set by npulaunch for every rank; the YAML's env may not set them (it would break the job).
RANK_VARIABLES = (
    "RANK_ID",
    "RANK_SIZE",
    "DEVICE_ID",
    "ASCEND_DEVICE_ID",
    "JOB_ID",
    "RANK_TABLE_FILE",
    "ASCEND_PROCESS_LOG_PATH",
    "DEVICE_INDEX",
    "RANK_INDEX",
)
NPULAUNCH_PREFIX = "NPULAUNCH_"
# Read by the plan, not passed through unchecked: it decides every rank's ASCEND_DEVICE_ID, and a bad
# value is refused there (plan/hosts.py), so it is no "unknown variable" even without a catalog row.
PLAN_CHECKED_VARIABLES = ("ASCEND_RT_VISIBLE_DEVICES",)


def env_problems(yaml_env: Mapping[str, Optional[str]]) -> List[Tuple[str, str, str, str]]:
    """Problems with the user's env: ``(name, found, allowed, hint)`` for each."""
    problems = []
    if yaml_env.get("POD_NAME") is not None:
        problems.append(
            (
                "POD_NAME",
                "POD_NAME in env",
                "no POD_NAME (npulaunch removes it from every rank)",
                "the TF Adapter would take the rank's identity from it instead of RANK_ID, and npulaunch's "
                "rank table names ranks by id",
            )
        )
    for name in yaml_env:
        if name in RANK_VARIABLES or name.startswith(NPULAUNCH_PREFIX):
            hint = "use job.id (or --job-id)" if name == "JOB_ID" else "npulaunch sets it for every rank"
            problems.append(
                (name, f"{name} in env", "variables other than " + ", ".join(RANK_VARIABLES) + " and NPULAUNCH_*", hint)
            )
    return problems


def parse_env(check: Checker, value: Any) -> Dict[str, Optional[str]]:
    from npulaunch.config.catalog.envvars import ENV_VARS
    from npulaunch.config.values import check_env_value

    if value is None:
        return {}
    if not isinstance(value, dict):
        check.add(("env",), describe(value), "a mapping of variable names to values")
        return {}
    known = {spec.name: spec for spec in ENV_VARS}
    env: Dict[str, Optional[str]] = {}
    for name, item in value.items():
        path: YamlPath = ("env", name)
        spec = known.get(name)
        if not ENV_NAME_PATTERN.match(name):
            check.add(path, f"variable name {name!r}", "letters, digits and '_', not starting with a digit")
            continue
        if isinstance(item, dict) and spec is not None and spec.kind == "json":
            item = json.dumps(item, separators=(",", ":"))
        if isinstance(item, bool):
            check.add(
                path,
                describe(item),
                "a string or a number",
                "YAML reads yes/no/on/off/true/false as booleans: quote the value",
            )
        elif isinstance(item, (int, float)):
            env[name] = str(check.source_text(item, path))  # FOO: 010 means "010", not "8"
        elif item is None or isinstance(item, str):
            env[name] = item
            check_rank_text(check, item or "", path)
        else:
            check.add(path, describe(item), "a string, a number, or null (removes an inherited variable)")
        if env.get(name) is not None and spec is not None and not spec.set_by_launcher:
            try:
                check_env_value(spec, env[name] or "")
            except ValueProblem as problem:
                check.add(path, problem.found, problem.allowed, problem.hint)
        elif spec is None and name.startswith(("ASCEND_", "HCCL_")) and name not in PLAN_CHECKED_VARIABLES:
            check.warn(
                path,
                f"unknown variable {name}",
                "the variables of `npulaunch env-vars`",
                did_you_mean(name, list(known)) or "CANN ignores names it does not know",
            )
    for name, found, allowed, hint in env_problems(env):
        check.add(("env", name), found, allowed, hint)
    return env


def parse_session_options(check: Checker, value: Any) -> Dict[str, Any]:
    """Each option checked against the catalog and rendered to its CANN value (.b/.i/.s)."""
    from npulaunch.config.catalog.options import OPTIONS
    from npulaunch.config.values import check_option

    if value is None:
        return {}
    if not isinstance(value, dict):
        check.add(("session_options",), describe(value), "a mapping of TF Adapter option names to values")
        return {}
    known = {spec.name: spec for spec in OPTIONS}
    options: Dict[str, Any] = {}
    for name, item in value.items():
        path: YamlPath = ("session_options", name)
        spec = known.get(name)
        if spec is None:
            check.add(
                path, f"unknown option {name!r}", "the options of `npulaunch options`", did_you_mean(name, list(known))
            )
        elif item is None:
            check.add(path, "null", "a value (remove the key to keep CANN's default)")
        else:
            try:
                options[name] = check_option(spec, item)
            except ValueProblem as problem:
                check.add(path + problem.key, problem.found, problem.allowed, problem.hint)
    return options


MONITOR_KEYS = ("hang_timeout_s", "startup_timeout_s", "patterns", "progress_regex", "health_interval_s", "stragglers")
DEFAULT_HEALTH_INTERVAL_S = 30.0  # the live NPU health watch (host/health/watch.py); 0 turns it off
STRAGGLER_KEYS = ("action", "factor", "exclude_after_s")
STRAGGLER_ACTIONS = ("warn", "exclude")
# monitor.stragglers' defaults (diagnose/stragglers.py): a rank 20 % slower than its peers is named, and
# with action exclude, treated as a sub-health fault of its NPU once it has been slow for 2 minutes
DEFAULT_STRAGGLERS: Dict[str, Any] = {"action": "warn", "factor": 1.2, "exclude_after_s": 120.0}
PATTERN_KEYS = ("name", "pattern", "class", "kind", "retryable", "hint", "code")


def parse_monitor(check: Checker, value: Any) -> Dict[str, Any]:
    """The ``monitor`` section: hang limits (seconds; 0 turns a check off) and the job's own
    error patterns, each a regular expression that must compile."""
    section = check.mapping(value, ("monitor",), MONITOR_KEYS)
    result: Dict[str, Any] = {"patterns": ()}
    if "stragglers" in section:
        result["stragglers"] = parse_stragglers(check, section["stragglers"])
    for key in ("hang_timeout_s", "startup_timeout_s", "health_interval_s"):
        if key in section:
            result[key] = check.number(section[key], ("monitor", key), 0, 30 * 24 * 3600)
    if "progress_regex" in section:
        text = check.string(section["progress_regex"], ("monitor", "progress_regex"), "a regular expression")
        try:
            result["progress_regex"] = re.compile(text).pattern if text else None
        except re.error as exc:
            check.add(("monitor", "progress_regex"), describe(text), "a valid regular expression", str(exc))
    patterns = section.get("patterns", [])
    if not isinstance(patterns, list):
        check.add(("monitor", "patterns"), describe(patterns), "a list of {name, pattern, ...} entries")
        return result
    parsed = []
    for index, entry in enumerate(patterns):
        path: YamlPath = ("monitor", "patterns", index)
        item = check.mapping(entry, path, PATTERN_KEYS)
        name = check.string(item.get("name"), path + ("name",), "a name for the pattern")
        text = check.string(item.get("pattern"), path + ("pattern",), "a regular expression")
        if text is not None:
            try:
                re.compile(text)
            except re.error as exc:
                check.add(path + ("pattern",), describe(text), "a valid regular expression", str(exc))
                text = None
        if item.get("kind", "cause") not in ("cause", "symptom"):
            check.add(path + ("kind",), describe(item.get("kind")), "cause or symptom")
        if not isinstance(item.get("retryable", False), bool):
            check.add(path + ("retryable",), describe(item.get("retryable")), "true or false")
        if name is not None and text is not None:
            parsed.append({k: v for k, v in item.items()})
    result["patterns"] = tuple(parsed)
    return result


def parse_stragglers(check: Checker, value: Any) -> Optional[Dict[str, Any]]:
    """``monitor.stragglers``: off (false), on with the defaults (true), or {action, factor,
    exclude_after_s}. None: off."""
    path: YamlPath = ("monitor", "stragglers")
    if value is False or value == "off":
        return None
    if value is True or value == "on":
        return dict(DEFAULT_STRAGGLERS)
    if not isinstance(value, dict):
        check.add(path, describe(value), "off, on, or a mapping with keys " + ", ".join(STRAGGLER_KEYS))
        return dict(DEFAULT_STRAGGLERS)
    section = check.mapping(value, path, STRAGGLER_KEYS)
    result = dict(DEFAULT_STRAGGLERS)
    if "action" in section:
        if section["action"] in STRAGGLER_ACTIONS:
            result["action"] = section["action"]
        else:
            check.add(path + ("action",), describe(section["action"]), "warn or exclude")
    if "factor" in section:
        factor = check.number(
            section["factor"], path + ("factor",), 1.05, 100.0, "a number from 1.05 to 100 (1.2: 20 % slower)"
        )
        if factor is not None:
            result["factor"] = factor
    if "exclude_after_s" in section:
        after = check.number(section["exclude_after_s"], path + ("exclude_after_s",), 0, 30 * 24 * 3600)
        if after is not None:
            result["exclude_after_s"] = after
    return result


SLURM_KEYS = ("nodes", "spare_nodes", "time", "partition", "account", "sbatch_options")
SLURM_TIME = lazy_re(r"^(\d+-)?\d+(:\d{1,2}){0,2}$")


def parse_slurm(check: Checker, value: Any) -> Dict[str, Any]:
    """The ``slurm`` section: what ``npulaunch sbatch`` puts in the batch script's header."""
    section = check.mapping(value, ("slurm",), SLURM_KEYS)
    result: Dict[str, Any] = {}
    if "nodes" in section:
        nodes = check.integer(section["nodes"], ("slurm", "nodes"), 1, 100000)
        if nodes is not None:
            result["nodes"] = nodes
    if "spare_nodes" in section:
        spare = check.integer(section["spare_nodes"], ("slurm", "spare_nodes"), 0, 10000)
        if spare is not None:
            result["spare_nodes"] = spare
    if "time" in section:
        text = check.string(
            section["time"],
            ("slurm", "time"),
            'a Slurm time limit, e.g. "2:00:00" or "1-00:00:00"',
            "quote it: YAML reads 2:00:00 as a number",
        )
        if text is not None and not SLURM_TIME.match(text):
            check.add(("slurm", "time"), describe(text), "minutes, MM:SS, HH:MM:SS, D-HH, D-HH:MM or D-HH:MM:SS")
        elif text is not None:
            result["time"] = text
    for key in ("partition", "account"):
        if key in section:
            text = check.string(section[key], ("slurm", key), "a name")
            if text is not None and not re.match(r"^[A-Za-z0-9_.,-]+$", text):
                check.add(("slurm", key), describe(text), "letters, digits, '_', '.', '-' (and ',' between names)")
            elif text is not None:
                result[key] = text
    extra = section.get("sbatch_options", [])
    if not isinstance(extra, list) or not all(
        isinstance(o, str) and o.startswith("--") and "\n" not in o for o in extra
    ):
        check.add(("slurm", "sbatch_options"), describe(extra), 'a list of sbatch options, e.g. ["--exclusive"]')
    elif extra:
        result["sbatch_options"] = tuple(extra)
    return result


# Atlas A3 super-node networking: HCCL's rank table version 1.2 gives each server's super pod
# (super_pod_list[].super_pod_id, any globally unique string) and each device's super_device_id (the
# SDID of `npu-smi info -t spod-info`); without them HCCL uses "AI Server mode" (version 1.0).
# hicann/hccl docs/zh/user_guide/cluster_info_config/rank_table_config_a3.md @ 09300b7.
SUPER_POD_PRODUCT = "atlas-a3"
MAX_SUPER_DEVICE_ID = 2**32 - 2  # HCCL keeps it in a u32 whose all-ones value means "not set"


def parse_super_pod(
    check: Checker, item: Dict[str, Any], path: YamlPath, devices: Optional[Devices]
) -> Tuple[Optional[str], Optional[Dict[int, int]]]:
    """``super_pod_id`` and ``super_device_ids`` (one per device, like device_ips) of a host entry."""
    if "super_pod_id" not in item and "super_device_ids" not in item:
        return None, None
    pod = item.get("super_pod_id")
    if isinstance(pod, int) and not isinstance(pod, bool) and pod >= 0:
        pod = str(check.source_text(pod, path + ("super_pod_id",)))
    if "super_pod_id" not in item or not isinstance(pod, str) or not pod.strip() or pod != pod.strip():
        found = "no super_pod_id" if "super_pod_id" not in item else describe(item["super_pod_id"])
        check.add(path + ("super_pod_id",), found, "the host's super pod: a number or a string, unique per pod")
        pod = None
    given = item.get("super_device_ids")
    allowed = f"a list of super_device_ids 0-{MAX_SUPER_DEVICE_ID}, one per device in devices"
    if not isinstance(devices, tuple) or not isinstance(given, list) or len(given) != len(devices):
        if devices is not None:
            found = "no super_device_ids" if given is None else describe(given)
            if isinstance(given, list) and isinstance(devices, tuple):
                found = f"{len(given)} super_device_ids for {len(devices)} devices"
            hint = "list the devices (or give a count) to pair them" if devices == ALL_DEVICES else ""
            check.add(path + ("super_device_ids",), found, allowed, hint)
        return pod, None
    ids: Dict[int, int] = {}
    for i, (device, value) in enumerate(zip(devices, given)):
        if not isinstance(value, int) or isinstance(value, bool) or not 0 <= value <= MAX_SUPER_DEVICE_ID:
            check.add(path + ("super_device_ids", i), describe(value), f"a super_device_id 0-{MAX_SUPER_DEVICE_ID}")
        elif value in ids.values():
            check.add(path + ("super_device_ids", i), describe(value), "each super_device_id once")
        else:
            ids[device] = value
    return pod, (ids if len(ids) == len(devices) else None)


def check_super_pods(check: Checker, hosts: Tuple[HostConfig, ...], product: Optional[str]) -> None:
    """Super pods are for Atlas A3, on every host or none, each pod's hosts listed together."""
    given = [h for h in hosts if h.super_pod_id is not None]
    if not given:
        return
    if product != SUPER_POD_PRODUCT:
        check.add(
            given[0].path + ("super_pod_id",),
            f"super_pod_id with product {product or '(not set)'}",
            f"super pods only with product: {SUPER_POD_PRODUCT}",
            "rank table version 1.2 (super_pod_list) is HCCL's format for Atlas A3 super-node networking",
        )
    for host in hosts:
        if host.super_pod_id is None:
            check.add(
                host.path + ("super_pod_id",),
                "no super_pod_id",
                "super_pod_id and super_device_ids on every host, or on none",
                "one rank table (version 1.2) lists every server's super pod",
            )
    in_pod: Dict[Tuple[str, int], str] = {}  # HCOMM CheckSuperPodInfo: unique within a super pod
    for host in given:
        for device, sdid in (host.super_device_ids or {}).items():
            other = in_pod.setdefault((host.super_pod_id or "", sdid), host.host)
            if other != host.host:
                check.add(
                    host.path + ("super_device_ids",),
                    f"super_device_id {sdid} (device {device}), also on {other}",
                    "each super_device_id once in a super pod",
                    "it identifies the NPU in the super pod (npu-smi info -t spod-info: SDID)",
                )
    seen: List[str] = []
    for host in given:
        if seen and host.super_pod_id in seen and seen[-1] != host.super_pod_id:
            check.add(
                host.path + ("super_pod_id",),
                f"super pod {host.super_pod_id!r} after super pod {seen[-1]!r}",
                "the hosts of one super pod listed together",
                "HCCL does not accept the servers of two super pods interleaved (rank_table_config_a3.md)",
            )
        seen.append(host.super_pod_id or "")


# -- per-rank text and job.cpu_binding ------------------------------------------------------------


def check_rank_text(check: Checker, text: str, path: YamlPath) -> None:
    """Placeholders in a command argument, job.workdir, an env value or a make_dirs entry must be known."""
    from npulaunch.config.placeholders import placeholder_problem

    problem = placeholder_problem(text)
    if problem is not None:
        check.add(path, problem.found, problem.allowed, problem.hint)


def parse_make_dirs(check: Checker, value: Any, path: YamlPath) -> Tuple[str, ...]:
    """``job.make_dirs``: per-rank directories (with placeholders) made before each rank starts."""
    if value is None:
        return ()
    if not isinstance(value, list) or not all(isinstance(item, str) and item.strip() for item in value):
        check.add(path, describe(value), 'a list of directory paths, e.g. ["output/{device_id}/ckpt"]')
        return ()
    for index, item in enumerate(value):
        check_rank_text(check, item, path + (index,))
    return tuple(value)


BINDING_ALLOWED = 'none, blocks, auto, or a mapping of device ids to CPU lists ({"0": "0-23", "1": "24-47"})'


def binding_from_value(value: Any) -> Binding:
    """``job.cpu_binding`` (or ``--cpu-binding``) as a Binding; ValueProblem (``key``: the device
    whose CPU list is wrong) when it is none of the forms."""

    if value is False or value is None:  # YAML reads "off" / "no" as false
        return Binding("none")
    if isinstance(value, str) and value in MODES:
        return Binding(value)
    if not isinstance(value, dict) or not value:
        hint = did_you_mean(value, MODES) if isinstance(value, str) else ""
        raise ValueProblem(describe(value), BINDING_ALLOWED, hint)
    mapping: Dict[int, Tuple[int, ...]] = {}
    for key, cpus in value.items():
        if not str(key).isdigit() or int(key) > MAX_DEVICE_ID:
            raise ValueProblem(
                f"device {key!r}", f'device ids 0-{MAX_DEVICE_ID} as keys (quoted: "0": "0-23")', key=(key,)
            )
        parsed: Tuple[int, ...] = ()
        try:
            if isinstance(cpus, int) and not isinstance(cpus, bool) and cpus >= 0:
                parsed = (cpus,)
            elif isinstance(cpus, list) and all(isinstance(c, int) and not isinstance(c, bool) for c in cpus):
                parsed = parse_cpulist(",".join(str(c) for c in cpus))
            elif isinstance(cpus, str):
                parsed = parse_cpulist(cpus)
            else:
                raise ValueError(describe(cpus))
        except ValueError:
            parsed = ()
        if not parsed:
            raise ValueProblem(describe(cpus), 'a CPU list: "0-23", "0-11,48-59" or [0, 1, 2]', key=(key,))
        mapping[int(key)] = parsed
    return Binding("mapping", mapping)


def parse_cpu_binding(check: Checker, value: Any, path: YamlPath) -> Binding:

    try:
        return binding_from_value(value)
    except ValueProblem as problem:
        check.add(path + problem.key, problem.found, problem.allowed, problem.hint)
        return Binding("none")
