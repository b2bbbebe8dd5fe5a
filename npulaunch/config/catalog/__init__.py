"""The catalog: every TF Adapter session option and every environment variable npulaunch knows,
as data (a leaf: imports nothing of the project). Facts come from Huawei's CANN documents in
shared/seeds/; the descriptions are our own words. Checking values is values.py's job, rules
between options are rules.py's; this package only describes.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any, Dict, Optional, Tuple

TYPES = ("b", "i", "s")  # the parameter_map field: .b (bool), .i (int), .s (string)
SCENARIOS = ("training", "inference", "both")
STATUSES = ("stable", "experimental", "deprecated")

# Structured values: the YAML form npulaunch accepts and the CANN text it renders (values.py).
FORMS = (
    "",  # a plain value of the option's type, checked against choices / min-max
    "path",  # a directory or file path; with writes=True ranks write there (templated per rank)
    "json",  # a mapping rendered to a JSON string (profiling_options)
    "dump_step",  # steps and ranges: [0, "3-5", 10] -> "0|3-5|10"
    "input_shape",  # {name: [dims]} -> "name:d,d;name:d,d" (-1 marks a dynamic dimension)
    "dynamic_dims",  # [[d, d], [d, d]] -> "d,d;d,d" (one profile per list)
    "shape_range",  # {name: [[dims-or-ranges], ...]} -> "name:[1,2~3];name:[...]"
    "int_list",  # [0, 1, 2] -> "0,1,2"
    "name_list",  # [OpA, OpB] -> "OpA,OpB"
    "aicore_num",  # {aicore: N, vectorcore: M} or "N|M"
    "stream_parallel",  # {EngineName: N} -> "EngineName:N,EngineName:N"
    "accelerate_train_mode",  # {mode: fast, step: 2, loss_ratio: 0.9} -> "fast|2|0.9"
    "mapping_text",  # other structured text, passed through as written (see notes)
)


@dataclass(frozen=True)
class OptionSpec:
    """One ``custom_op.parameter_map[name]`` option of the NpuOptimizer."""

    name: str
    type: str  # one of TYPES
    area: str  # the seeds' section, snake_case: basic, memory, dynamic_shape, mixed_computing, debug,
    #            accuracy, dump, performance, profiling, aoe, operator_build, data_augmentation,
    #            exception_remedy, experimental, deprecated, ...
    scenario: str  # one of SCENARIOS
    description: str  # one line, our own words
    default: Any = None  # in the option's type; None = not set unless given
    default_note: str = ""  # where the default differs by scenario or product line
    choices: Tuple[Any, ...] = ()  # the closed set of allowed values, in the option's type
    min: Optional[float] = None  # inclusive bounds for numbers
    max: Optional[float] = None
    form: str = ""  # one of FORMS
    writes: bool = False  # a path the ranks write to: may use {job_id} {rank} {local_rank} {device_id} {host}
    status: str = "stable"  # one of STATUSES
    replacement: str = ""  # for deprecated options: what to use instead
    products: str = ""  # product lines it applies to, when restricted (e.g. "Atlas A2 training")
    notes: str = ""  # rules, units, product-specific ranges, in our words
    example: Any = None  # the documented example, in the YAML form npulaunch accepts

    def to_dict(self) -> Dict[str, Any]:
        return {
            "name": self.name,
            "type": self.type,
            "default": self.default,
            "default_note": self.default_note,
            "allowed": allowed_text(self),
            "choices": list(self.choices),
            "min": self.min,
            "max": self.max,
            "form": self.form,
            "writes": self.writes,
            "scenario": self.scenario,
            "area": self.area,
            "status": self.status,
            "replacement": self.replacement,
            "products": self.products,
            "description": self.description,
            "notes": self.notes,
            "example": self.example,
        }


@dataclass(frozen=True)
class EnvVarSpec:
    """One environment variable CANN reads (or npulaunch sets)."""

    name: str
    kind: str  # "int" | "str" | "path" | "json" | "enum"
    area: str  # logging, memory, profiling, dump, compile, cache, device, cluster, launcher, ...
    description: str  # one line, our own words
    default: Optional[str] = None
    choices: Tuple[str, ...] = ()
    min: Optional[int] = None
    max: Optional[int] = None
    unit: str = ""  # "s", "ms", "MB", "%"
    set_by_launcher: bool = False  # npulaunch sets it per rank (the YAML may not)
    notes: str = ""

    def to_dict(self) -> Dict[str, Any]:
        return {
            "name": self.name,
            "type": self.kind,
            "kind": self.kind,
            "default": self.default,
            "allowed": env_allowed_text(self),
            "choices": list(self.choices),
            "min": self.min,
            "max": self.max,
            "unit": self.unit,
            "area": self.area,
            "set_by_launcher": self.set_by_launcher,
            "description": self.description,
            "notes": self.notes,
            "scenario": "both",
            "status": "stable",
        }


UNIT_WORDS = {"s": "seconds", "ms": "milliseconds", "MB": "megabytes", "%": "percent"}


def _number(value: Optional[float]) -> str:
    return "" if value is None else (str(int(value)) if float(value).is_integer() else str(value))


def allowed_text(spec: OptionSpec) -> str:
    """What an option accepts, in words, for messages and listings."""
    if spec.choices:
        return "one of " + ", ".join(
            repr(c) if isinstance(c, str) else str(c).lower() if isinstance(c, bool) else str(c) for c in spec.choices
        )
    kind = {"b": "a boolean", "i": "an integer", "s": "a string"}[spec.type]
    if spec.min is not None and spec.max is not None:
        kind += f" from {_number(spec.min)} to {_number(spec.max)}"
    elif spec.min is not None:
        kind += f" of at least {_number(spec.min)}"
    elif spec.max is not None:
        kind += f" of at most {_number(spec.max)}"
    if spec.form:
        kind += f" ({spec.form.replace('_', ' ')})"
    return kind


def env_allowed_text(spec: EnvVarSpec) -> str:
    if spec.choices:
        return "one of " + ", ".join(spec.choices)
    if spec.kind == "int":
        unit = UNIT_WORDS.get(spec.unit, spec.unit)
        text = f"an integer number of {unit}" if unit else "an integer"
        if spec.min is not None and spec.max is not None:
            text += f" from {_number(spec.min)} to {_number(spec.max)}"
        elif spec.min is not None:
            text += f" of at least {_number(spec.min)}"
        return text
    return {"path": "a path", "json": "a JSON object", "str": "text", "enum": "text"}.get(spec.kind, "text")
