"""Placeholders: the per-rank names (``{rank}``, ``{device_id}``, ...) that session-option paths and
the command's arguments, job.workdir, env values and job.make_dirs may carry, checked when the config is
loaded and expanded for each rank by the plan. Pure; knows nothing of the options themselves (values.py).
"""

from __future__ import annotations

import re
from typing import Any, List, Mapping, Optional

from npulaunch.config.checker import ValueProblem
from npulaunch.host.lazyre import lazy_re

# Per-rank placeholders, in session-option paths and in the command's arguments, job.workdir, env values
# and job.make_dirs. {device_id} is the physical id (DEVICE_ID), {node_rank} the host's index (RANK_INDEX).
PLACEHOLDERS = ("rank", "local_rank", "device_id", "node_rank", "host", "job_id", "job_dir")
_PLACEHOLDER = lazy_re(r"\{([^{}]*)\}")
# In argv, workdir, env and make_dirs only {name} with a name is a placeholder: {{name}} is a literal
# {name}, ${name} a shell variable left alone, and other braces (JSON, Python dicts) are text.
_RANK_TEXT = lazy_re(r"\{\{([A-Za-z_][A-Za-z0-9_]*)\}\}|(\$?)\{([A-Za-z_][A-Za-z0-9_]*)\}")


def check_templates(text: str) -> str:
    for name in _PLACEHOLDER.findall(text):
        if name not in PLACEHOLDERS:
            raise ValueProblem(
                repr(text),
                "placeholders " + ", ".join("{%s}" % p for p in PLACEHOLDERS),
                f"unknown placeholder {{{name}}}",
            )
    return text


def expand_templates(text: str, values: Mapping[str, Any]) -> str:
    """``/dump/{rank}`` -> ``/dump/3`` (only the known placeholders; checked beforehand)."""
    return _PLACEHOLDER.sub(lambda m: str(values[m.group(1)]) if m.group(1) in values else m.group(0), text)


def unknown_placeholders(text: str) -> List[str]:
    """The ``{name}`` placeholders of a command argument, workdir, env value or make_dirs entry that
    are not among PLACEHOLDERS (``{{name}}`` and ``${name}`` are not placeholders)."""
    if "{" not in text:
        return []
    return [
        m.group(3)
        for m in _RANK_TEXT.finditer(text)
        if m.group(3) and not m.group(2) and m.group(3) not in PLACEHOLDERS
    ]


def placeholder_problem(text: str) -> Optional[ValueProblem]:
    """A ValueProblem naming the first unknown placeholder of ``text`` (None when all are known)."""
    unknown = unknown_placeholders(text)
    if not unknown:
        return None
    import difflib

    close = difflib.get_close_matches(unknown[0], PLACEHOLDERS, n=1, cutoff=0.6)
    hint = f"did you mean {{{close[0]}}}? " if close else ""
    hint += f"write {{{{{unknown[0]}}}}} for a literal {{{unknown[0]}}}"
    return ValueProblem(
        f"unknown placeholder {{{unknown[0]}}} in {text!r}",
        "placeholders " + " ".join("{%s}" % p for p in PLACEHOLDERS),
        hint,
    )


def expand_placeholders(text: str, values: Mapping[str, Any]) -> str:
    """``out/{device_id}`` -> ``out/3`` in argv, workdir, env values and make_dirs (checked beforehand:
    an unknown name is left as written); ``{{name}}`` -> ``{name}``; ``${name}`` untouched."""
    if "{" not in text:
        return text

    def one(match: "re.Match[str]") -> str:
        if match.group(1):
            return "{" + match.group(1) + "}"
        name = match.group(3)
        if match.group(2) or name not in values:
            return match.group(0)
        return str(values[name])

    return _RANK_TEXT.sub(one, text)
