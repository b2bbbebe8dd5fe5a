"""Data-parallel training, TF 1.15 style (graph mode, sess.run loop), that really trains.

On an Ascend host (npu_bridge importable) gradients are averaged with HCCL all-reduce on the
NPUs. Elsewhere, when npulaunch runs the job with ``cpu_fallback: true`` (it sets TF_CONFIG with a
loopback port per rank), every rank runs a TensorFlow server and gradients are averaged with
TensorFlow's own collective all-reduce on the CPU. Alone (no TF_CONFIG), it trains by itself.

Synthetic data: y = X @ w_true + b_true + noise, a different shard per rank. After training the
ranks compare their weights (an all-reduce of max - min) and say whether they are identical.
Session options come from npulaunch (``npulaunch.session.npu_config``, or injection), and the
loop is ``iterations_per_loop``-aware: it logs once per loop, as NPU training reports.
"""

import argparse
import json
import os
import sys
import time

os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "2")
import numpy as np  # noqa: E402
import tensorflow as tf  # noqa: E402

tf.compat.v1.disable_eager_execution()
FEATURES = 8


def session_config():
    """This rank's ConfigProto: npulaunch's options when npulaunch is importable."""
    try:
        from npulaunch import session
    except ImportError:
        return tf.compat.v1.ConfigProto(), {}
    return session.npu_config(), session.options()


def make_data(rank, samples):
    rng = np.random.RandomState(1000 + rank)
    w_true = np.arange(1, FEATURES + 1, dtype=np.float32) / FEATURES
    x = rng.normal(size=(samples, FEATURES)).astype(np.float32)
    y = x @ w_true + 0.5 + rng.normal(scale=0.01, size=samples).astype(np.float32)
    return x, y.astype(np.float32)


class Averager:
    """How gradients are averaged across ranks: HCCL on NPUs, TF collectives on the CPU, or not."""

    def __init__(self, rank, size):
        self.rank, self.size, self.keys = rank, size, 0
        self.npu = os.environ.get("NPULAUNCH_CPU_FALLBACK") != "1" and _have_npu_bridge()
        self.server = None
        if not self.npu and size > 1:
            cluster = json.loads(os.environ["TF_CONFIG"])["cluster"]
            self.config = tf.compat.v1.ConfigProto()
            self.config.experimental.collective_group_leader = "/job:worker/replica:0/task:0"
            self.server = tf.distribute.Server(
                tf.train.ClusterSpec(cluster), job_name="worker", task_index=rank, config=self.config, start=True
            )

    def device(self):
        return tf.device("/job:worker/task:%d" % self.rank) if self.server else _nothing()

    def mean(self, tensor, op="Add", final="Div"):
        if self.size == 1:
            return tensor
        self.keys += 1
        if self.npu:
            from npu_bridge.hccl import hccl_ops

            total = hccl_ops.allreduce(tensor, {"Add": "sum", "Max": "max", "Min": "min"}[op])
            return total / self.size if final == "Div" else total
        from tensorflow.python.ops import collective_ops

        return collective_ops.all_reduce(
            tensor, self.size, group_key=1, instance_key=self.keys, merge_op=op, final_op=final
        )


class _nothing:
    def __enter__(self):
        return self

    def __exit__(self, *exc):
        return False


def _have_npu_bridge():
    try:
        import npu_bridge.npu_init  # noqa: F401
    except ImportError:
        return False
    return True


def restore(sess, saver, directory, step_var, rank):
    """Resume: the checkpoint npulaunch names after a restart (NPULAUNCH_RESUME_CHECKPOINT, the same
    step on every rank), else the directory's own latest; the step to go on from (0: from the start)."""
    if saver is None:
        return 0
    os.makedirs(directory, exist_ok=True)
    path = os.environ.get("NPULAUNCH_RESUME_CHECKPOINT") or tf.train.latest_checkpoint(directory)
    if not path:
        return 0
    saver.restore(sess, path)
    step = int(sess.run(step_var))
    print("rank %d resumed from %s at step %d" % (rank, path, step), flush=True)
    return step


def main():
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--steps", type=int, default=200)
    parser.add_argument("--batch", type=int, default=64)
    parser.add_argument("--lr", type=float, default=0.1)
    parser.add_argument("--fail-rank", type=int, default=-1, help="this rank exits 3 instead of joining the others")
    parser.add_argument("--fail-after", type=float, default=0.0, help="seconds the failing rank waits first")
    parser.add_argument("--checkpoint-dir", default="", help="save a TF checkpoint here (and resume from it)")
    parser.add_argument("--save-every", type=int, default=50, help="steps between checkpoints")
    parser.add_argument("--step-time", type=float, default=0.0, help="seconds each step sleeps (to watch it)")
    args = parser.parse_args()
    rank = int(os.environ.get("RANK_ID", "0"))
    size = int(os.environ.get("RANK_SIZE", "1"))
    if rank == args.fail_rank:
        time.sleep(args.fail_after)
        print("rank %d: failing on purpose before joining the others" % rank, file=sys.stderr)
        sys.exit(3)

    started = time.time()
    averager = Averager(rank, size)
    config, options = session_config()
    if averager.server is not None:
        config.MergeFrom(averager.config)
    loop = int(options.get("iterations_per_loop", 1)) or 1
    x_data, y_data = make_data(rank, 4096)

    with tf.Graph().as_default(), averager.device():
        tf.compat.v1.set_random_seed(7)  # the same initial weights on every rank
        x = tf.compat.v1.placeholder(tf.float32, [None, FEATURES])
        y = tf.compat.v1.placeholder(tf.float32, [None])
        w = tf.compat.v1.get_variable("w", [FEATURES], initializer=tf.compat.v1.random_normal_initializer())
        b = tf.compat.v1.get_variable("b", [], initializer=tf.compat.v1.zeros_initializer())
        loss = tf.reduce_mean(tf.square(tf.linalg.matvec(x, w) + b - y))
        grads = [averager.mean(g) for g in tf.gradients(loss, [w, b])]
        step_var = tf.compat.v1.train.get_or_create_global_step()
        train = tf.group(
            *(tf.compat.v1.assign_sub(v, args.lr * g) for v, g in zip([w, b], grads)),
            tf.compat.v1.assign_add(step_var, 1),
        )
        saver = tf.compat.v1.train.Saver([w, b, step_var], max_to_keep=3) if args.checkpoint_dir else None
        params = tf.concat([w, tf.reshape(b, [1])], 0)
        spread = averager.mean(params, "Max", "Id") - averager.mean(params, "Min", "Id")
        target = averager.server.target if averager.server else ""
        with tf.compat.v1.Session(target, config=config) as sess:
            sess.run(tf.compat.v1.global_variables_initializer())
            first = restore(sess, saver, args.checkpoint_dir, step_var, rank)
            rng = np.random.RandomState(rank if first == 0 else rank * 100003 + first)
            for step in range(first + 1, args.steps + 1):
                pick = rng.randint(0, len(x_data), args.batch)
                _, value = sess.run([train, loss], {x: x_data[pick], y: y_data[pick]})
                if step % loop == 0 or step == args.steps:
                    print("rank %d step %d/%d loss %.6f" % (rank, step, args.steps, value), flush=True)
                if saver is not None and step % args.save_every == 0:
                    saver.save(sess, os.path.join(args.checkpoint_dir, "model.ckpt"), global_step=step)
                time.sleep(args.step_time)
            final, difference = sess.run([params, spread])
    identical = float(np.max(np.abs(difference))) == 0.0
    print("rank %d weights %s" % (rank, json.dumps([round(float(v), 6) for v in final])))
    print(
        "rank %d: weights identical on all %d ranks: %s (%.1f s)"
        % (rank, size, "yes" if identical else "NO", time.time() - started),
        flush=True,
    )
    rank_dir = os.environ.get("NPULAUNCH_RANK_DIR")
    if rank_dir:
        with open(os.path.join(rank_dir, "weights.json"), "w") as handle:
            json.dump([float(v) for v in final], handle)
    return 0 if identical else 1


if __name__ == "__main__":
    sys.exit(main())
