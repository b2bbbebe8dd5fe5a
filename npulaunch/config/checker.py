"""Validation helpers of the config layer: collect every located problem (and warning) of one
YAML document, describe found values, suggest the nearest valid name; ``ValueProblem``, what a check
of one value raises before the caller locates it. No schema here.
"""

from __future__ import annotations

from enum import Enum
from typing import TYPE_CHECKING, Any, Dict, List, Optional, Sequence, Tuple, Type, TypeVar, Union

from npulaunch.host.errors import ConfigProblem, YamlPath, render_path

if TYPE_CHECKING:
    from npulaunch.config.yamlsource import YamlDocument

E = TypeVar("E", bound=Enum)


class ValueProblem(Exception):
    """A value does not fit; ``found`` and ``allowed`` are for the message, ``key`` a sub-path."""

    def __init__(self, found: str, allowed: str, hint: str = "", key: Tuple[Union[str, int], ...] = ()) -> None:
        super().__init__(f"{found}; allowed: {allowed}")
        self.found, self.allowed, self.hint, self.key = found, allowed, hint, key


def describe(value: Any) -> str:
    """How a found value is shown in messages: the value and its YAML type."""
    kinds = {
        bool: "a boolean",
        int: "an integer",
        float: "a number",
        str: "a string",
        list: "a list",
        dict: "a mapping",
        type(None): "null",
    }
    kind = kinds.get(type(value), type(value).__name__)
    if isinstance(value, (dict, list)):
        return kind
    text = repr(value)
    return f"{text[:60]}... ({kind})" if len(text) > 60 else f"{text} ({kind})"


def did_you_mean(word: str, choices: Sequence[str]) -> str:
    """``did you mean 'hosts'?`` for a near miss, else an empty string."""
    import difflib  # only on the error path

    close = difflib.get_close_matches(word, list(choices), n=1, cutoff=0.6)
    return f"did you mean {close[0]!r}?" if close else ""


class Checker:
    """Collects every problem of one document so the user sees them all at once."""

    def __init__(self, doc: "YamlDocument") -> None:
        self.doc = doc
        self.problems: List[ConfigProblem] = []
        self.warnings: List[ConfigProblem] = []

    def add(self, path: YamlPath, found: str, allowed: str, hint: str = "") -> None:
        self.problems.append(
            ConfigProblem(self.doc.source, self.doc.line_of(path), render_path(path), found, allowed, hint)
        )

    def warn(self, path: YamlPath, found: str, allowed: str, hint: str = "") -> None:
        self.warnings.append(
            ConfigProblem(self.doc.source, self.doc.line_of(path), render_path(path), found, allowed, hint)
        )

    def source_text(self, value: Any, path: YamlPath) -> Any:
        """A number as the user wrote it (``0123``, ``1.50``), for values that are really text."""
        if isinstance(value, (int, float)) and not isinstance(value, bool):
            return self.doc.texts.get(path, str(value))
        return value

    def mapping(self, value: Any, path: YamlPath, keys: Sequence[str]) -> Dict[str, Any]:
        if value is None:
            return {}
        if not isinstance(value, dict):
            self.add(path, describe(value), "a mapping with keys " + ", ".join(keys))
            return {}
        for key in value:
            if key not in keys:
                self.add(path + (key,), f"unknown key {key!r}", ", ".join(keys), did_you_mean(key, keys))
        return value

    def string(self, value: Any, path: YamlPath, allowed: str = "a string", hint: str = "") -> Optional[str]:
        if isinstance(value, str) and value:
            return value
        self.add(path, describe(value), allowed, hint)
        return None

    def choice(self, value: Any, path: YamlPath, enum: Type[E]) -> Optional[E]:
        """The member of a str-valued ``enum`` named by ``value``; else a problem and None."""
        choices = [m.value for m in enum]
        if isinstance(value, str) and value in choices:
            return enum(value)
        hint = did_you_mean(value, choices) if isinstance(value, str) else ""
        self.add(path, describe(value), "one of " + ", ".join(choices), hint)
        return None

    def integer(self, value: Any, path: YamlPath, low: int, high: int, allowed: str = "") -> Optional[int]:
        """An int (not a bool) from ``low`` to ``high``; else a problem and None."""
        if isinstance(value, int) and not isinstance(value, bool) and low <= value <= high:
            return value
        self.add(path, describe(value), allowed or f"an integer from {low} to {high}")
        return None

    def number(self, value: Any, path: YamlPath, low: float, high: float, allowed: str = "") -> Optional[float]:
        if isinstance(value, (int, float)) and not isinstance(value, bool) and low <= value <= high:
            return float(value)
        self.add(path, describe(value), allowed or f"a number of seconds from {low:g} to {high:g}")
        return None
