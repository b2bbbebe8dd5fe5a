"""Every rule between options (and options and environment variables) has a violating and a
passing case; findings name both sides."""

from __future__ import annotations

from typing import Any, Dict, Optional

import pytest

from npulaunch.config.rules import ERROR, WARNING, RuleContext, check_rules


def findings(
    options: Dict[str, Any],
    env: Optional[Dict[str, Optional[str]]] = None,
    world_size: int = 8,
    product: Optional[str] = None,
    files: Optional[Dict[str, str]] = None,
):
    env = env or {}
    effective = {"HCCL_EXEC_TIMEOUT": "1800"}
    effective.update({k: v for k, v in env.items() if v is not None})
    ctx = RuleContext(
        options=options,
        env=env,
        effective_env=effective,
        world_size=world_size,
        product=product,
        file_reader=lambda path: (files or {}).get(path),
    )
    return check_rules(ctx)


def levels(found) -> Dict[str, set]:
    out: Dict[str, set] = {}
    for f in found:
        out.setdefault(f.level, set()).update(f.names)
    return out


SHAPE = {"input_shape": "data:1,-1;label:-1", "dynamic_node_type": 1}

CASES = [
    # (id, violating options/env, passing options/env, names the error must carry)
    (
        "one-iteration-per-loop-when-mixed",
        dict(options={"mix_compile_mode": True, "iterations_per_loop": 10}),
        dict(options={"mix_compile_mode": True, "iterations_per_loop": 1}),
        {"iterations_per_loop", "mix_compile_mode"},
    ),
    (
        "stream-sync-vs-hccl-timeout",
        dict(options={"stream_sync_timeout": 600000, "hccl_timeout": 1800}),
        dict(options={"stream_sync_timeout": 1900000, "hccl_timeout": 1800}),
        {"stream_sync_timeout", "hccl_timeout"},
    ),
    (
        "stream-sync-vs-env",
        dict(options={"stream_sync_timeout": 60000}, env={"HCCL_EXEC_TIMEOUT": "120"}),
        dict(options={"stream_sync_timeout": 130000}, env={"HCCL_EXEC_TIMEOUT": "120"}),
        {"stream_sync_timeout", "env:HCCL_EXEC_TIMEOUT"},
    ),
    (
        "precision-modes",
        dict(options={"precision_mode": "allow_mix_precision", "precision_mode_v2": "mixed_float16"}),
        dict(options={"precision_mode_v2": "mixed_float16"}),
        {"precision_mode", "precision_mode_v2"},
    ),
    (
        "dump-excludes-debug",
        dict(options={"enable_dump": True, "enable_dump_debug": True, "dump_path": "/d"}),
        dict(options={"enable_dump": True, "dump_path": "/d"}),
        {"enable_dump", "enable_dump_debug"},
    ),
    (
        "dump-needs-path",
        dict(options={"enable_dump": True}),
        dict(options={"enable_dump": True, "dump_path": "/d"}),
        {"enable_dump", "dump_path"},
    ),
    (
        "dump-debug-needs-path",
        dict(options={"enable_dump_debug": True}),
        dict(options={"enable_dump_debug": True, "dump_path": "/d"}),
        {"enable_dump_debug", "dump_path"},
    ),
    (
        "host-variables-need-mixed",
        dict(options={"variable_placement": "Host"}),
        dict(options={"variable_placement": "Host", "mix_compile_mode": True}),
        {"variable_placement", "mix_compile_mode"},
    ),
    (
        "dynamic-trio",
        dict(options={"input_shape": "data:1,-1"}),
        dict(options={**SHAPE, "dynamic_dims": "1,2;3,4"}),
        {"input_shape", "dynamic_dims", "dynamic_node_type"},
    ),
    (
        "dynamic-count",
        dict(options={**SHAPE, "dynamic_dims": "1,2,3;4,5,6"}),
        dict(options={**SHAPE, "dynamic_dims": "1,2;3,4"}),
        {"dynamic_dims", "input_shape"},
    ),
    (
        "dynamic-profiles",
        dict(options={**SHAPE, "dynamic_dims": "1,2"}),
        dict(options={**SHAPE, "dynamic_dims": "1,2;3,4"}),
        {"dynamic_dims"},
    ),
    (
        "compile-dynamic-excludes-trio",
        dict(options={**SHAPE, "dynamic_dims": "1,2;3,4", "compile_dynamic_mode": True}),
        dict(options={"compile_dynamic_mode": True}),
        {"compile_dynamic_mode", "input_shape"},
    ),
    (
        "hybrid-needs-trio",
        dict(options={"compile_hybrid_mode": 1, **SHAPE, "dynamic_dims": "1,2;3,4", "dynamic_node_type": 0}),
        dict(options={"compile_hybrid_mode": 1, **SHAPE, "dynamic_dims": "1,2;3,4"}),
        {"compile_hybrid_mode", "dynamic_node_type"},
    ),
    (
        "optypelist-needs-implmode",
        dict(options={"optypelist_for_implmode": "Pooling"}),
        dict(options={"optypelist_for_implmode": "Pooling", "op_select_implmode": "high_precision"}),
        {"optypelist_for_implmode", "op_select_implmode"},
    ),
    (
        "static-memory-vs-env",
        dict(options={"static_memory_policy": 2}, env={"GE_USE_STATIC_MEMORY": "1"}),
        dict(options={"static_memory_policy": 2}),
        {"static_memory_policy", "env:GE_USE_STATIC_MEMORY"},
    ),
    (
        "static-memory-parallel-graphs",
        dict(options={"static_memory_policy": 4, "graph_max_parallel_model_num": 2}),
        dict(options={"static_memory_policy": 3, "graph_max_parallel_model_num": 2}),
        {"static_memory_policy", "graph_max_parallel_model_num"},
    ),
    (
        "local-device-list-needs-rank",
        dict(options={"local_device_list": "0,1"}),
        dict(options={"local_device_list": "0,1", "local_rank_id": 0}),
        {"local_device_list", "local_rank_id"},
    ),
    (
        "in-out-pair-needs-mixed",
        dict(options={"in_out_pair": "[[['a'], ['b']]]"}),
        dict(options={"in_out_pair": "[[['a'], ['b']]]", "mix_compile_mode": True}),
        {"in_out_pair", "mix_compile_mode"},
    ),
    (
        "accelerate-needs-precision",
        dict(options={"experimental_accelerate_train_mode": "fast|step|0.9", "precision_mode": "allow_mix_precision"}),
        dict(
            options={"experimental_accelerate_train_mode": "fast|step|0.9", "precision_mode": "must_keep_origin_dtype"}
        ),
        {"experimental_accelerate_train_mode", "precision_mode"},
    ),
    (
        "accelerate-needs-precision-v2",
        dict(options={"experimental_accelerate_train_mode": "fast|step|0.9", "precision_mode_v2": "mixed_float16"}),
        dict(options={"experimental_accelerate_train_mode": "fast|step|0.9", "precision_mode_v2": "origin"}),
        {"experimental_accelerate_train_mode", "precision_mode_v2"},
    ),
    (
        "oom-excludes-ccec-o0",
        dict(options={"op_debug_config": "/c.cfg"}, files={"/c.cfg": "op_debug_config=oom,ccec_O0"}),
        dict(options={"op_debug_config": "/c.cfg"}, files={"/c.cfg": "op_debug_config=oom,ccec_g"}),
        {"op_debug_config"},
    ),
    (
        "oom-excludes-collect-path",
        dict(
            options={"op_debug_config": "/c.cfg"},
            env={"NPU_COLLECT_PATH": "/x"},
            files={"/c.cfg": "op_debug_config=oom"},
        ),
        dict(options={"op_debug_config": "/c.cfg"}, files={"/c.cfg": "op_debug_config=oom"}),
        {"op_debug_config", "env:NPU_COLLECT_PATH"},
    ),
    (
        "product-restricted-option",
        dict(options={"aicore_num": "2|4"}, product="atlas-training"),
        dict(options={"aicore_num": "2|4"}, product="atlas-a2"),
        {"aicore_num"},
    ),
    (
        "bf16-needs-a2-or-a3",
        dict(options={"precision_mode_v2": "mixed_bfloat16"}, product="atlas-training"),
        dict(options={"precision_mode_v2": "mixed_bfloat16"}, product="atlas-a3"),
        {"precision_mode_v2"},
    ),
    (
        "a2-dump-debug-mode-all-only",
        dict(options={"dump_debug_mode": "aicore_overflow"}, product="atlas-a2"),
        dict(options={"dump_debug_mode": "all"}, product="atlas-a2"),
        {"dump_debug_mode"},
    ),
    (
        "a2-no-subgraph-tuning",
        dict(options={"aoe_mode": "1"}, product="atlas-a2"),
        dict(options={"aoe_mode": "2"}, product="atlas-a2"),
        {"aoe_mode"},
    ),
    (
        "profiles-exclude-mixed-computing",
        dict(options={"input_shape": "data:-1", "mix_compile_mode": True}),
        dict(options={"mix_compile_mode": True}),
        {"input_shape", "mix_compile_mode"},
    ),
    (
        "instr-profiling-alone",
        dict(options={"profiling_mode": True, "profiling_options": '{"instr_profiling_freq":1000,"task_trace":"on"}'}),
        dict(options={"profiling_mode": True, "profiling_options": '{"instr_profiling_freq":1000}'}),
        {"profiling_options"},
    ),
    (
        "training-profiling-needs-traces",
        dict(options={"profiling_mode": True, "profiling_options": '{"output":"/p","task_trace":"on"}'}),
        dict(
            options={
                "profiling_mode": True,
                "profiling_options": '{"output":"/p","task_trace":"on","training_trace":"on"}',
            }
        ),
        {"profiling_options"},
    ),
    (
        "compress-weight-one-way",
        dict(options={"enable_compress_weight": True, "compress_weight_conf": "/c"}),
        dict(options={"enable_compress_weight": True}),
        {"enable_compress_weight", "compress_weight_conf"},
    ),
    (
        "multistream-cv-vs-env",
        dict(options={"auto_multistream_parallel_mode": "cv"}, env={"ENABLE_DYNAMIC_SHAPE_MULTI_STREAM": "1"}),
        dict(options={"auto_multistream_parallel_mode": "cv"}),
        {"auto_multistream_parallel_mode", "env:ENABLE_DYNAMIC_SHAPE_MULTI_STREAM"},
    ),
    (
        "debug-level-2-vs-oom",
        dict(options={"op_debug_level": 2, "op_debug_config": "/c.cfg"}, files={"/c.cfg": "op_debug_config=oom"}),
        dict(options={"op_debug_level": 0, "op_debug_config": "/c.cfg"}, files={"/c.cfg": "op_debug_config=oom"}),
        {"op_debug_level", "op_debug_config"},
    ),
    (
        "hccl-timeout-range-without-product",
        dict(options={"hccl_timeout": 20000}),
        dict(options={"hccl_timeout": 20000}, product="atlas-a2"),
        {"hccl_timeout"},
    ),
]


@pytest.mark.parametrize("case_id, bad, good, names", CASES, ids=[c[0] for c in CASES])
def test_rule(case_id: str, bad: dict, good: dict, names: set) -> None:
    errors = levels(findings(**bad)).get(ERROR, set())
    assert names <= errors, f"{case_id}: expected an error naming {names}, got {findings(**bad)}"
    assert ERROR not in levels(findings(**good)), findings(**good)


def test_stream_sync_timeout_in_seconds_is_called_out() -> None:
    (finding,) = [f for f in findings({"stream_sync_timeout": 3600, "hccl_timeout": 1800}) if f.level == ERROR]
    assert "milliseconds" in finding.hint and "looks like seconds" in finding.hint


def test_stream_sync_timeout_is_free_in_a_single_rank_job() -> None:
    assert not findings({"stream_sync_timeout": 1000, "hccl_timeout": 1836}, world_size=1)


@pytest.mark.parametrize(
    "options, expected",
    [
        ({"hccl_timeout": 600}, "round it to 544 s"),
        ({"op_select_implmode": "high_precision", "op_precision_mode": "/p.ini"}, "takes precedence"),
        ({"dynamic_inputs_shape_range": "data:[1~2]", "dynamic_dims": "1;2"}, "shape range is ignored"),
        ({"dynamic_graph_execute_mode": "dynamic_execute"}, "no effect"),
        ({"shape_generalization_mode": "FULL"}, "online compilation"),
        ({"modify_mixlist": "/m.json"}, "mixed precision"),
        ({"customize_dtypes": "/c.cfg", "precision_mode_v2": "origin"}, "no effect"),
        ({"profiling_options": '{"output":"/p"}'}, "profiling is on"),
        ({"graph_run_mode": 0, "iterations_per_loop": 10}, "training only"),
        ({"dynamic_input": True}, "deprecated"),
        ({"iterations_per_loop": 10}, "GetNext offloaded"),
        ({"fp_point": "conv1"}, "the fp_point key of profiling_options"),
        ({"precision_mode": "force_fp16"}, "online inference only"),
        ({"profiling_mode": True, "profiling_options": '{"output":"/p","traning_trace":"on"}'}, "'training_trace'"),
        (
            {"graph_run_mode": 0, "profiling_mode": True, "profiling_options": '{"training_trace":"on"}'},
            "online inference does not support it",
        ),
    ],
)
def test_warnings(options: dict, expected: str) -> None:
    warned = [f for f in findings(options) if f.level == WARNING]
    assert warned and any(expected in f.hint + f.found for f in warned), warned


def test_hccl_timeout_multiple_of_68_is_quiet_and_a2_needs_no_rounding() -> None:
    assert not findings({"hccl_timeout": 544})
    assert not findings({"hccl_timeout": 600}, product="atlas-a2")


def test_an_unreadable_op_debug_config_is_a_warning_not_an_error() -> None:
    (finding,) = findings({"op_debug_config": "/missing.cfg"})
    assert finding.level == WARNING and "could not be checked" in finding.hint


def test_a_loop_on_the_device_with_getnext_offloaded_is_quiet() -> None:
    # enable_data_pre_proc is deprecated in the seeds but still the switch the loop needs: no warning
    assert not findings({"iterations_per_loop": 10, "enable_data_pre_proc": True})


def test_the_for_all_impl_modes_are_accepted_as_the_tf_adapter_does() -> None:
    from npulaunch.config.rulebase import BY_NAME
    from npulaunch.config.values import check_option

    for mode in ("high_precision_for_all", "high_performance_for_all"):
        assert check_option(BY_NAME["op_select_implmode"], mode) == mode


@pytest.mark.parametrize(
    "profiling, found",
    [
        ({"task_trace": "yes"}, "task_trace: 'yes'"),
        ({"ge_api": "on"}, "ge_api: 'on'"),
        ({"dvpp_freq": 500}, "dvpp_freq: 500"),
        ({"instr_profiling_freq": "fast"}, "instr_profiling_freq: 'fast'"),
    ],
)
def test_profiling_option_values_outside_their_set_are_errors(profiling: dict, found: str) -> None:
    import json

    options = {"profiling_mode": True, "graph_run_mode": 0, "profiling_options": json.dumps(profiling)}
    errors = [f for f in findings(options) if f.level == ERROR]
    assert [f.found for f in errors] == [found]


def test_documented_profiling_keys_are_quiet() -> None:
    import json

    keys = {"output": "/p", "training_trace": "on", "task_trace": "l1", "aic_metrics": "PipeUtilization"}
    keys.update({"fp_point": "", "bp_point": "", "storage_limit": "500MB", "sys_hardware_mem_freq": 50})
    assert not findings({"profiling_mode": True, "profiling_options": json.dumps(keys)})
