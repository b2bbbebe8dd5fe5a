"""Session option values: check a YAML value against its catalog entry and render it as the value
CANN's parameter_map takes (bool for .b, int for .i, text for .s).

Structured options accept the natural YAML form (lists, mappings) or CANN's own text, and both
are checked against the documented grammar. Pure; knows nothing of other options (rules.py does).
"""

from __future__ import annotations

import json
import re
from typing import Any, Callable, Dict, List, Optional, Sequence, Union

from npulaunch.config.catalog import EnvVarSpec, OptionSpec, allowed_text, env_allowed_text
from npulaunch.config.checker import ValueProblem
from npulaunch.config.placeholders import check_templates
from npulaunch.host.lazyre import lazy_re

Rendered = Union[bool, int, str]
_NAME = lazy_re(r"^[A-Za-z_][A-Za-z0-9_./-]*$")


def _kind(value: Any) -> str:
    return {
        bool: "a boolean",
        int: "an integer",
        float: "a number",
        str: "a string",
        list: "a list",
        dict: "a mapping",
    }.get(type(value), type(value).__name__)


def _show(value: Any) -> str:
    if isinstance(value, (dict, list)):
        return _kind(value)
    text = json.dumps(value) if isinstance(value, bool) or value is None else repr(value)
    return f"{text} ({_kind(value)})"


def _int(value: Any, what: str, low: Optional[int] = None, high: Optional[int] = None) -> int:
    if isinstance(value, str) and re.fullmatch(r"-?\d+", value.strip()):
        value = int(value)
    if not isinstance(value, int) or isinstance(value, bool):
        raise ValueProblem(_show(value), what)
    if (low is not None and value < low) or (high is not None and value > high):
        raise ValueProblem(_show(value), what)
    return value


def _numeric_text(spec: OptionSpec) -> bool:
    """A .s option whose values are numbers written as text: YAML integers are accepted."""
    return bool(spec.choices and all(isinstance(c, str) and c.lstrip("-").isdigit() for c in spec.choices)) or (
        spec.type == "s" and spec.min is not None
    )


def check_option(spec: OptionSpec, value: Any) -> Rendered:
    """The CANN value for ``value``, or ValueProblem naming what was expected."""
    if spec.form:
        rendered: Rendered = FORM_CHECKERS[spec.form](spec, value)
    elif spec.type == "b":
        if not isinstance(value, bool):
            raise ValueProblem(
                _show(value),
                "a boolean (true or false)",
                "quoted words are strings: write true or false without quotes" if isinstance(value, str) else "",
            )
        rendered = value
    elif spec.type == "i":
        if not isinstance(value, int) or isinstance(value, bool):
            raise ValueProblem(_show(value), allowed_text(spec) if spec.choices else "an integer" + _range_text(spec))
        rendered = value
    else:
        if isinstance(value, int) and not isinstance(value, bool) and _numeric_text(spec):
            value = str(value)
        if not isinstance(value, str):
            raise ValueProblem(_show(value), "a string" + (f", {allowed_text(spec)}" if spec.choices else ""))
        rendered = value
    _check_domain(spec, rendered)
    return rendered


def _range_text(spec: OptionSpec) -> str:
    if spec.min is None and spec.max is None:
        return ""
    return f" from {spec.min if spec.min is not None else '-inf'} to {spec.max if spec.max is not None else 'inf'}"


def _check_domain(spec: OptionSpec, value: Rendered) -> None:
    if spec.choices and value not in spec.choices:
        close = [
            c for c in spec.choices if isinstance(c, str) and isinstance(value, str) and c.lower() == value.lower()
        ]
        raise ValueProblem(_show(value), allowed_text(spec), f"did you mean {close[0]!r}?" if close else "")
    number: Optional[float] = None
    if isinstance(value, int) and not isinstance(value, bool):
        number = value
    elif isinstance(value, str) and spec.type == "s" and re.fullmatch(r"-?\d+(\.\d+)?", value) and not spec.form:
        number = float(value)
    if number is not None and (
        (spec.min is not None and number < spec.min) or (spec.max is not None and number > spec.max)
    ):
        raise ValueProblem(_show(value), allowed_text(spec), spec.notes.split(".")[0] if "unit" in spec.notes else "")


# -- structured forms -------------------------------------------------------------------------


def _text_or(value: Any, parse: Callable[[str], Any]) -> Any:
    """Accept CANN's text form by parsing it into the YAML form first."""
    return parse(value) if isinstance(value, str) else value


def _path(spec: OptionSpec, value: Any) -> str:
    if not isinstance(value, str) or not value.strip():
        raise ValueProblem(_show(value), "a path")
    return check_templates(value) if spec.writes else value


def _json(spec: OptionSpec, value: Any) -> str:
    if isinstance(value, str):
        try:
            value = json.loads(value)
        except ValueError as exc:
            raise ValueProblem(_show(value), "a mapping, or a JSON object as text", f"not JSON: {exc}") from None
    if not isinstance(value, dict):
        raise ValueProblem(_show(value), "a mapping, or a JSON object as text")
    if isinstance(value.get("output"), str):
        check_templates(value["output"])
    return json.dumps(value, separators=(",", ":"))


def parse_dump_step(text: str) -> List[Union[int, str]]:
    return [int(part) if part.strip().isdigit() else part.strip() for part in text.split("|")]


def _dump_step(spec: OptionSpec, value: Any) -> str:
    steps = _text_or(value, parse_dump_step)
    allowed = 'steps and ranges: [0, "3-5", 10] or "0|3-5|10"'
    if not isinstance(steps, list) or not steps:
        raise ValueProblem(_show(value), allowed)
    parts = []
    for i, step in enumerate(steps):
        if isinstance(step, int) and not isinstance(step, bool) and step >= 0:
            parts.append(str(step))
            continue
        match = re.fullmatch(r"\s*(\d+)\s*-\s*(\d+)\s*", step) if isinstance(step, str) else None
        if not match or int(match.group(1)) > int(match.group(2)):
            raise ValueProblem(_show(step), allowed + " (ranges low-high, low <= high)", key=(i,))
        parts.append(f"{int(match.group(1))}-{int(match.group(2))}")
    return "|".join(parts)


def parse_input_shape(text: str) -> Dict[str, List[int]]:
    shapes: Dict[str, List[int]] = {}
    for item in text.split(";"):
        name, sep, dims = item.partition(":")
        if not sep:
            raise ValueProblem(repr(item), "name:dim,dim,... entries separated by ';'")
        shapes[name.strip()] = [_int(d, "integers >= -1 separated by ','", -1) for d in dims.split(",")]
    return shapes


def _input_shape(spec: OptionSpec, value: Any) -> str:
    shapes = _text_or(value, parse_input_shape)
    allowed = "a mapping of input name to a list of dimensions (-1 = dynamic, [0] = scalar)"
    if not isinstance(shapes, dict) or not shapes:
        raise ValueProblem(_show(value), allowed)
    parts = []
    for name, dims in shapes.items():
        if not isinstance(dims, list) or not dims:
            raise ValueProblem(_show(dims), allowed, key=(name,))
        ints = [_int(d, "integers >= -1", -1) for d in dims]
        parts.append(f"{name}:{','.join(str(d) for d in ints)}")
    return ";".join(parts)


def parse_dynamic_dims(text: str) -> List[List[int]]:
    return [[_int(d, "integers >= 1", 1) for d in profile.split(",")] for profile in text.split(";")]


def _dynamic_dims(spec: OptionSpec, value: Any) -> str:
    profiles = _text_or(value, parse_dynamic_dims)
    allowed = "a list of profiles, each a list of sizes for the -1 dimensions of input_shape"
    if not isinstance(profiles, list) or not profiles or not all(isinstance(p, list) and p for p in profiles):
        raise ValueProblem(_show(value), allowed)
    rendered = [[_int(d, "sizes >= 1", 1) for d in p] for p in profiles]
    if len({len(p) for p in rendered}) != 1:
        raise ValueProblem("profiles of different lengths", "every profile with one size per -1 of input_shape")
    return ";".join(",".join(str(d) for d in p) for p in rendered)


_DIM = r"-?\d+(?:~\d+)?"


def parse_shape_range(text: str) -> Dict[str, List[List[str]]]:
    result: Dict[str, List[List[str]]] = {}
    for item in text.split(";"):
        name, sep, rest = item.partition(":")
        shapes = re.findall(r"\[([^\]]*)\]", rest)
        if not sep or not shapes:
            raise ValueProblem(repr(item), "name:[dims],[dims] entries separated by ';'")
        result[name.strip()] = [[d.strip() for d in s.split(",") if d.strip()] for s in shapes]
    return result


def _shape_range(spec: OptionSpec, value: Any) -> str:
    ranges = _text_or(value, parse_shape_range)
    allowed = 'a mapping getnext/data -> list of shapes; a dimension is N, -1 or "low~high"'
    if not isinstance(ranges, dict) or not ranges:
        raise ValueProblem(_show(value), allowed)
    parts = []
    for name, shapes in ranges.items():
        if name not in ("getnext", "data"):
            raise ValueProblem(repr(name), "getnext (dataset inputs) or data (placeholders)", key=(name,))
        if not isinstance(shapes, list) or not all(isinstance(s, list) for s in shapes):
            raise ValueProblem(_show(shapes), allowed, key=(name,))
        rendered = []
        for shape in shapes:
            dims = []
            for dim in shape:
                text = str(dim).replace(" ", "")
                low_high = text.split("~")
                if not re.fullmatch(_DIM, text) or (len(low_high) == 2 and int(low_high[0]) > int(low_high[1])):
                    raise ValueProblem(_show(dim), allowed, key=(name,))
                dims.append(text)
            rendered.append("[" + ",".join(dims) + "]")
        parts.append(f"{name}:{','.join(rendered)}")
    return ";".join(parts)


def _int_list(spec: OptionSpec, value: Any) -> str:
    items = _text_or(value, lambda t: [p.strip() for p in t.split(",")])
    if not isinstance(items, list) or not items:
        raise ValueProblem(_show(value), 'a list of device ids, or "0,1"')
    ids = [_int(i, "device ids >= 0", 0) for i in items]
    if len(set(ids)) != len(ids):
        raise ValueProblem("a repeated id", "distinct device ids")
    return ",".join(str(i) for i in ids)


def _name_list(spec: OptionSpec, value: Any) -> str:
    names = _text_or(value, lambda t: [p.strip() for p in t.split(",")])
    if not isinstance(names, list) or not names or not all(isinstance(n, str) and _NAME.match(n) for n in names):
        raise ValueProblem(_show(value), 'a list of names, or "NameA,NameB"')
    return ",".join(names)


def _aicore_num(spec: OptionSpec, value: Any) -> str:
    allowed = '{cube: N, vector: M} or "N|M", both >= 1'
    if isinstance(value, str):
        value = value.split("|")
    if isinstance(value, dict):
        if set(value) != {"cube", "vector"}:
            raise ValueProblem(_show(value), allowed)
        value = [value["cube"], value["vector"]]
    if not isinstance(value, list) or len(value) != 2:
        raise ValueProblem(_show(value), allowed)
    return "|".join(str(_int(v, allowed, 1)) for v in value)


def _stream_parallel(spec: OptionSpec, value: Any) -> str:
    allowed = "a mapping of engine name to a parallelism >= 1, e.g. {DNN_VM_AICPU: 10, AIcoreEngine: 1}"
    if isinstance(value, str):
        pairs = [item.partition(":") for item in value.split(",")]
        if not all(sep for _, sep, _ in pairs):
            raise ValueProblem(_show(value), allowed)
        value = {name.strip(): count.strip() for name, _, count in pairs}
    if not isinstance(value, dict) or not value:
        raise ValueProblem(_show(value), allowed)
    return ",".join(f"{name}:{_int(count, allowed, 1)}" for name, count in value.items())


ACCELERATE_RATIO = {"step": (0.2, 0.9), "loss": (1.01, 1.5)}


def _accelerate(spec: OptionSpec, value: Any) -> str:
    allowed = '{type: fast|fast1, trigger: step|loss, ratio: R} or "fast|step|0.9" (step: R 0.2-0.9; loss: R 1.01-1.5)'
    if isinstance(value, str):
        fields = value.split("|")
        if len(fields) != 3:
            raise ValueProblem(_show(value), allowed)
        value = {"type": fields[0], "trigger": fields[1], "ratio": fields[2]}
    if not isinstance(value, dict) or set(value) != {"type", "trigger", "ratio"}:
        raise ValueProblem(_show(value), allowed)
    if value["type"] not in ("fast", "fast1") or value["trigger"] not in ACCELERATE_RATIO:
        raise ValueProblem(_show(value), allowed)
    try:
        ratio = float(value["ratio"])
    except (TypeError, ValueError):
        raise ValueProblem(_show(value["ratio"]), allowed, key=("ratio",)) from None
    low, high = ACCELERATE_RATIO[value["trigger"]]
    if not low <= ratio <= high:
        raise ValueProblem(_show(value["ratio"]), f"{low} to {high} for trigger {value['trigger']}", key=("ratio",))
    return f"{value['type']}|{value['trigger']}|{ratio:g}"


def _mapping_text(spec: OptionSpec, value: Any) -> str:
    if not isinstance(value, str):
        raise ValueProblem(_show(value), "text in CANN's format (see npulaunch options " + spec.name + ")")
    return value


FORM_CHECKERS: Dict[str, Callable[[OptionSpec, Any], Rendered]] = {
    "path": _path,
    "json": _json,
    "dump_step": _dump_step,
    "input_shape": _input_shape,
    "dynamic_dims": _dynamic_dims,
    "shape_range": _shape_range,
    "int_list": _int_list,
    "name_list": _name_list,
    "aicore_num": _aicore_num,
    "stream_parallel": _stream_parallel,
    "accelerate_train_mode": _accelerate,
    "mapping_text": _mapping_text,
}


def dynamic_count(input_shape: str) -> int:
    """How many -1 (dynamic) dimensions a rendered input_shape has."""
    return sum(dims.count(-1) for dims in parse_input_shape(input_shape).values())


def profiles(dynamic_dims: str) -> Sequence[List[int]]:
    return parse_dynamic_dims(dynamic_dims)


def check_env_value(spec: EnvVarSpec, value: str) -> None:
    """Raise ValueProblem when an environment value is outside its documented form or range."""
    shown = repr(value)
    if spec.kind == "int":
        try:
            _int(
                value,
                env_allowed_text(spec),
                None if spec.min is None else int(spec.min),
                None if spec.max is None else int(spec.max),
            )
        except ValueProblem as problem:
            raise ValueProblem(shown, problem.allowed) from None
    elif spec.choices and value not in spec.choices:
        raise ValueProblem(shown, env_allowed_text(spec))
    elif spec.kind == "json":
        try:
            parsed = json.loads(value)
        except ValueError as exc:
            raise ValueProblem(shown, "a JSON object (or a YAML mapping)", f"not JSON: {exc}") from None
        if not isinstance(parsed, dict):
            raise ValueProblem(shown, "a JSON object (or a YAML mapping)")
    elif spec.name.endswith("_IP") and not re.fullmatch(r"(\d{1,3})(\.\d{1,3}){3}", value):
        raise ValueProblem(shown, "an IPv4 address")
    elif not value.strip():
        raise ValueProblem(shown, env_allowed_text(spec))
