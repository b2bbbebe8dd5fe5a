"""A LaunchPlan as JSON, for tools (``npulaunch plan --json``) and for the job directory's
plan.json: every rank's complete environment and where each value came from. Pure rendering;
secrets (host/redact.py: secret-looking names, URL passwords, --token-style arguments) are
masked in everything written.
"""

from __future__ import annotations

import json
from typing import IO, Any, Dict, Iterator, Mapping, Optional, Tuple

from npulaunch.host.redact import redact_argv, redact_env
from npulaunch.host.spec import RankSpec, compose_env
from npulaunch.plan.launchplan import LaunchPlan


def complete_env(spec: RankSpec, inherited: Mapping[str, str]) -> Tuple[Dict[str, str], Dict[str, str]]:
    """The environment the rank will get and where each variable came from, sorted by name."""
    env, sources = compose_env(spec, inherited, inject_dir=None)
    return dict(sorted(env.items())), dict(sorted(sources.items()))


def rank_to_dict(
    spec: RankSpec, inherited: Mapping[str, str], device: Optional[Tuple[int, int, int]] = None
) -> Dict[str, Any]:
    """``device``: the rank's ``(physical, logical, ASCEND_DEVICE_ID)`` (LaunchPlan.rank_device)."""
    env, sources = complete_env(spec, inherited)
    physical, logical, user = device or (spec.device_id,) * 3
    return {
        "rank": spec.rank,
        "local_rank": spec.local_rank,
        "world_size": spec.world_size,
        "host": spec.host,
        "node_rank": spec.node_rank,
        "device_id": spec.device_id,
        "device": {"physical": physical, "logical": logical, "ascend_device_id": user},
        "argv": redact_argv(spec.argv),
        "cwd": spec.cwd,
        "env": redact_env(env),
        "env_sources": sources,
        "env_unset": list(spec.env_unset),
        "session_options": spec.session_options,
        "stdout": spec.stdout_path,
        "stderr": spec.stderr_path,
        "plog_dir": spec.plog_dir,
        "make_dirs": _make_dirs(spec),
        # job.cpu_binding: the CPUs the rank is bound to; null when not bound, or when decided on its
        # host as the job starts ("cpu_binding" then says how)
        "cpus": None if spec.cpus is None else list(spec.cpus),
        "cpu_binding": spec.cpu_request,
    }


def _make_dirs(spec: RankSpec) -> Dict[str, Any]:
    """option -> directory; job.make_dirs (several directories) -> a list."""
    made: Dict[str, Any] = {}
    for option, path in spec.make_dirs:
        if option == "job.make_dirs":
            made.setdefault(option, []).append(path)
        else:
            made[option] = path
    return made


def plan_to_dict(
    plan: LaunchPlan, inherited_by_host: Mapping[str, Mapping[str, str]], with_ranks: bool = True
) -> Dict[str, Any]:
    """The full plan as JSON-ready data. Hosts missing from ``inherited_by_host`` show only
    what npulaunch sets (their own environment is read on the host at start)."""
    data = {
        "job_id": plan.job_id,
        "job_uuid": plan.job_uuid,
        "job_name": plan.job_name,
        "job_dir": plan.job_dir,
        "config": plan.config_source,
        "world_size": plan.world_size,
        "hosts": list(plan.hosts),
        "grace_period_s": plan.grace_period_s,
        "console": plan.console.value,
        "forward_signals": list(plan.forward_signals),
        "rank_table_path": plan.rank_table_path,
        "rank_table_version": plan.rank_table_version or None,
        "rank_table_reason": plan.rank_table_reason,
        # only the hosts where a variable renumbers the devices (a list per host would not stream)
        "visible_devices": {
            mapped.host: {
                name: {"value": given[0], "source": given[1]}
                for name, given in (
                    ("ASCEND_VISIBLE_DEVICES", mapped.container_visible),
                    ("ASCEND_RT_VISIBLE_DEVICES", mapped.rt_visible),
                )
                if given is not None
            }
            for mapped in plan.host_devices
            if mapped.container_visible or mapped.rt_visible
        },
        "rank_table": plan.rank_table,
        "sources": plan.sources,
        "notes": list(plan.notes),
        "warnings": list(plan.warnings),
        "monitor": {
            "startup_timeout_s": plan.hang_startup_s,
            "hang_timeout_s": plan.hang_steady_s,
            "patterns": list(plan.patterns),
        },
    }
    if with_ranks:
        data["ranks"] = [
            rank_to_dict(spec, inherited_by_host.get(spec.host, {}), plan.rank_device(spec)) for spec in plan.ranks
        ]
    return data


def iter_plan_json(plan: LaunchPlan, inherited_by_host: Mapping[str, Mapping[str, str]]) -> Iterator[str]:
    """The plan as JSON, in pieces: the header indented, then one line per rank (and per server
    of the rank table), each encoded by json's C encoder. A plan of 32,768 ranks is never held as
    one string or one list of dictionaries."""
    head = plan_to_dict(plan, inherited_by_host, with_ranks=False)
    table = head.pop("rank_table")
    yield json.dumps(head, indent=2)[:-2] + ',\n  "rank_table": '
    if table is None:
        yield "null"
    else:
        servers = table["server_list"]
        rest = {k: v for k, v in table.items() if k != "server_list"}
        yield json.dumps(rest)[:-1] + ', "server_list": [\n'
        yield ",\n".join("    " + json.dumps(server) for server in servers) + "]}"
    yield ',\n  "ranks": ['
    for index, spec in enumerate(plan.ranks):
        line = json.dumps(rank_to_dict(spec, inherited_by_host.get(spec.host, {}), plan.rank_device(spec)))
        yield ("\n    " if index == 0 else ",\n    ") + line
    yield "\n  ]\n}\n" if plan.ranks else "]\n}\n"


def render_plan_json(plan: LaunchPlan, inherited_by_host: Mapping[str, Mapping[str, str]]) -> str:
    return "".join(iter_plan_json(plan, inherited_by_host))


def write_plan_json(out: IO[str], plan: LaunchPlan, inherited_by_host: Mapping[str, Mapping[str, str]]) -> None:
    for piece in iter_plan_json(plan, inherited_by_host):
        out.write(piece)
