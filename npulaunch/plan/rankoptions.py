"""Session options per rank: the cross-option rules checked once for the job, then the paths
ranks write to expanded for each rank ({job_id}, {rank}, {local_rank}, {device_id}, {host}).

Pure. Called by the plan; turns rule findings into located ConfigProblems (errors) and
warning lines, and warns when ranks of one host would still write to the same directory.
"""

from __future__ import annotations

import json
import os
from typing import Any, Dict, List, Mapping, Sequence, Set, Tuple

from npulaunch.config.catalog.options import OPTIONS
from npulaunch.config.checker import ValueProblem
from npulaunch.config.cluster import ClusterConfig
from npulaunch.config.placeholders import expand_templates
from npulaunch.config.rulebase import BY_NAME
from npulaunch.config.rules import ERROR, Finding, RuleContext, check_rules
from npulaunch.config.values import check_option
from npulaunch.host.errors import ConfigProblem
from npulaunch.plan.rankenv import DEFAULT_ENV

WRITES = tuple(spec.name for spec in OPTIONS if spec.writes)
SHARED_DIR_OPTIONS = ("dump_path", "profiling_options.output")
_UNSET = object()
PER_HOST = ("local_rank_id", "local_device_list")  # what data_preprocess: host_main adds to each rank


def _path_of(name: str) -> Tuple[str, str]:
    return ("env", name[4:]) if name.startswith("env:") else ("session_options", name)


def _where(config: ClusterConfig, name: str) -> str:
    """``session_options.x (line 12)``, or ``(not set)`` for an option the YAML does not have."""
    path = _path_of(name)
    problem = config.problem(path, "", "")
    given = config.document is not None and path in config.document.lines
    return f"{problem.path} (line {problem.line})" if given else f"{problem.path} (not set)"


def _locate(config: ClusterConfig, finding: Finding) -> ConfigProblem:
    problem = config.problem(_path_of(finding.names[0]), finding.found, finding.allowed, finding.hint)
    hint = finding.hint
    if len(finding.names) > 1:
        names = " and ".join(n.replace("env:", "env.") for n in finding.names)
        others = ", ".join(_where(config, n) for n in finding.names[1:])
        hint = "; ".join(h for h in (hint, f"rule between {names}: see {others}") if h)
    return ConfigProblem(problem.source, problem.line, problem.path, problem.found, problem.allowed, hint)


def check_job_options(config: ClusterConfig, world_size: int) -> Tuple[List[ConfigProblem], List[str]]:
    """Rule errors (located) and warnings (as lines) for the job's session options and env."""
    effective = dict(DEFAULT_ENV)
    effective.update({k: v for k, v in config.env.items() if v is not None})
    ctx = RuleContext(
        options=config.session_options,
        env=config.env,
        effective_env=effective,
        world_size=world_size,
        product=config.product,
        cann_version=config.cann_version,
    )
    errors: List[ConfigProblem] = []
    warnings = ["warning: " + w.render() for w in config.warnings]
    if config.product is None and "hccl_timeout" in config.session_options:
        warnings.append(
            "warning: hccl_timeout is checked against the range every product accepts (1-17340 s); "
            "name the product line (product: atlas-a2, ...) for its own range"
        )
    for finding in check_rules(ctx):
        located = _locate(config, finding)
        if finding.level == ERROR:
            errors.append(located)
        else:
            warnings.append("warning: " + located.render())
    return errors, warnings


def check_rank_options(
    config: ClusterConfig, world_size: int, per_rank: Sequence[Tuple[int, Mapping[str, Any]]]
) -> List[ConfigProblem]:
    """The values and the rules again, on each rank's options as merged (the job's, its paths
    expanded, and what the plan adds per rank: local_rank_id / local_device_list): errors the job's
    own options did not have. Ranks whose options differ only in expanded paths are checked once."""
    effective = dict(DEFAULT_ENV)
    effective.update({k: v for k, v in config.env.items() if v is not None})

    def findings(options: Mapping[str, Any]) -> List[Finding]:
        ctx = RuleContext(options, config.env, effective, world_size, config.product, config.cann_version)
        return [f for f in check_rules(ctx) if f.level == ERROR]

    job = config.session_options
    known = set(findings(job))
    checked, failed = set(), set()
    errors: List[ConfigProblem] = []
    seen: Set[int] = set()  # ranks often share one options dictionary (plan/build.py): checked once
    for rank, options in per_rank:
        if id(options) in seen:
            continue
        seen.add(id(options))
        # paths are the job's, as written: the rules look at what a path says, not where it points
        key = tuple(sorted((k, repr(v)) for k, v in options.items() if k not in WRITES and job.get(k, _UNSET) != v))
        if key in checked:
            continue
        checked.add(key)
        where = f"rank {rank}'s options as merged"
        for name, value in sorted(options.items()):
            spec = BY_NAME.get(name)
            if spec is None or config.session_options.get(name) == value or name in failed:
                continue
            try:
                check_option(spec, value)
            except ValueProblem as problem:
                failed.add(name)  # one error per option, for the first rank it fails on
                why = f"{where}; npulaunch sets it for data_preprocess: host_main" if name in PER_HOST else where
                errors.append(config.problem(("session_options", name), problem.found, problem.allowed, why))
        for finding in findings(options):
            if finding not in known:
                known.add(finding)
                located = _locate(config, finding)
                hint = "; ".join(h for h in (located.hint, where) if h)
                errors.append(
                    ConfigProblem(located.source, located.line, located.path, located.found, located.allowed, hint)
                )
    return errors


def options_for_rank(options: Mapping[str, Any], values: Mapping[str, Any]) -> Dict[str, Any]:
    """The job's options with every written path expanded for one rank."""
    result = dict(options)
    for name in WRITES:
        if isinstance(result.get(name), str):
            result[name] = expand_templates(result[name], values)
    if isinstance(result.get("profiling_options"), str):
        profiling = json.loads(result["profiling_options"])
        if isinstance(profiling.get("output"), str):
            profiling["output"] = expand_templates(profiling["output"], values)
            result["profiling_options"] = json.dumps(profiling, separators=(",", ":"))
    return result


def written_dirs(options: Mapping[str, Any], cwd: str) -> Tuple[Tuple[str, str], ...]:
    """``(option, absolute directory)`` for every directory one rank's options make CANN write to:
    dump_path, work_path, debug_dir, op_compiler_cache_dir, graph_compiler_cache_dir, and
    profiling_options' output. Relative ones are relative to the rank's working directory."""
    found = [
        (name, options[name])
        for name in WRITES
        if name != "profiling_options" and isinstance(options.get(name), str) and options[name]
    ]
    if isinstance(options.get("profiling_options"), str):
        output = json.loads(options["profiling_options"]).get("output")
        if isinstance(output, str) and output:
            found.append(("profiling_options.output", output))
    return tuple((name, os.path.normpath(os.path.join(cwd, os.path.expanduser(path)))) for name, path in found)


def shared_dir_warnings(per_rank: Sequence[Tuple[str, int, Mapping[str, Any]]]) -> List[str]:
    """``(host, rank, options)`` of every rank -> warnings for directories several ranks share."""
    users: Dict[Tuple[str, str, str], List[int]] = {}
    for host, rank, options in per_rank:
        for name in SHARED_DIR_OPTIONS:
            if name == "profiling_options.output":
                value = (
                    json.loads(options["profiling_options"]).get("output")
                    if isinstance(options.get("profiling_options"), str)
                    else None
                )
            else:
                value = options.get(name)
            if isinstance(value, str):
                users.setdefault((name, host, value), []).append(rank)
    return [
        f"warning: {len(ranks)} ranks on {host} write {name} to the same directory {path} "
        f"(ranks {', '.join(map(str, ranks[:8]))}{'...' if len(ranks) > 8 else ''}); "
        "add {rank} or {device_id} to the path"
        for (name, host, path), ranks in users.items()
        if len(ranks) > 1
    ]
