"""The pre-filter of the log path, and the phrases' matcher: a block of a rank's output is looked at
line by line only when it may hold a code (shapes.py) or a failure phrase (phrases.py); the gates
that decide it cost a few memchr calls a block of ordinary output.

Standard library only, Python 3.7+: the agent matches on compute hosts. A leaf: it knows lines,
not ranks or jobs. Facts (codes, meanings) follow Huawei's error-code reference; wording is ours.
"""

from __future__ import annotations

import bisect
import itertools
import re
from typing import Dict, Iterable, List, Match, Optional, Pattern, Sequence, Tuple, Union

from npulaunch.host.cann.phrases import CAUSE, SIGNATURES, SYMPTOM, Signature
from npulaunch.host.cann.shapes import E_SHAPES, NUMBER_LINES, SHAPE_NEEDLES, ecode_in, return_value_at
from npulaunch.host.lazyre import lazy_re
from npulaunch.host.tail import split_lines

__all__ = ["CAUSE", "SYMPTOM", "SIGNATURES", "Signature", "Matcher", "user_signatures"]


class Matcher:
    """Finds the signatures lines carry. Lines come in blocks and almost never match, so a block is
    first checked whole, as bytes (``scan_block``): for the literal needles of the built-in
    signatures and with the job's own patterns; only a block that passes is cut into lines, and
    then only the lines where a needle was found meet the patterns (a block with one benign
    "[ERROR]" plog line costs one line's patterns, not 500).

    The check of a block starts with gates (``_Gate``): a needle cannot be in a block that lacks one
    of its characters, and a single character is found at memory speed (memchr), several times
    faster than the needle itself. Most blocks of ordinary output lack a rare character of every
    needle, and are passed in a few memchr calls (8 ranks x 200k lines: 0.1 us a line)."""

    def __init__(self, signatures: Sequence[Signature] = SIGNATURES, shapes: bool = True) -> None:
        """``shapes``: also pass the blocks that may hold a code in one of CANN's shapes (an error-level
        six-character code, or the words of the other shapes: host/cann/shapes.py)."""
        self.signatures = tuple(signatures)
        self._shapes = shapes
        self._each = [(s, _Lazy(s.pattern)) for s in self.signatures]
        # each signature's own needles, so a line is tried only against the patterns whose needles it holds
        self._needles = [
            (_exact(s.needles), tuple(n for n in s.needles if n not in _exact(s.needles))) for s in self.signatures
        ]
        # needles with no letters (a numeric code) are matched exactly: no lower-cased copy for them
        self._exact = _prefilter({n for s in self.signatures for n in _exact(s.needles)})
        self._shape_prefilter = _prefilter(SHAPE_NEEDLES) if shapes else ()
        self._folded = _prefilter({n for s in self.signatures for n in s.needles if n not in _exact(s.needles)})
        unfiltered = [s.pattern for s in self.signatures if not s.needles]
        self._unfiltered = re.compile("|".join("(?:%s)" % p for p in unfiltered), re.MULTILINE) if unfiltered else None

        # a signature whose lines come with an E-shape in their block needs no gate: ecode_in passes its blocks
        gated = [s for s in self.signatures if not (shapes and s.shaped)]
        self._gates = _gates(
            {n for s in gated for n in _exact(s.needles)} | (set(SHAPE_NEEDLES) if shapes else set()),
            {n for s in gated for n in s.needles if n not in _exact(s.needles)},
        )

    def scan_block(self, block: bytes) -> Tuple[List[str], List[Tuple[int, Signature]]]:
        """``(lines, found)``: the signatures a block of whole lines carries, as ``scan`` gives them for
        its lines (text, progress updates without their ``\\r``). Both are empty when no needle is in
        the block, the common case, which costs no decoding and no splitting."""
        if not self.block_may_match(block):
            return [], []
        lines = split_lines(block)
        if b"\r" in block:
            lines = [line.rstrip("\r") for line in lines]
        return lines, self.scan(lines)

    def block_may_match(self, block: bytes) -> bool:
        """Whether a block of whole lines may hold a code or a phrase (when it does not, nothing in it
        needs a closer look: the common case, at memory speed)."""
        if self._shapes and ecode_in(block):
            return True
        lowered: Optional[bytes] = None
        for gate in self._gates:
            if gate.closed(block):
                continue
            text = block
            if gate.folded:
                if lowered is None:
                    lowered = block.lower()  # ASCII letters only: the needles are ASCII
                text = lowered
            if gate.search(text):
                return True
        if self._unfiltered is None:
            return False
        return self._unfiltered.search(block.decode("utf-8", "replace")) is not None

    def _may_match(self, text: str) -> bool:
        if any(_found(needle, text) for needle in self._exact):
            return True
        if self._folded:
            lowered = text.lower()
            if any(_found(needle, lowered) for needle in self._folded):
                return True
        return self._unfiltered is not None and self._unfiltered.search(text) is not None

    def match(self, line: str) -> Optional[Signature]:
        """The first signature (in catalog order) the line carries."""
        if not self._may_match(line):
            return None
        lowered = line.lower()
        for (signature, pattern), (exact, folded) in zip(self._each, self._needles):
            if (exact or folded) and not any(n in line for n in exact) and not any(n in lowered for n in folded):
                continue
            if pattern.search(line):
                return signature
        return None

    def scan(self, lines: Sequence[str], joined: Optional[str] = None) -> List[Tuple[int, Signature]]:
        """``(index, signature)`` for each line of a batch that carries one. ``joined``: the
        lines joined with newlines, when the caller has them already."""
        if not lines:
            return []
        found = []
        for index in self._candidates(lines, "\n".join(lines) if joined is None else joined):
            signature = self.match(lines[index])
            if signature is not None:
                found.append((index, signature))
        return found

    def candidate_lines(self, lines: Sequence[str]) -> Sequence[int]:
        """The lines of a batch that may carry a phrase or a code in one of CANN's shapes (what the block's
        pre-filter looked for, found line by line); every line when the job's own patterns match. In a batch that
        has one, the lines with a number in a return value's place too (shapes.return_value_at): a return value
        printed without a word the pre-filter looks for ("ret 107000") counts in a block that reports a failure."""
        text = "\n".join(lines)
        shaped = self._candidates(lines, text, shapes=True)
        if len(shaped) == len(lines):
            return shaped
        starts = [m.start() for m in _ECODE_TEXT.finditer(text)] if "E" in text else []
        if not starts and not shaped:
            return shaped
        starts += [m.start() for m in _NUMBER_TEXT.finditer(text) if return_value_at(text, m.start(), m.end())]
        return sorted(set(shaped) | set(_line_indexes(lines, starts)))

    def _candidates(self, lines: Sequence[str], text: str, shapes: bool = False) -> Sequence[int]:
        """The lines of a batch that may carry a signature: those where a needle occurs (a needle holds
        no newline, so each occurrence lies within one line), or every line when the job's own
        patterns (which have no needles) match the batch. One search of the batch for each group of
        needles, as the pre-filter does; nothing more when none occurs."""
        starts = [start for needle in self._exact for start in _starts(needle, text)]
        if shapes:
            starts += [start for needle in self._shape_prefilter for start in _starts(needle, text)]
        lowered = text.lower() if self._folded else text
        starts += [start for needle in self._folded for start in _starts(needle, lowered)]
        if (self._unfiltered is not None and self._unfiltered.search(text) is not None) or (
            starts and len(lowered) != len(text)  # lower-casing changed the length (a few non-ASCII letters do)
        ):
            return range(len(lines))
        if not starts:
            return ()
        return _line_indexes(lines, starts)


def _line_indexes(lines: Sequence[str], starts: Iterable[int]) -> List[int]:
    """The lines (of ``lines`` joined by newlines) where the offsets lie."""
    ends = list(itertools.accumulate(map((1).__add__, map(len, lines))))  # past each line and its newline
    return sorted({bisect.bisect_right(ends, start) for start in starts})


Needle = Union[str, Pattern[str]]
_ECODE_TEXT = lazy_re(E_SHAPES)
_NUMBER_TEXT = lazy_re(NUMBER_LINES)


class _Lazy:
    """A signature's pattern, compiled when a line first needs it: most jobs never print a line that
    gets that far, and compiling every pattern would cost each launch and each agent milliseconds."""

    __slots__ = ("source", "_compiled")

    def __init__(self, source: str) -> None:
        self.source = source
        self._compiled: Optional[Pattern[str]] = None

    def search(self, text: str) -> Optional[Match[str]]:
        if self._compiled is None:
            self._compiled = re.compile(self.source)
        return self._compiled.search(text)


# Characters from the rarest in log text to the most common (a rough order; the gates adapt to the
# text they meet). A character not listed counts as rarer than any.
_COMMONNESS = "QJZXVKWYqjzxFBGHMPUkvbywgfp!@#$%^&*|~`<>?{}CDLNORSTAIEucmdlhrsnioate,;()[]/-_.:=\"'0123456789 "
GATES_TRIED = 2  # characters looked for before searching for the needles themselves


class _Gate:
    """Needles that share a rare character, with the characters all of them contain, rarest first: a
    block without one of those characters holds none of the needles. The character that closed the gate
    last is tried first next time (blocks of a stream look alike). An open gate looks for each needle
    (a few ``in`` searches, each at memory speed)."""

    __slots__ = ("chars", "needles", "folded", "_last")

    def __init__(self, needles: Sequence[bytes], folded: bool) -> None:
        shared = set(needles[0])
        for needle in needles[1:]:
            shared &= set(needle)
        ranked = sorted(shared, key=_rarity)
        # each gate character in the forms that count: both cases when the needles are folded
        self.chars = [
            tuple({bytes([byte]), bytes([byte]).upper()}) if folded else (bytes([byte]),)
            for byte in ranked[:GATES_TRIED]
        ]
        self.needles = tuple(needles)
        self.folded = folded
        self._last = 0

    def search(self, block: bytes) -> bool:
        return any(needle in block for needle in self.needles)

    def closed(self, block: bytes) -> bool:
        """Whether the block lacks a character every needle has (in either case, when folded)."""
        order = [self._last] + [i for i in range(len(self.chars)) if i != self._last]
        for i in order:
            if not any(form in block for form in self.chars[i]):
                self._last = i
                return True
        return False


def _rarity(byte: int) -> Tuple[int, int]:
    return (_COMMONNESS.find(chr(byte)), byte)


def _gates(exact: Iterable[str], folded: Iterable[str]) -> Tuple[_Gate, ...]:
    """The gates of the needles: exact ones grouped by their rarest character (so that each gate closes
    on ordinary text), folded (lower-case) ones alone."""
    groups: Dict[int, List[bytes]] = {}
    for needle in sorted(n.encode() for n in exact):
        groups.setdefault(min(needle, key=_rarity), []).append(needle)
    gates = [_Gate(group, folded=False) for _, group in sorted(groups.items())]
    return tuple(gates + [_Gate([n.encode()], folded=True) for n in sorted(folded)])


def _exact(needles: Iterable[str]) -> Tuple[str, ...]:
    """The needles matched as written: those with a capital letter, or with no letter at all (a numeric
    code); the others (lower-case) match in any case."""
    return tuple(n for n in needles if n != n.lower() or n.upper() == n)


def _prefilter(needles: Iterable[str]) -> Tuple[Needle, ...]:
    """Needles grouped by their first character: a group is one regular expression starting with
    that literal character, which the regex engine looks for as fast as ``in`` finds a string, so
    the E-codes cost one pass over the text instead of one each (measured: 4 ms instead of 59
    ms for 15 MB). The group is written as a trie ("E(?:I00(?:02|06)|Z9999)"): each E found costs
    a few character tests however many codes there are. A needle alone in its group stays a string."""
    groups: Dict[str, List[str]] = {}
    for needle in sorted(needles):
        groups.setdefault(needle[0], []).append(needle)
    return tuple(group[0] if len(group) == 1 else re.compile(_trie(group)) for _, group in sorted(groups.items()))


def _trie(words: Iterable[str]) -> str:
    """A regular expression matching exactly the words, their shared prefixes written once."""
    branches: Dict[str, List[str]] = {}
    for word in words:
        branches.setdefault(word[:1], []).append(word[1:])
    alternatives = [re.escape(first) + _trie(rests) if first else "" for first, rests in sorted(branches.items())]
    return alternatives[0] if len(alternatives) == 1 else "(?:" + "|".join(alternatives) + ")"


def _found(needle: Needle, text: str) -> bool:
    return needle in text if isinstance(needle, str) else needle.search(text) is not None


def _starts(needle: Needle, text: str) -> List[int]:
    """Where the needle occurs in the text."""
    if not isinstance(needle, str):
        return [found.start() for found in needle.finditer(text)]
    starts, start = [], text.find(needle)
    while start >= 0:
        starts.append(start)
        start = text.find(needle, start + 1)
    return starts


def user_signatures(patterns: Iterable[dict]) -> List[Signature]:
    """Signatures from the YAML's monitor.patterns (already validated by the config layer)."""
    return [
        Signature(
            name=p["name"],
            pattern=p["pattern"],
            cls=p.get("class", p["name"]),
            kind=p.get("kind", CAUSE),
            retryable=bool(p.get("retryable", False)),
            hint=p.get("hint", "matched the job's own pattern"),
            code=p.get("code", ""),
        )
        for p in patterns
    ]
