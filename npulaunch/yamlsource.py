"""Read YAML text into plain values while remembering the line of every value.

First step of the config layer: no schema here, only YAML. Errors (syntax, duplicate keys,
non-string keys, aliases to nowhere) become ConfigErrors naming the file and line, never a traceback.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any, Dict, List, Optional, Tuple, Union

import yaml

from .errors import ConfigError, ConfigProblem

PathKey = Union[str, int]
YamlPath = Tuple[PathKey, ...]

try:  # the C loader is several times faster on large cluster files
    _Loader: Any = yaml.CSafeLoader
except AttributeError:  # pragma: no cover - PyYAML built without libyaml
    _Loader = yaml.SafeLoader


def render_path(path: YamlPath) -> str:
    """``("hosts", 1, "devices")`` -> ``hosts[1].devices``."""
    out = ""
    for key in path:
        if isinstance(key, int):
            out += f"[{key}]"
        else:
            out += ("." if out else "") + key
    return out or "(top level)"


@dataclass(frozen=True)
class YamlDocument:
    """A parsed YAML file: its value plus the 1-based line of every path in it."""

    source: str
    value: Any
    lines: Dict[YamlPath, int]

    def line_of(self, path: YamlPath) -> Optional[int]:
        """The line of ``path``, or of its nearest ancestor that has one."""
        for end in range(len(path), -1, -1):
            line = self.lines.get(path[:end])
            if line is not None:
                return line
        return None


def parse_yaml(text: str, source: str) -> YamlDocument:
    """Parse one YAML document, keeping line numbers. Raises ConfigError on bad YAML."""
    try:
        node = yaml.compose(text, Loader=_Loader)
    except yaml.MarkedYAMLError as exc:
        mark = exc.problem_mark or exc.context_mark
        line = mark.line + 1 if mark is not None else None
        problem = " ".join(str(p) for p in (exc.context, exc.problem) if p)
        raise ConfigError([ConfigProblem(source, line, "(YAML syntax)", problem or "invalid YAML",
                                         "well-formed YAML")]) from None
    except yaml.YAMLError as exc:
        raise ConfigError([ConfigProblem(source, None, "(YAML)", str(exc), "well-formed YAML")]) from None
    lines: Dict[YamlPath, int] = {}
    problems: List[ConfigProblem] = []
    value = None if node is None else _convert(node, (), source, lines, problems)
    if problems:
        raise ConfigError(problems)
    return YamlDocument(source, value, lines)


def _convert(node: yaml.Node, path: YamlPath, source: str, lines: Dict[YamlPath, int],
             problems: List[ConfigProblem]) -> Any:
    lines.setdefault(path, node.start_mark.line + 1)  # a mapping entry keeps its key's line
    if isinstance(node, yaml.MappingNode):
        result: Dict[str, Any] = {}
        for key_node, value_node in node.value:
            key_line = key_node.start_mark.line + 1
            if not isinstance(key_node, yaml.ScalarNode) or key_node.tag != "tag:yaml.org,2002:str":
                found = _construct_scalar(key_node) if isinstance(key_node, yaml.ScalarNode) else "a collection"
                problems.append(ConfigProblem(source, key_line, render_path(path) + " (key)",
                                              f"key {found!r}", "string keys",
                                              "quote the key if it is meant as text"))
                continue
            key = key_node.value
            if key == "<<":
                problems.append(ConfigProblem(source, key_line, render_path(path + (key,)),
                                              "a YAML merge key", "plain keys", "merge keys are not supported"))
                continue
            if key in result:
                problems.append(ConfigProblem(source, key_line, render_path(path + (key,)),
                                              f"a second {key!r}", "each key once",
                                              f"first set on line {lines[path + (key,)]}"))
                continue
            lines[path + (key,)] = key_line
            result[key] = _convert(value_node, path + (key,), source, lines, problems)
        return result
    if isinstance(node, yaml.SequenceNode):
        return [_convert(item, path + (i,), source, lines, problems) for i, item in enumerate(node.value)]
    return _construct_scalar(node)


def _construct_scalar(node: yaml.ScalarNode) -> Any:
    # SafeConstructor turns the resolved implicit tags (int, float, bool, null, timestamp) into values.
    constructor = yaml.constructor.SafeConstructor()
    return constructor.construct_object(node, deep=True)


def load_yaml_file(path: str) -> YamlDocument:
    """Read and parse a YAML file; unreadable files become ConfigErrors."""
    try:
        with open(path, encoding="utf-8") as handle:
            text = handle.read()
    except OSError as exc:
        raise ConfigError([ConfigProblem(path, None, "(file)", exc.strerror or str(exc),
                                         "a readable YAML file")]) from None
    except UnicodeDecodeError as exc:
        raise ConfigError([ConfigProblem(path, None, "(file)", f"bytes that are not UTF-8 ({exc.reason})",
                                         "UTF-8 text")]) from None
    return parse_yaml(text, path)
