"""The rank-side session helper: runs inside the training process and puts the session options
npulaunch chose for this rank into TensorFlow's ConfigProto, as the NpuOptimizer custom
optimizer's parameter_map (.b / .i / .s by the JSON type of each value).

Standard library only, Python 3.7+ (CANN's TF 1.15 stacks); TensorFlow is imported only when a
config is built. Works with TF 1.15 (``tf.ConfigProto``) and TF 2.x (``tf.compat.v1``); without
npu_bridge the options still land in the real ConfigProto (TensorFlow ignores the unknown
optimizer) and the script runs on the CPU.

    from npulaunch import session
    config = session.npu_config()          # or session.npu_config(base=my_config)
    with tf.compat.v1.Session(config=config) as sess: ...

    session.step()      # once per training step, where no framework hook times the steps (host/pace.py)

The options' way into a ConfigProto, the record of what each session got and the stack-dump
registration are host/configproto.py (the injection hook loads that file alone); this module adds
the calls a script makes itself.
"""

from __future__ import annotations

import os
from typing import Any, Dict, Optional

from npulaunch.host.configproto import (
    EFFECTIVE_FILE,
    GLOBAL_OPTIONS,
    OPTIONS_VAR,
    PRECEDENCE_VAR,
    RANK_DIR_VAR,
    STACK_DUMP_SIGNAL,
    STACK_SIGNAL_FILE,
    apply_options,
    effective_options,
    load_npu_bridge,
    open_private,
    options,
    record,
    register_stack_dump,
    tensorflow_classes,
    warn_once,
)

# Handed on for callers that read them here, though not part of the scripts' API (__all__):
from npulaunch.host.configproto import EXCLUSIVE_OPTIONS as EXCLUSIVE_OPTIONS
from npulaunch.host.configproto import OPTIMIZER as OPTIMIZER
from npulaunch.host.configproto import global_differences as global_differences
from npulaunch.host.pace import step as step  # the end of a training step, for straggler detection

__all__ = [
    "OPTIONS_VAR",
    "PRECEDENCE_VAR",
    "RANK_DIR_VAR",
    "EFFECTIVE_FILE",
    "HEARTBEAT_FILE",
    "STACK_SIGNAL_FILE",
    "STACK_DUMP_SIGNAL",
    "GLOBAL_OPTIONS",
    "INIT_SESSION_OPTIONS",
    "options",
    "run_config_kwargs",
    "apply_options",
    "effective_options",
    "record",
    "npu_config",
    "initialize_system",
    "set_iteration_per_loop",
    "heartbeat",
    "step",
    "register_stack_dump",
]

HEARTBEAT_FILE = "heartbeat"  # touched by heartbeat(): progress for npulaunch's hang watchdog

# The options CANN's initialize_system document (seed 002, table 1) requires on that session when the
# training uses them, beyond the global ones: the dump settings and the iteration-trace points.
INIT_SESSION_OPTIONS = tuple(
    sorted(
        set(GLOBAL_OPTIONS)
        | {"fp_point", "bp_point", "enable_dump", "dump_path", "dump_step", "dump_mode"}
        | {"enable_dump_debug", "dump_debug_mode"}
    )
)

# The session options NPURunConfig takes only inside a config object: argument -> (class, {option:
# the class's argument}). hicann/tensorflow tf_adapter/python/npu_bridge/estimator/npu/npu_config.py
# @ 82957b9 (NPURunConfig, DumpConfig, ProfilingConfig, MemoryConfig, DynamicInputConfig).
RUN_CONFIG_OBJECTS = {
    "dump_config": (
        "DumpConfig",
        {
            name: name
            for name in (
                "enable_dump",
                "dump_path",
                "dump_step",
                "dump_mode",
                "enable_dump_debug",
                "dump_debug_mode",
                "dump_data",
                "dump_layer",
            )
        },
    ),
    "profiling_config": (
        "ProfilingConfig",
        {"profiling_mode": "enable_profiling", "profiling_options": "profiling_options"},
    ),
    "memory_config": (
        "MemoryConfig",
        {name: name for name in ("atomic_clean_policy", "static_memory_policy", "variable_use_1g_huge_page")},
    ),
    "dynamic_input_config": (
        "DynamicInputConfig",
        {name: name for name in ("input_shape", "dynamic_dims", "dynamic_node_type", "compile_hybrid_mode")},
    ),
}


def run_config_kwargs() -> Dict[str, Any]:
    """Keyword arguments for npu_bridge's ``NPURunConfig``: the options it has an argument for, by
    their names in its real signature, and the dump, profiling, memory and dynamic-input options
    inside the config objects it takes them in. An option it has no argument for is left out,
    with a warning (set it on a session config with ``npu_config`` instead). Needs npu_bridge."""
    import inspect

    from npu_bridge.estimator.npu import npu_config as objects

    accepted = set(inspect.signature(objects.NPURunConfig.__init__).parameters) - {"self"}
    values = options()
    kwargs: Dict[str, Any] = {}
    for argument, (class_name, fields) in RUN_CONFIG_OBJECTS.items():
        given = {field: values.pop(name) for name, field in fields.items() if name in values}
        if given and argument in accepted and hasattr(objects, class_name):
            kwargs[argument] = getattr(objects, class_name)(**given)
        elif given:
            values.update({name: given[field] for name, field in fields.items() if field in given})
    left = sorted(name for name in values if name not in accepted)
    kwargs.update((name, value) for name, value in values.items() if name in accepted)
    if left:
        message = "NPURunConfig has no argument for session option(s) %s: not passed (use npu_config)" % (
            ", ".join(left)
        )
        warn_once(message)
    return kwargs


def npu_config(base: Any = None, prefer: Optional[str] = None) -> Any:
    """A ConfigProto carrying this rank's options, merged into a copy of ``base`` (never changed)."""
    config_class, _ = tensorflow_classes()
    config = config_class()
    if base is not None:
        config.CopyFrom(base)
    prefer = prefer or os.environ.get(PRECEDENCE_VAR, "script")
    conflicts = apply_options(config, options(), prefer)
    record(config, "npu_config", conflicts)
    register_stack_dump()
    return config


def initialize_system() -> Any:
    """Initialise collective communication in a session of its own, as CANN requires before a
    script calls HCCL (get_rank_id, get_local_rank_id, ...) ahead of sess.run or estimator.train.

    Returns a function that shuts the system down and closes that session; call it after
    training. Without npu_bridge (no Ascend software) there is nothing to initialise and both
    steps do nothing.
    """
    if not load_npu_bridge():
        return lambda: None
    import tensorflow as tf
    from npu_bridge.estimator import npu_ops

    config_class, _ = tensorflow_classes()
    config = config_class()
    chosen = {k: v for k, v in options().items() if k in INIT_SESSION_OPTIONS}
    record(config, "initialize_system", apply_options(config, chosen))
    graph = tf.Graph()
    with graph.as_default():
        init_op, shutdown_op = npu_ops.initialize_system(), npu_ops.shutdown_system()
    sess = tf.compat.v1.Session(graph=graph, config=config)
    sess.run(init_op)

    def shutdown() -> None:
        sess.run(shutdown_op)
        sess.close()

    return shutdown


def set_iteration_per_loop(sess: Any, train_op: Any) -> Any:
    """npu_bridge's ``util.set_iteration_per_loop(sess, train_op, n)`` with this rank's
    ``iterations_per_loop``: the device then runs n steps per ``sess.run(train_op)``. The session
    config must carry the same value (npu_config and injection put it there; the adapter does not
    compare the two) and, in sess.run mode, ``enable_data_pre_proc: true``. Returns ``train_op``
    itself when the value is 1, and without npu_bridge (one step per sess.run, with a warning)."""
    loops = options().get("iterations_per_loop", 1)
    if loops == 1:
        return train_op
    if not load_npu_bridge():
        message = "iterations_per_loop %d needs npu_bridge: without it every sess.run() runs one step" % loops
        warn_once(message)
        return train_op
    from npu_bridge.estimator.npu import util

    return util.set_iteration_per_loop(sess, train_op, loops)


def heartbeat() -> None:
    """Tell npulaunch this rank made progress (call it once per step; it touches a file)."""
    rank_dir = os.environ.get(RANK_DIR_VAR)
    if rank_dir and os.path.isdir(rank_dir):
        path = os.path.join(rank_dir, HEARTBEAT_FILE)
        with open_private(path, "a"):
            os.utime(path, None)
