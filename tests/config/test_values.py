"""Session option values: types to .b/.i/.s, and the structured forms in YAML or CANN text."""

from __future__ import annotations

from typing import Any

import pytest

from npulaunch.config.catalog import EnvVarSpec, OptionSpec
from npulaunch.config.checker import ValueProblem
from npulaunch.config.placeholders import expand_templates
from npulaunch.config.values import check_env_value, check_option


def spec(form: str = "", type: str = "s", **kw: Any) -> OptionSpec:
    return OptionSpec(name="x", type=type, area="test", scenario="both", description="d", form=form, **kw)


@pytest.mark.parametrize(
    "option, value, rendered",
    [
        (spec(type="b"), True, True),
        (spec(type="i", min=0, max=10), 3, 3),
        (spec(choices=("0", "1")), 1, "1"),  # numbers written as text accept a YAML integer
        (spec(choices=("must_keep_origin_dtype", "allow_mix_precision")), "allow_mix_precision", "allow_mix_precision"),
        (spec("dump_step"), [0, "3-5", 10], "0|3-5|10"),
        (spec("dump_step"), "0|3-5|10", "0|3-5|10"),
        (
            spec("input_shape"),
            {"data": [1, 1, 40, -1], "label": [1, -1], "mask": [-1, -1]},
            "data:1,1,40,-1;label:1,-1;mask:-1,-1",
        ),
        (spec("input_shape"), "data:1,1,40,-1;label:1,-1", "data:1,1,40,-1;label:1,-1"),
        (spec("dynamic_dims"), [[20, 20, 1, 1], [40, 40, 2, 2]], "20,20,1,1;40,40,2,2"),
        (spec("dynamic_dims"), "20,20,1,1;40,40,2,2", "20,20,1,1;40,40,2,2"),
        (
            spec("shape_range"),
            {"getnext": [[128, "3~5", "2~128", -1], [64, "3~5", "2~128", -1]], "data": [[128, "3~5", "2~128", -1]]},
            "getnext:[128,3~5,2~128,-1],[64,3~5,2~128,-1];data:[128,3~5,2~128,-1]",
        ),
        (
            spec("shape_range"),
            "getnext:[128 ,3~5, 2~128, -1],[64 ,3~5, 2~128, -1];data:[128 ,3~5, 2~128, -1]",
            "getnext:[128,3~5,2~128,-1],[64,3~5,2~128,-1];data:[128,3~5,2~128,-1]",
        ),
        (spec("int_list"), [0, 1], "0,1"),
        (spec("int_list"), "0,1", "0,1"),
        (spec("name_list"), ["Pooling", "SoftmaxV2"], "Pooling,SoftmaxV2"),
        (spec("aicore_num"), {"cube": 2, "vector": 4}, "2|4"),
        (spec("aicore_num"), "2|4", "2|4"),
        (spec("stream_parallel"), {"DNN_VM_AICPU": 10, "AIcoreEngine": 1}, "DNN_VM_AICPU:10,AIcoreEngine:1"),
        (spec("stream_parallel"), "DNN_VM_AICPU:10,AIcoreEngine:1", "DNN_VM_AICPU:10,AIcoreEngine:1"),
        (spec("accelerate_train_mode"), {"type": "fast", "trigger": "step", "ratio": 0.9}, "fast|step|0.9"),
        (spec("accelerate_train_mode"), "fast1|loss|1.05", "fast1|loss|1.05"),
        (
            spec("json"),
            {"output": "/prof/{rank}", "training_trace": "on"},
            '{"output":"/prof/{rank}","training_trace":"on"}',
        ),
        (spec("json"), '{"output":"/tmp/profiling"}', '{"output":"/tmp/profiling"}'),
        (spec("path", writes=True), "/dump/{job_id}/{rank}", "/dump/{job_id}/{rank}"),
    ],
)
def test_accepted(option: OptionSpec, value: Any, rendered: Any) -> None:
    assert check_option(option, value) == rendered


@pytest.mark.parametrize(
    "option, value, allowed",
    [
        (spec(type="b"), "yes", "a boolean"),
        (spec(type="b"), 1, "a boolean"),
        (spec(type="i"), True, "an integer"),
        (spec(type="i", min=0, max=10), 11, "from 0 to 10"),
        (spec(type="i", min=1), 0, "an integer of at least 1"),  # iterations_per_loop's bound
        (spec(type="i", max=5), 6, "an integer of at most 5"),
        (spec(), 3, "a string"),
        (spec(choices=("a", "b")), "c", "one of 'a', 'b'"),
        (spec("dump_step"), [0, "5-3"], "ranges low-high"),
        (spec("dump_step"), "0|x", "steps and ranges"),
        (spec("input_shape"), {"data": [1, -2]}, "integers >= -1"),
        (spec("input_shape"), "data 1,2", "name:dim"),
        (spec("dynamic_dims"), [[1, 2], [3]], "one size per -1"),
        (spec("dynamic_dims"), [[0, 1], [2, 3]], "sizes >= 1"),
        (spec("shape_range"), {"other": [[1]]}, "getnext"),
        (spec("shape_range"), {"data": [["5~3"]]}, "low~high"),
        (spec("int_list"), [0, 0], "distinct"),
        (spec("aicore_num"), "0|4", "both >= 1"),
        (spec("stream_parallel"), {"A": 0}, ">= 1"),
        (spec("accelerate_train_mode"), "fast|step|0.95", "0.2 to 0.9"),
        (spec("accelerate_train_mode"), "fast|loss|1.6", "1.01 to 1.5"),
        (spec("accelerate_train_mode"), "slow|step|0.5", "fast|fast1"),
        (spec("json"), "{not json", "JSON object"),
        (spec("json"), [1, 2], "a mapping"),
        (spec("path", writes=True), "/dump/{rnk}", "placeholders"),
    ],
)
def test_rejected(option: OptionSpec, value: Any, allowed: str) -> None:
    with pytest.raises(ValueProblem) as caught:
        check_option(option, value)
    assert allowed in caught.value.allowed + " " + caught.value.hint


def test_a_quoted_boolean_gets_a_hint() -> None:
    with pytest.raises(ValueProblem) as caught:
        check_option(spec(type="b"), "yes")
    assert caught.value.found == "'yes' (a string)" and "without quotes" in caught.value.hint


def test_templates_expand_per_rank() -> None:
    assert (
        expand_templates(
            "/d/{job_id}/{host}/{rank}-{local_rank}-{device_id}",
            {"job_id": "j", "host": "h", "rank": 9, "local_rank": 1, "device_id": 1},
        )
        == "/d/j/h/9-1-1"
    )


@pytest.mark.parametrize(
    "env, value, ok",
    [
        (EnvVarSpec("ASCEND_GLOBAL_LOG_LEVEL", "enum", "logging", "d", choices=("0", "1", "2", "3", "4")), "3", True),
        (EnvVarSpec("ASCEND_GLOBAL_LOG_LEVEL", "enum", "logging", "d", choices=("0", "1", "2", "3", "4")), "5", False),
        (EnvVarSpec("TE_PARALLEL_COMPILER", "int", "compile", "d", min=1, max=32), "32", True),
        (EnvVarSpec("TE_PARALLEL_COMPILER", "int", "compile", "d", min=1, max=32), "33", False),
        (EnvVarSpec("TE_PARALLEL_COMPILER", "int", "compile", "d", min=1, max=32), "eight", False),
        (EnvVarSpec("PROFILING_OPTIONS", "json", "profiling", "d"), '{"output": "/p"}', True),
        (EnvVarSpec("PROFILING_OPTIONS", "json", "profiling", "d"), "[1]", False),
        (EnvVarSpec("CM_CHIEF_IP", "str", "cluster", "d"), "10.0.0.1", True),
        (EnvVarSpec("CM_CHIEF_IP", "str", "cluster", "d"), "chief", False),
    ],
)
def test_env_values(env: EnvVarSpec, value: str, ok: bool) -> None:
    if ok:
        check_env_value(env, value)
    else:
        with pytest.raises(ValueProblem):
            check_env_value(env, value)
