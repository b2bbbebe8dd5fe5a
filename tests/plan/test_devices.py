"""Devices by value: physical (the YAML's, the rank table's) -> logical (a container's numbering) ->
ASCEND_DEVICE_ID (the index in ASCEND_RT_VISIBLE_DEVICES); the two variables read as the CANN runtime
and Ascend Docker Runtime read them; HCCL's device groups on Atlas training servers; a job of several
ranks without a rank table. build_plan with stand-in Discovery, as in test_build.py."""

from __future__ import annotations

import json
from typing import Any, Dict, Mapping, Optional, Sequence, Tuple

import pytest

from npulaunch.config.cluster import ClusterConfig
from npulaunch.config.load import parse_config
from npulaunch.config.yamlsource import parse_yaml
from npulaunch.host.discovery import (
    discover_usable_devices,
    parse_container_visible_devices,
    parse_npu_smi_info,
    parse_rt_visible_devices,
    physical_ids,
)
from npulaunch.host.errors import ConfigError
from npulaunch.plan.build import build_plan
from npulaunch.plan.launchplan import Discovery, LaunchPlan

HEAD = "version: 1\njob:\n  command: [python3, train.py]\n  log_dir: /srv/logs\n"


def config_of(body: str) -> ClusterConfig:
    return parse_config(parse_yaml(HEAD + body, "cluster.yaml"), base_dir="/srv")


def discovery(
    environ: Optional[Mapping[str, str]] = None,
    npus: bool = False,
    ips: Optional[Sequence[str]] = None,
    remote: Optional[Dict[str, Any]] = None,
    devices: Sequence[int] = (),
) -> Discovery:
    return Discovery(
        devices=lambda: list(devices),
        device_ips=lambda ids: None if ips is None else list(ips)[: len(ids)],
        npu_present=lambda: npus,
        environ=lambda: dict(environ or {}),
        remote=remote,
    )


def plan_of(body: str, found: Optional[Discovery] = None) -> LaunchPlan:
    return build_plan(config_of(body), "job-1", "uuid-1", found or discovery())


def ids_of(plan: LaunchPlan) -> list:
    """(DEVICE_ID, ASCEND_DEVICE_ID, (physical, logical, ASCEND_DEVICE_ID)) of every rank."""
    return [(s.env["DEVICE_ID"], s.env["ASCEND_DEVICE_ID"], plan.rank_device(s)) for s in plan.ranks]


# --- the variables, read as their runtimes read them


@pytest.mark.parametrize(
    "text, ids, problem",
    [
        ("1", (1,), ""),
        ("0,2,5", (0, 2, 5), ""),
        ("1,2,", (1, 2), ""),  # the runtime reads a trailing comma as nothing
        ("1, 2,3", (1,), "reads only 1 of '1, 2,3': it stops at ' '"),
        ("1,3a", (1, 3), "it stops at 'a'"),
        ("1,,2", (1,), "it stops at ','"),
        ("3,1", (), "not in ascending order"),
        ("1,1", (), "lists device 1 twice"),
        ("0,2,2", (), "lists device 2 twice"),
        ("", (), "does not start with a digit"),
        (" 1", (), "does not start with a digit"),
    ],
)
def test_rt_visible_devices_are_read_as_the_cann_runtime_reads_them(text: str, ids: tuple, problem: str) -> None:
    got_ids, got_problem = parse_rt_visible_devices(text)
    assert got_ids == ids
    assert (problem in got_problem) if problem else got_problem == ""


@pytest.mark.parametrize(
    "text, ids",
    [
        ("4,5", (4, 5)),
        ("5,4,4", (4, 5)),
        ("0-2,6", (0, 1, 2, 6)),
        ("Ascend910-3,Ascend910-1", (1, 3)),
        ("npu-7", (7,)),
        ("void", ()),
        ("3-1", None),
        ("4,x", None),
        ("Ascend910-3,4", None),
    ],
)
def test_container_visible_devices_are_read_as_ascend_docker_runtime_reads_them(text: str, ids: Any) -> None:
    assert parse_container_visible_devices(text) == ids


A3_NPU_SMI = """\
| NPU   Name                | Health        | Power(W)    Temp(C)           Hugepages-Usage(page)|
| Chip  Phy-ID              | Bus-Id        | AICore(%)   Memory-Usage(MB)  HBM-Usage(MB)        |
+===========================+===============+====================================================+
| 0     Ascend910           | OK            | 178.8       36                0    / 0             |
| 0     0                   | 0000:9D:00.0  | 0           0    / 0          3397 / 65536         |
+------------------------------------------------------------------------------------------------+
| 0     Ascend910           | OK            | -           36                0    / 0             |
| 1     1                   | 0000:9F:00.0  | 0           0    / 0          3186 / 65536         |
+===========================+===============+====================================================+
| 1     Ascend910           | OK            | 178.8       36                0    / 0             |
| 0     2                   | 0000:A1:00.0  | 0           0    / 0          3397 / 65536         |
+------------------------------------------------------------------------------------------------+
| 1     Ascend910           | Critical      | -           36                0    / 0             |
| 1     3                   | 0000:A3:00.0  | 0           0    / 0          3186 / 65536         |
+===========================+===============+====================================================+
"""


def test_atlas_a3_npu_smi_lists_both_dies_with_their_physical_ids() -> None:
    chips = parse_npu_smi_info(A3_NPU_SMI)
    assert [(c.npu_id, c.chip_id, c.phy_id, c.health) for c in chips] == [
        (0, 0, 0, "OK"),
        (0, 1, 1, "OK"),
        (1, 0, 2, "OK"),
        (1, 1, 3, "Critical"),
    ]
    assert physical_ids(chips, None) == (0, 1, 2, 3)
    with pytest.raises(Exception, match="device 3 \\(NPU 1\\) health Critical"):
        discover_usable_devices(lambda argv: A3_NPU_SMI, environ={})


def test_devices_all_in_a_container_are_the_mounted_physical_ids() -> None:
    one_chip = A3_NPU_SMI.split("+---")[0].replace(" 0     0   ", " 0         ")  # a 910-style row, no Phy-ID
    chips = parse_npu_smi_info(one_chip)
    assert [c.phy_id for c in chips] == [None]
    assert physical_ids(chips, "5") == (5,)
    assert physical_ids(chips, None) == (0,)  # outside a container: listing order
    assert discover_usable_devices(lambda argv: one_chip, environ={"ASCEND_VISIBLE_DEVICES": "5"}) == (5,)


# --- the mapping in the plan

TWO = "hosts:\n  - host: localhost\n    devices: DEVICES\n    device_ips: [10.1.0.1, 10.1.0.2]\n"


def test_without_visible_devices_every_numbering_is_the_physical_id() -> None:
    plan = plan_of(TWO.replace("DEVICES", "[4, 6]"))
    assert ids_of(plan) == [("4", "4", (4, 4, 4)), ("6", "6", (6, 6, 6))]
    assert plan.host_devices[0].describe() == ""


def test_inherited_rt_visible_devices_make_ascend_device_id_the_index_and_keep_the_table_physical() -> None:
    plan = plan_of(TWO.replace("DEVICES", "[2, 3]"), discovery({"ASCEND_RT_VISIBLE_DEVICES": "1,2,3"}))
    assert ids_of(plan) == [("2", "1", (2, 2, 1)), ("3", "2", (3, 3, 2))]
    assert plan.rank_table is not None
    assert [d["device_id"] for d in plan.rank_table["server_list"][0]["device"]] == ["2", "3"]
    assert plan.host_devices[0].rt_visible == ("1,2,3", "inherited by npulaunch on this host")


def test_the_yamls_value_wins_over_the_inherited_one_and_null_removes_it() -> None:
    inherited = discovery({"ASCEND_RT_VISIBLE_DEVICES": "0,1,2,3"})
    given = plan_of(TWO.replace("DEVICES", "[2, 3]") + "env:\n  ASCEND_RT_VISIBLE_DEVICES: '2,3'\n", inherited)
    assert [s.env["ASCEND_DEVICE_ID"] for s in given.ranks] == ["0", "1"]
    assert given.ranks[0].env["ASCEND_RT_VISIBLE_DEVICES"] == "2,3"
    assert given.host_devices[0].rt_visible == ("2,3", "set in the YAML's env")
    removed = plan_of(TWO.replace("DEVICES", "[2, 3]") + "env:\n  ASCEND_RT_VISIBLE_DEVICES: null\n", inherited)
    assert [s.env["ASCEND_DEVICE_ID"] for s in removed.ranks] == ["2", "3"]
    assert "ASCEND_RT_VISIBLE_DEVICES" in removed.ranks[0].env_unset


def test_the_yamls_visible_devices_are_no_unknown_variable() -> None:
    config = config_of(TWO.replace("DEVICES", "[0, 1]") + "env:\n  ASCEND_RT_VISIBLE_DEVICES: '0,1'\n")
    assert not [w for w in config.warnings if "ASCEND_RT_VISIBLE_DEVICES" in w.path]


def test_a_device_outside_the_visible_list_is_refused_naming_file_line_and_list() -> None:
    body = TWO.replace("DEVICES", "[0, 3]") + "env:\n  ASCEND_RT_VISIBLE_DEVICES: '1,3'\n"
    with pytest.raises(ConfigError) as err:
        plan_of(body)
    text = str(err.value)
    assert "cluster.yaml:7: hosts[0].devices: found device 0" in text
    assert "makes visible: physical 1, 3" in text and "ASCEND_RT_VISIBLE_DEVICES=1,3, set in the YAML's env" in text


@pytest.mark.parametrize(
    "value, phrase", [("1, 2", "reads only 1 of '1, 2'"), ("2,1", "not in ascending order"), ("1,1", "twice")]
)
def test_a_bad_value_in_the_yaml_is_refused_with_the_runtimes_behaviour(value: str, phrase: str) -> None:
    with pytest.raises(ConfigError) as err:
        plan_of(TWO.replace("DEVICES", "[1, 2]") + f"env:\n  ASCEND_RT_VISIBLE_DEVICES: '{value}'\n")
    text = str(err.value)
    assert "cluster.yaml:10: env.ASCEND_RT_VISIBLE_DEVICES" in text and phrase in text


def test_a_bad_inherited_value_is_refused_naming_the_environment() -> None:
    with pytest.raises(ConfigError) as err:
        plan_of(TWO.replace("DEVICES", "[1, 2]"), discovery({"ASCEND_RT_VISIBLE_DEVICES": "2,1"}))
    assert "npulaunch's environment: ASCEND_RT_VISIBLE_DEVICES: found '2,1'" in str(err.value)
    assert "no device visible" in str(err.value)


def test_in_a_container_the_mounted_devices_are_numbered_from_zero() -> None:
    container = {"ASCEND_VISIBLE_DEVICES": "4-7"}
    plan = plan_of(TWO.replace("DEVICES", "[5, 7]"), discovery(container))
    assert ids_of(plan) == [("5", "1", (5, 1, 1)), ("7", "3", (7, 3, 3))]
    both = plan_of(
        TWO.replace("DEVICES", "[5, 7]"), discovery(dict(container, ASCEND_RT_VISIBLE_DEVICES="1,3"))
    )  # RT lists logical ids: 1 and 3 are physical 5 and 7 here
    assert ids_of(both) == [("5", "0", (5, 1, 0)), ("7", "1", (7, 3, 1))]
    assert "ASCEND_VISIBLE_DEVICES=4-7" in both.host_devices[0].describe()
    with pytest.raises(ConfigError) as err:
        plan_of(TWO.replace("DEVICES", "[2, 5]"), discovery(container))
    assert "found device 2; allowed: the devices mounted in this container: 4, 5, 6, 7" in str(err.value)


def test_devices_all_keeps_only_the_visible_devices() -> None:
    found = discovery({"ASCEND_RT_VISIBLE_DEVICES": "1,3"}, devices=[0, 1, 2, 3], ips=None)
    plan = plan_of("hosts:\n  - host: localhost\n    devices: all\nrank_table: none\n", found)
    assert ids_of(plan) == [("1", "0", (1, 1, 0)), ("3", "1", (3, 3, 1))]


def test_a_remote_hosts_own_variables_apply_to_its_ranks_only() -> None:
    facts = {
        "node1": {"npus": [[0, "OK"], [1, "OK"]], "device_ips": {"2": "10.9.0.2", "3": "10.9.0.3"}, "visible": {}},
        "node2": {
            "npus": [[0, "OK"]],
            "device_ips": {"2": "10.9.1.2", "3": "10.9.1.3"},
            "visible": {"ASCEND_RT_VISIBLE_DEVICES": "2,3", "ASCEND_VISIBLE_DEVICES": None},
        },
    }
    body = "hosts:\n  - {host: node1, devices: [2, 3]}\n  - {host: node2, devices: [2, 3]}\n"
    plan = plan_of(body, discovery({"ASCEND_RT_VISIBLE_DEVICES": "0"}, remote=facts))
    assert [s.env["ASCEND_DEVICE_ID"] for s in plan.ranks] == ["2", "3", "0", "1"]
    assert plan.host_devices[1].rt_visible == ("2,3", "inherited on node2")


def test_host_main_preprocessing_lists_devices_as_the_ranks_open_them() -> None:
    body = TWO.replace("DEVICES", "[2, 3]") + "data_preprocess: host_main\n"
    plan = plan_of(body, discovery({"ASCEND_RT_VISIBLE_DEVICES": "2,3"}))
    assert {s.session_options["local_device_list"] for s in plan.ranks} == {"0,1"}


def test_the_cm_chief_device_is_the_chief_ranks_own_device_id() -> None:
    body = "hosts:\n  - host: localhost\n    devices: [6, 7]\nrank_table: cm\n"
    plan = plan_of(body, discovery({"ASCEND_RT_VISIBLE_DEVICES": "6,7"}))
    assert plan.ranks[0].env["CM_CHIEF_DEVICE"] == plan.ranks[0].env["ASCEND_DEVICE_ID"] == "0"


# --- HCCL's device groups on Atlas training servers (8 NPUs, devices 0-3 and 4-7)


def hosts_with(*devices: str) -> str:
    """A hosts section, one host per list of devices, with a device IP for each device."""
    text = "hosts:\n"
    for i, listed in enumerate(devices):
        ips = ", ".join(f"10.{i}.0.{n}" for n in range(len(json.loads(listed))))
        text += f"  - host: 10.0.0.{i + 1}\n    devices: {listed}\n    device_ips: [{ips}]\n"
    return text


@pytest.mark.parametrize(
    "devices",
    [("[0]",), ("[2, 3]",), ("[4, 7]",), ("[0, 1, 2, 3]",), ("[4, 5, 6, 7]",), ("[0, 1, 2, 3, 4, 5, 6, 7]",)]
    + [("[0, 1]", "[6, 7]"), ("[4, 5, 6, 7]", "[0, 1, 2, 3]")],
)
def test_atlas_training_accepts_the_documented_device_sets(devices: Tuple[str, ...]) -> None:
    plan = plan_of("product: atlas-training\n" + hosts_with(*devices))
    assert not [w for w in plan.warnings if "atlas-training" in w]


@pytest.mark.parametrize(
    "devices, phrase",
    [
        (("[0, 1, 2]",), "3 devices"),
        (("[3, 4]",), "devices 3, 4 span both groups"),
        (("[0, 1, 4, 5]",), "devices 0, 1, 4, 5 span both groups"),  # HCOMM accepts it, the documents do not
        (("[6, 8]",), "device ids above 7"),
        (("[0, 1]", "[0, 1, 2, 3]"), "2 devices here, 2, 4 across the servers"),
    ],
)
def test_atlas_training_refuses_other_device_sets_with_the_rule(devices: Tuple[str, ...], phrase: str) -> None:
    with pytest.raises(ConfigError) as err:
        plan_of("product: atlas-training\n" + hosts_with(*devices))
    text = str(err.value)
    assert phrase in text and "hosts[0].devices" in text
    assert "all inside 0-3 or all inside 4-7" in text and "distributed_training.md" in text


def test_without_a_product_a_breach_is_a_warning_naming_product() -> None:
    plan = plan_of(hosts_with("[3, 4]"))
    (warning,) = [w for w in plan.warnings if "span both groups" in w]
    assert warning.startswith("warning: hosts[0].devices (10.0.0.1)") and "Set product:" in warning


def test_hosts_with_the_same_breach_share_one_warning() -> None:
    """2,048 servers of 16 devices are one warning naming the first few, not 2,048 of 0.5 KB each."""
    plan = plan_of(hosts_with(*["[8, 9]"] * 5, "[3, 4]"))
    above = [w for w in plan.warnings if "device ids above 7" in w]
    assert len(above) == 1 and len([w for w in plan.warnings if "span both groups" in w]) == 1
    assert above[0].startswith(
        "warning: the devices of hosts[0] (10.0.0.1), hosts[1] (10.0.0.2), hosts[2] (10.0.0.3) and 2 more hosts: "
    )


@pytest.mark.parametrize(
    "extra", ["product: atlas-a2\n", "product: atlas-a3\n", "cpu_fallback: true\n", "rank_table: none\n"]
)
def test_other_products_and_jobs_without_hccl_have_no_device_group_rule(extra: str) -> None:
    plan = plan_of(extra + hosts_with("[0, 1, 4]", "[5]"))
    assert not [w for w in plan.warnings if "atlas-training" in w]


# --- several ranks on one host without a rank table

NO_IPS = "hosts:\n  - host: localhost\n    devices: [0, 1]\n"


def test_several_ranks_on_npus_without_a_rank_table_are_refused() -> None:
    with pytest.raises(ConfigError) as err:
        plan_of(NO_IPS, discovery(npus=True))
    text = str(err.value)
    assert "hosts[0].device_ips: found 2 ranks on localhost and no device IPs" in text
    assert "rank_table: cm, or rank_table: none" in text and "each rank would train alone" in text
    assert "product: atlas-a2 or atlas-a3" in text


def test_several_ranks_on_a_remote_host_with_npus_without_a_rank_table_are_refused() -> None:
    facts = {"node1": {"npus": [[0, "OK"], [1, "OK"]], "device_ips": None}}
    with pytest.raises(ConfigError, match="2 ranks on node1 and no device IPs"):
        plan_of("hosts:\n  - {host: node1, devices: [0, 1]}\n", discovery(remote=facts))


@pytest.mark.parametrize(
    "extra, found, phrase",
    [
        ("rank_table: none\n", discovery(npus=True), "the 2 ranks cannot use HCCL together"),
        ("cpu_fallback: true\n", discovery(npus=True), "TensorFlow collectives on the CPU"),
        ("", discovery(npus=False), "no NPU (npu-smi is not on PATH here)"),
    ],
)
def test_running_without_a_rank_table_is_a_stated_choice(extra: str, found: Discovery, phrase: str) -> None:
    plan = plan_of(NO_IPS + extra, found)
    assert plan.rank_table is None and all("RANK_TABLE_FILE" not in s.env for s in plan.ranks)
    assert any(phrase in note for note in plan.notes), plan.notes
    assert plan.rank_table_reason


def test_one_rank_needs_no_rank_table() -> None:
    plan = plan_of("hosts:\n  - host: localhost\n    devices: [0]\n", discovery(npus=True))
    assert plan.rank_table is None and any("one rank needs none" in n for n in plan.notes)


@pytest.mark.parametrize("product", ["atlas-a2", "atlas-a3"])
def test_one_a2_or_a3_server_gets_a_table_without_device_ips(product: str) -> None:
    plan = plan_of(f"product: {product}\n" + NO_IPS, discovery(npus=True))
    assert plan.rank_table is not None and plan.rank_table_version == "1.0"
    assert plan.rank_table["server_list"][0]["device"] == [
        {"device_id": "0", "rank_id": "0"},
        {"device_id": "1", "rank_id": "1"},
    ]
    assert any("rank table without device_ip: one server of" in n for n in plan.notes)


def test_atlas_training_needs_device_ips_even_on_one_server() -> None:
    with pytest.raises(ConfigError, match="no device IPs"):
        plan_of("product: atlas-training\n" + NO_IPS, discovery(npus=True))
