"""The shapes of the lines that carry CANN codes, and of the lines that continue a message. Pure:
text in, code hits out. A number is a code only in a return value's place ("error code is", "ret 107000",
"failed: 507034", "aclError:145000", "ErrorNo: 1343242270(...)", "errNo[...]", "status == HCCL_SUCCESS (1 vs. 0)")
and only when it is one: a number the catalog lists, or in the strongest places one of a code's shape; a step
counter, a loss, a port never is, and a success (0) never is. Every name a hit gives exists in the catalog.
Standard library only, Python 3.7+.

The templates come from CANN's printers (hicann/runtime src/dfx/error_manager/error_manager.cc,
src/dfx/log/liblog/slog/dlog_message.c, src/runtime/core/src/common/errcode_manage.cc and
error_message_manage.cc @ 681ef761), HCCL's (cann-hcomm src/pub_inc/log.h @ b5f3e5be), torch_npu's
(Ascend/pytorch torch_npu/csrc/core/npu/NPUException.h, torch_npu/utils/_error_code.py @ 9e73e708),
MindSpore's (ascend_err_manager.cc, "Ascend Error Message"), the TF Adapter's (GeOp "Error Message is") and
Graph Engine's (its ErrorNo statuses: hicann/ge inc/external/ge/ge_api_error_codes.h @ ffdcbc9f, codes.ge_fields).
"""

from __future__ import annotations

import re
import time
from types import ModuleType
from typing import List, Match, NamedTuple, Optional, Pattern, Tuple

from npulaunch.host.cann.codes import ACL, CANN, DRIVER, FAULT, GE, HCCL, TORCH_NPU, ge_fields
from npulaunch.host.lazyre import lazy_re


class Hit(NamedTuple):
    """A code found in a line: the code in its canonical form, its family, where it starts, how it was
    written (``form``: "code", "titled", "error code is", "errNo", ...)."""

    code: str
    family: str
    start: int
    form: str


# -- the pre-filter: what a block of output must hold to be looked at line by line -----------------------
# An error-level six-character code starts with "E" (memchr finds a block without one at memory speed); the
# other shapes are found by their words, which host/cann/prefilter.py's gates check with the phrases' needles.
# An error-level six-character code starts with "E", and so do the words that mark most other shapes: a Python
# exception's "Error:" (torch_npu's "RuntimeError: ... error code is 507035", MindSpore's "RuntimeError: Call rt api
# ... failed, ret: 507011"), a line a program logs at its ERROR level ("[ERROR] ... failed: 507035", a plog's errNo[...]
# and hcclRet, "with ERROR 561103") or that names the catalog's identifiers (ACL_ERROR_..., DRV_ERROR_...: "CANN
# failure 500001: ACL_ERROR_FAILURE"), torch_npu's ERRxxxxx. One search for all of them: memchr passes a block without
# an "E" at memory speed, and the regular expression, led by that literal "E", looks at each "E" once. The rest are
# found by the needles below, which prefilter.py's gates skip at memchr speed. Lines under a code line are read
# while its message is open. Not "error", "fail" or "failure" alone: a metric named mean_squared_error is printed on
# every step of some jobs, and a common word's gate opens on most blocks and costs a search of each
# (bench/log_path.py: "failure" and "FATAL" as needles cost 0.2 s of CPU on 8 x 200,000 lines of training output).
E_SHAPES = r"E(?:[0-9A-Z][0-9]{4}|rror:|RR(?:OR|0|99))"
# ErrCode=N, drvRetCode=N, ErrorCode=N; a check of a call's result against its family's success, as glog's CHECK_EQ
# prints it: "Check failed: status == HCCL_SUCCESS (1 vs. 0)"
SHAPE_NEEDLES = ("rrCode", "RetCode", "rrorCode", "SUCCESS (")
# In a block that may report a failure (it passed the pre-filter), the lines with a number in a return value's place
# are read too (return_value_at): "RegisterAscendBinary aiv ret 107000", "SetDevice failed.ret=507033" print no word
# the pre-filter looks for.
NUMBER_LINES = r"\d{6,}"
_E_SHAPES_BYTES: List[Pattern[bytes]] = []  # compiled at the first block that has an "E"


def ecode_in(block: bytes) -> bool:
    """Whether a block of output may hold an error-level six-character code or another shape's "E" word."""
    if b"E" not in block:
        return False
    if not _E_SHAPES_BYTES:
        _E_SHAPES_BYTES.append(re.compile(E_SHAPES.encode()))
    return _E_SHAPES_BYTES[0].search(block) is not None


# -- codes -------------------------------------------------------------------------------------------------------
# A six-character code stands where CANN's printers put one: before a colon ("EI0002: ...", "Title(EZ1001): "), before
# "[PID" or two spaces (an internal code's lines), at the end of a line, in parentheses, after "=" ("ErrorCode=EE1015"),
# or quoted, as a Python or JSON repr has it ({'errCode': 'EZ9999', ...}: see _quoted); never a token such as a file's
# name ("E10001.jpg") or a word in a sentence ("image E10001 loaded"), which would stop a healthy job.
_ECODE = lazy_re(
    r"(?<![0-9A-Za-z_])([EW][0-9A-Z]\d{4})(?:(?=\s*:|\[|\)|\s{2}|\s*$|\s*\])|(?<=[=(][EW][0-9A-Z]\d{4})"
    r"|(?<=['\"][EW][0-9A-Z]\d{4})(?=['\"]))"
)
# the strongest places: a number there is a code when it has an ACL code's shape, listed or not
_NUMERIC = lazy_re(
    r"(?i:\b(error[ _]?code(?:\s+is)?\s*[:=]?|errcode\s*[:=])|\bresult\s*=|\bret(?:code)?\s*[:=]|\breturn ret\s*[:=]"
    r"|\berrno\s*[:=\[]|\bret\s+is|\bfailed\s*:)"
    r"\s*\(?\s*(\d{1,10})(?![\dxX])(?!\.\d)"
)
# the weaker words ("result =", "ret:", "errno:") count only in a line that says something failed
_FAILED = lazy_re(r"(?i:fail|error|abnormal|exception)")
# A return value's place: a word that names one (ret, retcode, return, returned, rc, errno, err, error, errcode,
# error code, ErrorNo, status, result, code, failed, failure), alone or closing an identifier (aclError, hcclRet,
# drvRetCode, aclnnStatus, errNo), then what programs print between a name and its value (":", "=", "->", "is", "[",
# "(", quotes, spaces): "ret 107000", "ret[107001]", "failed: 507034", "aclError:145000", "with ERROR 561103",
# "'errCode': 507035", "ErrorNo: 1343242270(...)". A number there is a code when the catalog lists it (an ACL code)
# or GE's scheme decodes it (a GE status); "status", "result" and "code" alone name many values that are no return
# code ("exit code", an evaluation's result), so after them the line must also say that something failed.
_RETURN = lazy_re(
    r"(?:(?<![0-9A-Za-z_])|(?<=[a-z0-9])(?=[A-Z]))"
    r"(?i:ret(?:code|val|urn(?:ed)?)?|rc|errno|err(?:or)?(?:[ _]?(?:code|no|num))?|fail(?:ed|ure)?"
    r"|(status|result|code))"
    r"(?![A-Za-z])['\"]?\s*(?:is\b|[:=]|->)?\s*[\[(]?\s*['\"]?\s*$"
)
RETURN_REACH = 40  # how far before a number its name may start ("error code is " and the like)
# a number: a run of digits (the run is whole: no digit on either side), which ends where a value ends, not in a hex
# number, a decimal fraction or a word
_RUN = lazy_re(NUMBER_LINES)
_NOT_AFTER = lazy_re(r"[xX]|\.\d|[A-Za-z]")
# the catalog's own identifiers: ACL_ERROR_FAILURE, ACL_ERROR_RT_AICORE_EXCEPTION, ACLNN_ERR_INNER, HCCL_E_TIMEOUT,
# DRV_ERROR_OUT_OF_MEMORY
_IDENTIFIER = lazy_re(r"\b(ACL_ERROR_[A-Z0-9_]+|ACLNN_ERR_[A-Z0-9_]+|HCCL_E_[A-Z_]+|(?:DRV|DEV)_ERROR_[A-Z_]+)\b")
_HCCL_RET = lazy_re(r"hcclRet\s*->\s*(\d+)|\bret\[(\d+)\]")
_HCCL_ERRNO = lazy_re(r"\berrNo\[0x([0-9a-fA-F]{1,16})\]|\breturn\[(\d{6,10})\]")
_DRV = lazy_re(r"\bdrvRetCode\s*[=:]\s*(\d+)")
# a check of a call's result against its family's success value, as glog's CHECK_EQ prints one: "Check failed: status
# == HCCL_SUCCESS (1 vs. 0)" (either side may be the constant; each family's success is 0: HCCL_SUCCESS in
# hccl_types.h, ACL_SUCCESS / ACL_ERROR_NONE in acl_base_rt.h, RT_ERROR_NONE, DRV_ERROR_NONE in ascend_hal_error.h)
_CHECKED = lazy_re(r"\b(\w+)\s*==\s*(\w+)(?:\([^()]*\))?\s*\((-?\d+) vs\. (-?\d+)\)")
_SUCCESS = {"HCCL_SUCCESS": HCCL, "DRV_ERROR_NONE": DRIVER}  # the value is the family's enumerator
# the value is read by its own shape (an ACL code, a GE status: ge::SUCCESS, GRAPH_SUCCESS)
_SHAPED_SUCCESS = frozenset(("ACL_SUCCESS", "ACL_ERROR_NONE", "RT_ERROR_NONE", "SUCCESS", "GRAPH_SUCCESS"))
# torch_npu's "ERR<SS><EEE> <SUBMODULE> <text>" (_error_code.py's format): the code and the submodule's name after it
_TORCH_NPU = lazy_re(r"(?<![0-9A-Za-z_])(ERR\d{5}) (?:PTA|OPS|DIST|GRAPH|PROF|UNKNOWN)\b")
_EVENT = lazy_re(r"(?i:event_id|fault[ _]?code)\s*[:=\[]\s*(?:0x)?([0-9A-Fa-f]{8,9})\b")
_REASON = lazy_re(r"\b(?:reason|desc)\s*=\s*\[?([^\[\]]+?)\]?(?:\[FUNC:|,\s|\.?\s*$)")
_HCCL_CONTEXT = lazy_re(r"(?i:hccl|hcom)")

HCCL_MODULE = 5  # HCCL's module in its 64-bit errNo (log.h: HCCL_ERROR_CODE, HCOM_ERROR_CODE)


def find_codes(line: str) -> List[Hit]:
    """Every code the line carries, in order of where it starts."""
    hits: List[Hit] = []
    if "E" in line or "W" in line:
        for match in _ECODE.finditer(line):
            code = match.group(1)
            before = line[max(0, match.start() - 1) : match.start()]
            if line[match.end() : match.end() + 1] in ("'", '"') and not _quoted(code, line, match.start()):
                continue
            hits.append(Hit(code, CANN, match.start(), "titled" if before == "(" else "code"))
        if "ERR" in line:
            hits.extend(Hit(m.group(1), TORCH_NPU, m.start(), "torch_npu") for m in _TORCH_NPU.finditer(line))
    for match in _NUMERIC.finditer(line):
        number = match.group(2)
        if match.group(1) is None and not _FAILED.search(line):
            continue
        if len(number) == 6 and number[0] in "1235":
            hits.append(Hit(number, ACL, match.start(2), "error code"))
        elif len(number) <= 4 and _HCCL_CONTEXT.search(line):
            hits.extend(_named(hccl_name(int(number)), HCCL, match.start(2), "error code"))
    taken = {hit.start for hit in hits}
    for run in _RUN.finditer(line):  # the numbers of a code's length, each with the name before it
        start, end = run.span()
        name = None if start in taken else return_value_at(line, start, end)
        if name is None:
            continue
        camel = name.start() > 0 and line[name.start() - 1].isalnum()  # aclnnStatus: a return value's own name
        if name.group(1) is not None and not camel and not _FAILED.search(line):
            continue
        hits.extend(_returned(run.group(), start))
    if "_E" in line:
        hits.extend(_identifiers(line))
    if "hcclRet" in line or "ret[" in line:
        for match in _HCCL_RET.finditer(line):
            if match.group(1) or _HCCL_CONTEXT.search(line):  # ret[N] is HCCL's only in an HCCL line
                hits.extend(_named(hccl_name(int(match.group(1) or match.group(2))), HCCL, match.start(), "hcclRet"))
    if "errNo[" in line or "return[" in line:
        for match in _HCCL_ERRNO.finditer(line):
            value = int(match.group(1), 16) if match.group(1) else int(match.group(2))
            if (value >> 24) & 0xFF == HCCL_MODULE or value < 0x10000:
                hits.extend(_named(hccl_name(value & 0xFFFF), HCCL, match.start(), "errNo"))
    if "drvRetCode" in line:
        for match in _DRV.finditer(line):
            hits.extend(_named(driver_name(int(match.group(1))), DRIVER, match.start(), "drvRetCode"))
    if "vs. " in line:
        hits.extend(_checked(line))
    if "event_id" in line or "ault" in line:
        hits.extend(Hit(m.group(1).upper(), FAULT, m.start(1), "event id") for m in _EVENT.finditer(line))
    hits.sort(key=lambda hit: hit.start)
    return hits


def return_value_at(text: str, start: int, end: int) -> Optional[Match[str]]:
    """The name of the return value the run of digits text[start:end] is (a NUMBER_LINES match), when the run has a
    code's length (six digits, an ACL code; ten, a GE status), ends where a value ends and follows such a name."""
    if end - start not in (6, 10) or _NOT_AFTER.match(text, end):
        return None
    return _RETURN.search(text, max(0, start - RETURN_REACH), start)


def _catalog() -> ModuleType:
    """The generated catalog, imported at the first line that needs it (not by the agent's start)."""
    from npulaunch.host.cann import catalog

    return catalog


def _quoted(code: str, line: str, start: int) -> bool:
    """Whether a quoted six-character code is one: a value of a Python or JSON repr ({'errCode': 'E80012', ...},
    "error_code": "EZ9999", ('EZ1001', ...)), not a word quoted in a sentence; and a code the catalog lists, or any
    in a line that says something failed."""
    from npulaunch.host.cann.knowledge import DOCUMENTED_INNER

    if line[: start - 1].rstrip()[-1:] not in (":", "=", "(", "[", ",", "{"):
        return False
    return code in _catalog().ECODES or code in DOCUMENTED_INNER or _FAILED.search(line) is not None


def _returned(number: str, start: int) -> List[Hit]:
    """The code a number in a return value's place is: an ACL code the catalog lists (six digits), a status GE's
    scheme decodes (ten digits), else none (a success, 0, is none: it has no such shape)."""
    value = int(number)
    if len(number) == 6 and value in _catalog().NUMERIC:
        return [Hit(number, ACL, start, "return value")]
    if len(number) == 10 and ge_fields(value) is not None:
        return [Hit(number, GE, start, "ge status")]
    return []


def _named(name: Optional[str], family: str, start: int, form: str) -> List[Hit]:
    return [] if name is None else [Hit(name, family, start, form)]


def _checked(line: str) -> List[Hit]:
    """The code a failed check of a call's result against its family's success value holds: "status == HCCL_SUCCESS
    (1 vs. 0)" is HcclResult 1, HCCL_E_PARA."""
    hits: List[Hit] = []
    for match in _CHECKED.finditer(line):
        left, right, left_value, right_value = match.groups()
        known = _SHAPED_SUCCESS.union(_SUCCESS)
        constant, value = (right, left_value) if right in known else (left, right_value)
        if constant not in known or value.startswith("-"):
            continue
        if constant in _SHAPED_SUCCESS:
            hits.extend(_returned(value, match.start()))
        elif _SUCCESS[constant] == HCCL:
            hits.extend(_named(hccl_name(int(value)), HCCL, match.start(), "check"))
        else:
            hits.extend(_named(driver_name(int(value)), DRIVER, match.start(), "check"))
    return hits


def _identifiers(line: str) -> List[Hit]:
    """The codes a line names by the catalog's identifiers (only identifiers the catalog has)."""
    hits = []
    for match in _IDENTIFIER.finditer(line):
        name = match.group(1)
        if name.startswith("ACL"):
            number = _numbers_by_name().get(name)
            if number is not None:
                hits.append(Hit(str(number), ACL, match.start(), "identifier"))
        elif name in _catalog().HCCL_RESULTS.values():
            hits.append(Hit(name, HCCL, match.start(), "identifier"))
        elif name in _catalog().DRV_ERRORS.values():
            hits.append(Hit(name, DRIVER, match.start(), "identifier"))
    return hits


_BY_NAME: List[dict] = []


def _numbers_by_name() -> dict:
    if not _BY_NAME:
        _BY_NAME.append({name: number for number, (name, _) in _catalog().NUMERIC.items()})
    return _BY_NAME[0]


def hccl_name(value: int) -> Optional[str]:
    """HcclResult ``value``'s name, or None when HCCL's enum has none (0 is HCCL_SUCCESS: no failure)."""
    return _catalog().HCCL_RESULTS.get(value)


def driver_name(value: int) -> Optional[str]:
    """drvError_t ``value``'s name, or None when the driver's enum has none (0 is DRV_ERROR_NONE)."""
    return _catalog().DRV_ERRORS.get(value)


def find_reason(line: str) -> Optional[str]:
    """The runtime's reason text (``reason=[aicore exception]``, ``reason=device task abort``,
    ``desc=[the model stream execute failed]``), if any."""
    if "reason" not in line and "desc=" not in line:
        return None
    match = _REASON.search(line)
    return match.group(1).strip() if match else None


# -- what a line is, around the codes -----------------------------------------------------------------------------
# prefixes other programs put before a rank's own text: torchrun's --log-line-prefix ("[rank3]:"), mpirun's
# --tag-output ("[1,3]<stdout>:"), grep -n over log files ("plog-2950_2025.log:12:"), and grep -rn -C over a folder,
# as msrun prints its workers' errors when a job fails ("msrun_log/worker_3.log:120:" for a line that matched,
# "msrun_log/scheduler.log-58-" for one around it: mindspore/python/mindspore/parallel/cluster/process_entity/_api.py
# _analyze_log @ 1d200336), Ray's and vLLM's process tags ("(EngineCore_DP0 pid=753) "), vLLM's and similar loggers'
# level and time ("ERROR 04-30 03:48:59 [core.py:700] ")
_PREFIX = lazy_re(
    r"^(?:\[rank\d+\]:\s?|\[\d+,\d+\]<std(?:out|err)>:\s?|(?:[\w.-]+/)*[\w.-]+\.log(?::\d+:|-\d+-)"
    r"|\([\w.-]+(?: [\w.-]+=[\w.:-]+)*,? pid=\d+(?:, ip=[\d.]+)?\)\s?"
    r"|(ERROR|WARNING|INFO|DEBUG|CRITICAL) \d\d-\d\d \d\d:\d\d:\d\d(?:\.\d+)? \[[^\]]*\]\s?)+"
)
# CANN's plog record: "[ERROR] HCCL(17528,python3):2026-03-18-10:33:52.113.403 [file.cc:797] ...", and MindSpore's
# log line in the same form ("[ERROR] DEVICE(170414,fffe397fa1e0,python):2021-09-13-15:29:07.466.049 [...]")
_RECORD = lazy_re(r"^\[(ERROR|WARNING|WARN|INFO|DEBUG|EVENT|TRACE|CRITICAL)\] ?[A-Z_]+\([^)]*\):")
_CONTINUES = lazy_re(
    r"^(?:\s|TraceBack \(most recent call last\)|Possible Cause|Solution:|\[Error\]:|Error Message is|"
    r"\(Please search|Exception raised from|frame #\d|-+\s*$|- Ascend Error Message|Ascend Error Message|"
    r"During handling of the above exception|The above exception was the direct cause|"
    r"Traceback \(most recent call last\)|[A-Za-z_][\w.]*(?:Error|Exception|Interrupt|Exit)\b)"
)
# MindSpore's frame around an exception's parts (mindspore/core/utils/log_adapter.cc @ 02dbdb0f, PrintMessage: a line of
# dashes, "- <title>", dashes, the part): "- Ascend Error Message:", "- C++ Call Stack: (For framework developers)",
# "- Framework Unexpected Exception Raised:", "- Device load error message:", "- The Traceback of Net Construct Code:"
_BANNER = lazy_re(r"^- [A-Z][\w +'/.-]{0,60}:(?: \(For framework developers\))?\s*$")
# a warning printed by torch ("[W compiler_depend.ts:28] Warning: ..."), glog ("W1102 03:04:05.1 ...") or logging
_WARNING = lazy_re(r"^(?:\[W(?: |\d)|W\d{4} \d\d:\d\d|\[WARNING\]|\[WARN\]|WARNING[: ]|Warning: |UserWarning)")
# a line logged at an information level: glog ("I1102 03:04:05.1 ..."), Python's logging and absl ("INFO:tensorflow:",
# "INFO:root:"), the "[INFO]" and "[DEBUG]" of ACL programs' INFO_LOG and of ais_bench
_INFO = lazy_re(r"^(?:I\d{4} \d\d:\d\d|(?:INFO|DEBUG):\w|\[(?:INFO|DEBUG)\] )")
_TIME = lazy_re(
    r"(\d{4})-(\d{2})-(\d{2})[-T ](\d{2}):(\d{2}):(\d{2})(?:[.,](\d{3})(?:\.(\d{3}))?|\.(\d{4,6}))?(?![\d])"
)


def strip_prefix(line: str) -> str:
    """The line without what a launcher or logger put before the rank's own text."""
    return split_prefix(line)[0]


def split_prefix(line: str) -> Tuple[str, Optional[str]]:
    """The line without what a launcher or logger put before the rank's own text, and the level the logger's
    prefix gave it (vLLM's ``WARNING 07-22 05:09:39 [platform.py:394]``: a line it logged at WARNING is a warning
    whatever it says, a Traceback too), or None."""
    if line[:1] not in "[(EWIDC" and ".log" not in line[:200]:
        return line, None
    match = _PREFIX.match(line)
    return (line[match.end() :], match.group(1)) if match else (line, None)


def record_level(text: str) -> Optional[str]:
    """A plog record's level (``ERROR``), or None when the line is no plog record."""
    if not text.startswith("["):
        return None
    match = _RECORD.match(text)
    return match.group(1) if match else None


def continues(text: str) -> bool:
    """Whether a line (without its prefix) goes on the message before it: indented, a CANN block's
    TraceBack / Possible Cause / Solution, torch_npu's ``[Error]:``, the MindSpore and TF Adapter frames,
    a Python traceback's parts."""
    return bool(text) and _CONTINUES.match(text) is not None


def banner(text: str) -> bool:
    """Whether a line is the title of a part of MindSpore's exception frame (``- C++ Call Stack: ...``): the
    lines of that part, up to a blank line, go on the message."""
    return text[:2] == "- " and _BANNER.match(text) is not None


def is_warning(text: str) -> bool:
    return text[:1] in "[WU" and _WARNING.match(text) is not None


def is_info(text: str) -> bool:
    """Whether a line was logged at an information or debug level (a plog record's level is record_level's)."""
    return text[:1] in "I[D" and _INFO.match(text) is not None


def line_time(line: str) -> Optional[float]:
    """The line's own time stamp as epoch seconds (local time, as CANN, torch_npu and loggers write
    them: ``2026-03-18-10:33:52.113.403``, ``2025-10-11-15:09:34``, ``2024-01-02 03:04:05,123``), or None."""
    if "-" not in line:
        return None
    match = _TIME.search(line)
    if not match:
        return None
    y, mo, d, h, mi, s = (int(g) for g in match.groups()[:6])
    ms, us, frac = match.group(7), match.group(8), match.group(9)
    try:
        base = time.mktime((y, mo, d, h, mi, s, 0, 0, -1))
    except (OverflowError, ValueError):
        return None
    if frac:
        return base + int(frac) / 10 ** len(frac)
    return base + (int(ms) / 1000.0 if ms else 0.0) + (int(us) / 1e6 if us else 0.0)


def split_escaped(line: str) -> Tuple[str, ...]:
    """A line that holds a whole message with its newlines escaped (an exception's repr: ``...error code
    is 507899\\n[ERROR] ...\\nEL9999: Inner Error!\\n...``), as the lines it stands for."""
    if "\\n" not in line:
        return (line,)
    return tuple(part for part in line.split("\\n"))
