"""``npulaunch explain`` and ``npulaunch diagnose`` as text: what a code is, and the root cause found in a
set of logs. Pure rendering; what is known and decided is host/cann's and diagnose/offline.py's.
"""

from __future__ import annotations

import time
from typing import List, Optional

from npulaunch.diagnose.offline import Diagnosis, Located
from npulaunch.host.cann.codes import CANN, CAUSE, ECODE, INTERNAL, LEVELS, MODULES, NUMERIC_CLASSES, CodeInfo
from npulaunch.views.reporttext import root_cause_lines

KIND_TEXT = {
    CAUSE: "cause: a failure of its own",
    "symptom": "symptom: what waiting on a failure elsewhere looks like; the root cause is the earliest cause on "
    "another rank",
}


def render_code(info: CodeInfo) -> str:
    """What npulaunch knows of one code."""
    title = f"  {info.title}" if info.title else ""
    lines = [f"{info.code}  {info.module}{title}"]
    if not info.known:
        lines.append("  not in the catalog of the CANN versions npulaunch knows; " + shape_of(info))
    scope = {INTERNAL: "internal error", "user": "user error"}.get(info.scope, "")
    category = "" if info.category == "internal" and info.scope == INTERNAL else info.category
    kind_of = "warning (not a failure)" if info.warning else ", ".join(p for p in (scope, category) if p)
    lines.append(f"  {kind_of}" + (f" ({info.group})" if info.group else ""))
    if info.level:
        lines.append(f"  MindCluster's level: {info.level}")
    if not info.warning:
        lines.append(f"  {KIND_TEXT.get(info.kind, info.kind)}")
        lines.append(
            "  retryable: "
            + (f"yes: {info.retryable_why}" if info.retryable else "no (no text of Huawei's says a retry helps)")
        )
        lines.append(f"  failure class: {info.cls}")
    lines.append(f"  what to check: {info.hint}")
    lines.append(f"  CANN's page: {info.page}")
    if info.source:
        lines.append(f"  listed in: {info.source}")
    return "\n".join(lines) + "\n"


def shape_of(info: CodeInfo) -> str:
    """What a code's shape alone says (for a code no catalog lists)."""
    code = info.code
    if info.family == CANN and ECODE.match(code):
        module = MODULES.get(code[1], "a module CANN's reference does not list")
        scope = "internal (9000-9999, 8888)" if info.scope == INTERNAL else "a user error (0000-8999)"
        return f"its shape says: level {LEVELS.get(code[0], code[0])}, module {module}, {scope}"
    if info.family == "acl":
        klass = NUMERIC_CLASSES.get(code[0], "")
        return f"its shape says: an aclError of {info.module}, class {code[0]}xxxxx ({klass.split(':')[0]})"
    if info.family == "fault":
        return f"its shape says: an NPU hardware fault code; MindCluster handles unknown codes as {info.level}"
    return f"its shape says: a {info.module} code"


def render_diagnosis(diagnosis: Diagnosis) -> str:
    files = len(diagnosis.files)
    found = (1 if diagnosis.root else 0) + len(diagnosis.explained) + len(diagnosis.others)
    lines = [f"npulaunch diagnose: {files} file{'s' if files != 1 else ''}, {found} finding{'s' if found != 1 else ''}"]
    if diagnosis.job_dir:
        return "\n".join(lines + _job_lines(diagnosis)) + "\n"
    root = diagnosis.root
    if root is None:
        lines.append(f"  {diagnosis.why}")
        return "\n".join(lines) + "\n"
    f = root.finding
    lines.append(f"  root cause: {_label(root)} in {_where(root)}{_at(f.time)}")
    lines.append(f"  error: {f.line}")
    if f.detail:
        lines.append(f"  detail: {f.detail}")
    if f.codes:
        lines.append(f"  other codes in the message: {', '.join(f.codes)}")
    excerpt = list(f.before[-5:]) + [f.line] + list(f.after)
    if len(excerpt) > 1:
        lines.append("  excerpt:")
        lines.extend("    | " + text for text in excerpt)
    lines.append(f"  why: {diagnosis.why}")
    lines.append(
        f"  hint: {f.hint}"
        + (f" (a retry may help{': ' + f.retryable_why if f.retryable_why else ''})" if f.retryable else "")
    )
    if f.info is not None:
        lines.append(f"  CANN's page: {f.info.page}")
    if diagnosis.explained:
        lines.append("  symptoms it explains:")
        lines.extend(f"    {_where(x)}: {_label(x)}{_at(x.finding.time)}" for x in diagnosis.explained)
    if diagnosis.others:
        lines.append("  other findings:")
        lines.extend(f"    {_where(x)}: {_label(x)}{_at(x.finding.time)}" for x in diagnosis.others[:20])
        if len(diagnosis.others) > 20:
            lines.append(f"    ... and {len(diagnosis.others) - 20} more (--json lists every one)")
    return "\n".join(lines) + "\n"


def _job_lines(diagnosis: Diagnosis) -> List[str]:
    """A job directory's diagnosis: its root cause as ``report`` says it, then what its files hold."""
    lines = [f"  job directory {diagnosis.job_dir}: {diagnosis.why}"]
    if diagnosis.failure is not None:
        lines.extend(root_cause_lines(diagnosis.failure))
    found = ([diagnosis.root] if diagnosis.root else []) + list(diagnosis.explained) + list(diagnosis.others)
    found.sort(key=lambda x: (x.finding.time is None, x.finding.time or 0.0))
    if found:
        lines.append("  findings in its files:")
        lines.extend(f"    {_where(x)}: {_label(x)}{_at(x.finding.time)}" for x in found[:20])
        if len(found) > 20:
            lines.append(f"    ... and {len(found) - 20} more (--json lists every one)")
    return lines


def _label(x: Located) -> str:
    f = x.finding
    return f"{f.code or f.name} ({f.cls}, {f.kind})"


def _where(x: Located) -> str:
    rank = f"rank {x.rank}, " if x.rank is not None else ""
    return f"{rank}{x.path}" + (f":{x.finding.line_no}" if x.finding.line_no else "")


def _at(stamp: Optional[float]) -> str:
    if stamp is None:
        return ""
    return " at " + time.strftime("%Y-%m-%d %H:%M:%S", time.localtime(stamp)) + ("%.3f" % (stamp % 1))[1:]


def explain_lines(infos: List[CodeInfo]) -> str:
    return "\n".join(render_code(info) for info in infos)
