"""build_plan by value: rank numbering, the per-rank environment and its sources, the rank table
(against a golden file), discovery passed in as plain lambdas, command-line overrides."""

from __future__ import annotations

import difflib
import json
import os
import subprocess
from typing import Any, Dict, Optional, Sequence

import pytest
from helpers import GOLDEN, ROOT, STANDINS

from npulaunch.config.cluster import ClusterConfig
from npulaunch.config.load import load_config, parse_config
from npulaunch.config.overrides import Overrides, apply_overrides
from npulaunch.config.yamlsource import parse_yaml
from npulaunch.diagnose.cause import rank_ranges
from npulaunch.host.discovery import discover_device_ips
from npulaunch.host.errors import ConfigError
from npulaunch.host.redact import REDACTED, redact_env
from npulaunch.plan.build import build_plan
from npulaunch.plan.launchplan import Discovery, LaunchPlan
from npulaunch.plan.ranktable import render_rank_table

JOB_ID = "job-1"
LOG_DIR = "/srv/logs"
JOB_DIR = f"{LOG_DIR}/{JOB_ID}"

TWO_HOSTS = """\
version: 1
job:
  name: two
  command: [python3, train.py]
  workdir: /srv/work
  log_dir: /srv/logs
hosts:
  - host: 10.0.0.11
    devices: [0, 1, 2]
    device_ips: [192.168.100.101, 192.168.101.101, 192.168.102.101]
  - host: 10.0.0.12
    devices: [4, 5]
    device_ips: [192.168.100.102, 192.168.101.102]
session_options:
  hcom_parallel: true
  iterations_per_loop: 10
"""

ONE_HOST = """\
version: 1
job:
  command: [python3, train.py]
  log_dir: /srv/logs
hosts:
  - host: localhost
    devices: DEVICES
"""

NO_NPU_TOOLS = Discovery(devices=lambda: [], device_ips=lambda ids: None)


def make_config(text: str) -> ClusterConfig:
    return parse_config(parse_yaml(text, "cluster.yaml"), base_dir="/srv")


def one_host(devices: str = "[0, 1]", extra: str = "") -> ClusterConfig:
    return make_config(ONE_HOST.replace("DEVICES", devices) + extra)


def plan_of(config: ClusterConfig, discovery: Discovery = NO_NPU_TOOLS) -> LaunchPlan:
    return build_plan(config, JOB_ID, "uuid-1", discovery)


@pytest.fixture(scope="module")
def two_hosts() -> LaunchPlan:
    return plan_of(make_config(TWO_HOSTS))


@pytest.mark.parametrize(
    "rank, local_rank, node_rank, host, device_id",
    [
        (0, 0, 0, "10.0.0.11", 0),
        (1, 1, 0, "10.0.0.11", 1),
        (2, 2, 0, "10.0.0.11", 2),
        (3, 0, 1, "10.0.0.12", 4),
        (4, 1, 1, "10.0.0.12", 5),
    ],
)
def test_rank_numbering_over_two_hosts(
    two_hosts: LaunchPlan, rank: int, local_rank: int, node_rank: int, host: str, device_id: int
) -> None:
    spec = two_hosts.ranks[rank]
    assert (spec.rank, spec.local_rank, spec.node_rank, spec.host, spec.device_id, spec.world_size) == (
        rank,
        local_rank,
        node_rank,
        host,
        device_id,
        5,
    )
    assert two_hosts.world_size == 5 and len(two_hosts.ranks) == 5
    assert two_hosts.hosts == ("10.0.0.11", "10.0.0.12")


def test_host_plans_split_the_ranks_by_host(two_hosts: LaunchPlan) -> None:
    assert [[r.rank for r in two_hosts.host_plan(n).ranks] for n in (0, 1)] == [[0, 1, 2], [3, 4]]
    assert two_hosts.host_plan(1).host == "10.0.0.12"


@pytest.mark.parametrize(
    "rank, expected",
    [
        (
            0,
            {
                "RANK_ID": "0",
                "RANK_SIZE": "5",
                "DEVICE_ID": "0",
                "ASCEND_DEVICE_ID": "0",
                "JOB_ID": JOB_ID,
                "RANK_TABLE_FILE": f"{JOB_DIR}/rank_table.json",
                "HCCL_CONNECT_TIMEOUT": "600",
                "HCCL_EXEC_TIMEOUT": None,  # CANN's own default, by version (config/timeouts.py)
                "ASCEND_PROCESS_LOG_PATH": f"{JOB_DIR}/hosts/10.0.0.11/rank-0/ascend",
                "NPULAUNCH_LOCAL_RANK": "0",
                "NPULAUNCH_NODE_RANK": "0",
                "NPULAUNCH_HOST": "10.0.0.11",
            },
        ),
        (
            4,
            {
                "RANK_ID": "4",
                "RANK_SIZE": "5",
                "DEVICE_ID": "5",
                "ASCEND_DEVICE_ID": "5",
                "JOB_ID": JOB_ID,
                "RANK_TABLE_FILE": f"{JOB_DIR}/rank_table.json",
                "HCCL_CONNECT_TIMEOUT": "600",
                "HCCL_EXEC_TIMEOUT": None,  # CANN's own default, by version (config/timeouts.py)
                "ASCEND_PROCESS_LOG_PATH": f"{JOB_DIR}/hosts/10.0.0.12/rank-4/ascend",
                "NPULAUNCH_LOCAL_RANK": "1",
                "NPULAUNCH_LOCAL_WORLD_SIZE": "2",
                "NPULAUNCH_NODE_RANK": "1",
                "NPULAUNCH_HOST": "10.0.0.12",
                "NPULAUNCH_JOB_UUID": "uuid-1",
            },
        ),
    ],
)
def test_per_rank_env_values(two_hosts: LaunchPlan, rank: int, expected: Dict[str, str]) -> None:
    env = two_hosts.ranks[rank].env
    assert {name: env.get(name) for name in expected} == expected
    assert json.loads(env["NPULAUNCH_SESSION_OPTIONS"]) == {"hcom_parallel": True, "iterations_per_loop": 10}
    assert all(isinstance(value, str) for value in env.values())


def test_plog_paths_are_unique_and_inside_the_job_dir(two_hosts: LaunchPlan) -> None:
    paths = [spec.env["ASCEND_PROCESS_LOG_PATH"] for spec in two_hosts.ranks]
    assert len(set(paths)) == len(paths)
    for spec, path in zip(two_hosts.ranks, paths):
        assert os.path.commonpath([path, two_hosts.job_dir]) == two_hosts.job_dir == JOB_DIR
        assert path == spec.plog_dir and path.startswith(spec.rank_dir + os.sep)


ENV_YAML = """\
env:
  HCCL_CONNECT_TIMEOUT: 1200
  FOO: bar
  PYTHONUNBUFFERED: "0"
  DROP_ME: null
  HCCL_EXEC_TIMEOUT: null
"""


@pytest.mark.parametrize(
    "name, value, source",
    [
        ("HCCL_CONNECT_TIMEOUT", "1200", "yaml"),  # yaml over default
        ("PYTHONUNBUFFERED", "0", "yaml"),
        ("FOO", "bar", "yaml"),
        ("RANK_ID", "1", "launcher"),
        ("JOB_ID", JOB_ID, "launcher"),
        ("HCCL_EXEC_TIMEOUT", None, None),  # null removes an inherited one
        ("DROP_ME", None, None),
    ],
)
def test_env_precedence_and_sources(name: str, value: Optional[str], source: Optional[str]) -> None:
    spec = plan_of(one_host(extra=ENV_YAML)).ranks[1]
    assert spec.env.get(name) == value
    assert (spec.env_sources.get(name, "launcher") if name in spec.env else None) == source
    assert (name in spec.env_unset) == (value is None)


def test_defaults_have_default_source() -> None:
    spec = plan_of(one_host()).ranks[0]
    assert {n: (spec.env[n], spec.env_sources[n]) for n in ("HCCL_CONNECT_TIMEOUT", "PYTHONUNBUFFERED")} == {
        "HCCL_CONNECT_TIMEOUT": ("600", "default"),
        "PYTHONUNBUFFERED": ("1", "default"),
    }
    assert "HCCL_EXEC_TIMEOUT" not in spec.env  # left to CANN, whose default depends on its version


@pytest.mark.parametrize(
    "extra, ips, has_table",
    [
        ("", None, False),  # auto, IPs unknown
        ("    device_ips: [10.1.0.1, 10.1.0.2]\n", None, True),  # auto, IPs from YAML
        ("", ["10.2.0.1", "10.2.0.2"], True),  # auto, IPs discovered
        ("    device_ips: [10.1.0.1, 10.1.0.2]\nrank_table: none\n", None, False),
    ],
)
def test_rank_table_file_set_iff_there_is_a_table(extra: str, ips: Optional[Sequence[str]], has_table: bool) -> None:
    discovery = Discovery(devices=lambda: [], device_ips=lambda ids: ips)
    plan = plan_of(one_host(extra=extra), discovery)
    assert (plan.rank_table is not None) == has_table
    for spec in plan.ranks:
        assert ("RANK_TABLE_FILE" in spec.env) == has_table
        assert ("RANK_TABLE_FILE" in spec.env_unset) == (not has_table)
        if has_table:
            assert spec.env["RANK_TABLE_FILE"] == plan.rank_table_path == f"{JOB_DIR}/rank_table.json"


def strings_only(value: Any) -> bool:
    if isinstance(value, dict):
        return all(isinstance(k, str) and strings_only(v) for k, v in value.items())
    if isinstance(value, list):
        return all(strings_only(v) for v in value)
    return isinstance(value, str)


def test_rank_table_of_two_hosts(two_hosts: LaunchPlan) -> None:
    table = two_hosts.rank_table
    assert table is not None and strings_only(table)
    assert table["server_count"] == "2" and table["version"] == "1.0"
    assert [s["server_id"] for s in table["server_list"]] == ["10.0.0.11", "10.0.0.12"]
    entries = [(s["server_id"], d) for s in table["server_list"] for d in s["device"]]
    assert sorted(int(d["rank_id"]) for _, d in entries) == list(range(two_hosts.world_size))
    by_place = {(spec.host, str(spec.device_id)): spec.env["RANK_ID"] for spec in two_hosts.ranks}
    assert {(host, d["device_id"]): d["rank_id"] for host, d in entries} == by_place
    assert [d["device_ip"] for _, d in entries][3:] == ["192.168.100.102", "192.168.101.102"]


def test_rank_table_golden_two_servers() -> None:
    config = load_config(str(ROOT / "cluster_configs" / "two-servers.yaml"))
    plan = build_plan(config, "golden", "uuid", NO_NPU_TOOLS)
    assert plan.rank_table is not None
    got = render_rank_table(plan.rank_table)
    golden_path = GOLDEN / "two-servers.rank_table.json"
    want = golden_path.read_text(encoding="utf-8")
    diff = "".join(difflib.unified_diff(want.splitlines(True), got.splitlines(True), str(golden_path), "rendered"))
    assert got == want, "rank table differs from the golden file:\n" + diff


def hccn_standin(argv: Sequence[str]) -> str:
    done = subprocess.run([str(STANDINS / argv[0]), *argv[1:]], capture_output=True, text=True, check=True)
    return done.stdout


def test_rank_table_required_with_ips_from_hccn_tool_standin() -> None:
    discovery = Discovery(devices=lambda: [], device_ips=lambda ids: discover_device_ips(ids, runner=hccn_standin))
    plan = plan_of(one_host("[0, 1, 5]", "rank_table: required\n"), discovery)
    assert plan.rank_table is not None
    devices = plan.rank_table["server_list"][0]["device"]
    assert [(d["device_id"], d["device_ip"], d["rank_id"]) for d in devices] == [
        ("0", "192.168.100.101", "0"),
        ("1", "192.168.101.101", "1"),
        ("5", "192.168.101.102", "2"),
    ]
    assert plan.sources["hosts[0].device_ips"] == "discovery (hccn_tool)"


def test_rank_table_required_without_ips_is_an_error() -> None:
    with pytest.raises(ConfigError) as err:
        plan_of(one_host(extra="rank_table: required\n"))
    assert "hosts[0].device_ips" in str(err.value) and "rank_table: required" in str(err.value)


def test_rank_table_none() -> None:
    plan = plan_of(one_host(extra="    device_ips: [10.1.0.1, 10.1.0.2]\nrank_table: none\n"))
    assert (plan.rank_table, plan.rank_table_path) == (None, None)
    assert any("rank_table: none" in note for note in plan.notes)


def test_same_inputs_give_the_same_plan() -> None:
    first, second = plan_of(make_config(TWO_HOSTS)), plan_of(make_config(TWO_HOSTS))
    assert first.ranks == second.ranks and first.rank_table == second.rank_table
    assert first == second


def test_devices_all_comes_from_discovery() -> None:
    discovery = Discovery(devices=lambda: [0, 1, 2, 3], device_ips=lambda ids: None)
    plan = plan_of(one_host("all"), discovery)
    assert [(s.rank, s.device_id) for s in plan.ranks] == [(0, 0), (1, 1), (2, 2), (3, 3)]
    assert "discovery" in plan.sources["hosts[0].devices"]
    assert plan_of(one_host("[0, 1]"), discovery).sources["hosts[0].devices"] == "yaml"


IPS = "    device_ips: [10.0.0.1, 10.0.0.2, 10.0.0.3, 10.0.0.4]\n"


@pytest.mark.parametrize(
    "flags, devices, ips",
    [
        (Overrides(nproc_per_node=2), (0, 1), ("10.0.0.1", "10.0.0.2")),
        (Overrides(devices=(1, 3)), (1, 3), ("10.0.0.2", "10.0.0.4")),
        (Overrides(devices=(3, 0)), (3, 0), ("10.0.0.4", "10.0.0.1")),
        (Overrides(devices=(1, 5)), (1, 5), None),  # device 5 has no known IP: none are kept
    ],
)
def test_cli_device_overrides_keep_ips_by_device_id(flags: Overrides, devices: tuple, ips: Optional[tuple]) -> None:
    config = apply_overrides(one_host("[0, 1, 2, 3]", IPS), flags)
    host = config.hosts[0]
    assert (host.devices, host.device_ips) == (devices, ips)
    assert config.sources["hosts[0].devices"] == "cli"
    plan = plan_of(config)
    assert [s.device_id for s in plan.ranks] == list(devices)
    if ips is not None:
        assert plan.rank_table is not None
        assert [d["device_ip"] for d in plan.rank_table["server_list"][0]["device"]] == list(ips)


def test_cli_job_overrides_record_their_source() -> None:
    config = apply_overrides(
        one_host(), Overrides(command=("python3", "other.py"), grace_period_s=1.5, log_dir="/tmp/other logs")
    )
    assert config.job.command == ("python3", "other.py") and config.job.grace_period_s == 1.5
    assert config.job.log_dir == "/tmp/other logs"
    assert {k: config.sources[k] for k in ("job.command", "job.grace_period_s", "job.log_dir")} == {
        "job.command": "cli",
        "job.grace_period_s": "cli",
        "job.log_dir": "cli",
    }


def test_grace_period_zero_is_kept() -> None:
    config = make_config(ONE_HOST.replace("DEVICES", "1").replace("  log_dir:", "  grace_period_s: 0\n  log_dir:"))
    assert plan_of(config).grace_period_s == 0.0


@pytest.mark.parametrize(
    "ranks, text",
    [
        ([], ""),
        ([3], "3"),
        ([0, 1, 2, 5, 7, 8], "0-2, 5, 7-8"),
        ([8, 7, 0, 2, 1], "0-2, 7-8"),
        ([1, 3, 5], "1, 3, 5"),
    ],
)
def test_rank_ranges(ranks: list, text: str) -> None:
    assert rank_ranges(ranks) == text


@pytest.mark.parametrize(
    "name, hidden",
    [
        ("MY_API_TOKEN", True),
        ("DB_PASSWORD", True),
        ("client_secret", True),
        ("AWS_ACCESS_KEY_ID", True),
        ("HCCL_CONNECT_TIMEOUT", False),
        ("RANK_ID", False),
        ("PATH", False),
    ],
)
def test_redact_env(name: str, hidden: bool) -> None:
    shown = redact_env({name: "s3cr3t-value", "OTHER": "x"})
    assert shown[name] == (REDACTED if hidden else "s3cr3t-value")
    assert shown["OTHER"] == "x"


REMOTE_TWO = """\
version: 1
job:
  command: [python3, train.py]
  log_dir: /srv/logs
hosts:
  - {host: node1, devices: DEVICES}
  - {host: node2, devices: [0, 1]}
"""


def remote_facts(npus: Optional[list] = None, ips: Optional[dict] = None) -> Dict[str, Any]:
    """What the SSH preflight found on a host (remotecheck.remote_facts)."""
    return {"npus": npus, "device_ips": ips}


def test_a_remote_hosts_devices_and_ips_come_from_its_preflight() -> None:
    facts = {
        "node1": remote_facts(
            [[0, "OK"], [1, "Warning"], [2, "OK"]], {"0": "10.9.0.1", "1": "10.9.0.2", "2": "10.9.0.3"}
        ),
        "node2": remote_facts(None, {"0": "10.9.1.1", "1": "10.9.1.2"}),
    }
    plan = plan_of(
        make_config(REMOTE_TWO.replace("DEVICES", "all")),
        Discovery(devices=lambda: [], device_ips=lambda ids: None, remote=facts),
    )
    assert [(s.host, s.device_id) for s in plan.ranks] == [
        ("node1", 0),
        ("node1", 1),
        ("node1", 2),
        ("node2", 0),
        ("node2", 1),
    ]
    assert plan.rank_table is not None
    assert [d["device_ip"] for s in plan.rank_table["server_list"] for d in s["device"]] == [
        "10.9.0.1",
        "10.9.0.2",
        "10.9.0.3",
        "10.9.1.1",
        "10.9.1.2",
    ]
    assert plan.sources["hosts[0].devices"] == "discovery on node1 (npu-smi info)"
    assert plan.sources["hosts[1].device_ips"] == "discovery on node2 (hccn_tool)"


@pytest.mark.parametrize(
    "facts, path, phrase",
    [
        ({"node1": remote_facts([[0, "OK"], [1, "Critical"]])}, "hosts[0].devices", "device 1 health Critical"),
        ({"node1": remote_facts(None)}, "hosts[0].devices", "node1 has no npu-smi that lists NPUs"),
    ],
)
def test_devices_all_on_a_remote_host_needs_healthy_npus(facts: Dict[str, Any], path: str, phrase: str) -> None:
    facts = dict(facts, node2=remote_facts(None, {"0": "10.9.1.1", "1": "10.9.1.2"}))
    with pytest.raises(ConfigError) as err:
        plan_of(
            make_config(REMOTE_TWO.replace("DEVICES", "all")),
            Discovery(devices=lambda: [], device_ips=lambda ids: None, remote=facts),
        )
    assert path in str(err.value) and phrase in str(err.value)


def test_a_remote_host_without_device_ips_after_its_preflight_is_an_error() -> None:
    facts = {"node1": remote_facts(None, {"0": "10.9.0.1", "1": None}), "node2": remote_facts(None, None)}
    with pytest.raises(ConfigError) as err:
        plan_of(
            make_config(REMOTE_TWO.replace("DEVICES", "[0, 1]")),
            Discovery(devices=lambda: [], device_ips=lambda ids: None, remote=facts),
        )
    assert "hosts[0].device_ips" in str(err.value) and "no device IPs for node1, node2" in str(err.value)


def test_the_offline_plan_leaves_remote_device_ips_to_the_preflight() -> None:
    plan = plan_of(make_config(REMOTE_TWO.replace("DEVICES", "[0, 1]")))
    assert plan.rank_table is None and plan.rank_table_path == f"{JOB_DIR}/rank_table.json"
    assert plan.ranks[0].env["RANK_TABLE_FILE"] == f"{JOB_DIR}/rank_table.json"
    assert any("node1, node2 are read with hccn_tool on each host when the job starts" in n for n in plan.notes)
    with pytest.raises(ConfigError) as err:  # and cannot know a remote host's devices at all
        plan_of(make_config(REMOTE_TWO.replace("DEVICES", "all")))
    assert "hosts[0].devices" in str(err.value) and '"all" on a remote host' in str(err.value)


def test_ranks_share_one_options_dictionary_unless_a_path_is_per_rank() -> None:
    """32,768 ranks with the same options hold one dictionary and one NPULAUNCH_SESSION_OPTIONS text;
    a placeholder makes each rank's own, expanded."""
    import json

    shared = plan_of(one_host(extra="session_options: {hcom_parallel: true, dump_path: /dumps}\n")).ranks
    assert shared[0].session_options is shared[1].session_options
    assert shared[0].env["NPULAUNCH_SESSION_OPTIONS"] is shared[1].env["NPULAUNCH_SESSION_OPTIONS"]
    assert json.loads(shared[1].env["NPULAUNCH_SESSION_OPTIONS"]) == {"hcom_parallel": True, "dump_path": "/dumps"}
    assert shared[0].make_dirs == shared[1].make_dirs == (("dump_path", "/dumps"),)
    own = plan_of(one_host(extra="session_options: {dump_path: '/dumps/{rank}'}\n")).ranks
    assert own[0].session_options is not own[1].session_options
    assert [json.loads(r.env["NPULAUNCH_SESSION_OPTIONS"])["dump_path"] for r in own] == ["/dumps/0", "/dumps/1"]
