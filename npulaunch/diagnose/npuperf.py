"""What an NPU's performance figures say beside the other job NPUs' (the latest NPU_PERF readings of every
host, host/health/perf.py): short sentences for a slow rank's report, such as "NPU 2 AI Core frequency 800
MHz (others 1800)". Pure functions over the event data; they decide nothing about the job and read no files.
"""

from __future__ import annotations

from statistics import median
from typing import Any, List, Mapping, Sequence, Tuple

DeviceKey = Tuple[str, int]  # (host, physical device id)
Readings = Mapping[str, Any]  # one device's entry of NPU_PERF's "devices"

# A busy chip (AI Core usage > 0) whose current clock is below its rated one is throttled; an idle 910B
# clocks down to 800 of 1800 MHz, which is no throttling. MindCluster FaultDiag's rule (Ascend/mind-cluster
# component/ascend-faultdiag/src/ascend_fd/pkg/diag/node_anomaly/npu_anomaly/na_detection.py @ 22bb3d98,
# NPUChecker: freq < rated_freq and aicore_rate > 0); ../shared/sources/npu_perf_formats.md 2 and 6.1.
# The margins against the others' median are npulaunch's own: Huawei documents no such comparison.
FREQ_MARGIN = 0.10  # a current clock this much below the busy others' median stands out
OVER_TEMP_C = 105.0  # FaultDiag's over-temperature mark for a throttled NPU (NODE_RES_ABNORMAL_02)
TEMP_MARGIN_C = 10.0  # this much hotter than the others' median stands out
POWER_MARGIN = 0.25  # power this much off the others' median, and at least POWER_MIN_W, stands out
POWER_MIN_W = 20.0
IDLE_MARGIN = 0.5  # AI Core usage at most half the others' median, while they are busy (IDLE_BUSY_PCT)
IDLE_BUSY_PCT = 20.0
MAX_COUNTERS = 3  # error counters named in one sentence


def compare_npu(readings: Mapping[DeviceKey, Readings], device: DeviceKey) -> List[str]:
    """What stands out in ``device``'s figures against every other job NPU's (``readings``: the latest
    figures of each (host, physical id)); [] when nothing does or its figures are unknown."""
    mine = readings.get(device)
    if mine is None:
        return []
    others = [figures for key, figures in readings.items() if key != device]
    name = f"NPU {device[1]}"
    found: List[str] = []
    for rule in (_frequency, _usage, _temperature, _power, _link_rate):
        sentence = rule(name, mine, others)
        if sentence:
            found.append(sentence)
    errors = _link_errors(name, mine)
    if errors:
        found.append(errors)
    return found


def figures_text(readings: Mapping[DeviceKey, Readings], device: DeviceKey) -> str:
    """One plain line on ``device``'s figures: what stands out (compare_npu, joined by "; "), that none were
    read ("no NPU figures: ..." with why), or that they are like the others'."""
    mine = readings.get(device)
    name = f"NPU {device[1]}"
    if mine is None:
        return f"no NPU figures: the health watch on {device[0]} reported none for {name}"
    if all(mine.get(key) is None for key in ("aicore_usage_pct", "aicore_mhz", "temp_c", "power_w")):
        why = mine.get("unanswered") or "npu-smi printed none"
        return f"no NPU figures: {why}"
    found = compare_npu(readings, device)
    if found:
        return "; ".join(found)
    if not any(_known(figures) for key, figures in readings.items() if key != device):
        return f"{name}'s figures are known, but no other NPU's to compare with"
    return f"{name}'s figures are like the others'"


def host_load_text(host: str, load1: float, cpus: int) -> str:
    """``host h1 load 7.9 on 2 CPUs`` (the 1-minute load average), with ``, more than its CPUs`` past them."""
    said = f"host {host} load {load1:.1f} on {cpus} CPU{'s' if cpus != 1 else ''}"
    return said + (", more than its CPUs" if cpus > 0 and load1 > cpus else "")


# -- one figure each ------------------------------------------------------------------------------------


def _frequency(name: str, mine: Readings, others: Sequence[Readings]) -> str:
    mhz, rated = mine.get("aicore_mhz"), mine.get("aicore_rated_mhz")
    if mhz is None or not _busy(mine):
        return ""  # an idle chip clocks down: no throttling (FaultDiag)
    busy = [o for o in others if o.get("aicore_mhz") is not None and _busy(o)]
    seen = _values(busy, "aicore_mhz")
    if _throttled(mine) and 2 * sum(_throttled(o) for o in busy) < len(busy):  # most busy others are not
        return f"{name} AI Core frequency {mhz} MHz, throttled below its rated {rated} MHz (others {_span(seen)})"
    if _throttled(mine) and not busy:
        idle = " (others idle)" if any(o.get("aicore_usage_pct") == 0 for o in others) else ""
        return f"{name} AI Core frequency {mhz} MHz, throttled below its rated {rated} MHz{idle}"
    if seen and mhz <= (1 - FREQ_MARGIN) * median(seen):
        return f"{name} AI Core frequency {mhz} MHz (others {_span(seen)})"
    return ""


def _usage(name: str, mine: Readings, others: Sequence[Readings]) -> str:
    usage = mine.get("aicore_usage_pct")
    seen = _values(others, "aicore_usage_pct")
    if usage is None or not seen or median(seen) < IDLE_BUSY_PCT or usage > IDLE_MARGIN * median(seen):
        return ""
    return f"{name} AI Core busy {_num(usage)} % (others {_span(seen)})"


def _temperature(name: str, mine: Readings, others: Sequence[Readings]) -> str:
    temp = mine.get("temp_c")
    if temp is None:
        return ""
    seen = _values(others, "temp_c")
    hot = bool(seen) and temp >= median(seen) + TEMP_MARGIN_C
    if temp >= OVER_TEMP_C and not (seen and median(seen) >= OVER_TEMP_C):
        where = f" (others {_span(seen)})" if seen else ""
        return (
            f"{name} at {_num(temp)} °C{where}, at or above {_num(OVER_TEMP_C)} °C, FaultDiag's over-temperature mark"
        )
    return f"{name} at {_num(temp)} °C (others {_span(seen)})" if hot else ""


def _power(name: str, mine: Readings, others: Sequence[Readings]) -> str:
    """Power of a busy chip against busy others of its kind (the same rated clock): an idle chip draws less
    for no fault, and no Huawei power limit exists to judge it by (npu_perf_formats.md 8; FaultDiag
    collects power without using it)."""
    power = mine.get("power_w")
    same = [o for o in others if _busy(o) and o.get("aicore_rated_mhz") == mine.get("aicore_rated_mhz")]
    seen = _values(same, "power_w")
    if power is None or not _busy(mine) or not seen:
        return ""
    middle = median(seen)
    if abs(power - middle) < max(POWER_MARGIN * middle, POWER_MIN_W):
        return ""
    return f"{name} draws {_num(power)} W (others {_span(seen)})"


def _link_rate(name: str, mine: Readings, others: Sequence[Readings]) -> str:
    rate = mine.get("link_mbps")
    seen = _values(others, "link_mbps")
    if rate is None or not seen or rate >= median(seen):
        return ""
    return f"NIC of {name} at {rate} Mb/s (others {_span(seen)})"


def _link_errors(name: str, mine: Readings) -> str:
    rises = {k: v for k, v in (mine.get("link_errors") or {}).items() if isinstance(v, int) and v > 0}
    if not rises:
        return ""
    named = sorted(rises, key=lambda counter: (-rises[counter], counter))
    said = ", ".join(f"{rises[counter]:,} new {counter}" for counter in named[:MAX_COUNTERS])
    more = f" and {len(named) - MAX_COUNTERS} more counters" if len(named) > MAX_COUNTERS else ""
    return f"NIC of {name}: {said}{more}"


# -- helpers -------------------------------------------------------------------------------------------


def _busy(figures: Readings) -> bool:
    usage = figures.get("aicore_usage_pct")
    return usage is not None and usage > 0


def _throttled(figures: Readings) -> bool:
    """FaultDiag's throttled sample: busy and below its rated clock."""
    mhz, rated = figures.get("aicore_mhz"), figures.get("aicore_rated_mhz")
    return _busy(figures) and mhz is not None and rated is not None and mhz < rated


def _known(figures: Readings) -> bool:
    return any(figures.get(key) is not None for key in ("aicore_usage_pct", "aicore_mhz", "temp_c", "power_w"))


def _values(readings: Sequence[Readings], key: str) -> List[float]:
    return [figures[key] for figures in readings if isinstance(figures.get(key), (int, float))]


def _num(value: float) -> str:
    return "%d" % value if float(value).is_integer() else "%.1f" % value


def _span(values: Sequence[float]) -> str:
    """``1800`` or ``61–63``: the others' range."""
    low, high = min(values), max(values)
    return _num(low) if low == high else f"{_num(low)}–{_num(high)}"
