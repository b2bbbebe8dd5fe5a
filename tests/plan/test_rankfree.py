"""Rank-table-free jobs (rank_table: cm): the CM_* variables each rank gets, what must not reach
it (RANK_ID, RANK_SIZE, RANK_TABLE_FILE, inherited CM_* beside a rank table), and the refusals,
by value on build_plan; one real run on this host."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any, Dict, Optional

import pytest
from helpers import free_port_window, rank_cmd, run_cli

from npulaunch.config.cluster import ClusterConfig
from npulaunch.config.load import parse_config
from npulaunch.config.yamlsource import parse_yaml
from npulaunch.host.errors import ConfigError
from npulaunch.plan.build import build_plan
from npulaunch.plan.launchplan import Discovery, LaunchPlan
from npulaunch.plan.rankfree import CM_VARIABLES

NO_NPU_TOOLS = Discovery(devices=lambda: [], device_ips=lambda ids: None, free_ports=lambda n: (41234,) * n)


def config_of(hosts: str, extra: str = "") -> ClusterConfig:
    text = f"version: 1\njob: {{name: cm, command: [python3, train.py], log_dir: /srv/logs}}\nhosts:\n{hosts}{extra}"
    return parse_config(parse_yaml(text, "cm.yaml"), "/srv")


def plan_of(config: ClusterConfig, discovery: Discovery = NO_NPU_TOOLS) -> LaunchPlan:
    return build_plan(config, "j", "uuid", discovery)


def cm_env(plan: LaunchPlan, rank: int) -> Dict[str, str]:
    return {k: v for k, v in plan.ranks[rank].env.items() if k.startswith("CM_")}


def problems(config: ClusterConfig, discovery: Discovery = NO_NPU_TOOLS) -> str:
    with pytest.raises(ConfigError) as raised:
        plan_of(config, discovery)
    return str(raised.value)


TWO_IP_HOSTS = "  - {host: 10.0.0.11, devices: [2, 3]}\n  - {host: 10.0.0.12, devices: [0, 1, 2]}\n"


def test_every_rank_gets_the_chief_its_host_and_the_job_size_and_no_rank_variables() -> None:
    plan = plan_of(config_of(TWO_IP_HOSTS, "rank_table: cm\nenv: {CM_CHIEF_PORT: '29400'}\n"))
    chief = {"CM_CHIEF_IP": "10.0.0.11", "CM_CHIEF_PORT": "29400", "CM_CHIEF_DEVICE": "2", "CM_WORKER_SIZE": "5"}
    for rank in range(5):
        host_ip = "10.0.0.11" if rank < 2 else "10.0.0.12"
        assert cm_env(plan, rank) == dict(chief, CM_WORKER_IP=host_ip)
        spec = plan.ranks[rank]
        assert not {"RANK_ID", "RANK_SIZE", "RANK_TABLE_FILE"} & set(spec.env)
        assert {"RANK_ID", "RANK_SIZE", "RANK_TABLE_FILE"} <= set(spec.env_unset)  # nor inherited ones
        assert spec.env["DEVICE_ID"] == spec.env["ASCEND_DEVICE_ID"] == str(spec.device_id)
    assert plan.rank_table is None and plan.rank_table_path is None
    assert any("rank-table-free" in note and "get_rank_id" in note for note in plan.notes)
    assert plan.sources["CM_CHIEF_PORT"] == "yaml"


def test_a_job_on_this_host_alone_gets_loopback_and_a_free_port() -> None:
    plan = plan_of(config_of("  - {host: localhost, devices: [4, 5]}\n", "rank_table: cm\n"))
    assert cm_env(plan, 1) == {
        "CM_CHIEF_IP": "127.0.0.1",
        "CM_CHIEF_PORT": "41234",
        "CM_CHIEF_DEVICE": "4",
        "CM_WORKER_IP": "127.0.0.1",
        "CM_WORKER_SIZE": "2",
    }
    assert plan.sources["CM_CHIEF_PORT"] == "a free port of this host"


@pytest.mark.parametrize(
    "remote, resolve, expected",
    [
        ({"node-a": {"address": "10.1.0.1"}, "node-b": {"address": "10.1.0.2"}}, None, ("10.1.0.1", "10.1.0.2")),
        (None, {"node-a": "10.2.0.1", "node-b": "10.2.0.2"}.get, ("10.2.0.1", "10.2.0.2")),
    ],
)
def test_host_names_become_the_addresses_npulaunch_reached_or_resolved(
    remote: Optional[Dict[str, Any]], resolve: Any, expected: tuple
) -> None:
    config = config_of(
        "  - {host: node-a, devices: [0]}\n  - {host: node-b, devices: [0]}\n",
        "rank_table: cm\nenv: {CM_CHIEF_PORT: '6000'}\n",
    )
    discovery = Discovery(
        devices=lambda: [], device_ips=lambda ids: None, remote=remote, resolve=resolve or (lambda name: None)
    )
    plan = plan_of(config, discovery)
    assert (cm_env(plan, 0)["CM_WORKER_IP"], cm_env(plan, 1)["CM_WORKER_IP"]) == expected
    assert cm_env(plan, 1)["CM_CHIEF_IP"] == expected[0]


@pytest.mark.parametrize(
    "hosts, extra, found",
    [
        (TWO_IP_HOSTS, "rank_table: cm\n", "cm on several hosts without a chief port"),
        (TWO_IP_HOSTS, "rank_table: cm\nproduct: atlas-a3\nenv: {CM_CHIEF_PORT: '1'}\n", "cm with product atlas-a3"),
        (
            TWO_IP_HOSTS,
            "rank_table: cm\nenv: {CM_CHIEF_PORT: '1', CM_WORKER_SIZE: '5'}\n",
            "env.CM_WORKER_SIZE: found CM_WORKER_SIZE in env; allowed: only CM_CHIEF_PORT",
        ),
        (
            "  - {host: localhost, devices: [0]}\n",
            "env: {CM_CHIEF_IP: 10.0.0.1}\n",
            "env.CM_CHIEF_IP: found CM_CHIEF_IP with rank_table: auto; allowed: no CM_* variable",
        ),
        (
            "  - {host: localhost, devices: [0]}\n",
            "rank_table: none\nenv: {CM_CHIEF_PORT: '6000'}\n",
            "CM_CHIEF_PORT with rank_table: none",
        ),
    ],
)
def test_refused_before_anything_starts(hosts: str, extra: str, found: str) -> None:
    assert found in problems(config_of(hosts, extra))


def test_a_host_without_an_address_is_refused_under_a_scheduler_and_shown_as_pending_over_ssh() -> None:
    config = config_of(
        "  - {host: no-such-host, devices: [0]}\n  - {host: localhost, devices: [0]}\n",
        "rank_table: cm\nenv: {CM_CHIEF_PORT: '1'}\n",
    )
    with pytest.raises(ConfigError, match=r"hosts\[0\]\.host: found 'no-such-host'; allowed: an IP address"):
        build_plan(config, "j", "uuid", NO_NPU_TOOLS, node=1)  # node 1 of a scheduler's job: nothing to wait for
    offline = plan_of(config)  # npulaunch plan of an SSH job: the address is the one SSH reaches at start
    assert cm_env(offline, 0)["CM_WORKER_IP"] == "(the address no-such-host is reached at, when the job starts)"


def test_more_devices_than_cm_worker_size_allows_is_refused() -> None:
    hosts = "".join(f"  - {{host: 10.{i // 250}.{i % 250}.1, devices: 16}}\n" for i in range(2049))
    assert "cm with 32784 devices; allowed: at most 32768 devices" in problems(
        config_of(hosts, "rank_table: cm\nenv: {CM_CHIEF_PORT: '6000'}\n")
    )


def test_with_a_rank_table_inherited_cm_variables_are_removed() -> None:
    config = config_of("  - {host: localhost, devices: [0], device_ips: [192.168.1.1]}\n")
    spec = plan_of(config).ranks[0]
    assert "RANK_TABLE_FILE" in spec.env and set(CM_VARIABLES) <= set(spec.env_unset)


def test_a_real_rank_table_free_run_reaches_the_ranks_without_inherited_rank_variables(
    tmp_path: Path, marker: str
) -> None:
    config = tmp_path / "cm.yaml"
    config.write_text(
        f"version: 1\njob: {{name: cm, command: {json.dumps(rank_cmd('rank.py', '*=env')[1:])}, "
        f"log_dir: {tmp_path / 'logs'}}}\nhosts: [{{host: localhost, devices: [0, 1]}}]\n"
        f"rank_table: cm\nenv: {{HCCL_IF_BASE_PORT: '{free_port_window()}'}}\n"  # not 60000: an outgoing
    )  # connection of another test may hold one of those ephemeral ports, and the preflight refuses then
    stale = {"RANK_ID": "7", "RANK_SIZE": "9", "RANK_TABLE_FILE": "/old/table.json", "NPLTEST_MARKER": marker}
    result = run_cli("run", str(config), "--job-id", "cm", env=stale)
    assert result.returncode == 0, result.stderr
    envs = [json.loads((tmp_path / "logs" / "cm" / f"rank-{r}" / "env.json").read_text()) for r in (0, 1)]
    for rank, env in enumerate(envs):
        assert not {"RANK_ID", "RANK_SIZE", "RANK_TABLE_FILE"} & set(env)
        assert (env["CM_CHIEF_IP"], env["CM_WORKER_IP"], env["CM_WORKER_SIZE"], env["CM_CHIEF_DEVICE"]) == (
            "127.0.0.1",
            "127.0.0.1",
            "2",
            "0",
        )
        assert env["ASCEND_DEVICE_ID"] == str(rank)
    assert envs[0]["CM_CHIEF_PORT"] == envs[1]["CM_CHIEF_PORT"]


def test_an_inherited_pod_name_never_reaches_a_rank_and_the_yaml_may_not_set_one() -> None:
    for extra in ("", "rank_table: cm\n"):
        spec = plan_of(config_of("  - {host: localhost, devices: [0]}\n", extra)).ranks[0]
        assert "POD_NAME" in spec.env_unset and "POD_NAME" not in spec.env
    with pytest.raises(ConfigError, match=r"env\.POD_NAME: found POD_NAME in env; allowed: no POD_NAME"):
        config_of("  - {host: localhost, devices: [0]}\n", "env: {POD_NAME: trainer-0}\n")
