"""parse_yaml (one pass over the parser's events) against the three-pass reader it replaced (depth
check, compose, recursive conversion; kept below as the reference): the same value, lines, texts and
problems on every YAML file of the repository, a 2,048-host file, tricky snippets and random ones."""

from __future__ import annotations

import importlib.util
import math
import random
from pathlib import Path
from typing import Any, Dict, List, Set

import pytest
import yaml
from helpers import BROKEN_CONFIGS, ROOT, TESTS

from npulaunch.config import yamlsource
from npulaunch.config.yamlsource import MAX_DEPTH, MAX_EXPANDED_DEPTH, parse_yaml
from npulaunch.host.errors import ConfigError, ConfigProblem, YamlPath, render_path

# ---- the reference: yamlsource.py as it was before the one-pass reader (only the loader is a parameter)


def _reference_check_depth(text: str, source: str) -> None:
    depth = 0
    for event in yaml.parse(text, Loader=yaml.CSafeLoader):
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


def reference_parse(text: str, source: str, loader: Any = yaml.CSafeLoader) -> yamlsource.YamlDocument:
    try:
        _reference_check_depth(text, source)
        node = yaml.compose(text, Loader=loader)
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
    converter = _ReferenceConverter(source)
    value = None if node is None else converter.convert(node, ())
    if converter.problems:
        raise ConfigError(converter.problems)
    return yamlsource.YamlDocument(source, value, converter.lines, converter.texts)


class _ReferenceConverter:
    def __init__(self, source: str) -> None:
        self.source = source
        self.lines: Dict[YamlPath, int] = {}
        self.texts: Dict[YamlPath, str] = {}
        self.problems: List[ConfigProblem] = []
        self._active: Set[int] = set()
        self._count = 0

    def _problem(self, line: int, path: str, found: str, allowed: str, hint: str = "") -> None:
        self.problems.append(ConfigProblem(self.source, line, path, found, allowed, hint))

    def convert(self, node: yaml.Node, path: YamlPath) -> Any:
        line = node.start_mark.line + 1
        self.lines.setdefault(path, line)
        self._count += 1
        if self._count > yamlsource.MAX_NODES:  # read at run time: tests lower it
            if self._count == yamlsource.MAX_NODES + 1:
                self._problem(
                    line,
                    render_path(path),
                    f"more than {yamlsource.MAX_NODES} values",
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
        if node.tag not in yamlsource._SCALAR_TAGS:
            self._problem(
                node.start_mark.line + 1, render_path(path), f"the tag {node.tag!r}", "plain YAML values without tags"
            )
            return None
        if node.tag != "tag:yaml.org,2002:str":
            self.texts[path] = node.value
        value = yaml.constructor.SafeConstructor().construct_object(node, deep=True)
        line = node.start_mark.line + 1
        if isinstance(value, str) and "\0" in value:
            self._problem(line, render_path(path), "a NUL character", "text without NUL characters")
        elif isinstance(value, float) and not math.isfinite(value):
            self._problem(line, render_path(path), f"{node.value} (not a finite number)", "a finite number")
        return value


# ---- the comparison

# The C composer names no anchor in these two messages; the one-pass reader names it (line unchanged).
COMPOSER_MESSAGES = ("found undefined alias", "found duplicate anchor")


def outcome(parse: Any, text: str) -> Any:
    """Everything parse_yaml gives: repr keeps 1, 1.0 and True apart, and the order of keys."""
    try:
        doc = parse(text, "job.yaml")
    except ConfigError as exc:
        return ("refused", exc.problems)
    except Exception as exc:  # noqa: BLE001 - a crash must be the same crash
        return ("raised", type(exc).__name__, str(exc))
    return ("parsed", repr(doc.value), doc.value, doc.lines, doc.texts)


def assert_same(text: str) -> Any:
    old, new = outcome(reference_parse, text), outcome(parse_yaml, text)
    if old[0] == new[0] == "refused" and len(old[1]) == 1 and old[1][0].found.startswith(COMPOSER_MESSAGES):
        (was,), (now,) = old[1], new[1]
        prefix = next(message for message in COMPOSER_MESSAGES if was.found.startswith(message))
        assert now.found.startswith(prefix), (text, now)
        assert (now.line, now.path, now.allowed, now.hint) == (was.line, was.path, was.allowed, was.hint), text
        return new
    if old[0] == "raised":  # a tag the text does not fit (!!int x): a traceback before, a problem now
        assert new[0] == "refused" and any("YAML cannot read it as" in p.found for p in new[1]), (text, new)
        return new
    assert new == old, text
    return new


def yaml_files() -> List[Path]:
    folders = (ROOT / "cluster_configs", ROOT / "examples", BROKEN_CONFIGS, TESTS / "data")
    return sorted(p for folder in folders for p in folder.rglob("*") if p.suffix in (".yaml", ".yml"))


@pytest.mark.parametrize("path", yaml_files(), ids=lambda p: str(p.relative_to(ROOT)))
def test_every_yaml_file_of_the_repository(path: Path) -> None:
    text = path.read_text()
    # a broken config may be broken as YAML: one whose !!int tag its text does not fit (refused, once a traceback)
    assert assert_same(text)[0] == ("refused" if "YAML cannot read it" in text else "parsed")


def test_a_2048_host_file(tmp_path: Path) -> None:
    spec = importlib.util.spec_from_file_location("plan_scale", ROOT / "bench" / "plan_scale.py")
    assert spec is not None and spec.loader is not None
    plan_scale = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(plan_scale)
    text = plan_scale.write_config(tmp_path, 2048, 16).read_text()
    result = assert_same(text)
    assert result[0] == "parsed" and len(result[2]["hosts"]) == 2048
    assert assert_same(text.replace("devices: 16,", "devices: &d 16,", 1).replace("devices: 16,", "devices: *d,"))


DEEP = "".join("  " * i + f"k{i}:\n" for i in range(MAX_DEPTH)) + "  " * MAX_DEPTH + "1\n"
SNIPPETS = [
    # documents
    "",
    "# only a comment\n  # and another\n",
    "---\n",
    "--- \n...\n",
    "hello\n",
    "'quoted'\n",
    "- 1\n- [2, 3]\n",
    "a: 1\n---\nb: 2\n",
    "a: 1\n...\n---\n",
    "--- a\n--- b\n",
    "a: .nan\n---\nb\n",
    "a: *x\n---\nb\n",
    "a: 1\n---\nb: [\n",
    "a: 1\n---\nb: " + "[" * (MAX_DEPTH + 1) + "]" * (MAX_DEPTH + 1) + "\n",
    "%YAML 1.1\n---\na: 1\n",
    "%TAG !e! tag:example.com,2000:\n---\na: !e!x 1\n",
    # anchors and aliases
    "a: &x 1\nb: *x\nc: [*x]\n",
    "- &s 5\n- *s\n- [*s, {k: *s}]\n",
    "a: &x [1, 2]\nb: *x\nc: [*x, *x]\n",
    "a: &x {p: 1, q: [2, 3]}\nb: *x\nc:\n  - *x\n  - d: *x\n",
    "a: &o {i: &n [1, 2], j: *n}\nb: *o\nc: *n\n",
    "a: &a [1]\nb: &b [*a, *a]\nc: &c [*b, *b]\nd: [*c, *c]\n",
    "a: &e\nb: *e\n",
    "a: &t 1.5\nb: *t\nc: &q '0123'\nd: *q\n",
    "a: &f .nan\nb: *f\nc: &z !foo x\nd: *z\n",
    "a: &x [1, *x]\n",
    "a: &x\n  b: *x\n  c: [1, *x]\n",
    "&x {*x : 1}\n",
    "a: &x [1, &y [2, *y], *x, !foo t]\nb: *y\n",
    "k: {? &X [&Y [*X]] : v}\nb: *Y\n",
    "? &k [1, &j [2]]\n: v\nb: *k\nc: *j\n",
    "a: *nope\n",
    "a: [1, *nope]\nb: [\n",
    "a: *nope\nb: " + "[" * (MAX_DEPTH + 1) + "]" * (MAX_DEPTH + 1) + "\n",
    "a: &x 1\nb: &x 2\n",
    "a: &x [1, &x 2]\n",
    "a: &x {b: 1}\nc: &x [2]\n",
    "a: .nan\nb: &x 1\nc: &x 2\n",
    # merge keys
    "base: &b {x: 1}\nother:\n  <<: *b\n  y: 2\n",
    "a:\n  <<: {x: 1}\n  <<: [*u]\n",
    '"<<": 1\n',
    "a: <<\n",
    "a: &m <<\n*m : 3\n",
    "a: =\n",
    # scalars
    "i: 12\nb: true\nn: null\nt: ~\nf: 1.5\ne: 1e3\nts: 2001-12-14t21:59:43.10-05:00\nd: 2002-12-14\n"
    "oct: 0o17\nold_oct: 017\nhex: 0x1F\nsex: 1:20\nsexf: 1:20.5\nbin: 0b101\nplain: 0123\n"
    "single: '0123'\ndouble: \"0123\"\nyes: yes\non: on\nunder: 1_000\nneg: -0\nplus: +12\nemp:\n",
    "a: .nan\n",
    "a: .inf\nb: -.Inf\nc: [.NaN, .INF]\n",
    'a: "x\\0y"\n',
    'a: ["\\0", {b: "\\0"}]\n',
    '"k\\0": 1\n',
    "a: !!str 1\n",
    'a: !!int "3"\n',
    "a: !!float 1\nb: !!null ''\nc: !!bool true\nd: !!timestamp 2001-01-01\n",
    "a: ! 12\nb: ! [1]\n",
    "a: !foo x\n",
    "a: !!binary aGVsbG8=\n",
    "a: !!set {x, y}\n",
    "!!map {a: 1}\n",
    "a: !!seq [1]\nb: !!omap [x: 1]\nc: !!python/tuple [1]\n",
    "a: |\n  text\n  more\nb: >\n  folded\n  text\nc: 'multi\n  line'\n",
    "a:\n  multi\n  line plain\nb: 1\n",
    # flow and block collections
    "a: [1, [2, {b: 3}]]\nb:\n  - x\n  - - y\n    - z\n  - k: v\n    l: w\n",
    "a: [\n  1,\n  2,\n  {b: 3,\n   c: 4}\n]\nd: {\n  e: [5,\n    6]}\n",
    "a:\n  - b: 1\n    c: 2\n  -\n    d: 3\n  - - - deep\n",
    "- \n- ~\n- - \n",
    "a: {}\nb: []\nc: [{}]\n",
    "a: [b: 1, c]\n",
    # keys
    "1: a\n",
    "true: x\nnull: y\n~: z\n1.5: w\n'1': v\n",
    "? complex\n: value\n",
    "? [a, b]\n: c\nd: 1\n",
    "? {a: 1}\n: [.nan, !foo x]\n",
    "{[a]: 1, b: 2}\n",
    "? \n: x\n",
    "a: &k name\n*k : 3\n",
    "a: &k 1\n*k : 3\n",
    "a: &k [1]\n*k : 3\n",
    "!!merge [a]: 1\n",
    "!!str 1: a\n",
    # duplicate keys
    "a: 1\na: 2\n",
    "a: 1\nb: 2\na: 3\na: 4\n",
    "x:\n  a: 1\n  a: {b: 2}\n",
    "a: 1\na: [!foo x, .nan, *u]\n",
    "1: [.nan]\nb: 2\n",
    # tabs and syntax errors
    "a:\n\tb: 1\n",
    "a: 1\t\nb:\t2\n",
    "a: [1, 2\n",
    "a: b: c\n",
    "a: 'x\n",
    "- a\nb: 1\n",
    "key: @x\n",
    "a: *\n",
    "a: &\n",
    "a: \x01\n",
    "\ufeffa: 1\n",
    # depth
    DEEP,
    DEEP.replace("1\n", "[1]\n"),
    "a: " + "[" * MAX_DEPTH + "]" * MAX_DEPTH + "\n",
    "a: " + "[" * (MAX_DEPTH + 1) + "]" * (MAX_DEPTH + 1) + "\n",
    "a: " + "[" * (MAX_DEPTH + 1) + "\n",
    "a: " + "{b: " * MAX_DEPTH + "1" + "}" * MAX_DEPTH + "\n",
    "a: &d " + "[" * 60 + "]" * 60 + "\nb: " + "[" * 60 + "*d" + "]" * 60 + "\n",  # deep once expanded
    # what the constructor cannot read: the old reader raised (a traceback), this one refuses it
    "a: !!int x\n",
    "a: !!float x\n",
    "a: !!bool x\n",
    "a: !!timestamp x\n",
    "a: .nan\nb: [!!bool x, !!int y]\n",
    "a: &x [!!int x]\nb: [1, *x]\n",
    "a: !!int x\nb: [\n",
    "a: !!int x\nb: *nope\n",
    "a: !!int x\n---\nb\n",
    "a: !!int x\nb: " + "[" * (MAX_DEPTH + 1) + "]" * (MAX_DEPTH + 1) + "\n",
]


@pytest.mark.parametrize("text", SNIPPETS)
def test_snippets(text: str) -> None:
    assert_same(text)


@pytest.mark.parametrize(
    "text, line, found",
    [
        ("a: 1\nb: *nope\n", 2, "found undefined alias 'nope'"),
        ("a: &x 1\nb:\n  c: &x 2\n", 3, "found duplicate anchor 'x' (first occurrence on line 1)"),
        ("a: 1\n---\nb: 2\n", 2, "expected a single document in the stream but found another document"),
        ("a: &x [1, *x]\n", 1, "an alias that contains itself"),
        ("a: " + "[" * (MAX_DEPTH + 1) + "]" * (MAX_DEPTH + 1) + "\n", 1, f"more than {MAX_DEPTH} nested levels"),
    ],
)
def test_messages_of_the_composer_errors(text: str, line: int, found: str) -> None:
    with pytest.raises(ConfigError) as caught:
        parse_yaml(text, "job.yaml")
    (problem,) = caught.value.problems
    assert (problem.line, problem.found) == (line, found)


BOMB = "a: &a [x, y, z]\nb: &b [*a, *a, *a]\nc: &c [*b, *b, *b]\nd: [*c, *c, *c]\n"


@pytest.mark.parametrize(
    "text",
    [
        BOMB,
        BOMB + "e: 1\ne: [2, 3]\nf: !foo x\n1: k\ng: [&late [1, 2], *late]\nh: *late\n",
        "a: [1, 2, 3, 4, 5, 6, 7, 8, 9, 10]\nb: {c: [1, 2, 3, 4, 5, 6, 7, 8, 9, 10]}\nc: .nan\n",
        "a: &x [1, *x]\n" + "".join(f"k{i}: {i}\n" for i in range(30)),
    ],
)
def test_alias_bombs_stop_at_max_nodes(monkeypatch: pytest.MonkeyPatch, text: str) -> None:
    monkeypatch.setattr(yamlsource, "MAX_NODES", 20)
    assert assert_same(text)[0] == "refused"


def random_value(rng: random.Random, depth: int, anchors: List[str], clean: bool) -> str:
    """A flow value spread over lines: scalars of every kind, collections, anchors, aliases and,
    unless ``clean``, what is refused (bad keys and tags, .nan, NUL, duplicates, undefined aliases)."""
    roll = rng.random()
    if roll < 0.2 and anchors:
        return "*" + rng.choice(anchors)
    anchor = ""
    if rng.random() < 0.15:  # now and then, unless clean, a name used before: a duplicate anchor
        reused = anchors and not clean and rng.random() < 0.05
        anchor = f"&{rng.choice(anchors) if reused else f'a{rng.randrange(10**9)}'} "
    if roll < 0.55 or depth > 3:
        scalars = ["1", "0123", "'0123'", "x", "true", "~", "1.5", "0x1F", "1:20", "2001-12-14", "!!str 7", '!!int "8"']
        if not clean:
            scalars += [".nan", "!foo t", '"a\\0"', "<<", "="] + ["*nope"] * (rng.random() < 0.1)
        text = anchor + rng.choice(scalars)
    elif roll < 0.75:
        items = [random_value(rng, depth + 1, anchors, clean) for _ in range(rng.randrange(4))]
        text = anchor + "[" + ",\n ".join(items) + "]"
    else:
        keys = ["k", "j", "'q'", "i", '"1"']
        if not clean:
            keys += ["k", "1", "<<", "[1]", "~"] + [f"*a{i}" for i in range(len(anchors))[:2]]
        names = rng.sample(keys, rng.randrange(4)) if clean else [rng.choice(keys) for _ in range(rng.randrange(4))]
        entries = [f"{name}: {random_value(rng, depth + 1, anchors, clean)}" for name in names]
        text = anchor + "{" + ",\n  ".join(entries) + "}"
    if anchor:
        anchors.append(anchor[1:-1])
    return text


@pytest.mark.parametrize("clean", [True, False], ids=["clean", "refused"])
@pytest.mark.parametrize("seed", range(200))
def test_random_documents(seed: int, clean: bool) -> None:
    rng = random.Random(seed)
    anchors: List[str] = []
    keys = "abcde" if clean else rng.choices("abcde", k=5)
    text = "".join(f"{key}: {random_value(rng, 0, anchors, clean)}\n" for key in keys[: rng.randrange(1, 6)])
    assert assert_same(text)[0] == "parsed" or not clean


def test_a_long_chain_of_aliases() -> None:
    # 300 levels once expanded (the reference recurses two frames a level: 600 of Python's 1,000)
    text = "a0: &a0 {k: 1}\n" + "".join(f"a{i}: &a{i} {{k: *a{i - 1}}}\n" for i in range(1, 300))
    value = assert_same(text)[2]["a299"]
    for _ in range(300):
        assert isinstance(value, dict) and list(value) == ["k"]
        value = value["k"]
    assert value == 1


def test_aliases_nested_deeper_than_the_old_reader_could_go_are_refused() -> None:
    # The reference raised RecursionError; the one-pass reader has no recursion, and refuses such
    # depth (each value keeps its whole path). Anchors defined in a key are never converted, so
    # this chain costs one value per level.
    chain = ", ".join(f"&a{i} [*a{i - 1}]" for i in range(1, MAX_EXPANDED_DEPTH + 50))
    text = f"? [&a0 [1], {chain}]\n: v\nb: *a{MAX_EXPANDED_DEPTH + 49}\nc: 1\n"
    with pytest.raises(ConfigError) as caught:
        parse_yaml(text, "job.yaml")
    key, deep = caught.value.problems
    assert key.found == "a collection as key"
    assert (deep.line, deep.path) == (1, "b" + "[0]" * (MAX_EXPANDED_DEPTH - 1))  # the anchor's line
    assert deep.found == f"more than {MAX_EXPANDED_DEPTH} nested levels once aliases are expanded"
    with pytest.raises(RecursionError):
        reference_parse(text, "job.yaml")
