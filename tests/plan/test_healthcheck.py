"""Judging the hosts' health facts together, by value: each fault gives its finding with the right
severity (fatal across hosts, a warning on one), findings of many NPUs merge, versions and TLS are
compared across hosts, and the ping ring pairs every NPU with one peer."""

from __future__ import annotations

from typing import Any, Dict, List, Optional

import pytest

from npulaunch.config.load import parse_config
from npulaunch.config.yamlsource import parse_yaml
from npulaunch.plan.checks.findings import CheckFailed, Finding, Severity, compact, merged
from npulaunch.plan.checks.health import HealthSettings, health_ask, judge_health
from npulaunch.plan.checks.net import ping_findings, ping_pairs
from npulaunch.plan.checks.remote import probe_asks, review_health


def config(hosts: int = 2, extra: str = "", devices: str = "[0, 1]", ips: Optional[List[str]] = None):
    lines = []
    for i in range(1, hosts + 1):
        entry = f"  - host: h{i}\n    devices: {devices}\n"
        if ips:
            entry += f"    device_ips: [{', '.join(ips[(i - 1) * 2 : i * 2])}]\n"
        lines.append(entry)
    text = "job:\n  command: [python3, t.py]\nhosts:\n" + "".join(lines) + extra
    return parse_config(parse_yaml(text, "c.yaml"), base_dir="/srv")


def nic(device: int, host: int, **changes: Any) -> Dict[str, Any]:
    facts = {
        "link": "UP",
        "net_health": "Success",
        "ip": f"192.168.{100 + device}.{100 + host}",
        "netmask": "255.255.255.0",
        "gateway": f"192.168.{100 + device}.1",
        "netdetect": f"192.168.{100 + device}.1",
        "tls": 0,
    }
    facts.update(changes)
    return facts


def host_facts(host: int, devices=(0, 1), nics: Optional[Dict[int, Dict[str, Any]]] = None, **health: Any):
    found = {
        "tools": {"npu-smi": True, "hccn_tool": True},
        "devices": list(devices),
        "busy": {},
        "chips": {str(d): {"health": "OK", "npu": d, "chip": 0} for d in devices},
        "nics": {str(d): (nics or {}).get(d, nic(d, host)) for d in devices},
        "skipped": [],
        "versions": {"toolkit": ["8.3.RC2", "/x/ascend_toolkit_install.info"], "driver": ["25.2.0", "npu-smi info"]},
        "hccl_env": [],
        "ports": None,
        "calls": {"hccn_tool": 12},
    }
    found.update(health)
    return {"health": found, "device_ips": None}


def judged(cfg, answers, **kw) -> List[Finding]:
    asks = probe_asks(cfg, "j", HealthSettings())
    return merged(judge_health(cfg, answers, asks))


def lines(findings: List[Finding]) -> List[str]:
    return [f"{f.severity.value}: {f.render()}" for f in findings]


def test_healthy_hosts_give_nothing() -> None:
    cfg = config()
    assert judged(cfg, {"h1": host_facts(1), "h2": host_facts(2)}) == []


def test_a_down_link_is_fatal_across_hosts_and_a_warning_on_one() -> None:
    down = {1: nic(1, 1, link="DOWN", net_health="Fault")}
    two = judged(config(), {"h1": host_facts(1, nics=down), "h2": host_facts(2)})
    assert lines(two) == [
        "fatal: h1: NPU 1: NIC link DOWN (expected UP); inspect: hccn_tool -i 1 -link -g; cable and switch port: "
        "hccn_tool -i 1 -optical -g, hccn_tool -i 1 -lldp -g"
    ]
    one = judged(config(1), {"h1": host_facts(1, nics=down)})
    assert [f.severity for f in one] == [Severity.WARNING]


def test_many_npus_with_the_same_fault_make_one_line() -> None:
    down = {d: nic(d, 1, link="DOWN") for d in range(8)}
    found = judged(config(devices="8"), {"h1": host_facts(1, range(8), down), "h2": host_facts(2, range(8))})
    assert len(found) == 1 and found[0].devices == tuple(range(8))
    assert (
        found[0].render().startswith("h1: NPUs 0-7: NIC link DOWN (expected UP); inspect: hccn_tool -i <id> -link -g")
    )


@pytest.mark.parametrize("state", ["Socket fail", "Socket failed", "Receive timeout", "Unreachable", "Fault"])
def test_bad_net_health(state: str) -> None:
    found = judged(config(), {"h1": host_facts(1, nics={0: nic(0, 1, net_health=state)}), "h2": host_facts(2)})
    assert lines(found)[0].startswith(f"fatal: h1: NPU 0: NIC net health {state} (expected Success)")


def test_init_without_a_detect_address_is_not_checked() -> None:
    facts = host_facts(1, nics={0: nic(0, 1, net_health="Init", netdetect=None)})
    found = judged(config(), {"h1": facts, "h2": host_facts(2)})
    assert [(f.check, f.severity, f.devices) for f in found] == [("net_health", Severity.NOT_CHECKED, (0,))]


def test_an_address_that_is_not_the_rank_tables() -> None:
    ips = ['"192.168.100.101"', '"192.168.101.101"', '"192.168.100.102"', '"192.168.101.102"']
    cfg = config(ips=ips)
    wrong = {1: nic(1, 1, ip="192.168.101.201")}
    found = judged(cfg, {"h1": host_facts(1, nics=wrong), "h2": host_facts(2)})
    assert lines(found) == [
        "fatal: h1: NPU 1: NIC address 192.168.101.201, but the rank table's device_ip is 192.168.101.101 "
        "(hosts[0].device_ips) (expected 192.168.101.101); correct device_ips in the YAML, or the NIC: hccn_tool -i 1 "
        "-ip -g; set: hccn_tool -i 1 -ip -s address <address> netmask <netmask>"
    ]


def test_no_gateway_to_a_peer_in_another_subnet() -> None:
    h1 = {0: nic(0, 1, gateway=None)}
    h2 = {0: nic(0, 2, ip="10.0.0.2", netmask="255.255.255.0", gateway="10.0.0.1", netdetect="10.0.0.1")}
    found = judged(config(), {"h1": host_facts(1, nics=h1), "h2": host_facts(2, nics=h2)})
    assert lines(found) == [
        "fatal: h1: NPU 0: NIC 192.168.100.101/24 has no gateway, and its peer h2 NPU 0 (10.0.0.2) is in another "
        "subnet (expected the same subnet, or a gateway); set: hccn_tool -i 0 -gateway -s address <gateway>; "
        "inspect: -gateway -g"
    ]


def test_a_detect_address_out_of_reach() -> None:
    facts = host_facts(1, nics={0: nic(0, 1, gateway=None, netdetect="10.9.9.9")})
    found = judged(config(1), {"h1": facts})
    assert [(f.check, f.severity) for f in found] == [("netdetect", Severity.WARNING)]


def test_tls_on_for_some_npus_only() -> None:
    found = judged(
        config(3),
        {
            "h1": host_facts(1),
            "h2": host_facts(2, nics={0: nic(0, 2, tls=1), 1: nic(1, 2, tls=1)}),
            "h3": host_facts(3),
        },
    )
    assert lines(found) == [
        "fatal: h2: NPUs 0-1: TLS switch 1 (on) (expected 0 as on 4 other NPUs (h1, h3)); make every NPU of the job "
        "the same: hccn_tool -i <id> -tls -s enable 0"
    ]


def test_versions_differ_across_hosts() -> None:
    other = {"toolkit": ["8.0.RC2", "/y/version.cfg"], "driver": ["24.1.rc1", "/usr/local/Ascend/driver/version.info"]}
    found = judged(config(3), {"h1": host_facts(1), "h2": host_facts(2), "h3": host_facts(3, versions=other)})
    assert lines(found) == [
        "fatal: h3: CANN toolkit 8.0.RC2 (/y/version.cfg) (expected 8.3.RC2 as on h1, h2 (HCCL refuses ranks of "
        "different versions: EI0008)); install the same CANN toolkit version on every host",
        "warning: h3: driver 24.1.rc1 (/usr/local/Ascend/driver/version.info) (expected 25.2.0 as on h1, h2); install "
        "the same driver version on every host",
    ]


def test_the_yaml_cann_version_against_the_hosts() -> None:
    found = judged(config(1, 'cann_version: "8.0.RC2"\n'), {"h1": host_facts(1)})
    assert [(f.check, f.severity) for f in found] == [("toolkit", Severity.WARNING)]
    assert "the YAML says cann_version: 8.0.RC2" in found[0].seen


def test_unhealthy_and_busy_chips_are_fatal_even_on_one_host() -> None:
    chips = {
        "0": {"health": "Alarm", "npu": 0, "chip": 0, "code": "A4025021 8C03A000 8C084E00", "info": "heart beat lost"},
        "1": {"health": "Warning", "npu": 1, "chip": 0},
    }
    found = judged(config(1), {"h1": host_facts(1, chips=chips, busy={"1": [[4242, ""]]})})
    assert lines(found) == [
        "fatal: h1: NPU 0: chip health Alarm (error code A4025021 8C03A000 8C084E00: heart beat lost; most severe "
        "RestartNPU (8C03A000), MindCluster: isolate the chip and reschedule the job) (expected OK); inspect: "
        "npu-smi info -t health -i 0 -c 0",
        "warning: h1: NPU 1: chip health Warning (most severe NotHandleFault, MindCluster: no action, reported only) "
        "(expected OK); inspect: npu-smi info -t health -i 1 -c 0",
        "fatal: h1: NPU 1: held by another process: pid 4242 (in another container) (expected a free device); "
        "npu-smi info lists it: stop that process or choose other devices",
    ]


@pytest.mark.parametrize(
    "health, code, severity, level",
    [
        ("Alarm", "A4025021", Severity.WARNING, "NotHandleFault"),  # the codes decide, as in MindCluster
        ("Warning", "80E18405", Severity.WARNING, "SubHealthFault"),
        ("Warning", "8118043C", Severity.FATAL, "PreSeparateNPU"),  # nothing new is scheduled there
        ("Critical", "", Severity.FATAL, "SeparateNPU"),  # no code: the health's severity
        ("UNKNOWN", "", Severity.FATAL, "RestartNPU"),  # the card-drop code 40F84E00
        ("Alarm", "DEADBEEF", Severity.FATAL, "SeparateNPU"),  # a code MindCluster does not list
    ],
)
def test_a_chips_severity_is_the_verdict_of_its_codes(health: str, code: str, severity: Severity, level: str) -> None:
    chips = {"0": {"health": health, "npu": 0, "chip": 0, "code": code, "info": "x"}}
    found = [f for f in judged(config(1), {"h1": host_facts(1, chips=chips)}) if f.check == "chip_health"]
    assert [(f.severity, f"most severe {level}" in f.seen) for f in found] == [(severity, True)], found


def test_missing_tools_and_skipped_questions_are_not_checked() -> None:
    facts = host_facts(
        1,
        tools={"npu-smi": False, "hccn_tool": False},
        chips={},
        nics={},
        skipped=[["firmware", None, "no /usr/local/Ascend/firmware/version.info"]],
    )
    facts["health"]["nics"] = {}
    found = judged(config(1), {"h1": facts})
    assert [(f.check, f.severity) for f in found] == [
        ("chip_health", Severity.NOT_CHECKED),
        ("nic", Severity.NOT_CHECKED),
        ("firmware", Severity.NOT_CHECKED),
    ]


def test_host_side_of_hccl() -> None:
    env = [["HCCL_IF_IP", "192.0.2.7", "no interface of this host has it"]]
    ports = {"source": "HCCL's default base port 60000", "busy": [60001], "unreserved": list(range(60000, 60032))}
    ports.update(chief_port=None, chief_busy=False, first=60000, last=60031)
    cm = judged(config(1, "rank_table: cm\n"), {"h1": host_facts(1, hccl_env=env, ports=ports)})
    assert [(f.check, f.severity) for f in cm] == [
        ("hccl_env", Severity.FATAL),
        ("ports", Severity.FATAL),
        ("ports", Severity.WARNING),
    ]
    assert cm[2].hint == "sysctl -w net.ipv4.ip_local_reserved_ports=60000-60031"
    assert cm[1].hint == "ss -tanp 'sport >= :60001 and sport <= :60001' shows who; or move HCCL_IF_BASE_PORT"
    table = judged(config(1), {"h1": host_facts(1, hccl_env=env)})
    assert [(f.check, f.severity) for f in table] == [("hccl_env", Severity.WARNING)]


def test_hccl_ports_held_by_connections_refuse_the_job_and_say_so() -> None:
    ports = {"source": "HCCL_IF_BASE_PORT=40000", "busy": [40001, 40003, 40004], "connections": [40003, 40004]}
    ports.update(unreserved=[], chief_port=None, chief_busy=False, first=40000, last=40031)
    found = judged(config(1, "rank_table: cm\n"), {"h1": host_facts(1, ports=ports)})
    assert [(f.check, f.severity, f.seen) for f in found] == [
        (
            "ports",
            Severity.FATAL,
            "HCCL's host ports 40001, 40003-40004 (HCCL_IF_BASE_PORT=40000) in use: 40003-40004 by a connection, "
            "not a listener",
        ),
    ]
    assert found[0].hint == "ss -tanp 'sport >= :40001 and sport <= :40004' shows who; or move HCCL_IF_BASE_PORT"


def test_health_questions_follow_the_job() -> None:
    cm = config(2, "rank_table: cm\nenv:\n  CM_CHIEF_PORT: '29610'\n  HCCL_IF_BASE_PORT: '50000'\n")
    first = health_ask(cm, 0, HealthSettings())
    assert first is not None and first["ports"] and first["chief_port"] == 29610
    assert first["env"] == {"HCCL_IF_BASE_PORT": "50000"}
    assert health_ask(cm, 1, HealthSettings())["chief_port"] is None  # type: ignore[index]
    assert health_ask(config(1, "cpu_fallback: true\n"), 0, HealthSettings()) is None


# --- pings


def test_the_ping_ring_pairs_each_npu_with_one_peer() -> None:
    pairs = ping_pairs(
        {
            "h1": [(0, "a0"), (1, "a1")],
            "h2": [(0, "b0")],
            "h3": [(4, "c4"), (5, None)],
        }
    )
    assert pairs == {
        "h1": [[0, "b0", "h2", 0], [1, "b0", "h2", 0]],
        "h2": [[0, "c4", "h3", 4]],
        "h3": [[4, "a0", "h1", 0]],
    }
    assert ping_pairs({"h1": [(0, "a0")]}) == {}


def test_ping_verdicts() -> None:
    pairs = {"h1": [[0, "b0", "h2", 0], [1, "b1", "h2", 1], [2, "b2", "h2", 2]], "h2": [[0, "a0", "h1", 0]]}
    answers = {
        "h1": {
            "results": [[0, "b0", 3, 3, ""], [1, "b1", 3, 0, "recv time out seq=0"], [2, "b2", 3, 2, ""]],
            "skipped": "",
        },
        "h2": None,
    }
    found = ping_findings(pairs, answers)
    assert [(f.host, f.severity, f.devices) for f in found] == [
        ("h1", Severity.FATAL, (1,)),
        ("h1", Severity.WARNING, (2,)),
        ("h2", Severity.NOT_CHECKED, ()),
    ]
    assert found[0].render() == (
        "h1: NPU 1: no reply from h2 NPU 1 (b1): recv time out seq=0 (expected replies); hccn_tool -i 1 -ping -g "
        "address b1; both NICs' links, addresses, gateways and the switch"
    )


def test_review_asks_the_pings_only_across_hosts() -> None:
    cfg = config(2)
    answers = {"h1": host_facts(1), "h2": host_facts(2)}
    asks = probe_asks(cfg, "j", HealthSettings())
    asked: List[Dict[str, Any]] = []

    def ask_round(questions: Dict[str, Dict[str, Any]], timeout_s: float) -> Dict[str, Any]:
        asked.append(questions)
        return {
            h: {
                "ping": {
                    "results": [p + [3, 3, ""] for p in q["ping"]["pairs"]],
                    "skipped": "",
                    "calls": {"hccn_tool": 2},
                }
            }
            for h, q in questions.items()
        }

    findings, checked = review_health(cfg, answers, asks, HealthSettings(), ask_round)
    assert findings == [] and checked["pings"] == 4 and checked["tool_calls"] == {"hccn_tool": 28, "npu-smi": 2}
    assert asked[0]["h1"]["ping"]["pairs"] == [[0, "192.168.100.102"], [1, "192.168.101.102"]]
    assert review_health(cfg, answers, asks, HealthSettings(ping=False), ask_round)[1]["pings"] == 0
    assert len(asked) == 1


def test_compact_and_check_failed() -> None:
    assert compact([3, 0, 1, 2, 7]) == "0-3, 7"
    failed = CheckFailed("nothing was started", ["h1: working directory /x does not exist"], [], {})
    assert failed.exit_code == 2 and str(failed) == "nothing was started:\n  h1: working directory /x does not exist"


def test_a_per_rank_working_directory_is_not_looked_at_before_the_plan() -> None:
    # job.workdir with a placeholder has one path per rank: the probe does not check a path that
    # does not exist as written (each rank's is known only once planned)
    cfg = config(extra="")
    plain = probe_asks(cfg, "j")
    assert plain["h1"]["workdir"] == cfg.job.workdir and plain["h1"]["script"] == "t.py"
    text = (
        "job:\n  command: [python3, t.py]\n  workdir: /data/run-{node_rank}\nhosts:\n  - host: h1\n    devices: [0]\n"
    )
    templated = probe_asks(parse_config(parse_yaml(text, "job.yaml"), "/base"), "j")
    assert templated["h1"]["workdir"] == "/" and templated["h1"]["script"] is None
