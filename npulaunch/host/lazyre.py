"""Module-level regular expressions compiled when first used, not when their module is imported.

A launch imports some fifty patterns (npu-smi tables, hccn_tool answers, config checks, secret
flags, tracebacks); a plain run uses a few of them, and compiling all cost about 8 ms of each
launch's CPU (measured on the project's 2-core machine). ``lazy_re`` gives an object that behaves
as the compiled pattern: its first use compiles it and puts the pattern's methods on the object
itself, so every later call goes straight to them. Standard library only, Python 3.7+.
"""

from __future__ import annotations

import re
from typing import Any, Pattern, cast

_METHODS = ("match", "fullmatch", "search", "finditer", "findall", "sub", "subn", "split")


class _LazyPattern:
    def __init__(self, pattern: str, flags: int) -> None:
        self.pattern = pattern
        self.flags = flags

    def __getattr__(self, name: str) -> Any:  # only for names the object does not have yet
        compiled = re.compile(self.pattern, self.flags)
        for method in _METHODS:
            setattr(self, method, getattr(compiled, method))
        self.groups = compiled.groups
        self.groupindex = compiled.groupindex
        return getattr(compiled, name)

    def __repr__(self) -> str:
        return "lazy_re(%r)" % self.pattern


def lazy_re(pattern: str, flags: int = 0) -> "Pattern[str]":
    """``re.compile(pattern, flags)``, compiled at its first use."""
    return cast("Pattern[str]", _LazyPattern(pattern, flags))
