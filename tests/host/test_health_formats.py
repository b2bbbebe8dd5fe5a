"""Every real output in tests/data/tool_outputs/ (sources in its SOURCES.md) read by the health
parsers, and the stand-ins' output read the same way: the stand-ins must print what the real tools do."""

from __future__ import annotations

import os
import re
import subprocess
from pathlib import Path

import pytest
from helpers import STANDINS, TESTS

from npulaunch.host.discovery import parse_hccn_ip, parse_npu_smi_info, parse_npu_smi_processes, parse_npu_smi_version
from npulaunch.host.health import parse

DATA = TESTS / "data" / "tool_outputs"


def sample(name: str) -> str:
    return (DATA / name).read_text(encoding="utf-8")


def test_every_sample_has_a_source_and_every_source_a_sample() -> None:
    rows = [line.split("|")[1] for line in (DATA / "SOURCES.md").read_text().splitlines() if line.startswith("| `")]
    listed = {name for cell in rows for name in re.findall(r"`([^`]+)`", cell)}
    present = {p.name for p in DATA.iterdir() if p.name != "SOURCES.md"}
    assert present == listed


@pytest.mark.parametrize(
    "name, link",
    [("hccn_link_up.txt", "UP"), ("hccn_link_down_950.txt", "DOWN")],
)
def test_link_status(name: str, link: str) -> None:
    assert parse.parse_link(sample(name)) == link


def test_link_status_is_read_whatever_the_case() -> None:
    assert parse.parse_link("link status: Up\n") == "UP"  # mind-cluster's unit test writes it so
    assert parse.parse_link("vnic link status: UP\n") is None  # the vNIC is another question


@pytest.mark.parametrize(
    "name, state, good",
    [
        ("hccn_net_health_init.txt", "Init", True),
        ("hccn_net_health_success.txt", "Success", True),
        ("hccn_net_health_fault.txt", "Fault", False),
        ("hccn_net_health_socket_failed.txt", "Socket failed", False),
    ],
)
def test_net_health(name: str, state: str, good: bool) -> None:
    assert parse.parse_net_health(sample(name)) == state
    assert (state in parse.NET_HEALTH_GOOD) == good and (state in parse.NET_HEALTH_BAD) != good


def test_addresses() -> None:
    assert (parse_hccn_ip(sample("hccn_ip_910b1.txt")), parse.parse_netmask(sample("hccn_ip_910b1.txt"))) == (
        "29.1.112.213",
        "255.255.0.0",
    )
    assert parse_hccn_ip(sample("hccn_ip_910a.txt")) == "192.161.200.10"
    assert parse_hccn_ip(sample("hccn_ip_none.txt")) is None


def test_gateway_and_detect_address_in_both_spellings() -> None:
    assert parse.parse_gateway(sample("hccn_gateway_8.txt")) == "11.12.165.1"
    assert parse.parse_gateway("default gateway:11.12.165.1\n") == "11.12.165.1"  # Ascend 950: no Iface part
    assert parse.parse_gateway("") is None
    assert parse.parse_netdetect(sample("hccn_netdetect_doc.txt")) == "11.12.165.1"
    assert parse.parse_netdetect("netdetect addr: 29.1.0.1\n") == "29.1.0.1"  # the current printf
    assert parse.parse_netdetect("netdetect addr: 0.0.0.0\n") is None


@pytest.mark.parametrize(
    "name, switch",
    [
        ("hccn_tls_switch_preconfigured.txt", 0),
        ("hccn_tls_old_driver_full.txt", 0),
    ],
)
def test_tls_switch(name: str, switch: int) -> None:
    assert parse.parse_tls_switch(sample(name)) == switch


def test_tls_switch_of_each_device() -> None:
    lines = sample("hccn_tls_two_devices.txt").splitlines()
    assert [parse.parse_tls_switch(line) for line in lines] == [0, 1]


@pytest.mark.parametrize(
    "name, counts",
    [
        ("hccn_ping_ok.txt", (3, 3, "")),
        ("hccn_ping_ok_doc_typo.txt", (3, 3, "")),
        ("hccn_ping_partial_loss.txt", (3, 2, "recv time out seq=O")),
    ],
)
def test_ping(name: str, counts: tuple) -> None:
    assert parse.parse_ping(sample(name)) == counts


def test_hccn_conf_by_physical_id() -> None:
    conf = parse.parse_hccn_conf(sample("hccn_conf_910b1.txt"))
    assert conf[0]["address"] == "29.1.137.205" and conf[7]["netdetect"] == "29.1.0.1"
    assert set(conf) == {0, 7}


@pytest.mark.parametrize(
    "name, chips, version, busy",
    [
        ("npu_smi_910b3_25.2.0_busy.txt", 8, "25.2.0", [(2, 0, 1333928, "")]),
        (
            "npu_smi_910a_23.0.rc3_busy.txt",
            8,
            "23.0.rc2.3",
            [
                (n, 0, pid, "python")
                for n, pid in enumerate((139667, 139577, 139446, 139372, 139258, 139163, 139126, 139090))
            ],
        ),
        ("npu_smi_910a_1.9.3.txt", 4, "21.0.rc1", []),
        ("npu_smi_a3_24.1.rc3.7_excerpt.txt", 2, "24.1.rc3.7", []),
    ],
)
def test_npu_smi_info(name: str, chips: int, version: str, busy: list) -> None:
    text = sample(name)
    assert len(parse_npu_smi_info(text)) == chips
    assert parse_npu_smi_version(text) == version
    assert [(p.npu_id, p.chip_id, p.pid, p.name) for p in parse_npu_smi_processes(text)] == busy


def test_npu_smi_26_process_table_with_the_container_column() -> None:
    processes = parse_npu_smi_processes(sample("npu_smi_a3_26.0.rc2_excerpt.txt"))
    assert [(p.npu_id, p.chip_id, p.pid, p.name) for p in processes] == [(0, 0, 632268, "python3.1")]


@pytest.mark.parametrize(
    "name, health, code",
    [
        ("npu_smi_health_ok.txt", "OK", ""),
        ("npu_smi_health_950.txt", "OK", ""),
        ("npu_smi_health_alarm_910a.txt", "Alarm", "A4025021 8C03A000 8C084E00"),
    ],
)
def test_chip_health(name: str, health: str, code: str) -> None:
    found = parse.parse_npu_health(sample(name))
    assert found[:2] == (health, code)


def test_chip_health_keeps_every_line_of_the_error_information() -> None:
    info = parse.parse_npu_health(sample("npu_smi_health_alarm_910a.txt"))[2]
    assert info.startswith("ascend_monitor adda heart beat lost error; node type=process-manager")
    assert info.endswith("event state=Heartbeat Lost.")


def test_board_firmware() -> None:
    assert parse.parse_board_firmware(sample("npu_smi_board_910a.txt")) == "7.1.0.7.220"


@pytest.mark.parametrize(
    "name, version",
    [
        ("ascend_toolkit_install_8.3.RC2.info", "8.3.RC2"),
        ("ascend_toolkit_install_8.5.0.info", "8.5.0"),
        ("ascend_toolkit_install_7.0.T10.info", "7.0.T10"),
        ("toolkit_version_6.0.1.cfg", "6.0.1"),
    ],
)
def test_toolkit_version(name: str, version: str) -> None:
    assert parse.parse_toolkit_version(sample(name)) == version


def test_version_cfg_with_a_cann_prefix() -> None:  # HCCL's own reader shows "[1.83.T8.0.B128:CANN-1.83]"
    assert parse.parse_toolkit_version("toolkit_running_version=[1.80:CANN-1.80]\n") == "1.80"


@pytest.mark.parametrize(
    "name, version",
    [
        ("driver_version_23.0.7.info", "23.0.7"),
        ("driver_version_24.1.rc1.info", "24.1.rc1"),
        ("firmware_version.info", "7.1.0.11.220"),
    ],
)
def test_installed_versions(name: str, version: str) -> None:
    assert parse.parse_installed_version(sample(name)) == version


# --- the stand-ins print the same formats


def standin(tool: str, *args: str, **env: str) -> subprocess.CompletedProcess:
    return subprocess.run(
        [str(STANDINS / tool), *args], capture_output=True, text=True, env={**os.environ, **env}, timeout=10
    )


def test_standin_hccn_tool_answers_every_query_in_the_real_formats() -> None:
    assert parse.parse_link(standin("hccn_tool", "-i", "2", "-link", "-g").stdout) == "UP"
    assert parse.parse_net_health(standin("hccn_tool", "-i", "2", "-net_health", "-g").stdout) == "Success"
    assert parse.parse_gateway(standin("hccn_tool", "-i", "2", "-gateway", "-g").stdout) == "192.168.102.1"
    assert parse.parse_netdetect(standin("hccn_tool", "-i", "2", "-netdetect", "-g").stdout) == "192.168.102.1"
    assert parse.parse_tls_switch(standin("hccn_tool", "-i", "2", "-tls", "-g").stdout) == 0
    assert parse.parse_ping(standin("hccn_tool", "-i", "2", "-ping", "-g", "address", "1.2.3.4").stdout) == (3, 3, "")


def test_standin_hccn_tool_faults() -> None:
    down = {"NPU_STANDIN_LINK_DOWN": "2"}
    assert parse.parse_link(standin("hccn_tool", "-i", "2", "-link", "-g", **down).stdout) == "DOWN"
    assert parse.parse_net_health(standin("hccn_tool", "-i", "2", "-net_health", "-g", **down).stdout) == "Fault"
    assert parse.parse_link(standin("hccn_tool", "-i", "1", "-link", "-g", **down).stdout) == "UP"
    assert parse_hccn_ip(standin("hccn_tool", "-i", "2", "-ip", "-g", NPU_STANDIN_NO_IP="2").stdout) is None
    wrong = parse_hccn_ip(standin("hccn_tool", "-i", "0", "-ip", "-g", NPU_STANDIN_WRONG_IP="all").stdout)
    assert wrong != parse_hccn_ip(standin("hccn_tool", "-i", "0", "-ip", "-g").stdout)
    assert parse.parse_tls_switch(standin("hccn_tool", "-i", "2", "-tls", "-g", NPU_STANDIN_TLS="2").stdout) == 1
    gateway = standin("hccn_tool", "-i", "2", "-gateway", "-g", NPU_STANDIN_NO_GATEWAY="all")
    assert gateway.returncode != 0 and parse.parse_gateway(gateway.stdout) is None
    failed = standin("hccn_tool", "-i", "2", "-ping", "-g", "address", "1.2.3.4", NPU_STANDIN_PING_FAIL="2")
    assert failed.returncode != 0 and parse.parse_ping(failed.stdout) == (3, 0, "recv time out seq=0")


def test_standin_npu_smi_answers_in_the_real_formats() -> None:
    table = standin("npu-smi", "info", NPU_STANDIN_BUSY="1", NPU_STANDIN_DRIVER="24.1.rc1").stdout
    assert [(p.npu_id, p.chip_id) for p in parse_npu_smi_processes(table)] == [(1, 0)]
    assert parse_npu_smi_version(table) == "24.1.rc1"
    ok = standin("npu-smi", "info", "-t", "health", "-i", "0", "-c", "0").stdout
    assert parse.parse_npu_health(ok) == ("OK", "", "")
    bad = standin("npu-smi", "info", "-t", "health", "-i", "0", "-c", "0", NPU_STANDIN_UNHEALTHY="0").stdout
    assert parse.parse_npu_health(bad)[:2] == ("Critical", "A4025021 8C03A000 8C084E00")
    board = standin("npu-smi", "info", "-t", "board", "-i", "0").stdout
    assert parse.parse_board_firmware(board) == "7.1.0.7.220"


def test_data_directory_is_in_the_repository() -> None:
    assert Path(DATA / "SOURCES.md").is_file()
