"""What a CANN code is: its family, module, title, user or internal, class, whether a retry can
help, cause or symptom, what to check, and CANN's page. From the generated catalog (catalog.py)
when it lists the code, else from what the code's shape alone says. A leaf of host/cann: it knows
codes, not lines. Standard library only, Python 3.7+.

Structure (CANN's error-code reference, "Description": hiascend.com/document/detail/en/
CANNCommunityEdition/900/maintenref/troubleshooting/troubleshooting_0225.html): six characters; the
first is the level (E error, W warning, I information), the second the module, the last four the
code: 0000-8999 user errors, 9000-9999 internal ones. The runtime also counts xx8888 as internal
(``IsInnerErrorCode``, hicann/runtime src/dfx/error_manager/error_manager.cc @ 681ef761).
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Dict, Optional, Tuple

from npulaunch.host.lazyre import lazy_re

CAUSE, SYMPTOM = "cause", "symptom"
USER, INTERNAL = "user", "internal"

# the second character (the page above; 5, 6, 9 and A are not in its list, but the runtime's catalog files
# operator checks and compilation errors under them)
MODULES = {
    "1": "GE",
    "2": "FE",
    "3": "AI CPU",
    "4": "TE Fusion",
    "5": "Operators",
    "6": "Operators",
    "7": "Vector operator plugins",
    "8": "Vector operators",
    "9": "Operator compilation",
    "A": "Operator compilation",
    "B": "TBE Pass compiler",
    "C": "Auto Tune",
    "D": "RL Tune",
    "E": "Runtime",
    "F": "LxFusion and AutoDeploy",
    "G": "AOE",
    "H": "ACL",
    "I": "HCCL",
    "J": "HCCP",
    "K": "Profiling",
    "L": "Driver",
    "M": "Queue scheduling",
    "N": "DVPP",
    "O": "AMCT",
    "P": "Dump",
    "Z": "Operators (common, aclnn)",
}
LEVELS = {"E": "error", "W": "warning", "I": "information"}

# the families of codes, in the order of how much a code of each says (the most specific first): a user
# E-code names the failure; an internal one the module; an ACL return code the API's outcome, and Graph Engine's
# own status (ErrorNo) its step's; HCCL's and the driver's results a layer's; torch_npu's ERRxxxxx the framework's
# call; a hardware fault code an event id
CANN, ACL, GE, HCCL, DRIVER = "cann", "acl", "ge", "hccl", "driver"
TORCH_NPU, FAULT = "torch_npu", "fault"
FAMILIES = (CANN, ACL, GE, HCCL, DRIVER, TORCH_NPU, FAULT)

ECODE = lazy_re(r"^[EWI][0-9A-Z]\d{4}$")
_NUMERIC = lazy_re(r"^[1-5]\d{5}$")
_GE_STATUS = lazy_re(r"^\d{10}$")
_TORCH_NPU = lazy_re(r"^ERR\d{5}$")
_FAULT = lazy_re(r"^(?:0[xX])?([0-9A-Fa-f]{8,9})$")

# aclError's classes by the first digit (hicann/runtime docs/zh/api_ref/25-01_aclError.md @ 681ef761; the same
# rules in the English API reference, aclcppdevg_03_6666)
NUMERIC_CLASSES = {
    "1": "environment or code: fixed by changing the environment or the code",
    "2": "resources: not enough of a resource, or an API or argument that does not fit the hardware",
    "3": "service state: a queue full or empty",
    "5": "internal: a software or device failure the user cannot fix; report it to Huawei",
}
# which component returned it, by the second and third digits (the headers' grouping: acl_base_rt.h 00 and 48,
# rt_error_codes.h 07, ge_error_codes.h 45, op_errno.h 61)
NUMERIC_COMPONENTS = {"00": "ACL", "48": "ACL", "07": "Runtime", "45": "GE", "61": "aclnn", "64": "Flow functions"}


def ecode_module(code: str) -> str:
    """The module a six-character code's second character names."""
    return MODULES.get(code[1:2], "unknown module %r" % code[1:2])


def ecode_scope(code: str) -> str:
    """``internal`` for xx9000-xx9999 and xx8888, else ``user``."""
    return INTERNAL if code[2:3] == "9" or code[2:] == "8888" else USER


def ge_fields(status: int) -> Optional[Dict[str, int]]:
    """A Graph Engine status's fields (runtime, type, level, sysid, modid, value) by GE's own scheme, or None
    when the number is none of GE's: its system is not GE's, or a field holds a value no enumerator of GE's
    names. The scheme is GE_ERRORNO's (hicann/ge inc/external/ge/ge_api_error_codes.h @ ffdcbc9f: runtime 2 bits,
    type 2, level 3, sysid 8, modid 5, value 12) with the enumerators of hicann/metadef
    pkg_inc/common/ge_common/error_codes_define.h @ 786891c0 (SYSID_GE = 8, GRAPH_MODULE = 4, ...), as the
    catalog holds them (GE_STATUS_LAYOUT, GE_STATUS_SCHEME: scripts/gen_cann_catalog.py reads both). 0 is
    GE's SUCCESS and 0xFFFFFFFF its generic FAILED: neither is a status of a module, so neither decodes."""
    from npulaunch.host.cann import catalog

    if not 0 < status < 1 << 32:
        return None
    fields = {name: (status >> shift) & ((1 << width) - 1) for name, (shift, width) in catalog.GE_STATUS_LAYOUT.items()}
    scheme = catalog.GE_STATUS_SCHEME
    if any(fields[name] not in values for name, values in scheme.items()):
        return None
    return fields


def family_of(code: str) -> Optional[str]:
    """The family a code in its canonical form belongs to, or None when it is not a code."""
    if ECODE.match(code):
        return CANN
    if _NUMERIC.match(code):
        return ACL
    if _GE_STATUS.match(code) and ge_fields(int(code)) is not None:
        return GE
    if code.startswith("HCCL_E_"):
        return HCCL
    if code.startswith(("DRV_ERROR_", "DEV_ERROR_")):
        return DRIVER
    if _TORCH_NPU.match(code):
        return TORCH_NPU
    if _FAULT.match(code) and not code.lower().startswith("0x"):
        return FAULT  # eight or nine hex digits (an ACL code has six)
    return None


def canonical(text: str) -> Optional[str]:
    """A code as a user may type it (``ez9999``, ``0x80e18402``, ``hccl:6``, ``drv:6``) in the form the
    catalog and the reports use (``EZ9999``, ``80E18402``, ``HCCL_E_NOT_FOUND``), or None."""
    text = text.strip()
    upper = text.upper()
    if upper.startswith(("HCCL:", "DRV:")) and upper[upper.index(":") + 1 :].isdigit():
        from npulaunch.host.cann import catalog

        number = int(upper.split(":", 1)[1])
        table = catalog.HCCL_RESULTS if upper.startswith("HCCL") else catalog.DRV_ERRORS
        return table.get(number, "%s_%d" % ("HCCL_E" if upper.startswith("HCCL") else "DRV_ERROR", number))
    if upper.startswith("0X"):
        match = _FAULT.match(text)
        if match and ge_fields(int(match.group(1), 16)) is not None:
            return str(int(match.group(1), 16))  # a GE status in hex (0x5010401E): GE's logs print it in decimal
        return match.group(1).upper() if match else None
    return upper if family_of(upper) else None


@dataclass(frozen=True)
class CodeInfo:
    """Everything npulaunch knows about one code (``npulaunch explain``, and a finding's ``code_info``)."""

    code: str
    family: str  # CANN, ACL, GE, HCCL, DRIVER, TORCH_NPU, FAULT
    known: bool  # listed in a catalog of the CANN versions npulaunch knows
    module: str
    title: str  # CANN's identifier: Memory_Allocation_Failure, ACL_ERROR_RT_AICORE_EXCEPTION, HCCL_E_TIMEOUT
    scope: str  # USER or INTERNAL ("" where the family has none)
    group: str  # the catalog's group (CANN's errClass) or the numeric class
    category: str  # what kind of failure, in a few words: "invalid argument", "resources", "internal", ...
    cls: str  # npulaunch's failure class: device_out_of_memory, hccl_exec_timeout, runtime_inner_error ...
    kind: str  # CAUSE or SYMPTOM (of a failure on another rank)
    retryable: bool
    retryable_why: str  # where Huawei's text says a retry helps ("" when it does not say so)
    hint: str
    page: str  # CANN's page for the code, or the reference it belongs to
    level: str  # a hardware fault code's MindCluster level ("" otherwise)
    source: str  # repository@commit:path of the catalog that lists it ("" when none does)
    warning: bool = False  # a W-code: reported, never a failure

    def summary(self) -> dict:
        """What a finding carries of it (events, failure.json): the facts, not npulaunch's judgement."""
        return {
            "family": self.family,
            "known": self.known,
            "module": self.module,
            "title": self.title,
            "scope": self.scope,
            "category": self.category,
            "level": self.level,
            "page": self.page,
        }

    def to_json(self) -> dict:
        """All of it (``npulaunch explain --json``): the facts, then npulaunch's judgement."""
        facts = self.summary()
        facts.update(
            code=self.code,
            group=self.group,
            cls=self.cls,
            kind=self.kind,
            retryable=self.retryable,
            retryable_why=self.retryable_why,
            hint=self.hint,
            source=self.source,
        )
        return facts


def specificity(code: str) -> Tuple[int, int]:
    """How much a code says, for choosing a block's code (smaller says more): its family's rank, then, among
    six-character codes, user codes before internal ones, and warnings last."""
    family = family_of(code) or FAULT
    if family == CANN and code[0] != "E":
        return (len(FAMILIES) + 1, 0)  # a warning or information code says least: it is no failure
    if family == CANN:
        return (0, 1 if ecode_scope(code) == INTERNAL else 0)
    # a GE status says as much as an ACL code (GE's return codes are ACL codes: ge_error_codes.h): the first counts
    return (FAMILIES.index(ACL if family == GE else family) + 1, 0)
