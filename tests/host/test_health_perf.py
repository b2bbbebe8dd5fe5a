"""The NPU performance figures the health watch reads: the real samples of ``npu-smi info -t common`` and
``hccn_tool -speed/-stat -g`` in tests/data/tool_outputs/ (sources in its SOURCES.md) parsed, the stand-ins'
output parsed back the same way (with figures changed through NPU_STANDIN_PERF), and one round's answers
taken into NPU_PERF data (host/health/perf.py)."""

from __future__ import annotations

import json
import os
import re
import subprocess
from pathlib import Path

import pytest
from helpers import STANDINS, TESTS

from npulaunch.host.health import parse, perf
from npulaunch.host.health.readings import Answer, Device

DATA = TESTS / "data" / "tool_outputs"


def sample(name: str) -> str:
    return (DATA / name).read_text(encoding="utf-8")


def standin(tool: str, *args: str, **env: str) -> subprocess.CompletedProcess:
    return subprocess.run(
        [str(STANDINS / tool), *args], capture_output=True, text=True, env={**os.environ, **env}, timeout=10
    )


@pytest.mark.parametrize(
    "name, usage, mhz, rated, temp, power, hbm",
    [
        # 910B1 idle: clocked down to 800 of 1800; the mcu block's 38 C is not the chip's
        ("npu_smi_common_910b1.txt", 0.0, 800, 1800, 46.0, 93.4, 4.0),
        ("npu_smi_common_910_doc.txt", 0.0, 900, 900, 41.0, 71.7, 0.0),  # no blank lines
        ("npu_smi_common_310p.txt", 0.0, 960, 1080, 43.0, 13.4, None),  # power only in the mcu block, no HBM
        ("npu_smi_common_950.txt", 0.0, 100, 1650, 65.0, 298.6, 3.0),  # no indent, no Chip ID
    ],
)
def test_npu_common(name: str, usage: float, mhz: int, rated: int, temp: float, power: float, hbm: float) -> None:
    assert parse.parse_npu_common(sample(name), 0) == parse.NpuCommon(usage, mhz, rated, temp, power, hbm)
    assert parse.parse_npu_common(sample(name)) == parse.parse_npu_common(sample(name), 0)


def test_npu_common_takes_the_chip_asked_for_and_reads_tabs_and_missing_values() -> None:
    lines = [("NPU ID", "1"), ("Chip Count", "2"), ("", "")]
    lines += [("Chip ID", "0"), ("Aicore curFreq(MHZ)", "960"), ("Temperature(C)", "43"), ("", "")]
    lines += [("Chip ID", "1"), ("Aicore curFreq(MHZ)", "1080"), ("Temperature(C)", "NA"), ("", "")]
    lines += [("Chip Name", "mcu"), ("Temperature(C)", "41"), ("NPU Real-time Power(W)", "13.4")]
    two = "".join("\t%-30s : %s\n" % line if line[0] else "\n" for line in lines)  # a 310P Duo card, as printed
    second = parse.parse_npu_common(two, 1)
    assert second is not None and (second.aicore_mhz, second.temp_c, second.power_w) == (1080, None, 13.4)
    first = parse.parse_npu_common(two, 0)
    assert first is not None and (first.aicore_mhz, first.temp_c) == (960, 43.0)
    assert parse.parse_npu_common("Error: the device does not exist\n") is None
    assert parse.parse_npu_common(sample("npu_smi_health_ok.txt")) is None


def test_hccn_speed() -> None:
    assert parse.parse_hccn_speed(sample("hccn_speed_doc.txt")) == 100000
    assert parse.parse_hccn_speed(sample("hccn_speed_unknown.txt")) is None
    assert parse.parse_hccn_speed(sample("hccn_link_up.txt")) is None


def test_hccn_stat_reads_the_document_sample_without_its_heading_or_elision() -> None:
    counters = parse.parse_hccn_stat(sample("hccn_stat_doc.txt"))
    assert counters["nic_rx_all_oct_num"] == 482237805 and counters["roce_qp_status_err_num"] == 0
    assert len(counters) == 8 and "packet statistics" not in counters
    assert parse.parse_hccn_stat("packet statistics:\nport_id: 4\ncrc_error_sum: 7\n") == {  # Ascend 950's spaces
        "port_id": 4,
        "crc_error_sum": 7,
    }


# --- the stand-ins print the same formats


def test_standin_npu_smi_common_is_the_910b_layout_of_a_busy_chip(tmp_path: Path) -> None:
    out = standin("npu-smi", "info", "-t", "common", "-i", "3", "-c", "0").stdout
    lines = out.splitlines()
    # hicann/driver npu_info_print.c: printf("\t%-30s : %u\n"); a blank line before the chip and the mcu blocks
    assert lines[0] == "\tNPU ID                         : 3" and lines[2] == "" and lines[3].startswith("\tChip ID ")
    assert all(re.fullmatch(r"\t.{30} : \S+", line) for line in lines if line)
    keys = [line.split(":")[0].strip() for line in lines if line]
    assert keys == _keys("npu_smi_common_910b1.txt")  # the real 910B1 sample's keys, in its order
    busy = parse.parse_npu_common(out, 0)
    assert busy is not None and busy.aicore_mhz == busy.aicore_rated_mhz == 1800
    assert busy.aicore_usage_pct is not None and 60 <= busy.aicore_usage_pct <= 90
    assert busy.temp_c is not None and 50 <= busy.temp_c <= 60 and busy.power_w is not None and busy.power_w > 250
    figures = tmp_path / "perf"
    figures.write_text("# NPU 3 throttled\n3 aicore_mhz=800 temp_c=104 power_w=120 usage=95\n")
    slow = parse.parse_npu_common(
        standin("npu-smi", "info", "-t", "common", "-i", "3", NPU_STANDIN_PERF=str(figures)).stdout
    )
    assert slow == parse.NpuCommon(95.0, 800, 1800, 104.0, 120.0, busy.hbm_usage_pct)
    other = standin("npu-smi", "info", "-t", "common", "-i", "2", NPU_STANDIN_PERF=str(figures)).stdout
    assert parse.parse_npu_common(other, 0).aicore_mhz == 1800  # type: ignore[union-attr]
    figures.write_text("3 fail=common\n")
    failed = standin("npu-smi", "info", "-t", "common", "-i", "3", NPU_STANDIN_PERF=str(figures))
    assert failed.returncode != 0 and failed.stderr


def _keys(name: str) -> list:
    return [line.split(":")[0].strip() for line in sample(name).splitlines() if line.strip()]


def test_standin_hccn_tool_speed_and_counters(tmp_path: Path) -> None:
    assert standin("hccn_tool", "-i", "2", "-speed", "-g").stdout == "Speed: 200000 Mb/s\n"
    out = standin("hccn_tool", "-i", "2", "-stat", "-g").stdout
    assert out.startswith("packet statistics:\n") and all(
        re.fullmatch(r"\w+:\d+", line) for line in out.splitlines()[1:]
    )
    counters = parse.parse_hccn_stat(out)
    # the document sample's keys (its elision aside) in the same order, every error counter present and 0
    documented = list(parse.parse_hccn_stat(sample("hccn_stat_doc.txt")))
    assert [key for key in counters if key in documented] == documented
    assert all(counters[name] == 0 for name in perf.ERROR_COUNTERS) and counters["nic_rx_all_pkg_num"] > 0
    figures = tmp_path / "{node}.perf"
    Path(str(figures).replace("{node}", "n7")).write_text(
        "2 link_mbps=100000 rx_err=+1234 fcs_err=5\n1 link_mbps=unknown\n"
    )
    env = {"NPU_STANDIN_PERF": str(figures), "SLURMD_NODENAME": "n7"}
    assert parse.parse_hccn_speed(standin("hccn_tool", "-i", "2", "-speed", "-g", **env).stdout) == 100000
    assert standin("hccn_tool", "-i", "1", "-speed", "-g", **env).stdout == "Speed: Unknown!\n"
    changed = parse.parse_hccn_stat(standin("hccn_tool", "-i", "2", "-stat", "-g", **env).stdout)
    assert (changed["roce_rx_err_pkt_num"], changed["mac_rx_fcs_err_pkt_num"]) == (1234, 5)
    assert (
        parse.parse_hccn_stat(standin("hccn_tool", "-i", "3", "-stat", "-g", **env).stdout)["roce_rx_err_pkt_num"] == 0
    )


# --- one round's answers as NPU_PERF data


def test_perf_event_data_counts_error_increases_and_says_why_a_figure_is_missing() -> None:
    devices = [Device(0, [0], npu=0, chip=0), Device(1, [1], npu=1, chip=0), Device(5, [2])]  # 5: not mapped
    readings = perf.PerfReadings(devices)
    calls = perf.perf_calls(devices, nics=True)
    assert [argv for part, device, argv in calls if device == 0] == [
        ["npu-smi", "info", "-t", "common", "-i", "0", "-c", "0"],
        ["hccn_tool", "-i", "0", "-speed", "-g"],
        ["hccn_tool", "-i", "0", "-stat", "-g"],
    ]
    common = Answer(text=sample("npu_smi_common_910b1.txt"))
    stat = "packet statistics:\nroce_rx_err_pkt_num:%d\nmac_rx_fcs_err_pkt_num:%d\nnic_rx_all_pkg_num:%d\n"

    def answers(rx_err: int, fcs: int, total: int) -> dict:
        return {
            ("common", 0): common,
            ("speed", 0): Answer(text="Speed: 200000 Mb/s\n"),
            ("stat", 0): Answer(text=stat % (rx_err, fcs, total)),
            ("common", 1): Answer(silent="npu-smi info -t common -i 1 -c 0 did not answer within 10 s"),
            ("speed", 1): Answer(failed="hccn_tool -i 1 -speed -g exited with 1: no such device"),
            ("stat", 1): Answer(text="nothing here\n"),
        }

    def not_asked(dev: Device) -> str:
        return f"npu-smi info lists no NPU with physical id {dev.device}"

    first = readings.event(answers(7, 2, 100), True, not_asked)
    json.dumps(first)  # event data: JSON-able
    assert first["devices"]["0"] == {
        "npu": 0,
        "chip": 0,
        "ranks": [0],
        "aicore_usage_pct": 0.0,
        "aicore_mhz": 800,
        "aicore_rated_mhz": 1800,
        "temp_c": 46.0,
        "power_w": 93.4,
        "hbm_usage_pct": 4.0,
        "link_mbps": 200000,
        "link_errors": None,  # a first reading: nothing to compare with
        "unanswered": None,
    }
    one = first["devices"]["1"]
    assert one["aicore_mhz"] is None and one["link_mbps"] is None and one["link_errors"] is None
    assert one["unanswered"].split("; ") == [
        "npu-smi info -t common -i 1 -c 0 did not answer within 10 s",
        "hccn_tool -i 1 -speed -g exited with 1: no such device",
        "hccn_tool -i 1 -stat -g printed no counter npulaunch reads",
    ]
    assert first["devices"]["5"]["unanswered"].startswith("npu-smi info lists no NPU with physical id 5")
    assert readings.event(answers(7, 2, 500), True, not_asked)["devices"]["0"]["link_errors"] == {}
    rose = readings.event(answers(1241, 2, 900), True, not_asked)["devices"]["0"]["link_errors"]
    assert rose == {"roce_rx_err_pkt_num": 1234}  # traffic counters are no errors
    cleared = readings.event(answers(3, 2, 950), True, not_asked)["devices"]["0"]["link_errors"]
    assert cleared == {"roce_rx_err_pkt_num": 3}  # fewer than before: cleared (-stat -c) since, counted from 0
    alone = readings.event(answers(3, 2, 950), False, not_asked)["devices"]["0"]  # one host: no NIC asked
    assert (alone["link_mbps"], alone["link_errors"], alone["unanswered"]) == (None, None, None)
