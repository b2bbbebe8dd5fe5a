"""An NPU host's health, in one place for ``npulaunch check`` and for the watch while a job runs: what the
tools say (``gather``: npu-smi, hccn_tool, version files; ``parse``: their formats; ``hostnet``: the host side
of HCCL), what one NPU's facts mean (``judge``: MindCluster's fault levels and actions, a NIC's link and net
health), and the live watch the agent runs (``watch``). Standard library only, Python 3.7."""
