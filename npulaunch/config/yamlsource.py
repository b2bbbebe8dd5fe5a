"""Read YAML text into plain values while remembering the line of every value.

First step of the config layer: no schema here, only YAML, read in one pass over the parser's events
(no node tree, no recursion). Errors (syntax, duplicate keys, non-string keys, aliases to nowhere)
become ConfigErrors naming the file and line, never a traceback.
"""

from __future__ import annotations

import math
import os
from dataclasses import dataclass
from typing import Any, Dict, Iterator, List, Optional, Set, Tuple, Union

import yaml

from npulaunch.host.errors import ConfigError, ConfigProblem, YamlPath, render_path

try:  # the C parser is several times faster on large cluster files
    _Loader: Any = yaml.CSafeLoader
except AttributeError:  # pragma: no cover - PyYAML built without libyaml
    _Loader = yaml.SafeLoader


MAX_NODES = 1_000_000  # a cluster file is far smaller; this stops alias bombs ("billion laughs")
MAX_BYTES = 10 * 1024 * 1024  # a 2,048-host file is about 100 KB; reading 54 MB cost 1 GB and 14 s
MAX_DEPTH = 100  # a cluster file nests 4 or 5 levels; the recursive composer once used here crashed on deep files
# Aliases expanded can nest deeper than the text; every value's path is kept, so depth costs memory.
# The recursive reader this one replaced raised RecursionError before this depth, so nothing it read is refused.
MAX_EXPANDED_DEPTH = 1000
_STR = "tag:yaml.org,2002:str"
_MERGE = "tag:yaml.org,2002:merge"
_SCALAR_TAGS = {"tag:yaml.org,2002:" + t for t in ("str", "int", "float", "bool", "null", "timestamp")}
_resolve = yaml.resolver.Resolver().resolve  # the composer's implicit tags (int, bool, ...); no path resolvers
_Scalar, _Alias = yaml.ScalarEvent, yaml.AliasEvent
_MapStart, _MapEnd = yaml.MappingStartEvent, yaml.MappingEndEvent
_SeqStart, _SeqEnd = yaml.SequenceStartEvent, yaml.SequenceEndEvent
_KEY, _SKIP = object(), object()  # a mapping waits for a key; it skips the value of a refused key


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


def _too_deep(source: str, line: Optional[int]) -> ConfigProblem:
    """Nesting past MAX_DEPTH: found by the reader, or refused earlier by the parser itself (libyaml)."""
    return ConfigProblem(source, line, "(YAML)", f"more than {MAX_DEPTH} nested levels", "a cluster file's nesting")


def parse_yaml(text: str, source: str) -> YamlDocument:
    """Parse one YAML document, keeping line numbers. Raises ConfigError on bad YAML."""
    reader = _Reader(source)
    try:
        reader.read(_Loader(text))
    except yaml.MarkedYAMLError as exc:
        mark = exc.problem_mark or exc.context_mark
        line = mark.line + 1 if mark is not None else None
        problem = " ".join(str(p) for p in (exc.context, exc.problem) if p)
        if "maximum nesting depth" in problem:  # libyaml from PyYAML 6.0.4 stops deep nesting itself
            raise ConfigError([_too_deep(source, line)]) from None
        hint = ""
        if line is not None and "\t" in "".join(text.splitlines()[max(0, line - 2) : line]):
            hint = "YAML does not allow tabs for indentation: use spaces"
        raise ConfigError(
            [ConfigProblem(source, line, "(YAML syntax)", problem or "invalid YAML", "well-formed YAML", hint)]
        ) from None
    except yaml.YAMLError as exc:
        raise ConfigError([ConfigProblem(source, None, "(YAML)", str(exc), "well-formed YAML")]) from None
    if reader.problems:
        raise ConfigError(reader.problems)
    return YamlDocument(source, reader.value, reader.lines, reader.texts)


@dataclass(eq=False)  # compared by identity: the set of anchors being converted holds them
class _Anchor:
    """What an alias stands for: the anchored node's first event and tag, and for a collection
    the events after its start through its end, replayed at every alias (as the composer's shared
    node was converted again under each alias's path: lines recorded, every value counted)."""

    event: Any  # the ScalarEvent, or the MappingStartEvent / SequenceStartEvent
    tag: Optional[str]  # a scalar's resolved tag; a collection's explicit tag, if any
    events: Optional[List[Any]] = None  # None while the collection is still open


class _Frame:
    """A collection being filled: its path, and for a mapping the key waiting for its value."""

    __slots__ = ("path", "items", "is_map", "index", "key", "anchor")

    def __init__(self, path: YamlPath, items: Union[Dict[str, Any], List[Any]], anchor: Optional[_Anchor]) -> None:
        self.path = path
        self.items: Any = items
        self.is_map = isinstance(items, dict)
        self.index = 0
        self.key: Any = _KEY  # _KEY, _SKIP or the str key whose value comes next
        self.anchor = anchor


class _Reader:
    """Parser events -> plain values in one pass with explicit stacks (no recursion, so deep files
    cannot crash it), recording lines, texts and problems instead of raising."""

    def __init__(self, source: str) -> None:
        self.source = source
        self.value: Any = None
        self.lines: Dict[YamlPath, int] = {}
        self.texts: Dict[YamlPath, str] = {}
        self.problems: List[ConfigProblem] = []
        self._depth = 0  # of the parser's stream, aliases not expanded
        self._documents = 0
        self._anchors: Dict[str, _Anchor] = {}
        self._open: List[Tuple[int, _Anchor, int]] = []  # anchored collections still open: depth, anchor, start
        self._recorded: List[Any] = []  # the stream's events while an anchored collection is open
        self._frames: List[_Frame] = []
        self._replays: List[Iterator[Any]] = []  # the events of the aliases being expanded
        self._active: Set[_Anchor] = set()  # collections being converted: an alias to one is a cycle
        self._skip = 0  # nesting inside a collection that is not converted (a key, a refused entry)
        self._count = 0
        self._constructor = yaml.constructor.SafeConstructor()

    def read(self, loader: Any) -> None:
        """Consume the whole stream. As when a depth pass and the composer read it first: syntax
        errors and depth are checked to its end before a composer error (undefined alias, duplicate
        anchor, second document) is raised."""
        get_event, step = loader.get_event, self._step
        error = None
        try:
            while True:
                event = get_event()
                if event.__class__ is not _Scalar or event.anchor is not None or self._open:
                    if event.__class__ is yaml.StreamEndEvent:
                        break
                    error = self._track(event)
                    if error is not None:
                        break
                step(event)
                if self._replays:
                    self._replay()
            while error is not None and event.__class__ is not yaml.StreamEndEvent:
                event = get_event()
                self._check_depth(event)
        finally:
            loader.dispose()
        if error is not None:
            raise error

    def _check_depth(self, event: Any) -> None:
        """Refuse nesting deeper than MAX_DEPTH, as soon as the stream goes that deep."""
        if event.__class__ is _MapStart or event.__class__ is _SeqStart:
            self._depth += 1
            if self._depth > MAX_DEPTH:
                line = event.start_mark.line + 1 if event.start_mark is not None else None
                raise ConfigError([_too_deep(self.source, line)])
        elif event.__class__ is _MapEnd or event.__class__ is _SeqEnd:
            self._depth -= 1

    def _track(self, event: Any) -> Optional[yaml.MarkedYAMLError]:
        """What only the parser's own stream needs: depth, documents, anchors, and the events of
        anchored collections. Returns the error that stops composing (the composer raised it)."""
        cls = event.__class__
        self._check_depth(event)
        if cls is _Alias:
            if event.anchor not in self._anchors:
                found = f"found undefined alias {event.anchor!r}"
                return yaml.composer.ComposerError(None, None, found, event.start_mark)
        elif cls is yaml.DocumentStartEvent:
            self._documents += 1
            if self._documents > 1:
                single = "expected a single document in the stream"
                return yaml.composer.ComposerError(single, None, "but found another document", event.start_mark)
        elif (cls is _Scalar or cls is _MapStart or cls is _SeqStart) and event.anchor is not None:
            error = self._define(event)
            if error is not None:
                return error
        if self._open:
            self._recorded.append(event)
            # an end event: the depth is already its parent's, the collection it closes started one deeper
            if (cls is _MapEnd or cls is _SeqEnd) and self._open[-1][0] == self._depth + 1:
                _, anchor, start = self._open.pop()
                anchor.events = self._recorded[start + 1 :]
                if not self._open:
                    self._recorded = []
        return None

    def _define(self, event: Any) -> Optional[yaml.MarkedYAMLError]:
        """Remember an anchor (a collection's events are recorded until it closes)."""
        first = self._anchors.get(event.anchor)
        if first is not None:
            line = first.event.start_mark.line + 1
            found = f"found duplicate anchor {event.anchor!r} (first occurrence on line {line})"
            return yaml.composer.ComposerError(None, None, found, event.start_mark)
        is_scalar = event.__class__ is _Scalar
        anchor = self._anchors[event.anchor] = _Anchor(event, self._tag(event) if is_scalar else event.tag)
        if not is_scalar:
            self._open.append((self._depth, anchor, len(self._recorded)))
        return None

    def _replay(self) -> None:
        """Convert the events of the aliases met, innermost first (an alias inside one pushes its own)."""
        replays = self._replays
        while replays:
            event = next(replays[-1], None)
            if event is None:
                replays.pop()
            else:
                self._step(event)

    def _step(self, event: Any) -> None:
        """Convert one event of the stream or of an alias being expanded."""
        cls = event.__class__
        if self._skip:
            if cls is _MapStart or cls is _SeqStart:
                self._skip += 1
            elif cls is _MapEnd or cls is _SeqEnd:
                self._skip -= 1
        elif cls is _Scalar:
            tag = event.tag  # as _tag does, inline: most events are scalars
            if tag is None or tag == "!":
                tag = _resolve(yaml.ScalarNode, event.value, event.implicit)
            self._node(event, tag, None, False)
        elif cls is _MapStart or cls is _SeqStart:
            self._node(event, event.tag, None if event.anchor is None else self._anchors[event.anchor], False)
        elif cls is _MapEnd or cls is _SeqEnd:
            frame = self._frames.pop()
            if frame.anchor is not None:
                self._active.discard(frame.anchor)
        elif cls is _Alias:
            anchor = self._anchors[event.anchor]
            self._node(anchor.event, anchor.tag, anchor, True)

    @staticmethod
    def _tag(event: Any) -> str:
        """A scalar's tag, resolved as the composer resolves it."""
        tag = event.tag
        if tag is None or tag == "!":
            return _resolve(yaml.ScalarNode, event.value, event.implicit)
        return tag

    def _node(self, event: Any, tag: Optional[str], anchor: Optional[_Anchor], alias: bool) -> None:
        """Place one node (a scalar, a collection's start, or an alias) in its parent."""
        line = event.start_mark.line + 1  # an alias has its anchor's line, as the composer's shared node had
        frame = self._frames[-1] if self._frames else None
        if frame is None:
            path: YamlPath = ()
            self.lines.setdefault(path, line)
        elif not frame.is_map:
            path = frame.path + (frame.index,)
            frame.index += 1
            self.lines.setdefault(path, line)
        elif frame.key is _KEY or frame.key is _SKIP:
            is_scalar = event.__class__ is _Scalar
            text = event.value if is_scalar else None
            frame.key = self._key(frame, text, tag, line) if frame.key is _KEY else _KEY
            self._skip = 0 if is_scalar or alias else 1  # a collection that is not converted: skip its events
            return
        else:
            path = frame.path + (frame.key,)  # the entry's line is its key's, recorded by _key
            frame.key = _KEY
        self._count += 1
        if tag == _STR and event.__class__ is _Scalar and self._count <= MAX_NODES:  # the common case, inline
            value = event.value
            if "\0" in value:  # "a\0b": no process can be given it (exec fails)
                self._problem(line, render_path(path), "a NUL character", "text without NUL characters")
        else:
            value = self._convert(event, tag, anchor, alias, path, line)
        if frame is None:
            self.value = value
        elif frame.is_map:
            frame.items[path[-1]] = value
        else:
            frame.items.append(value)

    def _key(self, frame: _Frame, text: Optional[str], tag: Optional[str], line: int) -> object:
        """Check a mapping key (``text`` is None for a collection); returns it, or _SKIP if refused."""
        if tag == _MERGE:
            self._problem(
                line,
                render_path(frame.path + ("<<",)),
                "a YAML merge key",
                "plain keys",
                "merge keys are not supported: write the keys out",
            )
            return _SKIP
        if text is None or tag != _STR:
            found = "a collection as key" if text is None else f"key {text}"
            self._problem(
                line, render_path(frame.path) + " (key)", found, "string keys", "quote the key if it is meant as text"
            )
            return _SKIP
        path = frame.path + (text,)
        if text in frame.items:
            first = f"first set on line {self.lines[path]}"
            self._problem(line, render_path(path), f"a second {text!r}", "each key once", first)
            return _SKIP
        self.lines[path] = line
        return text

    def _convert(
        self, event: Any, tag: Optional[str], anchor: Optional[_Anchor], alias: bool, path: YamlPath, line: int
    ) -> Any:
        """The value of one node (a str scalar's is taken by _node); a collection's is filled by the
        events that follow."""
        is_scalar = event.__class__ is _Scalar
        if self._count > MAX_NODES:
            if self._count == MAX_NODES + 1:
                self._problem(
                    line,
                    render_path(path),
                    f"more than {MAX_NODES} values",
                    "a cluster-sized file",
                    "aliases expand to too many values",
                )
            self._skip = 0 if is_scalar or alias else 1
            return None
        if is_scalar:
            return self._scalar(event, tag, path, line)
        if anchor is not None and anchor in self._active:
            self._problem(line, render_path(path), "an alias that contains itself", "finite data")
            self._skip = 0 if alias else 1
            return None
        if len(self._frames) >= MAX_EXPANDED_DEPTH:
            found = f"more than {MAX_EXPANDED_DEPTH} nested levels once aliases are expanded"
            self._problem(line, render_path(path), found, "a cluster file's nesting")
            self._skip = 0 if alias else 1
            return None
        items: Union[Dict[str, Any], List[Any]] = {} if event.__class__ is _MapStart else []
        self._frames.append(_Frame(path, items, anchor))
        if anchor is not None:
            self._active.add(anchor)
        if alias:
            assert anchor is not None and anchor.events is not None  # an open anchor is active or skipped
            self._replays.append(iter(anchor.events))
        return items

    def _scalar(self, event: Any, tag: Optional[str], path: YamlPath, line: int) -> Any:
        if tag not in _SCALAR_TAGS:
            self._problem(line, render_path(path), f"the tag {tag!r}", "plain YAML values without tags")
            return None
        self.texts[path] = event.value
        # SafeConstructor turns the resolved implicit tags (int, float, bool, null, timestamp) into values.
        node = yaml.ScalarNode(tag, event.value, event.start_mark, event.end_mark, event.style)
        try:
            value = self._constructor.construct_object(node, deep=True)
        except Exception:  # ValueError, KeyError, ...: an explicit tag the text does not fit (!!int x)
            kind = (tag or "").rsplit(":", 1)[-1]
            self._problem(
                line,
                render_path(path),
                f"!!{kind} {event.value!r} (YAML cannot read it as {kind})",
                f"a value YAML reads as {kind}",
                "drop the tag, or quote the text",
            )
            return None
        if isinstance(value, float) and not math.isfinite(value):  # .nan / .inf: no setting means them
            self._problem(line, render_path(path), f"{event.value} (not a finite number)", "a finite number")
        return value

    def _problem(self, line: int, path: str, found: str, allowed: str, hint: str = "") -> None:
        self.problems.append(ConfigProblem(self.source, line, path, found, allowed, hint))


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
