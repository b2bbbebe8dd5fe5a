"""The YAML's ``env`` and ``session_options`` sections, checked against the catalog: each value
typed and rendered (values.py), unknown names refused or warned about. Part of the config layer.
"""

from __future__ import annotations

import json
import re
from typing import Any, Dict, Optional

from .checker import Checker, describe, did_you_mean
from .errors import YamlPath
from .rankenv import env_problems

ENV_NAME_PATTERN = re.compile(r"^[A-Za-z_][A-Za-z0-9_]*$")


def parse_env(check: Checker, value: Any) -> Dict[str, Optional[str]]:
    from .catalog.envvars import ENV_VARS
    from .values import ValueProblem, check_env_value

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
            check.add(path, describe(item), "a string or a number",
                      "YAML reads yes/no/on/off/true/false as booleans: quote the value")
        elif isinstance(item, (int, float)):
            env[name] = str(check.source_text(item, path))  # FOO: 010 means "010", not "8"
        elif item is None or isinstance(item, str):
            env[name] = item
        else:
            check.add(path, describe(item), "a string, a number, or null (removes an inherited variable)")
        if env.get(name) is not None and spec is not None and not spec.set_by_launcher:
            try:
                check_env_value(spec, env[name] or "")
            except ValueProblem as problem:
                check.add(path, problem.found, problem.allowed, problem.hint)
        elif spec is None and name.startswith(("ASCEND_", "HCCL_")):
            check.warn(path, f"unknown variable {name}", "the variables of `npulaunch env-vars`",
                       did_you_mean(name, list(known)) or "CANN ignores names it does not know")
    for name, found, allowed, hint in env_problems(env):
        check.add(("env", name), found, allowed, hint)
    return env


def parse_session_options(check: Checker, value: Any) -> Dict[str, Any]:
    """Each option checked against the catalog and rendered to its CANN value (.b/.i/.s)."""
    from .catalog.options import OPTIONS
    from .values import ValueProblem, check_option

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
            check.add(path, f"unknown option {name!r}", "the options of `npulaunch options`",
                      did_you_mean(name, list(known)))
        elif item is None:
            check.add(path, "null", "a value (remove the key to keep CANN's default)")
        else:
            try:
                options[name] = check_option(spec, item)
            except ValueProblem as problem:
                check.add(path + problem.key, problem.found, problem.allowed, problem.hint)
    return options
