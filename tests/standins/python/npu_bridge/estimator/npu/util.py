"""Stand-in for npu_bridge's ``util.set_iteration_per_loop``, following the real one
(hicann/tensorflow tf_adapter/python/npu_bridge/estimator/npu/util.py @ 82957b9, lines 192-226): the
same argument checks and errors, four int64 resource variables loaded through the session, and the
train op grouped as ``IterationOp`` (the node the adapter's GeOp looks for). The call is recorded."""

import tensorflow as tf

from npu_bridge import record

_VARIABLES = ("iterations_per_loop", "loop_cond", "zero", "one")


def check_positive_integer(value, name):
    if not isinstance(value, int) or isinstance(value, bool):
        raise TypeError("%s must be int, got %s" % (name, type(value)))
    if value <= 0:
        raise ValueError("%s must be positive, got %d" % (name, value))


def _create_or_get_var(name):
    collection = "npu_runconfig_" + name
    found = tf.compat.v1.get_collection(collection)
    if found:
        return found[0]
    return tf.compat.v1.get_variable(
        name,
        initializer=tf.compat.v1.zeros_initializer(),
        shape=[],
        dtype=tf.int64,
        trainable=False,
        collections=[collection, tf.compat.v1.GraphKeys.LOCAL_VARIABLES],
        use_resource=True,
    )


def set_iteration_per_loop(sess, train_op, iterations_per_loop=1):
    if not isinstance(train_op, tf.Operation):
        raise ValueError("The incoming 'train_op' type is '%s', and the need type is 'Operation'" % type(train_op))
    check_positive_integer(iterations_per_loop, "iterations_per_loop")
    record("set_iteration_per_loop", iterations_per_loop=iterations_per_loop)
    if iterations_per_loop == 1:
        return train_op
    variables = [_create_or_get_var(name) for name in _VARIABLES]
    for variable, value in zip(variables, (iterations_per_loop - 1, 0, 0, 1)):
        variable.load(value, session=sess)
    return tf.group(train_op, name="IterationOp")
