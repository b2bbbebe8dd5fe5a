"""The probe's health facts on this host, gathered with the NPU tool stand-ins on the PATH (real processes,
real files, real sockets): every fact, each fault, and a time that stays bounded when a tool hangs."""

from __future__ import annotations

import platform
import socket
import time
from pathlib import Path
from typing import Any, Dict

import pytest
from helpers import STANDINS, free_port_window, marked_pids, wait_until

from npulaunch.host.agent.probe import probe
from npulaunch.host.health import gather as health
from npulaunch.host.health import hostnet


@pytest.fixture
def standins(monkeypatch: pytest.MonkeyPatch, marker: str) -> pytest.MonkeyPatch:
    """The stand-ins first on the PATH; every tool they start carries the test's marker."""
    import os

    monkeypatch.setenv("PATH", f"{STANDINS}{os.pathsep}{os.environ['PATH']}")
    monkeypatch.setenv("NPLTEST_MARKER", marker)
    for name in ("ASCEND_HOME_PATH", "ASCEND_TOOLKIT_HOME", "HCCL_IF_IP", "HCCL_SOCKET_IFNAME"):
        monkeypatch.delenv(name, raising=False)
    return monkeypatch


def ask(tmp_path: Path, **health_ask: Any) -> Dict[str, Any]:
    paths = {
        "root": str(tmp_path / "Ascend"),
        "install_info": str(tmp_path / "no-install.info"),
        "hccn_conf": str(tmp_path / "hccn.conf"),
    }
    health_part = dict({"nics": True, "env": {}, "ports": False, "chief_port": None, "paths": paths}, **health_ask)
    return {
        "workdir": str(tmp_path),
        "script": None,
        "program": "python3",
        "job_dir": str(tmp_path / "logs" / "j"),
        "devices": [0, 1],
        "need_ips": True,
        "health": health_part,
    }


def test_a_healthy_host_reports_every_fact(standins: pytest.MonkeyPatch, tmp_path: Path) -> None:
    found = probe(ask(tmp_path))
    facts = found["health"]
    assert facts["tools"] == {"npu-smi": True, "hccn_tool": True}
    assert facts["devices"] == [0, 1] and facts["busy"] == {}
    assert {d: c["health"] for d, c in facts["chips"].items()} == {"0": "OK", "1": "OK"}
    assert facts["nics"]["1"] == {
        "link": "UP",
        "net_health": "Success",
        "ip": "192.168.101.101",
        "netmask": "255.255.255.0",
        "gateway": "192.168.101.1",
        "netdetect": "192.168.101.1",
        "tls": 0,
    }
    assert found["device_ips"] == {"0": "192.168.100.101", "1": "192.168.101.101"}  # asked once, not twice
    assert facts["calls"] == {"hccn_tool": 12}
    assert facts["versions"]["driver"] == ["23.0.1", "npu-smi info"]
    assert facts["versions"]["toolkit"] is None and facts["versions"]["firmware"] is None
    assert sorted(s[0] for s in facts["skipped"]) == ["firmware", "toolkit"]


def test_faults_show_in_the_facts(standins: pytest.MonkeyPatch, tmp_path: Path) -> None:
    standins.setenv("NPU_STANDIN_UNHEALTHY", "0")
    standins.setenv("NPU_STANDIN_BUSY", "1")
    standins.setenv("NPU_STANDIN_LINK_DOWN", "1")
    standins.setenv("NPU_STANDIN_TLS", "0")
    standins.setenv("NPU_STANDIN_NO_GATEWAY", "0")
    facts = probe(ask(tmp_path))["health"]
    assert facts["chips"]["0"]["health"] == "Critical" and facts["chips"]["0"]["code"] == "A4025021 8C03A000 8C084E00"
    assert facts["busy"] == {"1": [[1333929, "python"]]}
    assert (facts["nics"]["1"]["link"], facts["nics"]["1"]["net_health"]) == ("DOWN", "Fault")
    assert (facts["nics"]["0"]["tls"], facts["nics"]["1"]["tls"]) == (1, 0)
    assert facts["nics"]["0"]["gateway"] is None and facts["nics"]["1"]["gateway"] == "192.168.101.1"


def test_versions_from_the_install_files(standins: pytest.MonkeyPatch, tmp_path: Path) -> None:
    data = Path(__file__).parents[1] / "data" / "tool_outputs"
    toolkit = tmp_path / "toolkit" / f"{platform.machine()}-linux"
    toolkit.mkdir(parents=True)
    (toolkit / "ascend_toolkit_install.info").write_text((data / "ascend_toolkit_install_8.3.RC2.info").read_text())
    root = tmp_path / "Ascend"
    for part, name in (("driver", "driver_version_24.1.rc1.info"), ("firmware", "firmware_version.info")):
        (root / part).mkdir(parents=True)
        (root / part / "version.info").write_text((data / name).read_text())
    standins.setenv("ASCEND_HOME_PATH", str(tmp_path / "toolkit"))
    versions = probe(ask(tmp_path))["health"]["versions"]
    assert versions == {
        "toolkit": ["8.3.RC2", str(toolkit / "ascend_toolkit_install.info")],
        "driver": ["24.1.rc1", str(root / "driver" / "version.info")],
        "firmware": ["7.1.0.11.220", str(root / "firmware" / "version.info")],
    }


def test_the_job_yaml_env_decides_which_toolkit(standins: pytest.MonkeyPatch, tmp_path: Path) -> None:
    cfg = tmp_path / "old"
    cfg.mkdir()
    (cfg / "version.cfg").write_text("toolkit_running_version=[1.84.15.1.310:6.0.1]\n")
    standins.setenv("ASCEND_HOME_PATH", str(tmp_path / "elsewhere"))
    versions = probe(ask(tmp_path, env={"ASCEND_HOME_PATH": str(cfg)}))["health"]["versions"]
    assert versions["toolkit"] == ["6.0.1", str(cfg / "version.cfg")]


def test_a_hung_tool_costs_its_time_limit_and_is_not_checked(
    standins: pytest.MonkeyPatch, tmp_path: Path, marker: str
) -> None:
    standins.setenv("NPU_STANDIN_HCCN_HANG", "link")
    started = time.monotonic()
    # 2 s: the stand-in's other calls answer within it on a busy 2-core machine (0.5 s did not, in the suite)
    facts = probe(ask(tmp_path, tool_timeout_s=2))["health"]
    elapsed = time.monotonic() - started
    assert elapsed < 6.0, elapsed  # two hung calls in parallel, 2 s each, and the rest
    hung = [s for s in facts["skipped"] if s[0] == "link"]
    assert [s[1] for s in hung] == [0, 1]
    assert "hccn_tool -i 0 -link -g did not answer within 2 s" in hung[0][2]
    assert facts["nics"]["0"]["net_health"] == "Success"  # the other questions were answered
    assert wait_until(lambda: not marked_pids(marker), 2)  # the hung tools were killed


def test_the_whole_gathering_has_a_deadline(standins: pytest.MonkeyPatch, tmp_path: Path) -> None:
    standins.setenv("NPU_STANDIN_HCCN_HANG", "all")
    started = time.monotonic()
    facts = probe(ask(tmp_path, tool_timeout_s=30, limit_s=1.0))["health"]
    assert time.monotonic() - started < 3.0
    assert len([s for s in facts["skipped"] if s[0] in dict(health.NIC_QUERIES)]) == 12
    assert any("the host's 1 s for its checks ran out" in s[2] for s in facts["skipped"])


def test_a_hung_npu_smi_health_query(standins: pytest.MonkeyPatch, tmp_path: Path) -> None:
    standins.setenv("NPU_STANDIN_UNHEALTHY", "1")
    standins.setenv("NPU_STANDIN_HANG", "health")
    started = time.monotonic()
    facts = probe(ask(tmp_path, tool_timeout_s=0.5))["health"]
    assert time.monotonic() - started < 3.0
    assert facts["chips"]["1"]["health"] == "Critical" and "code" not in facts["chips"]["1"]
    assert [s[:2] for s in facts["skipped"] if s[0] == "chip_detail"] == [["chip_detail", 1]]


def test_without_the_tools_nothing_is_claimed(monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> None:
    monkeypatch.setenv("PATH", "/usr/bin:/bin")
    facts = probe(ask(tmp_path))["health"]
    assert facts["tools"] == {"npu-smi": False, "hccn_tool": False}
    assert facts["chips"] == {} and facts["nics"] == {}


def test_pings_to_peers(standins: pytest.MonkeyPatch) -> None:
    standins.setenv("NPU_STANDIN_PING_FAIL", "1")
    standins.setenv("NPU_STANDIN_PING_LOSS", "2")
    found = probe({"ping": {"pairs": [[0, "192.168.100.117"], [1, "192.168.101.117"], [2, "192.168.102.117"]]}})
    assert found["ping"]["results"] == [
        [0, "192.168.100.117", 3, 3, ""],
        [1, "192.168.101.117", 3, 0, "recv time out seq=0"],
        [2, "192.168.102.117", 3, 2, "recv time out seq=0"],
    ]


def test_a_hung_ping_is_bounded(standins: pytest.MonkeyPatch) -> None:
    standins.setenv("NPU_STANDIN_HCCN_HANG", "ping")
    started = time.monotonic()
    found = probe({"ping": {"pairs": [[0, "192.168.100.117"]], "timeout_s": 0.5}})
    assert time.monotonic() - started < 2.5
    assert found["ping"]["results"][0][2] is None and "did not answer within 0.5 s" in found["ping"]["results"][0][4]


# --- the host side of HCCL


def test_hccl_if_ip_and_socket_ifname() -> None:
    found = hostnet.hccl_env_problems({"HCCL_IF_IP": "127.0.0.1", "HCCL_SOCKET_IFNAME": "=lo"})
    assert found == [["HCCL_IF_IP", "127.0.0.1", ""], ["HCCL_SOCKET_IFNAME", "=lo", ""]]
    missing = hostnet.hccl_env_problems({"HCCL_IF_IP": "192.0.2.77", "HCCL_SOCKET_IFNAME": "=nosuch0"})
    assert missing[0][2] == "no interface of this host has it"
    assert missing[1][2].startswith("matches none of this host's interfaces (")


@pytest.mark.parametrize(
    "rule, chosen",
    [
        ("eth", ["eth0", "eth1"]),
        ("^eth", ["lo", "enp3s0", "docker0"]),
        ("=eth1,enp3s0", ["eth1", "enp3s0"]),
        ("^=eth0,lo", ["eth1", "enp3s0", "docker0"]),
    ],
)
def test_socket_ifname_rules(rule: str, chosen: list) -> None:
    # the four forms of hicann/hccl docs/zh/user_guide/hccl_env/HCCL_SOCKET_IFNAME.md
    assert hostnet.ifname_candidates(rule, ["lo", "eth0", "eth1", "enp3s0", "docker0"]) == chosen


def test_hccl_ports_in_use_and_unreserved() -> None:
    base = free_port_window()
    holder = socket.socket()
    holder.bind(("127.0.0.1", base + 1))
    holder.listen()
    try:
        facts = hostnet.port_facts({"HCCL_IF_BASE_PORT": str(base)}, True, None)
    finally:
        holder.close()
    assert facts is not None and facts["first"] == base and facts["last"] == base + 31
    assert facts["busy"] == [base + 1] and facts["connections"] == []  # a listener
    assert facts["source"] == f"HCCL_IF_BASE_PORT={base}"


def test_a_port_held_by_a_connection_is_told_apart_from_a_listener() -> None:
    base = free_port_window()
    server = socket.socket()
    server.bind(("127.0.0.1", 0))
    server.listen()
    client = socket.socket()
    client.bind(("127.0.0.1", base + 2))  # as an outgoing connection takes a port of the ephemeral range
    client.connect(server.getsockname())
    try:
        facts = hostnet.port_facts({"HCCL_IF_BASE_PORT": str(base)}, True, None)
        assert hostnet.port_holders([base + 2, server.getsockname()[1], base + 3]) == {
            base + 2: "connection",
            server.getsockname()[1]: "listener",
        }
    finally:
        client.close()
        server.close()
    assert facts is not None and facts["busy"] == [base + 2] and facts["connections"] == [base + 2]


def test_port_holders_reads_the_kernels_socket_tables(monkeypatch: pytest.MonkeyPatch) -> None:
    head = "  sl  local_address rem_address   st tx_queue rx_queue tr tm->when retrnsmt   uid  timeout inode\n"
    tail = "00000000:00000000 00:00000000 00000000     0        0 1 1 ffff0000 20 4 30 10 -1\n"
    tcp = head + (
        f"   0: 0100007F:EA64 0100007F:0016 01 {tail}"  # 127.0.0.1:60004, established
        f"   1: 00000000:EA65 00000000:0000 0A {tail}"  # 0.0.0.0:60005, listening
        f"   2: 0100007F:EA65 0100007F:0016 01 {tail}"  # and a connection on it as well: still a listener
        f"   3: 0100007F:EA66 0100007F:0016 06 {tail}"  # TIME_WAIT
        f"   4: 0100007F:zz 0100007F:0016 01 {tail}"  # damaged lines are passed over
        "   5: 0100007F:EA67\n"
    )
    tcp6 = head + f"   0: 00000000000000000000000001000000:EA68 00000000000000000000000000000000:0000 0A {tail}"
    files = {"/proc/net/tcp": tcp, "/proc/net/tcp6": tcp6}
    monkeypatch.setattr(hostnet, "_read", files.get)
    assert hostnet.port_holders(range(60000, 60010)) == {
        60004: "connection",
        60005: "listener",
        60006: "connection",
        60008: "listener",
    }


def test_hccl_port_range_variable_wins() -> None:
    assert hostnet.hccl_ports({"HCCL_HOST_SOCKET_PORT_RANGE": "61000-61002,61010", "HCCL_IF_BASE_PORT": "50000"})[
        0
    ] == [
        61000,
        61001,
        61002,
        61010,
    ]
    assert hostnet.hccl_ports({"HCCL_HOST_SOCKET_PORT_RANGE": "auto"})[0] == []
    assert hostnet.hccl_ports({})[0] == list(range(60000, 60032))
