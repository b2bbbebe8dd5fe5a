"""Rules between session options, and between options and environment variables, from CANN's
documents (shared/seeds): each rule is a function of the checked values that returns findings.
The rules of config/productrules.py (product lines, scenarios, profiling, ignored settings) run
after these; ``check_rules`` runs them all.

Pure. Errors stop the launch; warnings are printed and kept in the plan. Every finding names the
options involved so the message can point at each of them in the YAML.
"""

from __future__ import annotations

from typing import List

from npulaunch.config.rulebase import (
    BY_NAME,
    DYNAMIC_TRIO,
    ERROR,
    RULES,
    WARNING,
    Finding,
    RuleContext,
    excludes,
    requires,
    rule,
)
from npulaunch.config.timeouts import ExecTimeout, exec_timeout, parse_version
from npulaunch.config.values import dynamic_count, profiles

__all__ = ["ERROR", "WARNING", "Finding", "RuleContext", "check_rules"]


def check_rules(ctx: RuleContext) -> List[Finding]:
    """Every finding of every rule, errors first."""
    found = [f for check in RULES for f in check(ctx)]
    return sorted(found, key=lambda f: f.level != ERROR)


def _exec_timeout(ctx: RuleContext) -> ExecTimeout:
    return exec_timeout(ctx.product, parse_version(ctx.cann_version) if ctx.cann_version else None)


@rule
def stream_sync_after_collectives(ctx: RuleContext) -> List[Finding]:
    """stream_sync_timeout (ms) must exceed the collective timeout (s) in cluster training: hccl_timeout,
    else HCCL_EXEC_TIMEOUT, else CANN's default for the product and version (config/timeouts.py)."""
    value = ctx.options.get("stream_sync_timeout")
    if value is None or value == -1 or ctx.world_size < 2:
        return []
    if "hccl_timeout" in ctx.options:
        other, seconds = "hccl_timeout", int(ctx.options["hccl_timeout"])
    elif str(ctx.effective_env.get("HCCL_EXEC_TIMEOUT", "")).isdigit():
        other, seconds = "env:HCCL_EXEC_TIMEOUT", int(ctx.effective_env["HCCL_EXEC_TIMEOUT"])
    else:
        other, seconds = "env:HCCL_EXEC_TIMEOUT", _exec_timeout(ctx).default_s  # CANN's default
    if seconds == 0 or value > seconds * 1000:
        return []
    hint = f"stream_sync_timeout is in milliseconds, {other.split(':')[-1]} in seconds"
    if other not in ctx.options and "HCCL_EXEC_TIMEOUT" not in ctx.effective_env:
        hint += f" (not set: CANN's default {seconds} s for {_exec_timeout(ctx).where})"
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
    """[67] hccl_timeout and HCCL_EXEC_TIMEOUT: the range of the product line and CANN version, and
    the 68-second steps of Atlas training products (config/timeouts.py has the table and sources)."""
    table = _exec_timeout(ctx)
    given = [("hccl_timeout", ctx.options.get("hccl_timeout"))]
    env = ctx.env.get("HCCL_EXEC_TIMEOUT")
    if isinstance(env, str) and env.isdigit():
        given.append(("env:HCCL_EXEC_TIMEOUT", int(env)))
    found = []
    for name, value in given:
        if value is None:
            continue
        shown = name.replace("env:", "")
        if not table.low <= value <= table.high:
            hint = ""
            if ctx.product is None:
                hint = "Atlas A2/A3 allow 0 (never) to 2147483647: name the product (product: atlas-a2 or atlas-a3)"
            found.append(Finding(ERROR, (name,), f"{shown} {value}", f"{table.allowed()} on {table.where}", hint))
        elif table.in_effect(value) != value:
            found.append(
                Finding(
                    WARNING,
                    (name,),
                    f"{shown} {value}",
                    f"a multiple of {table.step_s} seconds",
                    f"Atlas training products round it to {table.in_effect(value)} s",
                )
            )
    return found


@rule
def precision_modes(ctx: RuleContext) -> List[Finding]:
    return excludes(ctx, "precision_mode", "precision_mode_v2", "precision_mode_v2 replaces precision_mode")


@rule
def dumps(ctx: RuleContext) -> List[Finding]:
    found = excludes(ctx, "enable_dump", "enable_dump_debug", "data dump and overflow dump cannot run together")
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
        return requires(
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
    return found + requires(
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
        requires(ctx, "local_device_list", "local_rank_id", why="the main process is named by local_rank_id")
        + requires(ctx, "in_out_pair", "mix_compile_mode", True, "in_out_pair is a mixed-computing option")
        + requires(ctx, "in_out_pair_flag", "in_out_pair", why="the flag applies to in_out_pair's operators")
        + _single_iteration_when_mixed(ctx)
        + _loop_needs_getnext_offload(ctx)
    )


def _loop_needs_getnext_offload(ctx: RuleContext) -> List[Finding]:
    """A loop on the device (iterations_per_loop > 1) in sess.run mode needs the GetNext operator
    offloaded: "GetNext operator offload is a prerequisite for iteration offload" (hicann/tensorflow
    docs/en/tfadapter_1/apiref/npu_util/set_iteration_per_loop.md @ 82957b9). The session default is
    off (enable_dp = false, tf_adapter/util/npu_attrs.cc); NPURunConfig's is on (npu_config.py), so
    Estimator scripts have it without asking. The adapter does not check it: a warning."""
    loops = ctx.options.get("iterations_per_loop", 1)
    if loops > 1 and ctx.options.get("enable_data_pre_proc") is not True and ctx.training:
        return [
            Finding(
                WARNING,
                ("iterations_per_loop", "enable_data_pre_proc"),
                f"iterations_per_loop: {loops} without enable_data_pre_proc: true",
                "enable_data_pre_proc: true",
                "the device runs the loop only with GetNext offloaded (an Estimator's NPURunConfig turns it on "
                "by itself); the script also needs util.set_iteration_per_loop or session.set_iteration_per_loop",
            )
        ]
    return []


def _single_iteration_when_mixed(ctx: RuleContext) -> List[Finding]:
    """NPURunConfig refuses iterations_per_loop other than 1 with mix_compile_mode (TF Adapter
    npu_config.py @ 82957b9: '"iterations_per_loop" must be 1 with "mix_compile_mode" is True')."""
    loops = ctx.options.get("iterations_per_loop", 1)
    if ctx.options.get("mix_compile_mode") is True and loops != 1:
        return [
            Finding(
                ERROR,
                ("iterations_per_loop", "mix_compile_mode"),
                f"iterations_per_loop: {loops} with mix_compile_mode: true",
                "iterations_per_loop: 1",
                "mixed computing runs one iteration per sess.run()",
            )
        ]
    return []


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
        if spec.status == "deprecated" and not (name == "enable_data_pre_proc" and ctx.options.get(name) is True):
            # enable_data_pre_proc is logged as deprecated but is still the one switch for GetNext
            # offload in sess.run mode (npu_attrs.cc reads it): no warning for turning it on
            instead = f"use {spec.replacement}" if spec.replacement else "it will be removed"
            found.append(Finding(WARNING, (name,), f"{name} (deprecated)", "current options", instead))
    return found


# The second half of the rules registers itself after these (the order findings are listed in).
from npulaunch.config import productrules  # noqa: E402,F401
