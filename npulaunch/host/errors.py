"""The one exception hierarchy of npulaunch (a leaf: imports nothing of the project).

Exceptions carry fields and render them; only the CLI prints them or chooses exit codes.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Optional, Sequence, Tuple, Union

YamlPath = Tuple[Union[str, int], ...]


def render_path(path: YamlPath) -> str:
    """``("hosts", 1, "devices")`` -> ``hosts[1].devices``."""
    out = ""
    for key in path:
        if isinstance(key, int):
            out += f"[{key}]"
        else:
            out += ("." if out else "") + key
    return out or "(top level)"


class NpulaunchError(Exception):
    """Base of every error npulaunch raises on purpose."""

    exit_code = 1


@dataclass(frozen=True)
class ConfigProblem:
    """One thing wrong with the input: where it is, what was found, what is allowed."""

    source: str  # file name, or "command line"
    line: Optional[int]  # 1-based; None when the value has no line (CLI, defaults)
    path: str  # YAML path such as "hosts[1].devices[3]", or a flag such as "--devices"
    found: str
    allowed: str
    hint: str = ""

    def render(self) -> str:
        where = self.source if self.line is None else f"{self.source}:{self.line}"
        text = f"{where}: {self.path}: found {self.found}; allowed: {self.allowed}"
        if self.hint:
            text += f" ({self.hint})"
        return text


class ConfigError(NpulaunchError):
    """The configuration (YAML or flags) is invalid; nothing was started."""

    exit_code = 2

    def __init__(self, problems: Sequence[ConfigProblem]) -> None:
        self.problems = tuple(problems)
        super().__init__(self.render())

    def render(self) -> str:
        count = len(self.problems)
        head = "invalid configuration" if count == 1 else f"invalid configuration ({count} problems)"
        return head + ":\n" + "\n".join("  " + p.render() for p in self.problems)


class UsageError(NpulaunchError):
    """The command line is unusable (missing command, conflicting flags); nothing was started."""

    exit_code = 2


class PlanError(NpulaunchError):
    """The configuration is valid but cannot be turned into a launch plan on this machine
    (device discovery failed, the job directory exists, the command is missing, ...)."""

    exit_code = 2


class SchedulerError(NpulaunchError):
    """The scheduler's environment is incomplete or contradicts itself; nothing was started."""

    exit_code = 2
