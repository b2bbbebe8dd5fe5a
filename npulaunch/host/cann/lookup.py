"""What npulaunch knows of one code: its ``CodeInfo``, from the generated catalog (which codes exist, CANN's
titles and groups, where each came from) and knowledge.py (what npulaunch says of them); for a code no catalog
lists, from what its shape says. Imported at the first finding, not when the agent starts (the catalog is
140 KB). Standard library only, Python 3.7+.
"""

from __future__ import annotations

import re
from typing import Dict, Optional, Tuple

from npulaunch.host.cann import catalog
from npulaunch.host.cann.codes import (
    ACL,
    CANN,
    CAUSE,
    DRIVER,
    FAULT,
    GE,
    HCCL,
    INTERNAL,
    NUMERIC_CLASSES,
    NUMERIC_COMPONENTS,
    TORCH_NPU,
    USER,
    CodeInfo,
    ecode_module,
    ecode_scope,
    family_of,
    ge_fields,
)
from npulaunch.host.cann.knowledge import (
    ACL_REFERENCE,
    CATEGORIES,
    CATEGORY_HINTS,
    CODES,
    DOCUMENTED_INNER,
    ECODE_REFERENCE,
    FAULT_REFERENCE,
    GE_STATUS_HINT,
    INNER_REFERENCE,
    RETRYABLE,
    SOURCE_NOTES,
    TORCH_NPU_CLASSES,
    TORCH_NPU_HINTS,
    TORCH_NPU_PARTS,
    TORCH_NPU_REFERENCE,
    TORCH_NPU_TYPES,
    WARNING_HINT,
)


def describe(code: str) -> Optional[CodeInfo]:
    """What npulaunch knows of a code in canonical form (``codes.canonical``), known to a catalog or not;
    None when the text is no code at all."""
    family = family_of(code)
    if family is None:
        return None
    if family == CANN:
        return _ecode(code)
    if family == ACL:
        return _numeric(code)
    if family == GE:
        return _ge_status(code)
    if family in (HCCL, DRIVER):
        return _enum(code, family)
    if family == TORCH_NPU:
        return _torch_npu(code)
    return _fault(code)


# the module of a six-character code as a word in failure classes (runtime_inner_error, hccl_inner_error, ...)
_MODULE_WORDS = {
    "1": "ge",
    "2": "fe",
    "3": "aicpu",
    "4": "tefusion",
    "7": "operator",
    "8": "operator",
    "B": "tbe_pass",
    "E": "runtime",
    "H": "acl",
    "I": "hccl",
    "J": "hccp",
    "K": "profiling",
    "L": "driver",
    "N": "dvpp",
    "P": "dump",
}


def _slug(text: str) -> str:
    return re.sub(r"[^a-z0-9]+", "_", text.lower()).strip("_")


def _category(title: str) -> str:
    lowered = title.lower()
    return next((name for key, name in CATEGORIES if key in lowered), "error")


def _page(key: str, path: str) -> str:
    repo, commit, _ = catalog.SOURCES[key]
    return "https://github.com/%s/blob/%s/%s" % (repo, commit, path)


def _source(key: str) -> str:
    repo, commit, path = catalog.SOURCES[key]
    return "%s@%s:%s" % (repo, commit[:12], path)


def _info(code: str, family: str, known: bool, module: str, title: str, **fields: object) -> CodeInfo:
    """The CodeInfo with npulaunch's own knowledge (CODES, RETRYABLE) over the family's defaults."""
    own = CODES.get(code)
    if own is not None:
        fields.update(cls=own.cls, kind=own.kind, hint=own.hint)
    why = RETRYABLE.get(code, "")
    key, _, said = why.partition(" ")
    if key in SOURCE_NOTES:  # the note's key, spelled out: where Huawei's text says so
        why = "%s, says %s" % (said.split(": ", 1)[-1], SOURCE_NOTES[key].split(" (")[0])
    values: Dict[str, object] = dict(
        scope="", group="", category="error", cls="", kind=CAUSE, hint="", page="", level="", source=""
    )
    values.update(fields)
    return CodeInfo(code, family, known, module, title, retryable=bool(why), retryable_why=why, **values)  # type: ignore[arg-type]


def _ecode(code: str) -> CodeInfo:
    entry = catalog.ECODES.get(code)
    module, scope = ecode_module(code), ecode_scope(code)
    title, group, source = (entry[0], entry[1], entry[4]) if entry else ("", "", "")
    if scope == INTERNAL and not title.lower().endswith("inner_error"):
        category = "internal"
    else:
        category = _category(title) if title else ("internal" if scope == INTERNAL else "error")
    doc = catalog.DOCS.get(code)
    return _info(
        code,
        CANN,
        entry is not None or code in DOCUMENTED_INNER,
        module,
        title,
        scope=scope,
        group=group,
        category=category,
        cls="%s_%s" % (_MODULE_WORDS.get(code[1], "operator"), "inner_error" if scope == INTERNAL else _slug(category)),
        hint=WARNING_HINT
        if code[0] != "E"
        else (CATEGORY_HINTS[category] % module if "%s" in CATEGORY_HINTS[category] else CATEGORY_HINTS[category]),
        page=_page(*doc) if doc else (INNER_REFERENCE if code in DOCUMENTED_INNER else ECODE_REFERENCE),
        source=_source(source) if source else ("inner-doc" if code in DOCUMENTED_INNER else ""),
        warning=code[0] != "E",
    )


def _numeric(code: str) -> CodeInfo:
    entry = catalog.NUMERIC.get(int(code))
    component = NUMERIC_COMPONENTS.get(code[1:3], "CANN")
    klass = NUMERIC_CLASSES.get(code[0], "")
    category = {"1": "environment or code", "2": "resources", "3": "service state", "5": "internal"}.get(
        code[0], "error"
    )
    name, source = entry if entry else ("", "")
    page = ACL_REFERENCE % catalog.SOURCES["runtime-json"][1]
    if source in ("aclnn-codes",):
        page = _page("aclnn-codes", catalog.SOURCES["aclnn-codes"][2])
    return _info(
        code,
        ACL,
        entry is not None,
        component,
        name,
        scope=INTERNAL if code[0] == "5" else USER,
        group=klass,
        category=category,
        cls="%s_%s" % (_slug(component), "inner_error" if code[0] == "5" else "error"),
        hint="%s returned %s: %s" % (component, name or code, klass.split(":")[0] if klass else "an error"),
        page=page,
        source=_source(source) if source else "",
    )


def _ge_status(code: str) -> CodeInfo:
    """Graph Engine's status: its name and description from GE's headers (catalog.GE_STATUSES), its module and level
    by GE's scheme (codes.ge_fields), listed or not."""
    fields = ge_fields(int(code))
    assert fields is not None  # family_of said GE
    scheme = catalog.GE_STATUS_SCHEME
    module = scheme["modid"][fields["modid"]].replace("_MODULE", "").lower()
    entry = catalog.GE_STATUSES.get(int(code))
    name, desc, source = entry if entry else ("", "", "")
    level = scheme["level"][fields["level"]].replace("_LEVEL", "").lower()
    key = source or "ge-statuses"
    return _info(
        code,
        GE,
        entry is not None,
        "GE (%s module)" % module,
        name or "GE status %d of the %s module" % (fields["value"], module),
        scope="",
        group="GE status: %s module, %s level, value %d" % (module, level, fields["value"]),
        category=desc.rstrip(".!").lower() or "error",
        cls="ge_error",
        hint=GE_STATUS_HINT % (module + " module", desc.rstrip(".!") or "status %d" % fields["value"]),
        page=_page(key, catalog.SOURCES[key][2]),
        source=_source(source) if source else "",
    )


def _enum(code: str, family: str) -> CodeInfo:
    table, key = (catalog.HCCL_RESULTS, "hccl-results") if family == HCCL else (catalog.DRV_ERRORS, "drv-errors")
    number = next((n for n, name in table.items() if name == code), None)
    module = "HCCL" if family == HCCL else "Driver"
    words = code.split("_E_", 1)[-1] if family == HCCL else code.split("ERROR_", 1)[-1]
    return _info(
        code,
        family,
        number is not None,
        module,
        code if number is None else "%s (%d)" % (code, number),
        category=_category(words) if _category(words) != "error" else words.lower().replace("_", " "),
        cls="%s_error" % _slug(module),
        hint="%s returned %s: the lines around it name the call that failed" % (module, code),
        page=_page(key, catalog.SOURCES[key][2]),
        source=_source(key),
    )


def _torch_npu(code: str) -> CodeInfo:
    """torch_npu's ERR<SS><EEE>: its submodule and type from the catalog's numbers, in knowledge.py's words."""
    submodule = catalog.TORCH_NPU_SUBMODULES.get(int(code[3:5]))
    error = catalog.TORCH_NPU_ERRORS.get(int(code[5:8]))
    words = TORCH_NPU_TYPES.get(error or "", (error or "unknown type").lower().replace("_", " "))
    where = TORCH_NPU_PARTS.get(submodule or "", "submodule %s" % code[3:5])
    return _info(
        code,
        TORCH_NPU,
        submodule is not None and error is not None,
        "torch_npu %s" % (submodule or "submodule %s" % code[3:5]),
        "%s %s" % (submodule or "?", error or "?"),
        category=words,
        cls=TORCH_NPU_CLASSES.get(error or "", "torch_npu_%s" % _slug(error or "error")),
        hint=TORCH_NPU_HINTS.get(error or "")
        or "torch_npu, %s: %s; the CANN message printed with it names the cause" % (where, words),
        page=TORCH_NPU_REFERENCE % catalog.SOURCES["torch-npu-errors"][1],
        source=_source("torch-npu-errors"),
    )


def _fault(code: str) -> CodeInfo:
    level = catalog.FAULT_LEVELS.get(code)
    return _info(
        code,
        FAULT,
        level is not None,
        "NPU (hardware)",
        "fault event %s" % code,
        category="hardware",
        cls="npu_hardware_fault",
        # MindCluster treats a code it does not know as SeparateNPU (getFaultTypeBySeverity)
        level=level or "SeparateNPU",
        hint="the NPU reported a hardware fault; MindCluster handles it as %s"
        % (level or "SeparateNPU (unknown code)"),
        page=FAULT_REFERENCE % catalog.SOURCES["fault-levels"][1],
        source=_source("fault-levels") if level else "",
    )


def lookup_reason(text: str) -> Optional[Tuple[str, int]]:
    """The runtime's reason text (``reason=[aicore exception]``) and the ACL code it goes with, when the
    text holds one of the runtime's reasons."""
    stripped = text.strip().strip("[]").strip()
    code = catalog.RT_REASONS.get(stripped)
    return (stripped, code) if code is not None else None
