"""Rules from the rest of CANN's documents (catalog/RULES.md numbers in brackets): options
restricted to product lines, mixed computing and profiles, settings CANN ignores in a scenario,
profiling contents, further exclusions. Registered after config/rules.py's. Pure.
"""

from __future__ import annotations

import json
from typing import Dict, List, Tuple

from npulaunch.config.checker import did_you_mean
from npulaunch.config.rulebase import BY_NAME, ERROR, Finding, RuleContext, excludes, rule, warn

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
            warn(
                ("dynamic_inputs_shape_range", "dynamic_dims"),
                "both",
                "one of them",
                "dynamic_dims takes precedence: the shape range is ignored",
            )
        )
    if ctx.has("dynamic_graph_execute_mode") and ctx.options.get("dynamic_input") is not True:
        found.append(
            warn(
                ("dynamic_graph_execute_mode", "dynamic_input"),
                "dynamic_graph_execute_mode without dynamic_input: true",
                "dynamic_input: true",
                "it has no effect otherwise",
            )
        )
    if ctx.has("shape_generalization_mode") and ctx.options.get("jit_compile", "auto") != "true":
        found.append(
            warn(
                ("shape_generalization_mode", "jit_compile"),
                'shape_generalization_mode without jit_compile: "true"',
                'jit_compile: "true"',
                "it applies to online compilation only",
            )
        )
    mixed = any(ctx.options.get(n) in modes for n, modes in MIXED_MODES.items())
    if ctx.has("modify_mixlist") and not mixed:
        found.append(
            warn(
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
            warn(
                ("customize_dtypes", "precision_mode"),
                "customize_dtypes with the original-dtype mode",
                "another precision mode",
                "customize_dtypes has no effect there",
            )
        )
    if ctx.has("profiling_options") and ctx.options.get("profiling_mode") is not True:
        found.append(
            warn(
                ("profiling_options", "profiling_mode"),
                "profiling_options without profiling_mode: true",
                "profiling_mode: true",
                "the options are read only when profiling is on",
            )
        )
    for option, variable in (("profiling_mode", "PROFILING_MODE"), ("aoe_mode", "AOE_MODE")):
        if ctx.has(option) and ctx.env.get(variable) is not None:
            found.append(
                warn(
                    (option, "env:" + variable),
                    f"both {option} and {variable}",
                    "one of them",
                    f"the session option {option} takes precedence",
                )
            )
    return found


# profiling_options' keys and the values each takes (001 and 004, Profiling / profiling_options; the
# catalog's notes): on/off switches, levelled switches, and frequencies in Hz with their ranges.
_ON_OFF = ("on", "off")
PROFILING_KEYS: Dict[str, Tuple[str, ...]] = {
    "output": (),
    "storage_limit": (),
    "training_trace": _ON_OFF,
    "task_trace": ("on", "off", "l0", "l1"),
    "task_time": ("on", "off", "l0", "l1"),
    "ge_api": ("off", "l0", "l1"),
    "hccl": _ON_OFF,
    "aicpu": _ON_OFF,
    "fp_point": (),
    "bp_point": (),
    "aic_metrics": (),
    "l2": _ON_OFF,
    "msproftx": _ON_OFF,
    "runtime_api": _ON_OFF,
    "llc_profiling": ("read", "write"),
    "instr_profiling": _ON_OFF,
    "host_sys": (),
    "host_sys_usage": (),
}
PROFILING_FREQUENCIES = {
    "sys_hardware_mem_freq": (1, 100),
    "sys_io_sampling_freq": (1, 100),
    "sys_interconnection_freq": (1, 50),
    "dvpp_freq": (1, 100),
    "instr_profiling_freq": (300, 30000),
    "host_sys_usage_freq": (1, 50),
}


def _profiling_keys(keys: Dict[str, object], training: bool) -> List[Finding]:
    """Unknown keys (a typo profiles nothing: a warning, as a newer CANN may know more keys) and
    values outside a known key's set (an error)."""
    found = []
    for key, value in keys.items():
        if key not in PROFILING_KEYS and key not in PROFILING_FREQUENCIES:
            hint = did_you_mean(key, list(PROFILING_KEYS) + list(PROFILING_FREQUENCIES))
            found.append(
                warn(("profiling_options",), f"key {key!r}", "the keys of `npulaunch options profiling_options`", hint)
            )
        elif PROFILING_KEYS.get(key) and value not in PROFILING_KEYS[key]:
            allowed = " or ".join(repr(v) for v in PROFILING_KEYS[key])
            found.append(Finding(ERROR, ("profiling_options",), f"{key}: {value!r}", f"{key}: {allowed}"))
        elif key in PROFILING_FREQUENCIES:
            low, high = PROFILING_FREQUENCIES[key]
            number = int(value) if isinstance(value, (int, str)) and str(value).isdigit() else None
            if number is None or not low <= number <= high:
                found.append(
                    Finding(ERROR, ("profiling_options",), f"{key}: {value!r}", f"{key}: {low} to {high} (Hz)")
                )
    if not training and keys.get("training_trace") == "on":
        found.append(
            warn(
                ("profiling_options", "graph_run_mode"),
                "training_trace: on with graph_run_mode: 0",
                "task_trace and aicpu in online inference",
                "the iteration trace is a training profile: online inference does not support it (001)",
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
    found = _profiling_keys(keys, ctx.training) if isinstance(keys, dict) else []
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
        off = [k for k in ("task_trace", "training_trace") if keys.get(k) not in ("on", "l0", "l1")]
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
def inference_only_values(ctx: RuleContext) -> List[Finding]:
    """[26] precision_mode force_fp16 is for online inference (001 Accuracy Tuning / precision_mode).
    The TF Adapter accepts it in training too (npu_attrs.cc's list, hicann/tensorflow @ 82957b9):
    a warning, not an error."""
    if ctx.training and ctx.options.get("precision_mode") == "force_fp16":
        return [
            warn(
                ("precision_mode", "graph_run_mode"),
                "precision_mode: force_fp16 in training",
                "a training mode (allow_fp32_to_fp16, allow_mix_precision, ...) or precision_mode_v2",
                "force_fp16 is documented for online inference only (graph_run_mode: 0)",
            )
        ]
    return []


@rule
def more_exclusions(ctx: RuleContext) -> List[Finding]:
    """[48, 64, 84] pairs that fail together."""
    found = excludes(
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
