"""A rank that creates TensorFlow sessions the ways scripts do and prints, per way, what the real
session's ConfigProto carries: the NpuOptimizer parameter_map (value and field) and the script's
own settings. Run with session_injection: auto; does not import npulaunch unless asked ("explicit")."""

import json
import os
import sys

os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "3")
import tensorflow as tf  # noqa: E402

tf.compat.v1.disable_eager_execution()


def describe(config):
    params = {}
    for custom in config.graph_options.rewrite_options.custom_optimizers:
        if custom.name == "NpuOptimizer":
            for name, attr in custom.parameter_map.items():
                kind = attr.WhichOneof("value")
                value = getattr(attr, kind)
                params[name] = [kind, value.decode() if isinstance(value, bytes) else value]
    rewrite = config.graph_options.rewrite_options
    return {
        "params": params,
        "soft": config.allow_soft_placement,
        "inter_op": config.inter_op_parallelism_threads,
        "remapping": rewrite.remapping,
        "memory_optimization": rewrite.memory_optimization,
    }


def user_config():
    config = tf.compat.v1.ConfigProto(allow_soft_placement=True, inter_op_parallelism_threads=2)
    custom = config.graph_options.rewrite_options.custom_optimizers.add()
    custom.name = "NpuOptimizer"
    custom.parameter_map["iterations_per_loop"].i = 5  # the script's own value
    return config


def main():
    out = {}
    for way in sys.argv[1:]:
        with tf.Graph().as_default():
            total = tf.constant(2) + tf.constant(3)
            if way == "explicit":
                from npulaunch import session

                with tf.compat.v1.Session(config=session.npu_config(user_config())) as sess:
                    assert sess.run(total) == 5
                    out[way] = describe(sess._config)
            elif way == "config":
                mine = user_config()
                before = mine.SerializeToString()
                with tf.compat.v1.Session(config=mine) as sess:
                    assert sess.run(total) == 5
                    out[way] = describe(sess._config)
                out[way]["script_config_unchanged"] = mine.SerializeToString() == before
            elif way == "plain":
                with tf.compat.v1.Session() as sess:
                    assert sess.run(total) == 5
                    out[way] = describe(sess._config)
            elif way == "monitored":
                tf.compat.v1.train.get_or_create_global_step()
                with tf.compat.v1.train.MonitoredTrainingSession(config=user_config()) as mon:
                    assert mon.run(total) == 5
                    out[way] = describe(mon._tf_sess()._config)
    print("RESULT " + json.dumps(out, sort_keys=True))


if __name__ == "__main__":
    main()
