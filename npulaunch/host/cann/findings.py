"""One message, one finding: the message's most specific code (a user E-code over an internal one,
over an ACL return code, HCCL's and the driver's results, torch_npu's ERRxxxxx, a fault event id;
the first of its kind), the others listed, and what the catalog and the message's own words say
about it. An internal code is refined by its block: the driver call that failed, the operator, the
device, the runtime's reason, the code under it that says more. Standard library only, Python 3.7+.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Callable, List, Optional, Tuple

from npulaunch.host.cann.codes import ACL, CANN, CAUSE, INTERNAL, SYMPTOM, CodeInfo, specificity
from npulaunch.host.cann.messages import Message
from npulaunch.host.cann.phrases import Signature
from npulaunch.host.cann.shapes import find_reason, line_time, strip_prefix
from npulaunch.host.lazyre import lazy_re

EXCERPT_AFTER = 12  # a message's lines shown after the one with its code


@dataclass(frozen=True)
class Finding:
    name: str  # the code, or the phrase's name when the message carries no code
    code: str
    codes: Tuple[str, ...]  # the message's other codes, in order
    cls: str
    kind: str  # CAUSE or SYMPTOM
    retryable: bool
    retryable_why: str
    fatal: bool  # the job cannot go on: stop it now
    hint: str
    detail: str  # what the message says beyond its code (the call, the operator, the device, the reason)
    line: str  # the line that carries the code (or the phrase)
    before: Tuple[str, ...]
    after: Tuple[str, ...]
    time: Optional[float]  # the message's own time stamp, when it has one
    info: Optional[CodeInfo]
    line_no: int = 0  # the stream's line (1-based) of ``line``, where the reader counted them


_DRIVER_CALL = lazy_re(r"\[(?:drv api|driver interface)\]\s*(\w+) failed|\b((?:hal|drv)[A-Z]\w+) failed")
_RUNTIME_CALL = lazy_re(r"\b((?:rt|acl)[A-Z]\w+) (?:execution|execute) failed")
_OPERATOR = lazy_re(
    r"\bOp (\w+) |opType: \d+, (\w+)|kernel_name=([\w.-]+)|\bop_name is ([\w.-]+)|call (aclnn\w+) failed"
    r"|launch failed for (\w+)"
)
_DEVICE = lazy_re(
    r"\bdevice_id=(\d+)|\bdevice\(chipId:(\d+)|\bDevice:(\d+)|\bdeviceId\s*=\s*(\d+)|\bdevice ID (\d+)|\bdevId=(\d+)"
)
_INNER_CODE = lazy_re(r"\bInnerCode=(0x[0-9a-fA-F]+)")
# torch_npu's header "(PID:<pid>, Device:<device or -1>, RankID:<$RANK or -1>)" (Ascend/pytorch
# torch_npu/csrc/core/npu/NPUException.cpp formatErrorCode, L90-105 @ 9e73e708): the rank that printed it, when set
_RANK_ID = lazy_re(r"\bRankID:(\d+)\)")
_KERNEL_FAULT = lazy_re(r"(?i:\b(?:aicore|aivec|aivector|vector core|ai core)\b.{0,40}?\b(?:error|exception)\b)")
_AICPU_FAULT = lazy_re(r"(?i:\baicpu\b.{0,40}?\bexception\b|exception occurred during AICPU execution)")
_TIMEOUT = lazy_re(r"(?i:\btime(?:d)?[ _]?out\b)")


def build(message: Message, source: str = "") -> Finding:
    """The finding a message is."""
    from npulaunch.host.cann.lookup import describe, lookup_reason  # the catalog, loaded at the first finding

    codes = _codes(message)
    phrased = [(i, p) for i, p in message.phrases if isinstance(p, Signature)]
    # the first phrase that names the failure, else the first (a traceback's, a framework's: host/cann/phrases.py)
    at, phrase = next(
        ((i, p) for i, p in phrased if p.name not in GENERIC_PHRASES), phrased[0] if phrased else (0, None)
    )
    chosen = min(codes, key=lambda c: (specificity(c[1]), c[0]))[1] if codes else ""
    text = "\n".join(strip_prefix(line) for line in message.lines)
    reason = _reason(message, lookup_reason)
    implied = ""
    if not chosen and reason is not None and reason[1] is not None:
        implied = str(reason[1])
    code = chosen or implied
    info = describe(code) if code else None
    where = _code_line(message, codes, chosen) if chosen else None
    if where is None:
        where = at
    where = min(where, len(message.lines) - 1)
    cls, kind, hint, retryable, why = _judge(info, phrase, codes, chosen, text)
    detail = _detail(text, reason, implied)
    stamp = next((t for t in map(line_time, message.lines) if t is not None), None)
    return Finding(
        name=code or (phrase.name if phrase is not None else "message"),
        code=code,
        codes=tuple(dict.fromkeys(c for _, c in codes if c != code)),
        cls=cls,
        kind=kind,
        retryable=retryable,
        retryable_why=why,
        fatal=bool(chosen and chosen[0] != "W") or bool(implied) or (phrase is not None and phrase.fatal),
        hint=hint,
        detail=detail,
        line=message.lines[where][:500],
        before=tuple(message.before) + tuple(line[:500] for line in message.lines[:where]),
        after=tuple(line[:500] for line in message.lines[where + 1 : where + 1 + EXCERPT_AFTER]),
        time=stamp,
        info=info,
        line_no=message.line_no + where if message.line_no else 0,
    )


_BARE_HEADER = lazy_re(r"[EW][0-9A-Z]\d{4}:\s*(?:Inner Error|Internal error)[^:]*$")


def _code_line(message: Message, codes: List[Tuple[int, str]], chosen: str) -> Optional[int]:
    """The line to show for the code: its first line that says more than a bare ``EZ9999: Inner Error!``."""
    lines = [i for i, c in codes if c == chosen]
    kept = [i for i in lines if i < len(message.lines)]
    telling = [i for i in kept if not _BARE_HEADER.search(message.lines[i])]
    if not telling and kept and kept[0] + 1 < len(message.lines):
        return kept[0] + 1  # the header says nothing: the line under it does
    found = telling or kept or lines
    return found[0] if found else None


def _codes(message: Message) -> List[Tuple[int, str]]:
    """(line index, code) of every error-level code in the message, a phrase's code at its line."""
    found = [(index, hit.code) for index, hit in message.hits if hit.code[0] != "W" or hit.family != "cann"]
    found += [(index, p.code) for index, p in message.phrases if isinstance(p, Signature) and p.code]
    return sorted(found)


# phrases that say only that something failed, not what: a code's knowledge goes before them (a framework's own
# failure is one: MindSpore's internal errors print no code, and one printed with them names the cause)
GENERIC_PHRASES = frozenset(("python-traceback", "out-of-memory", "segfault", "mindspore-internal-error"))
# the categories of a user code's title that say no more than a code under it may (host/cann/lookup.py CATEGORIES):
# EL0003's "invalid argument" over 507033's device that did not start; never E30006's "installation" (the OPP)
_VAGUE_CATEGORIES = frozenset(("invalid argument", "error", "internal"))


def _judge(
    info: Optional[CodeInfo], phrase: Optional[Signature], codes: List[Tuple[int, str]], chosen: str, text: str
) -> Tuple[str, str, str, bool, str]:
    """(class, kind, hint, retryable, why) of the finding: npulaunch's knowledge of the code first; for a
    code it has none of, a failure phrase the message holds (but a traceback's or a crash's), a code
    under it that it knows (when the code's own title says little: an internal or invalid-argument one), what the
    block's words say (an internal code's kernel fault or timeout);
    else the family's defaults."""
    from npulaunch.host.cann.knowledge import CODES
    from npulaunch.host.cann.lookup import describe

    if info is not None and info.code in CODES:
        return info.cls, info.kind, info.hint, info.retryable, info.retryable_why
    specific = phrase is not None and phrase.name not in GENERIC_PHRASES
    if phrase is not None and specific:
        return phrase.cls, phrase.kind, phrase.hint, phrase.retryable, ""
    vague = info is None or info.family != CANN or info.scope == INTERNAL or info.category in _VAGUE_CATEGORIES
    for _, other in codes if vague else ():
        if other != chosen and other in CODES:
            known = describe(other)
            if known is not None:
                return known.cls, known.kind, known.hint, known.retryable, known.retryable_why
    if info is not None and (info.scope == INTERNAL or info.family == ACL):
        if _KERNEL_FAULT.search(text):
            return "device_kernel_fault", CAUSE, CODES["507015"].hint, False, ""
        if _AICPU_FAULT.search(text):
            return "aicpu_kernel_fault", CAUSE, CODES["507018"].hint, False, ""
        if info.module == "HCCL" and _TIMEOUT.search(text):
            return "hccl_exec_timeout", SYMPTOM, CODES["EI0002"].hint, False, ""
    if info is None or (phrase is not None and info.family != "cann" and not info.known):
        if phrase is not None:
            return phrase.cls, phrase.kind, phrase.hint, phrase.retryable, ""
        return "message", CAUSE, "", False, ""
    return info.cls, info.kind, info.hint, info.retryable, info.retryable_why


def _reason(
    message: Message, lookup_reason: Callable[[str], Optional[Tuple[str, int]]]
) -> Optional[Tuple[str, Optional[int]]]:
    """The runtime's reason in the message (the first it knows, else the first), and its ACL code."""
    texts = [text for text in map(find_reason, message.lines) if text]
    for text in texts:
        found = lookup_reason(text)
        if found is not None:
            return found
    return (texts[0], None) if texts else None


# what a message's detail names, each from the first of its patterns' groups that matched
_NAMED = (
    ("operator %s", _OPERATOR),
    ("the runtime's inner code %s", _INNER_CODE),
    ("device %s", _DEVICE),
    ("rank %s", _RANK_ID),
)


def _detail(text: str, reason: Optional[Tuple[str, Optional[int]]], implied: str) -> str:
    parts = []
    call = _DRIVER_CALL.search(text)
    if call:
        parts.append("driver call %s failed" % (call.group(1) or call.group(2)))
    else:
        call = _RUNTIME_CALL.search(text)
        if call:
            parts.append("runtime call %s failed" % call.group(1))
    for words, pattern in _NAMED:
        found = pattern.search(text)
        if found:
            parts.append(words % next(g for g in found.groups() if g))
    if reason is not None and reason[1] is not None:
        parts.append(
            "the runtime's reason: %s (%d%s)" % (reason[0], reason[1], ", the code it implies" if implied else "")
        )
    elif reason is not None:
        parts.append("the runtime's reason: %s" % reason[0][:120])
    return "; ".join(parts)
