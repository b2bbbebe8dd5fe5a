"""A rank that reads its environment the way Ascend ModelZoo's TF1 models do, and reports its data shard.

    modelzoo.py [--model_dir DIR] [--files N]

Read as the models read them (Ascend/ModelZoo-TensorFlow @ a2c3332), with no defaults, so a missing
variable fails as it would there (TypeError: int() argument must be ... not 'NoneType'):
- at import, ``int(os.getenv('RANK_SIZE'))`` (DeepFM train.py, DIN din_demo.py);
- ``int(os.getenv('DEVICE_INDEX'))``, the shard of ``d.shard(RANK_SIZE, DEVICE_INDEX)`` (ResNet50_ID0058
  src/data_loader/resnet50/data_loader.py);
- ``int(os.getenv('RANK_INDEX')) * 8 + int(os.getenv('DEVICE_ID'))``, BERT pretraining's shard
  (Bert_Google_for_TensorFlow run_pretraining.py), reported beside it.
The dataset is ``--files`` file names (default 2 * RANK_SIZE); a shard is every RANK_SIZE-th name from
its index on, as tf.data's ``shard(num_shards, index)`` takes them. Prints one ``SHARD {json}`` line and,
with ``--model_dir`` (ModelZoo's ``output/<device>/ckpt``), writes shard.json there: it must exist.
"""

import json
import os
import sys

RANK_SIZE = int(os.getenv("RANK_SIZE"))  # import time, no default: as the models do


def main(argv):
    args = dict(zip(argv[::2], argv[1::2]))
    files = ["part-%05d" % i for i in range(int(args.get("--files", 2 * RANK_SIZE)))]
    index = int(os.getenv("DEVICE_INDEX"))
    bert = int(os.getenv("RANK_INDEX")) * 8 + int(os.getenv("DEVICE_ID"))
    report = {
        "rank_id": os.getenv("RANK_ID"),
        "device_index": index,
        "rank_index": int(os.getenv("RANK_INDEX")),
        "device_id": int(os.getenv("DEVICE_ID")),
        "ascend_device_id": os.getenv("ASCEND_DEVICE_ID"),
        "rank_size": RANK_SIZE,
        "shard": files[index::RANK_SIZE],
        "bert_index": bert,
        "cpus": sorted(os.sched_getaffinity(0)),
        "cwd": os.getcwd(),
        "argv": argv,
    }
    print("SHARD " + json.dumps(report), flush=True)
    if "--model_dir" in args:
        with open(os.path.join(args["--model_dir"], "shard.json"), "w") as out:
            json.dump(report, out)


if __name__ == "__main__":
    main(sys.argv[1:])
