"""Rules between session options, and between options and environment variables, from CANN's
documents (shared/seeds): each rule is a function of the checked values that returns findings.

Pure. Errors stop the launch; warnings are printed and kept in the plan. Every finding names the
options involved so the message can point at each of them in the YAML.
"""

from __future__ import annotations

import json
import os
from dataclasses import dataclass, field
from typing import Any, Callable, Dict, List, Mapping, Optional, Tuple

from npulaunch.config.catalog import OptionSpec
from npulaunch.config.catalog.options import OPTIONS
from npulaunch.config.values import dynamic_count, profiles

BY_NAME: Dict[str, OptionSpec] = {spec.name: spec for spec in OPTIONS}
ERROR, WARNING = "error", "warning"
HCCL_TIMEOUT_STEP_S = 68  # Atlas training series round hccl_timeout down to a multiple of this
HCCL_TIMEOUT_LEGACY_MAX_S = 17340
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


def check_rules(ctx: RuleContext) -> List[Finding]:
    """Every finding of every rule, errors first."""
    found = [f for check in RULES for f in check(ctx)]
    return sorted(found, key=lambda f: f.level != ERROR)


def _excludes(ctx: RuleContext, a: str, b: str, why: str) -> List[Finding]:
    if ctx.has(a) and ctx.has(b):
        return [Finding(ERROR, (a, b), f"both {a} and {b}", f"one of {a} and {b}", why)]
    return []


def _requires(ctx: RuleContext, name: str, needed: str, value: Any = None, why: str = "") -> List[Finding]:
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


@rule
def stream_sync_after_collectives(ctx: RuleContext) -> List[Finding]:
    """stream_sync_timeout (ms) must exceed the collective timeout (s) in cluster training."""
    value = ctx.options.get("stream_sync_timeout")
    if value is None or value == -1 or ctx.world_size < 2:
        return []
    if "hccl_timeout" in ctx.options:
        other, seconds = "hccl_timeout", int(ctx.options["hccl_timeout"])
    elif str(ctx.effective_env.get("HCCL_EXEC_TIMEOUT", "")).isdigit():
        other, seconds = "env:HCCL_EXEC_TIMEOUT", int(ctx.effective_env["HCCL_EXEC_TIMEOUT"])
    else:
        return []
    if seconds == 0 or value > seconds * 1000:
        return []
    hint = f"stream_sync_timeout is in milliseconds, {other.split(':')[-1]} in seconds"
    if value > seconds:  # bigger than the seconds value: it was probably meant as seconds
        hint += f"; {value} looks like seconds: {value * 1000} ms would be {value} s"
    return [
        Finding(
            ERROR,
            ("stream_sync_timeout", other),
            f"stream_sync_timeout {value} ms <= {seconds} s",
            f"more than {seconds * 1000} ms in a job of {ctx.world_size} ranks",
            hint,
        )
    ]


@rule
def hccl_timeout_by_product(ctx: RuleContext) -> List[Finding]:
    value = ctx.options.get("hccl_timeout")
    if value is None:
        return []
    legacy = ctx.product in (None, "atlas-training", "atlas-300i-duo")
    if legacy and not 0 < value <= HCCL_TIMEOUT_LEGACY_MAX_S:
        where = ctx.product or "every product (no product: in the YAML, so the safe range applies)"
        return [
            Finding(
                ERROR,
                ("hccl_timeout",),
                f"hccl_timeout {value}",
                f"1 to {HCCL_TIMEOUT_LEGACY_MAX_S} seconds on {where}",
                "Atlas A2/A3 allow 0 (never) to 2147483647: set product: atlas-a2 or atlas-a3",
            )
        ]
    if legacy and (value < HCCL_TIMEOUT_STEP_S or value % HCCL_TIMEOUT_STEP_S):
        actual = max(HCCL_TIMEOUT_STEP_S, value // HCCL_TIMEOUT_STEP_S * HCCL_TIMEOUT_STEP_S)
        return [
            Finding(
                WARNING,
                ("hccl_timeout",),
                f"hccl_timeout {value}",
                "a multiple of 68 seconds",
                f"Atlas training products round it to {actual} s",
            )
        ]
    return []


@rule
def precision_modes(ctx: RuleContext) -> List[Finding]:
    return _excludes(ctx, "precision_mode", "precision_mode_v2", "precision_mode_v2 replaces precision_mode")


@rule
def dumps(ctx: RuleContext) -> List[Finding]:
    found = _excludes(ctx, "enable_dump", "enable_dump_debug", "data dump and overflow dump cannot run together")
    for name in ("enable_dump", "enable_dump_debug"):
        if ctx.options.get(name) is True and not ctx.has("dump_path"):
            found.append(
                Finding(
                    ERROR,
                    (name, "dump_path"),
                    f"{name}: true without dump_path",
                    "dump_path set",
                    "the dump needs a directory (use {rank} to keep ranks apart)",
                )
            )
    return found


@rule
def variable_on_host(ctx: RuleContext) -> List[Finding]:
    if ctx.options.get("variable_placement") == "Host":
        return _requires(
            ctx, "variable_placement", "mix_compile_mode", True, "variables on the host need mixed computing"
        )
    return []


@rule
def dynamic_dimensions(ctx: RuleContext) -> List[Finding]:
    given = [n for n in DYNAMIC_TRIO if ctx.has(n)]
    if not given:
        return []
    if len(given) != len(DYNAMIC_TRIO):
        missing = [n for n in DYNAMIC_TRIO if n not in given]
        return [
            Finding(
                ERROR,
                tuple(given) + tuple(missing),
                "only " + ", ".join(given),
                "input_shape, dynamic_dims and dynamic_node_type together",
            )
        ]
    count, shapes = dynamic_count(ctx.options["input_shape"]), profiles(ctx.options["dynamic_dims"])
    found = []
    if len(shapes[0]) != count:
        found.append(
            Finding(
                ERROR,
                ("dynamic_dims", "input_shape"),
                f"profiles of {len(shapes[0])} sizes",
                f"{count} sizes per profile, one per -1 in input_shape",
            )
        )
    if not 2 <= len(shapes) <= 100:
        found.append(Finding(ERROR, ("dynamic_dims",), f"{len(shapes)} profile(s)", "2 to 100 profiles"))
    return found


@rule
def dynamic_modes(ctx: RuleContext) -> List[Finding]:
    found = []
    trio = [n for n in DYNAMIC_TRIO if ctx.has(n)]
    if ctx.options.get("compile_dynamic_mode") is True and trio:
        found.append(
            Finding(
                ERROR,
                ("compile_dynamic_mode", trio[0]),
                "compile_dynamic_mode with " + ", ".join(trio),
                "compile_dynamic_mode without the dynamic-dimension options",
            )
        )
    if ctx.options.get("compile_hybrid_mode") == 1 and (
        len(trio) != len(DYNAMIC_TRIO) or ctx.options.get("dynamic_node_type") != 1
    ):
        found.append(
            Finding(
                ERROR,
                ("compile_hybrid_mode", "dynamic_node_type"),
                "compile_hybrid_mode: 1 without input_shape, dynamic_dims and dynamic_node_type: 1",
                "input_shape, dynamic_dims and dynamic_node_type: 1 (placeholder inputs)",
            )
        )
    return found


@rule
def operator_precision(ctx: RuleContext) -> List[Finding]:
    found = []
    if ctx.has("op_precision_mode"):
        for name in ("op_select_implmode", "optypelist_for_implmode"):
            if ctx.has(name):
                found.append(
                    Finding(
                        WARNING,
                        (name, "op_precision_mode"),
                        f"{name} with op_precision_mode",
                        "one of them",
                        f"op_precision_mode takes precedence: {name} is ignored",
                    )
                )
    return found + _requires(
        ctx, "optypelist_for_implmode", "op_select_implmode", why="the listed operators get op_select_implmode's mode"
    )


@rule
def static_memory(ctx: RuleContext) -> List[Finding]:
    found = []
    if ctx.has("static_memory_policy") and ctx.env.get("GE_USE_STATIC_MEMORY") is not None:
        found.append(
            Finding(
                ERROR,
                ("static_memory_policy", "env:GE_USE_STATIC_MEMORY"),
                "both static_memory_policy and GE_USE_STATIC_MEMORY",
                "one of them",
                "static_memory_policy replaces the GE_USE_STATIC_MEMORY variable",
            )
        )
    if ctx.options.get("static_memory_policy") in (2, 4) and ctx.options.get("graph_max_parallel_model_num", 1) > 1:
        found.append(
            Finding(
                ERROR,
                ("static_memory_policy", "graph_max_parallel_model_num"),
                f"static_memory_policy {ctx.options['static_memory_policy']} with "
                f"graph_max_parallel_model_num {ctx.options['graph_max_parallel_model_num']}",
                "static_memory_policy 0 or 3 when graphs run in parallel",
            )
        )
    return found


@rule
def companions(ctx: RuleContext) -> List[Finding]:
    return (
        _requires(ctx, "local_device_list", "local_rank_id", why="the main process is named by local_rank_id")
        + _requires(ctx, "in_out_pair", "mix_compile_mode", True, "in_out_pair is a mixed-computing option")
        + _requires(ctx, "in_out_pair_flag", "in_out_pair", why="the flag applies to in_out_pair's operators")
    )


@rule
def accelerate_needs_precision(ctx: RuleContext) -> List[Finding]:
    if not ctx.has("experimental_accelerate_train_mode"):
        return []
    checks = (("precision_mode", ("allow_fp32_to_fp16", "must_keep_origin_dtype")), ("precision_mode_v2", ("origin",)))
    for name, allowed in checks:
        if ctx.has(name) and ctx.options[name] not in allowed:
            return [
                Finding(
                    ERROR,
                    ("experimental_accelerate_train_mode", name),
                    f"{name}: {ctx.options[name]}",
                    f"{name} unset or one of " + ", ".join(allowed),
                )
            ]
    return []


@rule
def op_debug_oom(ctx: RuleContext) -> List[Finding]:
    path = ctx.options.get("op_debug_config")
    if not path:
        return []
    text = ctx.file_reader(path)
    if text is None:
        return [
            Finding(
                WARNING,
                ("op_debug_config",),
                f"{path} (not readable here)",
                "a readable .cfg file",
                "its oom/ccec_O0/NPU_COLLECT_PATH conflicts could not be checked",
            )
        ]
    flags = set()
    for line in text.splitlines():
        key, _, value = line.partition("=")
        if key.strip() == "op_debug_config":
            flags = {v.strip() for v in value.split(",")}
    found = []
    if {"oom", "ccec_O0"} <= flags:
        found.append(
            Finding(
                ERROR,
                ("op_debug_config",),
                f"{path}: oom with ccec_O0",
                "oom or ccec_O0",
                "both together end in an AI Core error",
            )
        )
    if "oom" in flags and ctx.env.get("NPU_COLLECT_PATH"):
        found.append(
            Finding(
                ERROR,
                ("op_debug_config", "env:NPU_COLLECT_PATH"),
                f"{path}: oom with NPU_COLLECT_PATH set",
                "oom or NPU_COLLECT_PATH",
                "the memory check cannot run while fault collection is on",
            )
        )
    return found


@rule
def scenario_and_status(ctx: RuleContext) -> List[Finding]:
    found = []
    for name in ctx.options:
        spec = BY_NAME.get(name)
        if spec is None:
            continue
        if spec.scenario == "training" and not ctx.training:
            found.append(
                Finding(
                    WARNING,
                    (name, "graph_run_mode"),
                    f"{name} with graph_run_mode: 0",
                    "training options in training",
                    f"{name} applies to training only",
                )
            )
        if spec.scenario == "inference" and ctx.training and name != "graph_run_mode":
            found.append(
                Finding(
                    WARNING,
                    (name,),
                    f"{name} in a training job",
                    "online-inference options with graph_run_mode: 0",
                    f"{name} applies to online inference only",
                )
            )
        if spec.status == "deprecated":
            instead = f"use {spec.replacement}" if spec.replacement else "it will be removed"
            found.append(Finding(WARNING, (name,), f"{name} (deprecated)", "current options", instead))
    return found


# -- rules from the rest of the documents (catalog/RULES.md numbers in brackets) -------------------

PRODUCT_WORDS = {
    "atlas-a2": "A2",
    "atlas-a3": "A3",
    "atlas-training": "Atlas training",
    "atlas-inference": "Atlas inference",
    "atlas-300i-duo": "300I Duo",
}
BF16_MODES = {
    "precision_mode": ("allow_mix_precision_bf16", "allow_fp32_to_bf16"),
    "precision_mode_v2": ("mixed_bfloat16",),
}
MIXED_MODES = {
    "precision_mode": ("allow_mix_precision", "allow_mix_precision_fp16", "allow_mix_precision_bf16"),
    "precision_mode_v2": ("mixed_float16", "mixed_bfloat16"),
}
PROFILING_EXCLUSIVE = (
    "training_trace",
    "task_trace",
    "hccl",
    "aicpu",
    "fp_point",
    "bp_point",
    "aic_metrics",
    "l2",
    "task_time",
    "runtime_api",
)


def _warn(names: Tuple[str, ...], found: str, allowed: str, hint: str) -> Finding:
    return Finding(WARNING, names, found, allowed, hint)


@rule
def product_lines(ctx: RuleContext) -> List[Finding]:
    """[27, 44, 80, 92] options restricted to some product lines."""
    if ctx.product is None:
        return []
    word, found = PRODUCT_WORDS[ctx.product], []
    for name in ctx.options:
        spec = BY_NAME.get(name)
        if spec is not None and spec.products and word not in spec.products:
            found.append(Finding(ERROR, (name,), f"{name} on {ctx.product}", f"products: {spec.products}"))
    for name, modes in BF16_MODES.items():
        if ctx.options.get(name) in modes and ctx.product not in ("atlas-a2", "atlas-a3"):
            found.append(
                Finding(
                    ERROR,
                    (name,),
                    f"{name}: {ctx.options[name]} on {ctx.product}",
                    "bfloat16 modes on atlas-a2 or atlas-a3 only",
                )
            )
    if ctx.product == "atlas-a2" and ctx.options.get("dump_debug_mode", "all") != "all":
        found.append(
            Finding(
                ERROR,
                ("dump_debug_mode",),
                f"dump_debug_mode: {ctx.options['dump_debug_mode']}",
                "all (the only mode Atlas A2 products accept)",
            )
        )
    if ctx.product in ("atlas-a2", "atlas-a3") and ctx.options.get("aoe_mode") == "1":
        found.append(Finding(ERROR, ("aoe_mode",), "aoe_mode: 1 (subgraph tuning)", "aoe_mode 2 or 4 on A2/A3"))
    return found


@rule
def mixed_computing_and_profiles(ctx: RuleContext) -> List[Finding]:
    """[9] whole-graph dimension profiles cannot be combined with mixed computing."""
    if ctx.options.get("mix_compile_mode") is True and ctx.has("input_shape"):
        return [
            Finding(
                ERROR,
                ("input_shape", "mix_compile_mode"),
                "input_shape with mix_compile_mode: true",
                "dynamic dimension profiles without mixed computing",
            )
        ]
    return []


@rule
def ignored_settings(ctx: RuleContext) -> List[Finding]:
    """[12, 13, 15, 28, 29, 68, 69, 79] settings that are accepted but have no effect."""
    found = []
    if ctx.has("dynamic_inputs_shape_range") and ctx.has("dynamic_dims"):
        found.append(
            _warn(
                ("dynamic_inputs_shape_range", "dynamic_dims"),
                "both",
                "one of them",
                "dynamic_dims takes precedence: the shape range is ignored",
            )
        )
    if ctx.has("dynamic_graph_execute_mode") and ctx.options.get("dynamic_input") is not True:
        found.append(
            _warn(
                ("dynamic_graph_execute_mode", "dynamic_input"),
                "dynamic_graph_execute_mode without dynamic_input: true",
                "dynamic_input: true",
                "it has no effect otherwise",
            )
        )
    if ctx.has("shape_generalization_mode") and ctx.options.get("jit_compile", "auto") != "true":
        found.append(
            _warn(
                ("shape_generalization_mode", "jit_compile"),
                'shape_generalization_mode without jit_compile: "true"',
                'jit_compile: "true"',
                "it applies to online compilation only",
            )
        )
    mixed = any(ctx.options.get(n) in modes for n, modes in MIXED_MODES.items())
    if ctx.has("modify_mixlist") and not mixed:
        found.append(
            _warn(
                ("modify_mixlist", "precision_mode"),
                "modify_mixlist without a mixed-precision mode",
                "precision_mode(_v2) set to a mixed mode",
                "the mix list is read only in mixed precision",
            )
        )
    if ctx.has("customize_dtypes") and (
        ctx.options.get("precision_mode") == "must_keep_origin_dtype"
        or ctx.options.get("precision_mode_v2") == "origin"
    ):
        found.append(
            _warn(
                ("customize_dtypes", "precision_mode"),
                "customize_dtypes with the original-dtype mode",
                "another precision mode",
                "customize_dtypes has no effect there",
            )
        )
    if ctx.has("profiling_options") and ctx.options.get("profiling_mode") is not True:
        found.append(
            _warn(
                ("profiling_options", "profiling_mode"),
                "profiling_options without profiling_mode: true",
                "profiling_mode: true",
                "the options are read only when profiling is on",
            )
        )
    for option, variable in (("profiling_mode", "PROFILING_MODE"), ("aoe_mode", "AOE_MODE")):
        if ctx.has(option) and ctx.env.get(variable) is not None:
            found.append(
                _warn(
                    (option, "env:" + variable),
                    f"both {option} and {variable}",
                    "one of them",
                    f"the session option {option} takes precedence",
                )
            )
    return found


@rule
def profiling_contents(ctx: RuleContext) -> List[Finding]:
    """[71, 72] what profiling a training job needs, and keys that exclude each other."""
    text = ctx.options.get("profiling_options")
    if not isinstance(text, str):
        return []
    keys = json.loads(text)
    found = []
    if "instr_profiling_freq" in keys:
        clash = [k for k in PROFILING_EXCLUSIVE if k in keys]
        if clash:
            found.append(
                Finding(
                    ERROR,
                    ("profiling_options",),
                    "instr_profiling_freq with " + ", ".join(clash),
                    "instr_profiling_freq alone",
                )
            )
    elif ctx.training and ctx.options.get("profiling_mode") is True:
        off = [k for k in ("task_trace", "training_trace") if keys.get(k) != "on"]
        if off:
            found.append(
                Finding(
                    ERROR,
                    ("profiling_options",),
                    "training profiling without " + ", ".join(off) + ": on",
                    'task_trace and training_trace both "on" when profiling training',
                )
            )
    return found


@rule
def more_exclusions(ctx: RuleContext) -> List[Finding]:
    """[48, 64, 84] pairs that fail together."""
    found = _excludes(
        ctx, "enable_compress_weight", "compress_weight_conf", "weight compression is switched on one way or the other"
    )
    if ctx.options.get("auto_multistream_parallel_mode") == "cv" and ctx.env.get("ENABLE_DYNAMIC_SHAPE_MULTI_STREAM"):
        found.append(
            Finding(
                ERROR,
                ("auto_multistream_parallel_mode", "env:ENABLE_DYNAMIC_SHAPE_MULTI_STREAM"),
                "auto_multistream_parallel_mode: cv with ENABLE_DYNAMIC_SHAPE_MULTI_STREAM",
                "one kind of multi-stream concurrency",
            )
        )
    if ctx.options.get("op_debug_level") == 2 and ctx.has("op_debug_config"):
        text = ctx.file_reader(ctx.options["op_debug_config"]) or ""
        if "oom" in text:
            found.append(
                Finding(
                    ERROR,
                    ("op_debug_level", "op_debug_config"),
                    "op_debug_level: 2 with oom",
                    "one of them",
                    "both together end in an AI Core error",
                )
            )
    return found
