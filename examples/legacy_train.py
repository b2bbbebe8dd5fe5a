"""An unchanged "legacy" TF 1.x-style training script: it builds its own ConfigProto and trains
with MonitoredTrainingSession, and knows nothing of npulaunch. Run it with
``session_injection: auto`` (examples/legacy.yaml) and npulaunch's options reach its session
anyway; rank-N/session_options.json in the job directory shows what the session got.
"""

import os

os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "2")
import numpy as np  # noqa: E402
import tensorflow as tf  # noqa: E402

tf.compat.v1.disable_eager_execution()


def main():
    rng = np.random.RandomState(0)
    x_data = rng.normal(size=(512, 4)).astype(np.float32)
    y_data = (x_data @ np.array([1.0, -2.0, 0.5, 3.0], dtype=np.float32)).astype(np.float32)

    config = tf.compat.v1.ConfigProto(allow_soft_placement=True)
    custom = config.graph_options.rewrite_options.custom_optimizers.add()
    custom.name = "NpuOptimizer"
    custom.parameter_map["use_off_line"].b = True  # what NPU scripts of that era set by hand

    step = tf.compat.v1.train.get_or_create_global_step()
    x = tf.constant(x_data)
    w = tf.compat.v1.get_variable("w", [4], initializer=tf.compat.v1.zeros_initializer())
    loss = tf.reduce_mean(tf.square(tf.linalg.matvec(x, w) - y_data))
    train = tf.compat.v1.train.GradientDescentOptimizer(0.1).minimize(loss, global_step=step)
    hooks = [tf.compat.v1.train.StopAtStepHook(last_step=200)]
    with tf.compat.v1.train.MonitoredTrainingSession(config=config, hooks=hooks) as sess:
        value = None
        while not sess.should_stop():
            _, value = sess.run([train, loss])
    print("done: loss %.6f after 200 steps" % value)


if __name__ == "__main__":
    main()
