"""What a rank needs on its host before it starts: its directories (its own, its plogs', and those
its session options make CANN write to, some of which must exist before the session starts) and
its environment. Used by the agent and by rank mode (``npulaunch exec``). Standard library only,
Python 3.7+.
"""

from __future__ import annotations

import os
from typing import Dict, Mapping

from npulaunch.host.spec import RankSpec, compose_env


def prepare_rank(spec: RankSpec, base_env: Mapping[str, str]) -> Dict[str, str]:
    """Create the rank's directories (its own, its plogs', and those its session options make CANN
    write to) and return its environment (``compose_env`` over ``base_env``, with this host's copy
    of the injection hook). Raises OSError naming the directory that cannot be made."""
    for option, directory in (("rank directory", spec.rank_dir), ("plog directory", spec.plog_dir)) + spec.make_dirs:
        try:
            os.makedirs(directory, mode=0o700, exist_ok=True)
        except OSError as exc:
            raise OSError(exc.errno, f"cannot create {option} {directory}: {exc.strerror}") from None
    return compose_env(spec, base_env)[0]
