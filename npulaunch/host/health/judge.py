"""The one judgement of an NPU's health facts (``npu-smi info -t health``: its health and error codes;
``hccn_tool -link -g``: its NIC's link), shared by the live watch beside the ranks (host/health/watch.py)
and the pre-start check (plan/checks/health.py), so both say the same of the same facts. Pure; it reads
MindCluster's fault levels from the generated catalog (host/cann/catalog.py, at the first code judged) and
decides nothing about the job. Standard library only, Python 3.7+.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Dict, Iterable, Optional, Sequence, Tuple

# MindCluster's levels, most severe first: getMostSeriousFaultType in Ascend/mind-cluster
# component/ascend-device-plugin/pkg/common/fault_code.go @ 22bb3d987bc0208c3eb7395e222b661276133c58
SEVERITY = (
    "ManuallySeparateNPU",
    "SeparateNPU",
    "PreSeparateNPU",
    "RestartNPU",
    "FreeRestartNPU",
    "RestartBusiness",
    "RestartRequest",
    "SubHealthFault",
    "NotHandleFault",
    "NormalNPU",
)
NORMAL = "NormalNPU"
UNKNOWN_CODE_LEVEL = "SeparateNPU"  # a code faultCode.json does not list (fault_code.go getFaultTypeBySeverity)

RESCHEDULE, PRE_SEPARATE, REPORT, NONE, UNKNOWN = "reschedule", "pre_separate", "report", "none", "unknown"
# What MindCluster does at each level in its default mode (rescheduling): Ascend/mind-cluster
# docs/en/scheduling/api/ascend_device_plugin.md @ 22bb3d98, "Custom Chip Faults", Table 1. The
# "Rescheduling Policy" column is one cell spanning RestartRequest to SeparateNPU: "Isolate the chip and
# reschedule the job"; the finer per-level actions are the graceful-tolerance mode's (hotReset=1, sunset).
# PreSeparateNPU: "does not affect services for now, but jobs will no longer be scheduled to this chip";
# ManuallySeparateNPU (reached only by a code's frequency, faultCustomization.json): isolated until an
# operator releases it. NotHandleFault: "not handled"; SubHealthFault: by the job's subHealthyStrategy,
# whose default ``ignore`` keeps the job running (docs/zh/scheduling/06_api/15_yaml_configuration.md).
ACTIONS = {
    "ManuallySeparateNPU": RESCHEDULE,
    "SeparateNPU": RESCHEDULE,
    "PreSeparateNPU": PRE_SEPARATE,
    "RestartNPU": RESCHEDULE,
    "FreeRestartNPU": RESCHEDULE,
    "RestartBusiness": RESCHEDULE,
    "RestartRequest": RESCHEDULE,
    "SubHealthFault": REPORT,
    "NotHandleFault": REPORT,
    "NormalNPU": NONE,
}
# what each action means, in the words shown to the user (the check's findings)
MEANINGS = {
    RESCHEDULE: "MindCluster: isolate the chip and reschedule the job",
    PRE_SEPARATE: "MindCluster: pre-isolate the chip, nothing new is scheduled there",
    REPORT: "MindCluster: no action, reported only",
    NONE: "healthy",
    UNKNOWN: "not answered",
}

# Health "UNKNOWN" (npu-smi: the device is missing or not started): MindCluster's device plugin adds the
# card-drop code 0x40F84E00 when dcmi_get_device_health answers DeviceNotReady (-8012) (Ascend/mind-cluster
# component/ascend-common/devmanager/dcmi/dcmi.go @ 22bb3d98, DcGetDeviceAllErrorCode; CardDropFaultCode in
# component/ascend-common/devmanager/common/constants.go); faultCode.json files it under RestartNPU.
CARD_DROP_CODE = "40F84E00"
# A health that is not OK with no code listed: MindCluster judges a code by the driver's severity when its
# table does not list it: Hint or Minor -> NotHandleFault, anything more or no known severity -> SeparateNPU
# (fault_code.go getFaultTypeBySeverity). npu-smi's health is the most severe alarm's (DCMI
# dcmi_get_device_health: 1 minor, 2 major, 3 critical alarm), so Warning (minor) -> NotHandleFault and
# Alarm, Critical or a health npulaunch does not know -> SeparateNPU. With codes listed the codes decide,
# as in MindCluster (it judges codes, never the health value).
HEALTH_LEVELS = {"ok": NORMAL, "warning": "NotHandleFault", "alarm": "SeparateNPU", "critical": "SeparateNPU"}

# A job NPU's NIC link DOWN in a job across hosts: npulaunch's own level (MindCluster's network levels do
# not cover it: link-down 0x81078603 is NotHandleFault in faultCode.json and becomes PreSeparateNPU only
# after 20 s down, faultCustomization.json FaultDuration). The link carries HCCL's traffic between hosts; a
# collective running while it is down fails with an ERROR CQE (RoCE retransmission timeout, cqe status 12)
# and HCCL's heartbeat reports the peer lost (hicann/hccl docs/zh/user_guide/fault_diagnosis/
# task_exec_stage.md @ 09300b70df9a031339f08e5f2ca06d7bf294d009, "ERROR CQE", which names a port's link-down
# as the cause to look for): the job cannot go on there, so the action is "reschedule".
LINK_DOWN = "link_down"


@dataclass(frozen=True)
class Verdict:
    """What an NPU's facts mean: ``level`` the most severe (a MindCluster level, LINK_DOWN, or None when
    not answered), ``action`` (RESCHEDULE, PRE_SEPARATE, REPORT, NONE, UNKNOWN), ``levels`` each code's
    level, ``codes`` as judged (upper case, no 0x, CARD_DROP_CODE added for health UNKNOWN)."""

    level: Optional[str]
    action: str
    levels: Dict[str, str] = field(default_factory=dict)
    codes: Tuple[str, ...] = ()

    @property
    def healthy(self) -> bool:
        return self.action == NONE

    def describe(self) -> str:
        """``most severe RestartNPU (8C03A000), MindCluster: isolate the chip and reschedule the job``."""
        if self.action in (NONE, UNKNOWN):
            return MEANINGS[self.action]
        if self.level == LINK_DOWN:
            return "NIC link DOWN: HCCL's traffic between hosts fails, reschedule the job"
        worst = [code for code in self.codes if self.levels.get(code) == self.level]
        which = " (%s)" % " ".join(worst) if worst and len(self.codes) > 1 else ""
        return "most severe %s%s, %s" % (self.level, which, MEANINGS[self.action])


def code_level(code: str) -> str:
    """MindCluster's level of one fault code (faultCode.json, in the generated catalog); SeparateNPU for
    a code it does not list."""
    from npulaunch.host.cann.catalog import FAULT_LEVELS  # 140 KB: loaded at the first code judged

    return FAULT_LEVELS.get(code, UNKNOWN_CODE_LEVEL)


def most_severe(levels: Iterable[str]) -> str:
    """The most severe of MindCluster levels (SEVERITY's order), NormalNPU for none; a name that is no
    level counts as SeparateNPU (MindCluster's level for what it does not know)."""
    rank = {level: index for index, level in enumerate(SEVERITY)}
    worst = len(SEVERITY) - 1
    for level in levels:
        worst = min(worst, rank.get(level, rank[UNKNOWN_CODE_LEVEL]))
    return SEVERITY[worst]


def normal_codes(codes: Iterable[str]) -> Tuple[str, ...]:
    """Codes as npu-smi or a user writes them (``0x80e01801``, ``80E01801``, "NA") in the catalog's form,
    each once, in order."""
    found = []
    for code in codes:
        code = code.strip().upper()
        code = code[2:] if code.startswith("0X") else code
        if code and code != "NA" and code not in found:
            found.append(code)
    return tuple(found)


def split_codes(text: str) -> Tuple[str, ...]:
    """npu-smi's ``Error Code`` value (space-separated, "NA" for none) as codes."""
    return normal_codes(text.replace(",", " ").split())


def judge_chip(health: Optional[str], codes: Sequence[str]) -> Verdict:
    """The verdict of one chip's health (``OK``, ``Warning``, ``Alarm``, ``Critical``, ``UNKNOWN``; None when
    npu-smi did not answer) and error codes."""
    if health is None:
        return Verdict(None, UNKNOWN)
    judged = normal_codes(codes)
    if health.upper() == "UNKNOWN" and CARD_DROP_CODE not in judged:
        judged += (CARD_DROP_CODE,)
    levels = {code: code_level(code) for code in judged}
    if levels:
        level = most_severe(levels.values())
    else:
        level = HEALTH_LEVELS.get(health.lower(), UNKNOWN_CODE_LEVEL)
    return Verdict(level, ACTIONS[level], levels, judged)


def judge_link(verdict: Verdict, link: Optional[str]) -> Verdict:
    """The chip's verdict with its NIC's link (``UP``, ``DOWN``, None when not asked or not answered): a
    DOWN link makes it RESCHEDULE; the level stays the chip's when that already means rescheduling, else
    becomes LINK_DOWN."""
    if link != "DOWN" or verdict.action == RESCHEDULE:
        return verdict
    return Verdict(LINK_DOWN, RESCHEDULE, verdict.levels, verdict.codes)


def is_fatal(verdict: Verdict) -> bool:
    """Whether the pre-start check refuses a chip: rescheduling levels, UNKNOWN, and PreSeparateNPU too
    (MindCluster schedules nothing new on such a chip); NotHandleFault and SubHealthFault are warnings."""
    return verdict.action in (RESCHEDULE, PRE_SEPARATE, UNKNOWN)
