"""The rank-side session helper, under the name training scripts import: ``from npulaunch import
session``. The code is ``npulaunch.host.session`` (it ships to compute hosts with the agent).
"""

from npulaunch.host.session import *  # noqa: F403
from npulaunch.host.session import __all__  # noqa: F401
