"""Debug logging for the code beside the ranks, at no import cost: records go through ``logging``
only when the process has already loaded it (the launcher does when ``--debug`` asks, and gives it a
handler). A remote agent never imports ``logging`` (about 3 ms of its start-up, once per host).
Standard library only, Python 3.7+.
"""

from __future__ import annotations

import sys


def debug(name: str, message: str, *args: object) -> None:
    """``logging.getLogger(name).debug(message, *args)`` if ``logging`` is loaded, else nothing."""
    logging = sys.modules.get("logging")
    if logging is not None:
        logger = logging.getLogger(name)
        if logger.isEnabledFor(logging.DEBUG):
            logger.debug(message, *args)
