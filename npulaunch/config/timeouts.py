"""HCCL's timeouts by product line and CANN version: what ``HCCL_EXEC_TIMEOUT`` and the session
option ``hccl_timeout`` accept, what they default to, and how CANN versions compare. Pure, a leaf.

Sources (catalog/RULES.md, "Run-time facts beyond the seeds", item 9):
- HCCL_EXEC_TIMEOUT, CANN 9.0: hicann/hccl docs/zh/user_guide/hccl_env/HCCL_EXEC_TIMEOUT.md @ 09300b7;
  https://www.hiascend.com/document/detail/zh/canncommercial/latest/maintenref/envvar/envref_07_0078.html
  Atlas training series (0, 17340] with the value used rounded down to a multiple of 68 (at least 68);
  Atlas A2 / A3 [0, 2147483647], 0 = never; default 1836 s (27 x 68, NOTIFY_DEFAULT_WAIT_TIME).
- Older defaults: 6.0.RC1 600 s in [60, 17340]
  (https://www.hiascend.com/doc_center/source/zh/canncommercial/60RC1/modeldev/tfmigr1/tfmigr1_000069.html);
  6.0.1 1800 s in [68, 17340] (.../canncommercial/601/modeldev/tfmigr1/tfmigr1_000071.html); 6.3.RC2 1800 s
  (.../63RC2/modeldev/tfmigr2/tfmigr2_000132.html); 1836 s from 7.0.0 on
  (https://www.hiascend.com/document/detail/zh/canncommercial/700/reference/envvar/envref_07_0071.html).
- hccl_timeout: the same ranges per product, and it wins over HCCL_EXEC_TIMEOUT (hicann/tensorflow
  docs/en/tfadapter_1/apiref/session_config/exception_remedy.md @ 82957b9).
- HCCL_CONNECT_TIMEOUT: [120, 7200], default 120, every product and version; from 8.2.RC1 the docs add
  that the wait is the value + 20 s (hicann/hccl docs/zh/user_guide/hccl_env/HCCL_CONNECT_TIMEOUT.md).
"""

from __future__ import annotations

import re
from dataclasses import dataclass
from typing import Optional, Tuple

from npulaunch.host.lazyre import lazy_re

Version = Tuple[int, int, int, int]  # (major, minor, 0 for an RC / 1 for a release, RC or patch number)

# 6.0.RC1, 6.0.1, 6.3.RC2, 7.0.0, 8.0.RC2, 8.5.0, 9.0.0; a suffix (".alpha001", "-beta1") is ignored
_VERSION = lazy_re(r"^(\d+)\.(\d+)\.(?:(RC)(\d+)|(\d+))(?:[.\-_][A-Za-z0-9.]*)?$", re.IGNORECASE)
VERSION_FORMS = "a CANN version such as 6.0.RC1, 6.0.1, 7.0.0, 8.0.RC2 or 9.0.0"
LEGACY_PRODUCTS = (None, "atlas-training", "atlas-300i-duo")  # 68-second steps, at most 17340 s
STEP_S = 68
NEVER_MAX_S = 2147483647
V6_0_1: Version = (6, 0, 1, 1)
V7_0_0: Version = (7, 0, 1, 0)


def parse_version(text: str) -> Optional[Version]:
    """``"8.0.RC2"`` -> (8, 0, 0, 2): release candidates sort before their release."""
    match = _VERSION.match(text.strip())
    if not match:
        return None
    major, minor, rc, rc_number, patch = match.groups()
    return (int(major), int(minor), 0, int(rc_number)) if rc else (int(major), int(minor), 1, int(patch))


@dataclass(frozen=True)
class ExecTimeout:
    """What HCCL_EXEC_TIMEOUT / hccl_timeout accept and default to, for one product and version."""

    default_s: int
    low: int  # the smallest value accepted
    high: int
    step_s: int = 0  # the value used is rounded down to a multiple of this (0: used as given)
    zero_is_never: bool = False
    where: str = ""  # the product / version it was decided for, for messages

    def allowed(self) -> str:
        text = f"{self.low} to {self.high} seconds"
        return text + " (0 = never)" if self.zero_is_never else text

    def in_effect(self, value: int) -> int:
        """The value HCCL uses: Atlas training products round down to 68-second steps."""
        if not self.step_s or (value == 0 and self.zero_is_never):
            return value
        return max(self.step_s, value // self.step_s * self.step_s)


def exec_timeout(product: Optional[str], version: Optional[Version]) -> ExecTimeout:
    """The HCCL_EXEC_TIMEOUT table. Without a version the newest default (1836 s) is assumed,
    the largest any version has, so that npulaunch's own watchdog never fires before HCCL's."""
    legacy = product in LEGACY_PRODUCTS
    where = f"{product or 'an unnamed product'}, CANN {_shown(version)}"
    if version is not None and version < V6_0_1:
        return ExecTimeout(600, 60, 17340, 0, False, where)
    default = 1800 if version is not None and version < V7_0_0 else 1836
    if legacy:
        return ExecTimeout(default, 1 if version is None or version >= V7_0_0 else STEP_S, 17340, STEP_S, False, where)
    return ExecTimeout(default, 0, NEVER_MAX_S, 0, True, where)


def _shown(version: Optional[Version]) -> str:
    if version is None:
        return "version not given"
    major, minor, kind, number = version
    return f"{major}.{minor}.{number}" if kind else f"{major}.{minor}.RC{number}"
