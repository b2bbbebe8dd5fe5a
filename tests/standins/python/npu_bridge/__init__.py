"""Stand-in for Huawei's npu_bridge (the TF Adapter), which cannot exist without Ascend software.
It offers the few entry points npulaunch's session helper uses, built from real TensorFlow ops,
and records each call in the file named by NPU_BRIDGE_STANDIN_LOG so tests can see them."""

import json
import os


def record(event, **data):
    path = os.environ.get("NPU_BRIDGE_STANDIN_LOG")
    if path:
        with open(path, "a") as handle:
            handle.write(json.dumps(dict(data, event=event, pid=os.getpid())) + "\n")
