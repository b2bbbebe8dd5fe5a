"""The frameworks' start-up contracts by value (plan/frameworks/): torchrun's variables as torch and
torch_npu read them, msrun's dynamic cluster with its scheduler process, MindSpore's rank-table mode,
and what each framework refuses. torch_npu cannot be installed here (it needs CANN), so what it reads is
checked by value, each against the source the contract cites."""

from __future__ import annotations

from typing import Any, Dict, Mapping, Optional

import pytest

from npulaunch.config.cluster import ClusterConfig, Framework
from npulaunch.config.load import parse_config
from npulaunch.config.overrides import Overrides, apply_overrides
from npulaunch.config.yamlsource import parse_yaml
from npulaunch.host.errors import ConfigError
from npulaunch.host.spec import HELPER_RANK
from npulaunch.plan.build import build_plan
from npulaunch.plan.frameworks import contract
from npulaunch.plan.frameworks.pytorch import agent_store
from npulaunch.plan.launchplan import Discovery, LaunchPlan

LOCAL = Discovery(devices=lambda: [], device_ips=lambda ids: None, free_ports=lambda n: (41000,) * n)


def config_of(text: str) -> ClusterConfig:
    return parse_config(parse_yaml("version: 1\n" + text, "cluster.yaml"), base_dir="/srv")


def plan_of(
    text: str,
    discovery: Discovery = LOCAL,
    attempt: int = 0,
    overrides: Optional[Overrides] = None,
) -> LaunchPlan:
    config = config_of(text)
    if overrides is not None:
        config = apply_overrides(config, overrides)
    return build_plan(config, "job-1", "uuid-1", discovery, attempt=attempt)


def env(plan: LaunchPlan, rank: int) -> Dict[str, str]:
    return dict(plan.processes[rank].env) if rank >= 0 else dict(plan.helpers[0].env)


def problems(text: str) -> str:
    with pytest.raises(ConfigError) as caught:
        plan_of(text)
    return str(caught.value)


JOB = "job: {command: [python3, train.py], log_dir: /srv/logs}\n"
TORCH_ONE_HOST = "framework: pytorch\n" + JOB + "hosts: [{host: localhost, devices: [3, 1]}]\n"

TWO_REMOTE_HOSTS = """\
hosts:
  - host: a
    devices: [0, 1]
  - host: b
    devices: [4, 2]
"""
# what the SSH preflight learns: the address the launcher reached each host at, and its own address toward it
REMOTE_FACTS: Mapping[str, Mapping[str, Any]] = {
    "a": {"address": "10.0.0.1", "launcher_address": "10.0.0.9", "visible": {}},
    "b": {"address": "10.0.0.2", "launcher_address": "10.0.0.9", "visible": {}},
}
OVER_SSH = Discovery(devices=lambda: [], device_ips=lambda ids: None, remote=REMOTE_FACTS)


# --- pytorch: torchrun's contract


def test_torch_ranks_get_torchruns_variables_with_torchruns_meanings() -> None:
    plan = plan_of(TORCH_ONE_HOST)
    first, second = env(plan, 0), env(plan, 1)
    for name, value in {
        "RANK": "0",
        "WORLD_SIZE": "2",
        "LOCAL_WORLD_SIZE": "2",
        "GROUP_RANK": "0",
        "GROUP_WORLD_SIZE": "1",
        "ROLE_RANK": "0",
        "ROLE_WORLD_SIZE": "2",
        "ROLE_NAME": "default",
        "MASTER_ADDR": "127.0.0.1",
        "MASTER_PORT": "41000",  # a free port of this host: the whole job runs here
        "TORCHELASTIC_RESTART_COUNT": "0",
        "TORCHELASTIC_MAX_RESTARTS": "0",
        "TORCHELASTIC_RUN_ID": "job-1",
        # npulaunch's agent serves the TCPStore when torch 2.4+ is beside it (agent_store), else rank 0 hosts it
        "TORCHELASTIC_USE_AGENT_STORE": str(agent_store()[0]),
        "OMP_NUM_THREADS": "1",  # two ranks on the host and none set (run.py L872-884)
    }.items():
        assert first[name] == value, name
    assert second["RANK"] == "1"
    assert first["TORCHELASTIC_ERROR_FILE"] == f"{plan.ranks[0].rank_dir}/error.json"
    assert second["TORCHELASTIC_ERROR_FILE"] == f"{plan.ranks[1].rank_dir}/error.json"


def test_torch_npu_sees_the_hosts_npus_ascending_and_local_rank_indexes_each_ranks_own() -> None:
    """devices [3, 1]: torch_npu reads ASCEND_RT_VISIBLE_DEVICES only when strictly ascending
    (torch_npu/npu/__init__.py L411-496), so it is 1,3, and set_device(LOCAL_RANK) must open the rank's
    own NPU: rank 0 (NPU 3) is index 1, rank 1 (NPU 1) index 0."""
    plan = plan_of(TORCH_ONE_HOST)
    first, second = env(plan, 0), env(plan, 1)
    assert first["ASCEND_RT_VISIBLE_DEVICES"] == second["ASCEND_RT_VISIBLE_DEVICES"] == "1,3"
    visible = [int(d) for d in first["ASCEND_RT_VISIBLE_DEVICES"].split(",")]
    assert visible == sorted(set(visible))
    for spec in plan.ranks:
        opened = visible[int(spec.env["LOCAL_RANK"])]
        assert opened == spec.device_id
    assert {first["LOCAL_RANK"], second["LOCAL_RANK"]} == {"0", "1"}


def test_torch_inside_a_container_lists_the_runtimes_numbering() -> None:
    """ASCEND_VISIBLE_DEVICES=4,5,6,7 (Ascend Docker Runtime): physical 6 and 5 are logical 2 and 1."""
    inside = Discovery(
        devices=lambda: [],
        device_ips=lambda ids: None,
        free_ports=lambda n: (41000,) * n,
        environ=lambda: {"ASCEND_VISIBLE_DEVICES": "4,5,6,7"},
    )
    plan = plan_of("framework: pytorch\n" + JOB + "hosts: [{host: localhost, devices: [6, 5]}]\n", inside)
    assert env(plan, 0)["ASCEND_RT_VISIBLE_DEVICES"] == "1,2"
    assert [spec.env["LOCAL_RANK"] for spec in plan.ranks] == ["1", "0"]


def test_torch_drops_the_tf_adapters_names_a_shell_may_have_left() -> None:
    plan = plan_of(TORCH_ONE_HOST)
    spec = plan.ranks[0]
    for name in ("RANK_ID", "RANK_SIZE", "DEVICE_ID", "ASCEND_DEVICE_ID", "RANK_TABLE_FILE"):
        assert name not in spec.env
        assert name in spec.env_unset
    assert "JOB_ID" in spec.env and "ASCEND_PROCESS_LOG_PATH" in spec.env  # npulaunch's own, every framework


def test_torch_over_ssh_meets_at_the_first_hosts_address_and_each_host_gets_its_hccl_if_ip() -> None:
    plan = plan_of("framework: pytorch\n" + JOB + TWO_REMOTE_HOSTS, OVER_SSH)
    assert [spec.env["MASTER_ADDR"] for spec in plan.ranks] == ["10.0.0.1"] * 4
    assert {spec.env["MASTER_PORT"] for spec in plan.ranks} == {"29500"}  # torchrun's default
    assert [spec.env["HCCL_IF_IP"] for spec in plan.ranks] == ["10.0.0.1", "10.0.0.1", "10.0.0.2", "10.0.0.2"]
    assert [spec.env["GROUP_RANK"] for spec in plan.ranks] == ["0", "0", "1", "1"]
    assert {spec.env["GROUP_WORLD_SIZE"] for spec in plan.ranks} == {"2"}
    assert [spec.env["RANK"] for spec in plan.ranks] == ["0", "1", "2", "3"]
    assert [spec.env["LOCAL_RANK"] for spec in plan.ranks] == ["0", "1", "1", "0"]  # host b: NPUs 2,4
    assert plan.ranks[2].env["ASCEND_RT_VISIBLE_DEVICES"] == "2,4"


def test_torch_from_the_launchers_host_meets_at_its_address_toward_the_others() -> None:
    """The launcher's host runs rank 0: MASTER_ADDR is the address the other hosts reach it at (its end
    of their SSH connection), never loopback."""
    text = "framework: pytorch\n" + JOB + "hosts: [{host: localhost, devices: [0]}, {host: b, devices: [0]}]\n"
    plan = plan_of(text, OVER_SSH)
    assert {spec.env["MASTER_ADDR"] for spec in plan.ranks} == {"10.0.0.9"}
    assert [spec.env["HCCL_IF_IP"] for spec in plan.ranks] == ["10.0.0.9", "10.0.0.2"]


def test_torch_yaml_and_command_line_choose_the_meeting_point() -> None:
    text = "framework: {name: pytorch, master_addr: 10.1.1.1, master_port: 23456, role: trainer}\n" + JOB
    plan = plan_of(text + TWO_REMOTE_HOSTS, OVER_SSH)
    assert (plan.ranks[3].env["MASTER_ADDR"], plan.ranks[3].env["MASTER_PORT"]) == ("10.1.1.1", "23456")
    assert plan.ranks[0].env["ROLE_NAME"] == "trainer"
    cli = plan_of(text + TWO_REMOTE_HOSTS, OVER_SSH, overrides=Overrides(master_port=24000))
    assert cli.ranks[0].env["MASTER_PORT"] == "24000"
    assert cli.sources["framework.master_port"] == "cli"


def test_torch_omp_threads_follow_torchrun() -> None:
    one_each = plan_of("framework: pytorch\n" + JOB + "hosts: [{host: localhost, devices: [0]}]\n")
    assert "OMP_NUM_THREADS" not in one_each.ranks[0].env  # torchrun sets it only for several workers
    given = plan_of(TORCH_ONE_HOST + "env: {OMP_NUM_THREADS: 4}\n")
    assert given.ranks[0].env["OMP_NUM_THREADS"] == "4"
    inherited = Discovery(devices=lambda: [], device_ips=lambda ids: None, environ=lambda: {"OMP_NUM_THREADS": "8"})
    assert "OMP_NUM_THREADS" not in plan_of(TORCH_ONE_HOST, inherited).ranks[0].env  # the rank inherits 8


def test_torch_restart_count_counts_npulaunchs_restarts() -> None:
    """TORCHELASTIC_RESTART_COUNT: 0 on the first attempt, as under torchrun (local_elastic_agent.py L426)."""
    text = TORCH_ONE_HOST + "job: {command: [python3, train.py], log_dir: /srv/logs, max_restarts: 3}\n"
    text = text.replace(JOB, "")
    for attempt, count in ((1, "0"), (2, "1"), (4, "3")):
        spec = plan_of(text, attempt=attempt).ranks[0]
        assert (spec.env["TORCHELASTIC_RESTART_COUNT"], spec.env["TORCHELASTIC_MAX_RESTARTS"]) == (count, "3")


def test_torch_after_a_recovery_onto_a_spare_npu_local_rank_still_opens_each_ranks_own() -> None:
    """NPU 1 fails, spare 4 takes rank 1's place: the visible list stays ascending (0,2,3,4) and rank
    1's LOCAL_RANK is 4's index in it; the restart counts."""
    from npulaunch.plan.placement import Exclusion

    text = "framework: pytorch\n" + JOB + "hosts: [{host: localhost, devices: 4, spare_devices: [4]}]\n"
    plan = build_plan(
        config_of(text), "job-1", "uuid-1", LOCAL, attempt=2, exclusions=[Exclusion("localhost", 1, "NPU fault")]
    )
    assert [spec.device_id for spec in plan.ranks] == [0, 4, 2, 3]
    visible = plan.ranks[0].env["ASCEND_RT_VISIBLE_DEVICES"]
    assert visible == "0,2,3,4"
    for spec in plan.ranks:
        assert [0, 2, 3, 4][int(spec.env["LOCAL_RANK"])] == spec.device_id
        assert spec.env["TORCHELASTIC_RESTART_COUNT"] == "1"


def test_torch_gets_the_rank_table_when_the_job_has_one() -> None:
    """torch_npu's rank-table start-up: RANK_TABLE_FILE, whose rank_id is the c10d RANK
    (ProcessGroupHCCL.cpp L2756-2804), beside the TCPStore it still needs."""
    hosts = "hosts: [{host: localhost, devices: [0, 1], device_ips: [1.1.1.1, 1.1.1.2]}]\n"
    text = "framework: pytorch\n" + JOB + hosts
    plan = plan_of(text)
    assert plan.rank_table is not None
    for spec in plan.ranks:
        assert spec.env["RANK_TABLE_FILE"] == plan.rank_table_path
        devices = [d for s in plan.rank_table["server_list"] for d in s["device"]]
        listed = [d for d in devices if d["device_id"] == str(spec.device_id)]
        assert listed[0]["rank_id"] == spec.env["RANK"]
        assert "MASTER_ADDR" in spec.env


def test_torch_without_device_ips_runs_without_a_table_and_says_so() -> None:
    plan = plan_of(TORCH_ONE_HOST)
    assert plan.rank_table is None
    assert any("forms the cluster without one" in note for note in plan.notes)


@pytest.mark.parametrize(
    "extra, found",
    [
        ("session_options: {hcom_parallel: true}\n", "session_options with framework: pytorch"),
        ("session_injection: auto\n", "session_injection with framework: pytorch"),
        ("cpu_fallback: true\n", "cpu_fallback with framework: pytorch"),
        ("rank_table: cm\n", "cm with framework: pytorch"),
        ("env: {RANK: '3'}\n", "RANK in env"),
        ("env: {MASTER_PORT: '1234'}\n", "framework.master_port"),
    ],
)
def test_torch_refuses_what_it_would_not_read(extra: str, found: str) -> None:
    said = problems(TORCH_ONE_HOST + extra)
    assert "cluster.yaml" in said and found in said


# --- mindspore: msrun's dynamic cluster, and the rank table

MS_TWO_HOSTS = "framework: mindspore\n" + JOB + TWO_REMOTE_HOSTS


def test_msrun_workers_get_msruns_variables() -> None:
    """As _api.py (mindspore_test @ 019ff922) exports them: MS_WORKER_NUM, MS_SCHED_HOST, MS_SCHED_PORT,
    MS_TOPO_TIMEOUT, MS_ROLE=MS_WORKER, MS_NODE_ID, RANK_ID, RANK_SIZE, DEVICE_ID (the local index)."""
    plan = plan_of(MS_TWO_HOSTS, OVER_SSH)
    assert plan.world_size == 4 and len(plan.ranks) == 4
    for spec in plan.ranks:
        got = spec.env
        assert got["MS_ROLE"] == "MS_WORKER"
        assert (got["MS_WORKER_NUM"], got["RANK_SIZE"]) == ("4", "4")
        assert (got["MS_SCHED_HOST"], got["MS_SCHED_PORT"]) == ("10.0.0.1", "8118")  # msrun's default port
        assert got["MS_TOPO_TIMEOUT"] == "600"
        assert got["MS_NODE_ID"] == got["RANK_ID"] == str(spec.rank)
        visible = [int(d) for d in got["ASCEND_RT_VISIBLE_DEVICES"].split(",")]
        assert visible[int(got["DEVICE_ID"])] == spec.device_id
    assert plan.ranks[2].env["DEVICE_ID"] == "1"  # host b: NPUs 2,4; rank 2 is on 4


def test_msrun_runs_one_scheduler_on_the_first_host_that_is_not_a_rank() -> None:
    plan = plan_of(MS_TWO_HOSTS, OVER_SSH)
    assert len(plan.helpers) == 1
    helper = plan.helpers[0]
    assert (helper.rank, helper.host, helper.argv) == (HELPER_RANK, "a", plan.ranks[0].argv)
    got = dict(helper.env)
    assert (got["MS_ROLE"], got["RANK_ID"]) == ("MS_SCHED", "0")  # start_scheduler: RANK_ID 0
    assert (got["MS_WORKER_NUM"], got["MS_SCHED_PORT"]) == ("4", "8118")
    assert "MS_NODE_ID" not in got and "DEVICE_ID" not in got
    assert helper.rank_dir.endswith("/scheduler") and helper.stdout_path.endswith("/scheduler/stdout.log")
    assert plan.world_size == 4
    assert [spec.rank for spec in plan.host_plan(0).ranks] == [0, 1, HELPER_RANK]  # its agent runs it
    assert [spec.rank for spec in plan.host_plan(1).ranks] == [2, 3]


def test_msrun_on_one_host_uses_a_free_port() -> None:
    plan = plan_of("framework: mindspore\n" + JOB + "hosts: [{host: localhost, devices: 2}]\n")
    assert {spec.env["MS_SCHED_PORT"] for spec in plan.processes} == {"41000"}
    assert {spec.env["MS_SCHED_HOST"] for spec in plan.processes} == {"127.0.0.1"}


def test_mindspore_rank_table_mode() -> None:
    """rank_table.md (mindspore-ai/docs @ 9e844dc6): RANK_TABLE_FILE, DEVICE_ID (physical), RANK_ID,
    RANK_SIZE; no scheduler, none of msrun's variables."""
    text = "framework: {name: mindspore, mode: rank_table}\n" + JOB
    text += "hosts: [{host: localhost, devices: [2, 3], device_ips: [1.1.1.1, 1.1.1.2]}]\n"
    plan = plan_of(text)
    assert plan.helpers == ()
    for spec in plan.ranks:
        got = spec.env
        assert got["RANK_TABLE_FILE"] == plan.rank_table_path
        assert (got["RANK_ID"], got["DEVICE_ID"], got["RANK_SIZE"]) == (str(spec.rank), str(spec.device_id), "2")
        assert "MS_ROLE" not in got and "MS_ROLE" in spec.env_unset


def test_mindspore_rank_table_mode_refuses_to_run_without_a_table() -> None:
    said = problems("framework: {name: mindspore, mode: rank_table}\nrank_table: none\n" + JOB)
    assert "none with framework mode rank_table" in said


# --- the framework key itself


@pytest.mark.parametrize(
    "text, found, allowed",
    [
        ("framework: torch\n", "'torch'", "framework: pytorch"),
        ("framework: {name: pytorch, mode: msrun}\n", "'msrun'", "only framework: mindspore has modes"),
        ("framework: {name: tensorflow, master_port: 2000}\n", "2000", "no master_port"),
        ("framework: {name: pytorch, master_port: 70000}\n", "70000", ""),
        ("framework: {name: mindspore, role: x}\n", "'x'", "pytorch only"),
        ("framework: {name: pytorch, port: 1}\n", "port", ""),
    ],
)
def test_bad_framework_keys_are_located(text: str, found: str, allowed: str) -> None:
    with pytest.raises(ConfigError) as caught:
        config_of(text + JOB)
    said = str(caught.value)
    assert "cluster.yaml:2" in said and found in said and allowed in said


def test_tensorflow_stays_the_default_and_unchanged() -> None:
    plan = plan_of(JOB + "hosts: [{host: localhost, devices: [3, 1]}]\n")
    assert plan.framework == "tensorflow" and plan.helpers == () and plan.meeting is None
    got = plan.ranks[0].env
    assert (got["RANK_ID"], got["DEVICE_ID"], got["RANK_SIZE"]) == ("0", "3", "2")
    assert "RANK" not in got and "MASTER_ADDR" not in got and "ASCEND_RT_VISIBLE_DEVICES" not in got


def test_command_line_framework_wins_and_is_shown() -> None:
    plan = plan_of(JOB + "hosts: [{host: localhost, devices: 2}]\n", overrides=Overrides(framework="pytorch"))
    assert plan.framework == "pytorch" and plan.sources["framework"] == "cli"
    assert plan.ranks[1].env["RANK"] == "1"


@pytest.mark.parametrize("name", [member for member in Framework])
def test_every_contract_cites_a_source_for_every_variable(name: Framework) -> None:
    module = contract(name)
    assert module.VARIABLES and module.SOURCES
    assert all(variable.source and variable.meaning for variable in module.VARIABLES)
    names = [variable.name for variable in module.VARIABLES]
    assert len(names) == len(set(names))


@pytest.mark.parametrize(
    "installed,served",
    [("2.13.0+cpu", True), ("2.4.0", True), ("2.3.1", False), ("1.13.1", False), (None, False)],
)
def test_the_agent_serves_the_store_for_torch_2_4_and_later(
    monkeypatch: pytest.MonkeyPatch, installed: Optional[str], served: bool
) -> None:
    from importlib import metadata

    def version(name: str) -> str:
        if installed is None:
            raise metadata.PackageNotFoundError(name)
        return installed

    monkeypatch.setattr(metadata, "version", version)
    serve, why = agent_store()
    assert serve is served
    assert ("npulaunch's agent serves" if served else "rank 0 hosts the TCPStore") in why
    plan = plan_of(TORCH_ONE_HOST)
    assert env(plan, 0)["TORCHELASTIC_USE_AGENT_STORE"] == str(served)
    assert plan.store_port == (plan.meeting[1] if served else None)
    assert plan.host_plan(0).store_port == plan.store_port


def test_under_exec_no_agent_serves_the_store_so_rank_0_hosts_it() -> None:
    plan = build_plan(config_of(TORCH_ONE_HOST), "job-1", "uuid-1", LOCAL, agents=False)
    assert env(plan, 0)["TORCHELASTIC_USE_AGENT_STORE"] == "False" and plan.store_port is None
    assert any("the TCPStore rank 0 hosts" in note for note in plan.notes)
