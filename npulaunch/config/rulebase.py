"""The machinery of the rules between session options (config/rules.py, config/productrules.py):
a finding, what a rule sees, the registry and the small helpers most rules use. Pure.
"""

from __future__ import annotations

import os
from dataclasses import dataclass, field
from typing import Any, Callable, Dict, List, Mapping, Optional, Tuple

from npulaunch.config.catalog import OptionSpec
from npulaunch.config.catalog.options import OPTIONS

BY_NAME: Dict[str, OptionSpec] = {spec.name: spec for spec in OPTIONS}
ERROR, WARNING = "error", "warning"
DYNAMIC_TRIO = ("input_shape", "dynamic_dims", "dynamic_node_type")


@dataclass(frozen=True)
class Finding:
    level: str  # ERROR or WARNING
    names: Tuple[str, ...]  # option names, or env:NAME for environment variables
    found: str
    allowed: str
    hint: str = ""


@dataclass(frozen=True)
class RuleContext:
    options: Mapping[str, Any]  # rendered session options the YAML sets
    env: Mapping[str, Optional[str]]  # the YAML's env (None = removed)
    effective_env: Mapping[str, str]  # what the ranks will see of npulaunch's defaults + the YAML's env
    world_size: int
    product: Optional[str] = None
    cann_version: Optional[str] = None  # as the YAML gives it ("8.0.RC2"), already checked
    file_reader: Callable[[str], Optional[str]] = field(default=lambda path: _read(path))

    def has(self, name: str) -> bool:
        return name in self.options

    @property
    def training(self) -> bool:
        return self.options.get("graph_run_mode", 1) == 1


def _read(path: str) -> Optional[str]:
    try:
        with open(os.path.expanduser(path), encoding="utf-8") as handle:
            return handle.read()
    except (OSError, UnicodeDecodeError):
        return None


Rule = Callable[[RuleContext], List[Finding]]
RULES: List[Rule] = []


def rule(func: Rule) -> Rule:
    RULES.append(func)
    return func


def excludes(ctx: RuleContext, a: str, b: str, why: str) -> List[Finding]:
    if ctx.has(a) and ctx.has(b):
        return [Finding(ERROR, (a, b), f"both {a} and {b}", f"one of {a} and {b}", why)]
    return []


def requires(ctx: RuleContext, name: str, needed: str, value: Any = None, why: str = "") -> List[Finding]:
    if not ctx.has(name):
        return []
    if value is None and not ctx.has(needed):
        return [Finding(ERROR, (name, needed), f"{name} without {needed}", f"{name} together with {needed}", why)]
    if value is not None and ctx.options.get(needed) != value:
        shown = str(value).lower() if isinstance(value, bool) else value
        return [
            Finding(
                ERROR,
                (name, needed),
                f"{name} with {needed}: {ctx.options.get(needed, '(unset)')}",
                f"{needed}: {shown}",
                why,
            )
        ]
    return []


def warn(names: Tuple[str, ...], found: str, allowed: str, hint: str) -> Finding:
    return Finding(WARNING, names, found, allowed, hint)
