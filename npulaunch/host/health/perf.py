"""The performance figures the health watch reads beside each NPU's health (host/health/watch.py asks, this
reads): ``npu-smi info -t common`` of each job NPU, and for a job across hosts ``hccn_tool -speed -g`` and
``-stat -g`` of its NIC, taken into the data of one NPU_PERF event per round. Judging them against the
other NPUs is diagnose/npuperf.py's, not this module's. Standard library only, Python 3.7+.
"""

from __future__ import annotations

from dataclasses import asdict
from typing import Callable, Dict, List, Mapping, Optional, Sequence, Tuple

from npulaunch.host.health.parse import NpuCommon, parse_hccn_speed, parse_hccn_stat, parse_npu_common
from npulaunch.host.health.readings import Answer, Device, EventData

COMMON, SPEED, STAT = "common", "speed", "stat"  # what a call asks: a chip's figures, its NIC's rate, counters
PARTS = (COMMON, SPEED, STAT)
Key = Tuple[str, Optional[int]]
NotAsked = Callable[[Device], str]

# The NIC counters of ``hccn_tool -stat -g`` that count errors (hicann/driver ascend910B/hccn_tool/tool.c
# tool_display_stat_info; ../shared/sources/npu_perf_formats.md 5a): bad and FCS frames, RoCE packets in
# error, and the RoCE anomalies MindCluster's exporter publishes beside them (unexpected ACKs, out of order,
# verification and QP status errors, retransmissions: component/npu-exporter/collector/metrics/
# collector_for_roce.go). Traffic, pause and PFC counters are left out: they count load, not faults.
ERROR_COUNTERS = (
    "mac_tx_bad_pkt_num",
    "mac_rx_bad_pkt_num",
    "mac_rx_fcs_err_pkt_num",
    "roce_rx_err_pkt_num",
    "roce_tx_err_pkt_num",
    "roce_unexpected_ack_num",
    "roce_out_of_order_num",
    "roce_verification_err_num",
    "roce_qp_status_err_num",
    "roce_new_pkt_rty_num",
)


def perf_calls(devices: Sequence[Device], nics: bool) -> List[Tuple[str, Optional[int], List[str]]]:
    """A round's figure calls: ``-t common`` of each mapped chip, then each NIC's rate and counters."""
    calls: List[Tuple[str, Optional[int], List[str]]] = [
        (COMMON, d.device, ["npu-smi", "info", "-t", "common", "-i", str(d.npu), "-c", str(d.chip)])
        for d in devices
        if d.npu is not None
    ]
    if nics:
        for d in devices:
            calls.append((SPEED, d.device, ["hccn_tool", "-i", str(d.device), "-speed", "-g"]))
            calls.append((STAT, d.device, ["hccn_tool", "-i", str(d.device), "-stat", "-g"]))
    return calls


class PerfReadings:
    """The figures of one agent's NPUs: builds each round's NPU_PERF data, remembering each NIC's last
    counters (an error count is reported as its increase since the previous reading)."""

    def __init__(self, devices: Sequence[Device]) -> None:
        self._devices = list(devices)
        self._counters: Dict[int, Dict[str, int]] = {}

    def event(self, answers: Mapping[Key, Answer], nics: bool, not_asked: NotAsked) -> EventData:
        """``{"devices": {"<physical id>": figures}}`` of a round's answers; ``not_asked(device)`` says why a
        chip got no ``-t common`` call (npu-smi's table was not read, or does not list it)."""
        found: Dict[str, EventData] = {}
        for dev in self._devices:
            why: List[str] = []
            answer = answers.get((COMMON, dev.device))
            common = self._common(dev, answer, why) if answer is not None else None
            if answer is None:
                why.append(not_asked(dev))
            figures: EventData = {"npu": dev.npu, "chip": dev.chip, "ranks": list(dev.ranks)}
            figures.update(asdict(common or NpuCommon()))
            figures["link_mbps"], figures["link_errors"] = None, None
            if nics:
                speed = _text(answers.get((SPEED, dev.device)), why)
                figures["link_mbps"] = parse_hccn_speed(speed) if speed is not None else None
                figures["link_errors"] = self._errors(dev.device, answers.get((STAT, dev.device)), why)
            figures["unanswered"] = "; ".join(why) or None
            found[str(dev.device)] = figures
        return {"devices": found}

    def _common(self, dev: Device, answer: Answer, why: List[str]) -> Optional[NpuCommon]:
        text = _text(answer, why)
        if text is None:
            return None
        common = parse_npu_common(text, dev.chip)
        if common is None:
            first = text.strip().splitlines()[0] if text.strip() else "nothing"
            asked = f"npu-smi info -t common -i {dev.npu} -c {dev.chip}"
            why.append(f"{asked} printed {first!r}, no figure npulaunch reads")
        return common

    def _errors(self, device: int, answer: Optional[Answer], why: List[str]) -> Optional[Dict[str, int]]:
        """The error counters that rose since the previous reading ({} when none did); None when not read
        now or never before (a first reading has nothing to compare with: the counters run from the driver's
        start or the last ``-stat -c``, not from the job's)."""
        text = _text(answer, why)
        counters = parse_hccn_stat(text) if text is not None else {}
        if not counters:
            if text is not None:
                why.append(f"hccn_tool -i {device} -stat -g printed no counter npulaunch reads")
            return None
        before = self._counters.get(device)
        self._counters[device] = counters
        if before is None:
            return None
        rises = {}
        for name in ERROR_COUNTERS:
            now, then = counters.get(name), before.get(name)
            if now is None or then is None:
                continue
            rise = now - then if now >= then else now  # fewer: cleared (-stat -c) since, counted from 0
            if rise > 0:
                rises[name] = rise
        return rises


def _text(answer: Optional[Answer], why: List[str]) -> Optional[str]:
    """The answer's output; None (and why, in ``why``) when it failed or did not answer."""
    if answer is None:
        return None
    if answer.silent or answer.failed:
        why.append(answer.silent or answer.failed)
        return None
    return answer.text
