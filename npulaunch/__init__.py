"""npulaunch: launch and watch distributed TensorFlow training on Huawei Ascend NPUs.

Kept import-free: the agent and the rank-side helper import this package on compute hosts
(Python 3.7, standard library only), and ``npulaunch --help`` must start fast.
"""

__version__ = "0.1.0"
