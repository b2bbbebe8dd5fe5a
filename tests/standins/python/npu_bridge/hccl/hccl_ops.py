"""allreduce for one process: the identity (a single rank holds the whole sum)."""

import tensorflow as tf


def allreduce(tensor, reduction, fusion=1, fusion_id=-1, group="hccl_world_group"):
    return tf.identity(tensor)
