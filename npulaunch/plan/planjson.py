"""A LaunchPlan as JSON, for tools (``npulaunch plan --json``) and for the job directory's
plan.json: every rank's complete environment and where each value came from. Pure rendering;
secrets (host/redact.py: secret-looking names, URL passwords, --token-style arguments) are
masked in everything written.

The environments are written once per group of ranks that inherit the same environment (``env_bases``:
what the group's ranks share, and the source of every variable whose source they share, such as
RANK_ID's) and, per rank, what differs from its group's base (``env``, ``env_sources``, and
``env_removed``: names of the base the rank does not get). A rank's complete
environment is its base updated with its own entries, less the removed ones (``full_rank``;
``npulaunch plan --rank N`` prints it). 32,768 ranks then take about 0.5 KB each instead of 3.5 KB.
"""

from __future__ import annotations

import json
from dataclasses import dataclass
from typing import IO, Any, Callable, Dict, Iterator, List, Mapping, Optional, Tuple

from npulaunch.host.redact import REDACTED, is_secret, redact_argv, redact_env, redact_text
from npulaunch.host.spec import RankEnv, RankSpec, compose_env, set_by_npulaunch
from npulaunch.plan.launchplan import LaunchPlan


def complete_env(spec: RankSpec, inherited: Mapping[str, str]) -> Tuple[Dict[str, str], Dict[str, str]]:
    """The environment the rank will get and where each variable came from, sorted by name."""
    env, sources = compose_env(spec, inherited, inject_dir=None)
    return dict(sorted(env.items())), dict(sorted(sources.items()))


_NONE: Mapping[str, str] = {}  # the inherited environment of a host the plan cannot see (a remote one)


def rank_to_dict(
    spec: RankSpec,
    inherited: Mapping[str, str],
    device: Optional[Tuple[int, int, int]] = None,
    compose: bool = True,
) -> Dict[str, Any]:
    """One rank with its complete environment (``compose=False``: without it, for the caller to
    fill in). ``device``: the rank's ``(physical, logical, ASCEND_DEVICE_ID)`` (LaunchPlan.rank_device)."""
    env, sources = complete_env(spec, inherited) if compose else ({}, {})
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
        "health_interval_s": plan.health_interval_s,
        "stragglers": plan.stragglers,
        "recovery": plan.recovery,
        "framework": plan.framework,
        "meeting": None if plan.meeting is None else {"address": plan.meeting[0], "port": plan.meeting[1]},
        # the framework's extra processes (MindSpore's scheduler), whole: they are few and not ranks
        "helpers": [rank_to_dict(s, inherited_by_host.get(s.host, {}), (-1, -1, -1)) for s in plan.helpers],
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
    bases = _Bases(plan, inherited_by_host)
    yield ',\n  "env_bases": [\n' + ",\n".join("    " + json.dumps(base) for base in bases.shown) + "\n  ]"
    yield ',\n  "ranks": ['
    for index, spec in enumerate(plan.ranks):
        line = bases.rank_line(spec)
        yield ("\n    " if index == 0 else ",\n    ") + line
    yield "\n  ]\n}\n" if plan.ranks else "]\n}\n"


@dataclass(frozen=True)
class _HostPart:
    """The part of a rank's entry every rank of its host shares (the ranks whose RankEnvs share one
    object of variables), worked out once: the JSON entries of 16 ranks differ in 20 values."""

    shared: Mapping[str, str]  # the RankEnv.shared and argv it is for (kept: their ids are the cache key)
    argv_of: Tuple[str, ...]
    prepend: Dict[str, str]
    env: Dict[str, str]  # what differs from the base besides the rank's own values, redacted
    sources: Dict[str, str]
    removed: str  # these as JSON text
    argv: str  # redacted
    unset: str
    made: Tuple[Tuple[str, str], ...]  # the make_dirs, options and CPU binding it is for, and their JSON text
    make_dirs: str
    options_of: Mapping[str, Any]
    options: str
    binding_of: Optional[Dict[str, Any]]
    binding: str
    own: Dict[str, _OwnName]  # each name of the ranks' own values, as the first rank that had it met it


class _OwnName:
    """One name of the ranks' own values, on one host: its source, and what it is compared with."""

    __slots__ = ("source", "replacing", "inherited", "base_value", "base_source", "secret")

    def __init__(
        self, source: str, replacing: str, inherited: Any, base_value: Any, base_source: Any, secret: bool
    ) -> None:
        self.source = source
        self.replacing = replacing  # the source when the rank's value replaces an inherited one
        self.inherited = inherited  # the inherited value, or _MISSING
        self.base_value = base_value  # the base's value and source, or _MISSING
        self.base_source = base_source
        self.secret = secret


class _Bases:
    """The shared part of the environments: one base per group of ranks whose hosts inherit the same
    environment (every local host shares the launcher's; a host the plan cannot see shows only
    what npulaunch sets). A base holds what the group's first and last ranks agree on; every rank
    then carries exactly what differs, so the base's choice never changes what a rank gets."""

    def __init__(self, plan: LaunchPlan, inherited_by_host: Mapping[str, Mapping[str, str]]) -> None:
        self._plan = plan
        self._inherited = inherited_by_host
        self._group: Dict[int, int] = {}  # id(inherited) -> index in shown
        self._bases: List[Tuple[Dict[str, str], Dict[str, str]]] = []
        self._first: List[RankSpec] = []
        self.shown: List[Dict[str, Any]] = []
        self._hosts: Dict[Tuple[int, ...], _HostPart] = {}
        firsts: Dict[int, RankSpec] = {}
        lasts: Dict[int, RankSpec] = {}
        hosts: Dict[int, List[str]] = {}
        for spec in plan.ranks:
            key = id(self._of(spec))
            firsts.setdefault(key, spec)
            lasts[key] = spec
            if not hosts.setdefault(key, []) or hosts[key][-1] != spec.host:
                hosts[key].append(spec.host)
        for key, first in firsts.items():
            env, sources = complete_env(first, self._of(first))
            last_env, last_sources = complete_env(lasts[key], self._of(first))
            base_env = {k: v for k, v in env.items() if last_env.get(k) == v}
            base_sources = {k: v for k, v in sources.items() if last_sources.get(k) == v}  # RANK_ID's too
            self._group[key] = len(self._bases)
            self._bases.append((base_env, base_sources))
            self._first.append(first)
            self.shown.append(
                {"hosts": sorted(set(hosts[key])), "env": redact_env(base_env), "env_sources": base_sources}
            )

    def _of(self, spec: RankSpec) -> Mapping[str, str]:
        return self._inherited.get(spec.host, _NONE)

    def rank_line(self, spec: RankSpec) -> str:
        """A rank's entry as JSON text, the same as ``json.dumps`` of its dictionary would give."""
        inherited = self._of(spec)
        group = self._group[id(inherited)]
        host = self._host_part(spec, inherited, group)
        if host is None:
            entry = rank_to_dict(spec, inherited, self._plan.rank_device(spec), compose=False)
            own_env, own_sources, removed = self._differences(spec, inherited, group)
            entry["env"] = redact_env(dict(sorted(own_env.items())))
            entry["env_sources"] = dict(sorted(own_sources.items()))
            entry["env_base"] = group
            entry["env_removed"] = sorted(removed)
            return json.dumps(entry)
        # the host's part, worked out once, and the rank's own values (RankEnv.own) against the base
        own_env, own_sources = dict(host.env), dict(host.sources)
        for name, value in spec.env.own.items():  # type: ignore[attr-defined]  # (_host_part checked)
            known = host.own.get(name)
            if known is None:
                known = host.own[name] = self._own_name(spec, inherited, group, name)
            source = known.source if known.inherited is _MISSING or known.inherited == value else known.replacing
            if value != known.base_value:
                own_env[name] = REDACTED if known.secret else redact_text(value)
            if source != known.base_source:
                own_sources[name] = source
        physical, logical, user = self._plan.rank_device(spec)
        options = host.options if spec.session_options is host.options_of else _dumps(spec.session_options)
        made = host.make_dirs if spec.make_dirs is host.made else _dumps(_make_dirs(spec))
        cpus = "null" if spec.cpus is None else _dumps(list(spec.cpus))
        binding = host.binding if spec.cpu_request is host.binding_of else _dumps(spec.cpu_request)
        # rank_to_dict's keys in its order, then the base's; the integers are ints (as json writes them)
        return (
            f'{{"rank": {spec.rank:d}, "local_rank": {spec.local_rank:d}, "world_size": {spec.world_size:d}, '
            f'"host": {_string(spec.host)}, "node_rank": {spec.node_rank:d}, "device_id": {spec.device_id:d}, '
            f'"device": {{"physical": {physical:d}, "logical": {logical:d}, "ascend_device_id": {user:d}}}, '
            f'"argv": {host.argv}, "cwd": {_string(spec.cwd)}, "env": {_texts(own_env)}, '
            f'"env_sources": {_texts(own_sources)}, "env_unset": {host.unset}, '
            f'"session_options": {options}, "stdout": {_string(spec.stdout_path)}, '
            f'"stderr": {_string(spec.stderr_path)}, "plog_dir": {_string(spec.plog_dir)}, "make_dirs": {made}, '
            f'"cpus": {cpus}, "cpu_binding": {binding}, "env_base": {group:d}, "env_removed": {host.removed}}}'
        )

    def _own_name(self, spec: RankSpec, inherited: Mapping[str, str], group: int, name: str) -> _OwnName:
        source = spec.env_sources.get(name, "launcher")
        base_env, base_sources = self._bases[group]
        return _OwnName(
            source,
            source + " (replaces the inherited value)",
            inherited.get(name, _MISSING),
            base_env.get(name, _MISSING),
            base_sources.get(name, _MISSING),
            is_secret(name),
        )

    def _host_part(self, spec: RankSpec, inherited: Mapping[str, str], group: int) -> Optional[_HostPart]:
        """What a rank whose environment is a RankEnv shares with the other ranks of its host (those
        with the same shared variables, command and unset names): worked out once, the long way, from
        the first of them. None for a rank not built that way (its entry is worked out whole)."""
        env = spec.env
        if not isinstance(env, RankEnv):
            return None
        key = (id(env.shared), id(spec.env_sources), id(spec.env_unset), id(inherited), id(spec.argv))
        part = self._hosts.get(key)
        if part is not None and part.shared is env.shared and part.argv_of is spec.argv:
            if spec.env_prepend == part.prepend:
                return part
        if not (env.own.keys().isdisjoint(spec.env_prepend) and env.own.keys().isdisjoint(spec.env_unset)):
            return None
        own_env, own_sources, removed = self._differences(spec, inherited, group)
        mine = env.own
        part = _HostPart(
            shared=env.shared,
            argv_of=spec.argv,
            prepend=dict(spec.env_prepend),
            env=redact_env({k: v for k, v in own_env.items() if k not in mine}),
            sources={k: v for k, v in own_sources.items() if k not in mine},
            removed=_dumps(sorted(removed)),
            argv=_dumps(redact_argv(spec.argv)),
            unset=_dumps(list(spec.env_unset)),
            made=spec.make_dirs,
            make_dirs=_dumps(_make_dirs(spec)),
            options_of=spec.session_options,
            options=_dumps(spec.session_options),
            binding_of=spec.cpu_request,
            binding=_dumps(spec.cpu_request),
            own={},
        )
        self._hosts[key] = part
        return part

    def _differences(
        self, spec: RankSpec, inherited: Mapping[str, str], group: int
    ) -> Tuple[Dict[str, str], Dict[str, str], List[str]]:
        """A rank's environment against its base, the long way: (what differs, their sources, removed)."""
        base_env, base_sources = self._bases[group]
        first = self._first[group]
        if (spec.env_unset, spec.env_prepend.keys(), spec.env.keys()) == (
            first.env_unset,
            first.env_prepend.keys(),
            first.env.keys(),
        ):
            # composed like the group's first rank: only the variables npulaunch sets can differ
            env, sources = set_by_npulaunch(spec, inherited, inject_dir=None)
            removed: List[str] = []
        else:
            env, sources = compose_env(spec, inherited, inject_dir=None)
            removed = [k for k in base_env if k not in env]
        own_env = {k: v for k, v in env.items() if base_env.get(k, _MISSING) != v}
        own_sources = {k: v for k, v in sources.items() if base_sources.get(k, _MISSING) != v}
        return own_env, own_sources, removed


_MISSING = object()


def _texts(values: Mapping[str, str]) -> str:
    """``json.dumps`` of a dictionary of strings, sorted by name: 1 us, not json.dumps's 5 (which makes
    a new C encoder at every call)."""
    return "{" + ", ".join(_string(name) + ": " + _string(values[name]) for name in sorted(values)) + "}"


_dumps = json.dumps
_string: Callable[[str], str] = json.encoder.encode_basestring_ascii


def full_rank(plan_data: Mapping[str, Any], entry: Mapping[str, Any]) -> Dict[str, Any]:
    """A rank's entry of plan.json (or ``plan --json``) with its complete environment: its base's
    variables updated with its own, less the removed ones."""
    base = plan_data["env_bases"][entry["env_base"]]
    removed = set(entry.get("env_removed") or ())
    full = dict(entry)
    env = {k: v for k, v in base["env"].items() if k not in removed}
    env.update(entry["env"])
    own, shared = entry["env_sources"], base["env_sources"]
    full["env"] = dict(sorted(env.items()))
    full["env_sources"] = {k: own[k] if k in own else shared[k] for k in full["env"]}
    for key in ("env_base", "env_removed"):
        full.pop(key, None)
    return full


def render_plan_json(plan: LaunchPlan, inherited_by_host: Mapping[str, Mapping[str, str]]) -> str:
    return "".join(iter_plan_json(plan, inherited_by_host))


def write_plan_json(out: IO[str], plan: LaunchPlan, inherited_by_host: Mapping[str, Mapping[str, str]]) -> None:
    for piece in iter_plan_json(plan, inherited_by_host):
        out.write(piece)
