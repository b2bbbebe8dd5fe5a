"""Counts in words, read right: ``counted(1, "rank")`` is "1 rank", ``counted(4, "rank")`` "4 ranks"."""

from __future__ import annotations

from typing import Optional


def counted(number: int, word: str, plural: Optional[str] = None) -> str:
    return f"{number} {word if number == 1 else (plural or word + 's')}"
