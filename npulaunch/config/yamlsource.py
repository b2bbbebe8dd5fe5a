"""Read YAML text into plain values while remembering the line of every value.

First step of the config layer: no schema here, only YAML. Errors (syntax, duplicate keys,
non-string keys, aliases to nowhere) become ConfigErrors naming the file and line, never a traceback.
"""

from __future__ import annotations

import math
import os
from dataclasses import dataclass
from typing import Any, Dict, List, Optional, Set

import yaml

from npulaunch.host.errors import ConfigError, ConfigProblem, YamlPath, render_path

try:  # the C loader is several times faster on large cluster files
    _Loader: Any = yaml.CSafeLoader
except AttributeError:  # pragma: no cover - PyYAML built without libyaml
    _Loader = yaml.SafeLoader


MAX_NODES = 1_000_000  # a cluster file is far smaller; this stops alias bombs ("billion laughs")
MAX_BYTES = 10 * 1024 * 1024  # a 2,048-host file is about 100 KB; reading 54 MB cost 1 GB and 14 s
MAX_DEPTH = 100  # a cluster file nests 4 or 5 levels; PyYAML's composer recurses (deep files crash it)
_SCALAR_TAGS = {"tag:yaml.org,2002:" + t for t in ("str", "int", "float", "bool", "null", "timestamp")}


@dataclass(frozen=True)
class YamlDocument:
    """A parsed YAML file: its value, the 1-based line of every path in it, and the source text
    of every scalar YAML did not read as a string (so ``id: 0123`` can be seen as "0123", not 83)."""

    source: str
    value: Any
    lines: Dict[YamlPath, int]
    texts: Dict[YamlPath, str]

    def line_of(self, path: YamlPath) -> Optional[int]:
        """The line of ``path``, or of its nearest ancestor that has one."""
        for end in range(len(path), -1, -1):
            line = self.lines.get(path[:end])
            if line is not None:
                return line
        return None


def _check_depth(text: str, source: str) -> None:
    """Refuse nesting deeper than MAX_DEPTH before composing: the event stream is read without
    recursion, the composer is not (500 levels raise RecursionError, 50,000 crash the C parser)."""
    depth = 0
    for event in yaml.parse(text, Loader=_Loader):
        if isinstance(event, (yaml.MappingStartEvent, yaml.SequenceStartEvent)):
            depth += 1
            if depth > MAX_DEPTH:
                line = event.start_mark.line + 1 if event.start_mark is not None else None
                raise ConfigError(
                    [
                        ConfigProblem(
                            source, line, "(YAML)", f"more than {MAX_DEPTH} nested levels", "a cluster file's nesting"
                        )
                    ]
                )
        elif isinstance(event, (yaml.MappingEndEvent, yaml.SequenceEndEvent)):
            depth -= 1


def parse_yaml(text: str, source: str) -> YamlDocument:
    """Parse one YAML document, keeping line numbers. Raises ConfigError on bad YAML."""
    try:
        _check_depth(text, source)
        node = yaml.compose(text, Loader=_Loader)
    except yaml.MarkedYAMLError as exc:
        mark = exc.problem_mark or exc.context_mark
        line = mark.line + 1 if mark is not None else None
        problem = " ".join(str(p) for p in (exc.context, exc.problem) if p)
        hint = ""
        if line is not None and "\t" in "".join(text.splitlines()[max(0, line - 2) : line]):
            hint = "YAML does not allow tabs for indentation: use spaces"
        raise ConfigError(
            [ConfigProblem(source, line, "(YAML syntax)", problem or "invalid YAML", "well-formed YAML", hint)]
        ) from None
    except yaml.YAMLError as exc:
        raise ConfigError([ConfigProblem(source, None, "(YAML)", str(exc), "well-formed YAML")]) from None
    converter = _Converter(source)
    value = None if node is None else converter.convert(node, ())
    if converter.problems:
        raise ConfigError(converter.problems)
    return YamlDocument(source, value, converter.lines, converter.texts)


class _Converter:
    """Nodes -> plain values, recording lines and problems instead of raising."""

    def __init__(self, source: str) -> None:
        self.source = source
        self.lines: Dict[YamlPath, int] = {}
        self.texts: Dict[YamlPath, str] = {}
        self.problems: List[ConfigProblem] = []
        self._active: Set[int] = set()  # collections being converted: an alias to one is a cycle
        self._count = 0

    def _problem(self, line: int, path: str, found: str, allowed: str, hint: str = "") -> None:
        self.problems.append(ConfigProblem(self.source, line, path, found, allowed, hint))

    def convert(self, node: yaml.Node, path: YamlPath) -> Any:
        line = node.start_mark.line + 1
        self.lines.setdefault(path, line)  # a mapping entry keeps its key's line
        self._count += 1
        if self._count > MAX_NODES:
            if self._count == MAX_NODES + 1:
                self._problem(
                    line,
                    render_path(path),
                    f"more than {MAX_NODES} values",
                    "a cluster-sized file",
                    "aliases expand to too many values",
                )
            return None
        if isinstance(node, yaml.ScalarNode):
            return self._scalar(node, path)
        if id(node) in self._active:
            self._problem(line, render_path(path), "an alias that contains itself", "finite data")
            return None
        self._active.add(id(node))
        try:
            if isinstance(node, yaml.SequenceNode):
                return [self.convert(item, path + (i,)) for i, item in enumerate(node.value)]
            assert isinstance(node, yaml.MappingNode)
            return self._mapping(node, path)
        finally:
            self._active.discard(id(node))

    def _mapping(self, node: yaml.MappingNode, path: YamlPath) -> Dict[str, Any]:
        result: Dict[str, Any] = {}
        for key_node, value_node in node.value:
            key_line = key_node.start_mark.line + 1
            if key_node.tag == "tag:yaml.org,2002:merge":
                self._problem(
                    key_line,
                    render_path(path + ("<<",)),
                    "a YAML merge key",
                    "plain keys",
                    "merge keys are not supported: write the keys out",
                )
                continue
            if not isinstance(key_node, yaml.ScalarNode) or key_node.tag != "tag:yaml.org,2002:str":
                found = f"key {key_node.value}" if isinstance(key_node, yaml.ScalarNode) else "a collection as key"
                self._problem(
                    key_line, render_path(path) + " (key)", found, "string keys", "quote the key if it is meant as text"
                )
                continue
            key = key_node.value
            if key in result:
                self._problem(
                    key_line,
                    render_path(path + (key,)),
                    f"a second {key!r}",
                    "each key once",
                    f"first set on line {self.lines[path + (key,)]}",
                )
                continue
            self.lines[path + (key,)] = key_line
            result[key] = self.convert(value_node, path + (key,))
        return result

    def _scalar(self, node: yaml.ScalarNode, path: YamlPath) -> Any:
        if node.tag not in _SCALAR_TAGS:
            self._problem(
                node.start_mark.line + 1, render_path(path), f"the tag {node.tag!r}", "plain YAML values without tags"
            )
            return None
        if node.tag != "tag:yaml.org,2002:str":
            self.texts[path] = node.value
        # SafeConstructor turns the resolved implicit tags (int, float, bool, null, timestamp) into values.
        value = yaml.constructor.SafeConstructor().construct_object(node, deep=True)
        line = node.start_mark.line + 1
        if isinstance(value, str) and "\0" in value:  # "a\0b": no process can be given it (exec fails)
            self._problem(line, render_path(path), "a NUL character", "text without NUL characters")
        elif isinstance(value, float) and not math.isfinite(value):  # .nan / .inf: no setting means them
            self._problem(line, render_path(path), f"{node.value} (not a finite number)", "a finite number")
        return value


def load_yaml_file(path: str) -> YamlDocument:
    """Read and parse a YAML file; unreadable files become ConfigErrors."""
    try:
        size = os.stat(path).st_size
        if size > MAX_BYTES:
            raise ConfigError(
                [
                    ConfigProblem(
                        path, None, "(file)", f"{size:,} bytes", f"at most {MAX_BYTES:,} bytes (a cluster file)"
                    )
                ]
            )
        with open(path, encoding="utf-8") as handle:
            text = handle.read(MAX_BYTES + 1)  # a file that grew since: read no more than the limit
    except OSError as exc:
        raise ConfigError(
            [ConfigProblem(path, None, "(file)", exc.strerror or str(exc), "a readable YAML file")]
        ) from None
    except UnicodeDecodeError as exc:
        raise ConfigError(
            [ConfigProblem(path, None, "(file)", f"bytes that are not UTF-8 ({exc.reason})", "UTF-8 text")]
        ) from None
    return parse_yaml(text, path)
