"""The HCCL rank table's two versions by value: 1.2 for Atlas A3 super pods (super_pod_list,
super_device_id) from the YAML or a MindX hccl.json, 1.0 otherwise with the reason in the plan; the
super-pod keys checked in the config; rank_table_problems, one rule per case."""

from __future__ import annotations

import copy
from typing import Any, Callable, Dict, Optional

import pytest

from npulaunch.config.cluster import ClusterConfig
from npulaunch.config.load import parse_config
from npulaunch.config.overrides import Overrides, apply_overrides
from npulaunch.config.yamlsource import parse_yaml
from npulaunch.host.errors import ConfigError, PlanError, SchedulerError
from npulaunch.plan.build import build_plan
from npulaunch.plan.launchplan import Discovery, LaunchPlan
from npulaunch.plan.ranktable import Server, build_rank_table, rank_table_problems
from npulaunch.plan.schedulers.volcano import hosts_from_rank_table

HEAD = "version: 1\njob:\n  command: [python3, train.py]\n  log_dir: /srv/logs\n"
NOTHING = Discovery(devices=lambda: [], device_ips=lambda ids: None, environ=lambda: {})
# after the SSH preflight: the hosts answered, and no hccn_tool gave their NPUs' addresses
PROBED = Discovery(
    devices=lambda: [],
    device_ips=lambda ids: None,
    environ=lambda: {},
    remote={f"10.0.0.{n}": {"npus": None, "device_ips": None} for n in (1, 2, 3)},
)

A3_PODS = """\
product: atlas-a3
hosts:
  - {host: 10.0.0.1, devices: [0, 1], super_pod_id: 0, super_device_ids: [0, 1], device_ips: [10.1.0.1, 10.1.0.2]}
  - {host: 10.0.0.2, devices: [0, 1], super_pod_id: 0, super_device_ids: [2, 3], device_ips: [10.1.1.1, 10.1.1.2]}
  - {host: 10.0.0.3, devices: [0, 1], super_pod_id: pod-b, super_device_ids: [0, 1], device_ips: [10.1.2.1, 10.1.2.2]}
"""


def config_of(body: str) -> ClusterConfig:
    return parse_config(parse_yaml(HEAD + body, "cluster.yaml"), base_dir="/srv")


def plan_of(config: ClusterConfig, discovery: Discovery = NOTHING) -> LaunchPlan:
    return build_plan(config, "job-1", "uuid-1", discovery)


def test_a3_with_super_pods_gets_version_1_2() -> None:
    plan = plan_of(config_of(A3_PODS))
    table = plan.rank_table
    assert table is not None and plan.rank_table_version == table["version"] == "1.2"
    assert table["super_pod_list"] == [
        {"super_pod_id": "0", "server_list": [{"server_id": "10.0.0.1"}, {"server_id": "10.0.0.2"}]},
        {"super_pod_id": "pod-b", "server_list": [{"server_id": "10.0.0.3"}]},
    ]
    assert table["server_list"][1]["device"][1] == {
        "device_id": "1",
        "super_device_id": "3",
        "device_ip": "10.1.1.2",
        "rank_id": "3",
    }
    assert "super-node networking" in plan.rank_table_reason and "2 super pods" in plan.rank_table_reason
    assert rank_table_problems(table, "atlas-a3") == []


def test_a3_without_super_pods_gets_1_0_in_ai_server_mode() -> None:
    body = "product: atlas-a3\nhosts:\n  - {host: 10.0.0.1, devices: [0, 1], device_ips: [10.1.0.1, 10.1.0.2]}\n"
    plan = plan_of(config_of(body))
    assert plan.rank_table is not None and plan.rank_table["version"] == plan.rank_table_version == "1.0"
    assert "super_pod_list" not in plan.rank_table
    assert "AI Server mode" in plan.rank_table_reason


@pytest.mark.parametrize("product, phrase", [("atlas-a2", "product atlas-a2"), (None, "no product: set")])
def test_other_products_get_1_0_and_say_why(product: Optional[str], phrase: str) -> None:
    body = ("" if product is None else f"product: {product}\n") + (
        "hosts:\n  - {host: 10.0.0.1, devices: [0, 1], device_ips: [10.1.0.1, 10.1.0.2]}\n"
    )
    plan = plan_of(config_of(body))
    assert plan.rank_table_version == "1.0" and phrase in plan.rank_table_reason


def test_one_super_pod_needs_no_device_ips_several_do() -> None:
    one_pod = A3_PODS.replace("pod-b", "0").replace("[0, 1], device_ips: [10.1.2.1, 10.1.2.2]", "[4, 5]")
    without_ips = "\n".join(
        line.split(", device_ips")[0] + "}" if "device_ips" in line else line for line in one_pod.splitlines()
    )
    plan = plan_of(config_of(without_ips + "\n"))
    assert plan.rank_table is not None and all(
        "device_ip" not in d for s in plan.rank_table["server_list"] for d in s["device"]
    )
    assert any("one super pod" in note for note in plan.notes)
    hccs_off = config_of(without_ips + "\nenv:\n  HCCL_INTER_HCCS_DISABLE: 'TRUE'\n")
    with pytest.raises(ConfigError, match="no device IPs"):
        plan_of(hccs_off, PROBED)
    two_pods = "\n".join(
        line.split(", device_ips")[0] + "}" if "device_ips" in line else line for line in A3_PODS.splitlines()
    )
    with pytest.raises(ConfigError, match="a job on several hosts needs an HCCL rank table"):
        plan_of(config_of(two_pods + "\n"), PROBED)


def test_device_overrides_keep_each_devices_super_device_id() -> None:
    body = (
        "product: atlas-a3\nhosts:\n"
        "  - {host: 10.0.0.1, devices: 4, super_pod_id: p, super_device_ids: [8, 9, 10, 11]}\n"
    )
    config = apply_overrides(config_of(body), Overrides(devices=(1, 3)))
    plan = plan_of(config)
    assert plan.rank_table is not None
    assert [d["super_device_id"] for d in plan.rank_table["server_list"][0]["device"]] == ["9", "11"]
    with pytest.raises(ConfigError, match="no super_device_id for device 5"):
        plan_of(apply_overrides(config_of(body), Overrides(devices=(1, 5))))


@pytest.mark.parametrize(
    "body, phrase",
    [
        (A3_PODS.replace("atlas-a3", "atlas-a2"), "hosts[0].super_pod_id: found super_pod_id with product atlas-a2"),
        (A3_PODS.replace("product: atlas-a3\n", ""), "found super_pod_id with product (not set)"),
        (
            A3_PODS.replace("super_pod_id: pod-b, super_device_ids: [0, 1], ", ""),
            "hosts[2].super_pod_id: found no super_pod_id",
        ),
        (
            A3_PODS.replace("super_device_ids: [2, 3]", "super_device_ids: [2]"),
            "found 1 super_device_ids for 2 devices",
        ),
        (
            A3_PODS.replace("super_device_ids: [2, 3]", "super_device_ids: [1, 3]"),
            "super_device_id 1 (device 0), also on 10.0.0.1",
        ),
        (A3_PODS.replace("super_device_ids: [2, 3]", "super_device_ids: [5, 5]"), "each super_device_id once"),
        (
            A3_PODS.replace(
                "super_pod_id: 0, super_device_ids: [2, 3]", "super_pod_id: pod-b, super_device_ids: [2, 3]"
            ).replace("super_pod_id: pod-b, super_device_ids: [0, 1]", "super_pod_id: 0, super_device_ids: [4, 5]"),
            "hosts[2].super_pod_id: found super pod '0' after super pod 'pod-b'",
        ),
        (
            A3_PODS.replace("devices: [0, 1], super_pod_id: pod-b", "devices: all, super_pod_id: pod-b"),
            "list the devices",
        ),
        (A3_PODS.replace("super_pod_id: pod-b", "super_pod_id: ''"), "hosts[2].super_pod_id: found"),
    ],
)
def test_super_pod_keys_are_checked_in_the_config(body: str, phrase: str) -> None:
    with pytest.raises(ConfigError) as err:
        config_of(body)
    assert phrase in str(err.value)


# --- rank_table_problems: each rule able to fail

GOOD_10 = build_rank_table(
    [Server("a", (0, 1), 0, ("10.0.0.1", "10.0.0.2")), Server("b", (0, 1), 2, ("10.0.1.1", "10.0.1.2"))], "1.0"
)
GOOD_12 = build_rank_table(
    [
        Server("a", (0, 1), 0, ("10.0.0.1", "10.0.0.2"), "p", (0, 1)),
        Server("b", (0, 1), 2, ("10.0.1.1", "10.0.1.2"), "p", (2, 3)),
        Server("c", (0, 1), 4, ("10.0.2.1", "10.0.2.2"), "q", (0, 1)),
    ],
    "1.2",
)


def changed(table: Dict[str, Any], change: Callable[[Dict[str, Any]], None]) -> Dict[str, Any]:
    copied = copy.deepcopy(table)
    change(copied)
    return copied


def set_rank(server: int, device: int, rank: str) -> Callable[[Dict[str, Any]], None]:
    return lambda t: t["server_list"][server]["device"][device].update(rank_id=rank)


def dev(t: Dict[str, Any], server: int, device: int) -> Dict[str, Any]:
    return t["server_list"][server]["device"][device]


def pod(t: Dict[str, Any], index: int) -> list:
    return t["super_pod_list"][index]["server_list"]


def pods_a_c_then_b(t: Dict[str, Any]) -> None:
    t["super_pod_list"] = [
        {"super_pod_id": "p", "server_list": [{"server_id": "a"}, {"server_id": "c"}]},
        {"super_pod_id": "q", "server_list": [{"server_id": "b"}]},
    ]


A2, A3, TRAINING = "atlas-a2", "atlas-a3", "atlas-training"


@pytest.mark.parametrize(
    "table, product, phrase",
    [
        (changed(GOOD_10, lambda t: t.update(version="1.1")), None, "version is '1.1'"),
        (changed(GOOD_10, lambda t: t.update(status="initializing")), None, "status is 'initializing'"),
        (changed(GOOD_10, lambda t: t.update(server_count="3")), None, "server_count '3' but 2 servers"),
        (changed(GOOD_10, set_rank(1, 1, "5")), None, "not unique and contiguous"),
        (changed(changed(GOOD_10, set_rank(0, 1, "3")), set_rank(1, 1, "1")), None, "interleave"),
        (changed(GOOD_10, lambda t: dev(t, 0, 1).update(device_id="0")), None, "listed twice"),
        (changed(GOOD_10, lambda t: dev(t, 1, 0).update(device_ip="10.0.0.1")), None, "used by"),
        (changed(GOOD_10, lambda t: t["server_list"][0].update(server_id="x" * 65)), None, "1 to 64 characters"),
        (changed(GOOD_10, lambda t: dev(t, 0, 0).update(rank_id=0)), None, "is not a string"),
        (changed(GOOD_10, lambda t: dev(t, 0, 0).pop("device_ip")), A2, "device_ip missing"),
        (changed(GOOD_10, lambda t: t["server_list"][1]["device"].pop()), TRAINING, "every server the same"),
        (changed(GOOD_10, lambda t: dev(t, 0, 0).update(device_id="8")), TRAINING, "0-7"),
        (changed(GOOD_10, lambda t: t.update(super_pod_list=[])), None, 'super_pod_list needs version "1.2"'),
        (changed(GOOD_12, lambda t: t.pop("super_pod_list")), A3, "without super_pod_list"),
        (changed(GOOD_12, lambda t: pod(t, 1).append({"server_id": "z"})), A3, "z is not in server_list"),
        (changed(GOOD_12, lambda t: pod(t, 1).pop()), A3, "holds 2 servers, server_list 3"),
        (changed(GOOD_12, lambda t: pod(t, 1).append({"server_id": "a"})), A3, "in super pods p and q"),
        (changed(GOOD_12, lambda t: dev(t, 1, 0).update(super_device_id="0")), A3, "super_device_id 0 twice in"),
        (changed(GOOD_12, lambda t: dev(t, 2, 0).pop("super_device_id")), A3, "super_device_id None"),
        (changed(GOOD_12, pods_a_c_then_b), A3, "not listed together"),
    ],
)
def test_rank_table_problems_finds_what_hccl_refuses(
    table: Dict[str, Any], product: Optional[str], phrase: str
) -> None:
    problems = rank_table_problems(table, product)
    assert any(phrase in p for p in problems), problems


@pytest.mark.parametrize("table, product", [(GOOD_10, None), (GOOD_10, "atlas-training"), (GOOD_12, "atlas-a3")])
def test_sound_tables_have_no_problems(table: Dict[str, Any], product: Optional[str]) -> None:
    assert rank_table_problems(table, product) == []


def test_a_one_server_a2_table_may_leave_device_ip_out() -> None:
    table = build_rank_table([Server("a", (0, 1), 0)], "1.0")
    assert rank_table_problems(table, "atlas-a2") == []
    assert any("device_ip missing" in p for p in rank_table_problems(table, "atlas-training"))


def test_an_invalid_table_is_never_planned() -> None:
    body = (
        "hosts:\n  - {host: a, devices: [0, 1], device_ips: [10.0.0.1, 10.0.0.2]}\n"
        "  - {host: b, devices: [0], device_ips: [10.0.0.1]}\n"
    )
    with pytest.raises(PlanError, match="device_ip 10.0.0.1 used by a/0 and b/0"):
        plan_of(config_of(body))


# --- a rank table mounted by the MindX operator


def test_a_mindx_1_2_table_keeps_its_super_pods_in_the_plans_own_table() -> None:
    config = hosts_from_rank_table(config_of("hosts: [{host: x, devices: 2}]\n"), GOOD_12, "/user/config/hccl.json")
    assert config.product == "atlas-a3" and "version 1.2" in config.sources["product"]
    assert [(h.host, h.super_pod_id, h.super_device_ids) for h in config.hosts] == [
        ("a", "p", {0: 0, 1: 1}),
        ("b", "p", {0: 2, 1: 3}),
        ("c", "q", {0: 0, 1: 1}),
    ]
    plan = plan_of(config)
    assert plan.rank_table == GOOD_12


@pytest.mark.parametrize(
    "table, phrase",
    [
        (changed(GOOD_10, set_rank(1, 1, "7")), "not unique and contiguous"),
        (changed(GOOD_12, lambda t: t["super_pod_list"][1]["server_list"].pop()), "holds 2 servers"),
        (changed(GOOD_10, lambda t: t.update(server_list=[])), "server_list is missing or empty"),
    ],
)
def test_a_mindx_table_hccl_would_refuse_is_a_clear_error(table: Dict[str, Any], phrase: str) -> None:
    with pytest.raises(SchedulerError) as err:
        hosts_from_rank_table(config_of("hosts: [{host: x, devices: 2}]\n"), table, "/user/config/hccl.json")
    assert "/user/config/hccl.json" in str(err.value) and phrase in str(err.value)
