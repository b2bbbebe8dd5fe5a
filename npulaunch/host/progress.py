"""Training progress read from the lines ranks print, without configuration: the step (and the
total, when the line has one) in the forms common training output takes. A job's own
``monitor.progress_regex`` replaces them (group 1 the step, group 2 the total). Standard library only,
Python 3.7+: the agent reads it on compute hosts, the live view on the launcher.

Forms recognised, most specific first:
- ``global_step = 120`` / ``global_step: 120`` / ``global_step 120`` (TensorFlow's LoggingTensorHook,
  Estimator's "loss = 0.12, step = 120" also below);
- ``step 120/1000``, ``step 120 of 1000``, ``Step [120/1000]``;
- ``  45/100 [=====>....] - ETA: 3s`` (Keras' progress bar) and ``Epoch 3/10``;
- ``step = 120`` / ``step: 120`` / ``step 120``.
"""

from __future__ import annotations

import re
from typing import Optional, Pattern, Sequence, Tuple

from npulaunch.host.lazyre import lazy_re

Step = Tuple[int, Optional[int]]  # (step, total or None)
LOOK_BACK = 20  # lines of a batch looked at, from its end

PATTERNS: Tuple[Pattern[str], ...] = tuple(
    lazy_re(p, re.IGNORECASE | re.MULTILINE)
    for p in (
        r"\bglobal_step\b\s*[=:]?\s*(\d+)",
        r"\bstep\s*\[?\s*(\d+)\s*(?:/|of)\s*(\d+)",
        r"^\s*(\d+)/(\d+)\s*\[[=>.\s]*\]",
        r"\bepoch\s*\[?\s*(\d+)\s*/\s*(\d+)",
        r"\bstep\b\s*[=:]?\s*(\d+)",
    )
)


def find_step(lines: Sequence[str], custom: Optional[Pattern[str]] = None) -> Optional[Step]:
    """The latest step the lines show (the last line that has one), or None. The latest lines are
    first searched together, once per pattern (a line's match is found there too: the patterns are
    multi-line); only when one matches are they looked at line by line."""
    patterns: Sequence[Pattern[str]] = (custom,) if custom is not None else PATTERNS
    recent = lines[-LOOK_BACK:]  # the latest lines of a batch: a flood costs nothing more
    joined = "\n".join(recent)
    if custom is None and not _may_hold_step(joined):
        return None
    patterns = [pattern for pattern in patterns if pattern.search(joined)]
    if not patterns:
        return None
    for line in reversed(recent):
        if not any(ch.isdigit() for ch in line[-200:]):
            continue
        for pattern in patterns:
            match = pattern.search(line[-500:])
            if match and match.groups() and match.group(1) and match.group(1).isdigit():
                total = match.group(2) if len(match.groups()) > 1 else None
                return int(match.group(1)), (int(total) if total and total.isdigit() else None)
    return None


def _may_hold_step(text: str) -> bool:
    """Whether the common forms could be in the text: each needs "step", "epoch" or "/" (a plain
    search, cheaper than the case-blind patterns themselves)."""
    if "/" in text:
        return True
    lowered = text.lower()
    return "step" in lowered or "epoch" in lowered
