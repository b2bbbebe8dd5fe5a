"""``import npu_bridge.npu_init`` registers the NPU pieces with TensorFlow (here: only recorded)."""

from npu_bridge import record

record("npu_init imported")
