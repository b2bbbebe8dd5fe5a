"""What an NPU's figures say beside the other job NPUs' (diagnose/npuperf.py): a throttled, hot, starved or
badly linked NPU is named with the others' range; an idle chip clocked down and equal figures are not."""

from __future__ import annotations

from typing import Any, Dict, Optional

import pytest

from npulaunch.diagnose.npuperf import compare_npu, figures_text, host_load_text

SLOW = ("h1", 2)


def npu(
    usage: Optional[float] = 80.0,
    mhz: Optional[int] = 1800,
    rated: Optional[int] = 1800,
    temp: Optional[float] = 62.0,
    power: Optional[float] = 300.0,
    link: Optional[int] = None,
    errors: Optional[Dict[str, int]] = None,
    why: Optional[str] = None,
) -> Dict[str, Any]:
    """One device's entry of NPU_PERF data (host/health/perf.py), a busy 910B by default."""
    return {
        "npu": 0,
        "chip": 0,
        "ranks": [0],
        "aicore_usage_pct": usage,
        "aicore_mhz": mhz,
        "aicore_rated_mhz": rated,
        "temp_c": temp,
        "power_w": power,
        "hbm_usage_pct": 85.0,
        "link_mbps": link,
        "link_errors": errors,
        "unanswered": why,
    }


def job(slow: Dict[str, Any], **others: Any) -> Dict[Any, Dict[str, Any]]:
    """Two hosts of 4 NPUs: h1's NPU 2 is ``slow``; the others as ``others`` say, temperature 61-63 and
    power 290-310 spread over them."""
    readings = {}
    for host in ("h0", "h1"):
        for device in range(4):
            spread = dict(temp=61.0 + device % 3, power=290.0 + 10 * (device % 3))
            readings[(host, device)] = npu(**dict(spread, **others))
    readings[SLOW] = slow
    return readings


@pytest.mark.parametrize(
    "slow, others, said",
    [
        # a busy chip below its rated clock while the others run at theirs: FaultDiag's throttling
        (
            npu(usage=95, mhz=800),
            {},
            ["NPU 2 AI Core frequency 800 MHz, throttled below its rated 1800 MHz (others 1800)"],
        ),
        (npu(mhz=1700), {}, ["NPU 2 AI Core frequency 1700 MHz, throttled below its rated 1800 MHz (others 1800)"]),
        # every busy chip throttled alike: nothing stands out; one 10 % below their median does
        (npu(mhz=1400), dict(mhz=1400), []),
        (npu(mhz=1200), dict(mhz=1400), ["NPU 2 AI Core frequency 1200 MHz (others 1400)"]),
        (npu(mhz=1300), dict(mhz=1400), []),  # 7 % lower: within the margin
        # an idle chip clocked down is no throttling, among idle or busy others
        (npu(usage=0, mhz=800), dict(usage=0, mhz=800), []),
        (npu(usage=0, mhz=800, power=95), dict(usage=0, mhz=800, power=95), []),
        (npu(usage=0, mhz=800, power=95), {}, ["NPU 2 AI Core busy 0 % (others 80)"]),  # no frequency, no power
        (
            npu(usage=60, mhz=800),
            dict(usage=0, mhz=800),
            ["NPU 2 AI Core frequency 800 MHz, throttled below its rated 1800 MHz (others idle)"],
        ),
        (npu(temp=104), {}, ["NPU 2 at 104 °C (others 61–63)"]),
        (npu(temp=70), {}, []),
        (
            npu(temp=106, mhz=1500),
            {},
            [
                "NPU 2 AI Core frequency 1500 MHz, throttled below its rated 1800 MHz (others 1800)",
                "NPU 2 at 106 °C (others 61–63), at or above 105 °C, FaultDiag's over-temperature mark",
            ],
        ),
        (npu(power=120), {}, ["NPU 2 draws 120 W (others 290–310)"]),
        (npu(power=285), {}, []),
        (npu(power=120, rated=1650), {}, []),  # another kind of NPU: its power is no measure here
        (npu(link=100000), dict(link=200000), ["NIC of NPU 2 at 100000 Mb/s (others 200000)"]),
        (npu(link=200000), dict(link=200000), []),
        (
            npu(errors={"roce_rx_err_pkt_num": 1234, "mac_rx_fcs_err_pkt_num": 5}),
            dict(errors={}),
            ["NIC of NPU 2: 1,234 new roce_rx_err_pkt_num, 5 new mac_rx_fcs_err_pkt_num"],
        ),
        (npu(errors={}), dict(errors={"roce_rx_err_pkt_num": 3}), []),  # others' errors are theirs
        (npu(), {}, []),  # all equal
    ],
)
def test_what_stands_out(slow: Dict[str, Any], others: Dict[str, Any], said: list) -> None:
    assert compare_npu(job(slow, **others), SLOW) == said


def test_the_lead_example_in_full() -> None:
    slow = npu(usage=95, mhz=800, temp=104, power=120, link=100000, errors={"roce_rx_err_pkt_num": 1234})
    found = compare_npu(job(slow, link=200000), SLOW)
    assert found == [
        "NPU 2 AI Core frequency 800 MHz, throttled below its rated 1800 MHz (others 1800)",
        "NPU 2 at 104 °C (others 61–63)",
        "NPU 2 draws 120 W (others 290–310)",
        "NIC of NPU 2 at 100000 Mb/s (others 200000)",
        "NIC of NPU 2: 1,234 new roce_rx_err_pkt_num",
    ]
    assert figures_text(job(slow, link=200000), SLOW) == "; ".join(found)


def test_unknown_figures_are_left_out_of_the_comparison() -> None:
    readings = job(npu(mhz=800, usage=90))
    readings[("h0", 0)] = npu(None, None, None, None, None, why="npu-smi info -t common -i 0 -c 0 did not answer")
    assert compare_npu(readings, SLOW)[0].endswith("(others 1800)")
    assert compare_npu(readings, ("h0", 0)) == [] and compare_npu(readings, ("h9", 0)) == []


def test_figures_text_says_plainly_when_there_are_none_or_nothing_stands_out() -> None:
    why = "npu-smi info -t common -i 2 -c 0 did not answer within 10 s"
    assert figures_text(job(npu(None, None, None, None, None, why=why)), SLOW) == f"no NPU figures: {why}"
    assert figures_text(job(npu(None, None, None, None, None)), SLOW) == "no NPU figures: npu-smi printed none"
    assert figures_text({}, SLOW) == "no NPU figures: the health watch on h1 reported none for NPU 2"
    assert figures_text(job(npu()), SLOW) == "NPU 2's figures are like the others'"
    assert figures_text({SLOW: npu()}, SLOW) == "NPU 2's figures are known, but no other NPU's to compare with"


def test_host_load_text() -> None:
    assert host_load_text("h1", 7.9, 2) == "host h1 load 7.9 on 2 CPUs, more than its CPUs"
    assert host_load_text("h0", 0.52, 64) == "host h0 load 0.5 on 64 CPUs"
    assert host_load_text("h0", 0.5, 1) == "host h0 load 0.5 on 1 CPU"
