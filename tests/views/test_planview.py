"""What ``npulaunch plan`` shows of devices and the rank table, through the real CLI: every rank's
device as the rank table names it, as the runtime numbers it and as the rank opens it
(ASCEND_DEVICE_ID), the variables that decided it, and the rank table's version and why."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from helpers import full_plan, run_cli

from npulaunch.config.load import parse_config
from npulaunch.config.yamlsource import parse_yaml
from npulaunch.plan.build import build_plan
from npulaunch.plan.launchplan import Discovery
from npulaunch.views.planview import render_plan_table

A3_ONE_POD = """\
version: 1
product: atlas-a3
job:
  command: [python3, train.py]
  log_dir: LOG
hosts:
  - host: localhost
    devices: [2, 3]
    super_pod_id: pod-0
    super_device_ids: [18, 19]
"""


def write(tmp_path: Path, log_dir: Path) -> Path:
    path = tmp_path / "a3 job.yaml"
    path.write_text(A3_ONE_POD.replace("LOG", json.dumps(str(log_dir))))
    return path


def test_plan_shows_each_ranks_device_mapping_and_the_rank_table_version(tmp_path: Path, log_dir: Path) -> None:
    result = run_cli("plan", str(write(tmp_path, log_dir)), env={"ASCEND_RT_VISIBLE_DEVICES": "2,3"})
    assert result.returncode == 0, result.stderr
    lines = result.stdout.splitlines()
    (table_line,) = [line for line in lines if line.startswith("rank table: ")]
    assert table_line.endswith(
        "rank_table.json (version 1.2: product atlas-a3 with super_pod_id / super_device_ids on every host "
        "(1 super pod): super-node networking, super_pod_list)"
    )
    assert "devices on localhost: ASCEND_RT_VISIBLE_DEVICES=2,3 (inherited by npulaunch on this host)" in lines
    header = next(i for i, line in enumerate(lines) if line.startswith("rank  "))
    assert lines[header].split()[:6] == ["rank", "local_rank", "host", "device_id", "logical", "ASCEND_DEVICE_ID"]
    rows = [line.split()[:6] for line in lines[header + 1 : header + 3]]
    assert rows == [["0", "0", "localhost", "2", "2", "0"], ["1", "1", "localhost", "3", "3", "1"]]
    assert any("rank table without device_ip: one super pod" in line for line in lines)


def test_plan_json_has_the_same_mapping_and_version(tmp_path: Path, log_dir: Path) -> None:
    result = run_cli("plan", str(write(tmp_path, log_dir)), "--json", env={"ASCEND_RT_VISIBLE_DEVICES": "2,3"})
    assert result.returncode == 0, result.stderr
    plan = full_plan(json.loads(result.stdout))
    assert plan["rank_table_version"] == plan["rank_table"]["version"] == "1.2"
    assert "super-node networking" in plan["rank_table_reason"]
    assert [r["device"] for r in plan["ranks"]] == [
        {"physical": 2, "logical": 2, "ascend_device_id": 0},
        {"physical": 3, "logical": 3, "ascend_device_id": 1},
    ]
    assert [(r["env"]["DEVICE_ID"], r["env"]["ASCEND_DEVICE_ID"]) for r in plan["ranks"]] == [("2", "0"), ("3", "1")]
    assert plan["visible_devices"] == {
        "localhost": {"ASCEND_RT_VISIBLE_DEVICES": {"value": "2,3", "source": "inherited by npulaunch on this host"}}
    }
    devices = plan["rank_table"]["server_list"][0]["device"]
    assert [(d["device_id"], d["super_device_id"]) for d in devices] == [("2", "18"), ("3", "19")]


def test_plan_refuses_a_device_outside_the_inherited_visible_list(tmp_path: Path, log_dir: Path) -> None:
    result = run_cli("plan", str(write(tmp_path, log_dir)), env={"ASCEND_RT_VISIBLE_DEVICES": "0,1,3"})
    assert result.returncode == 2 and "Traceback" not in result.stderr
    assert "a3 job.yaml:8: hosts[0].devices: found device 2" in result.stderr
    assert "makes visible: physical 0, 1, 3" in result.stderr


def test_without_a_table_the_plan_says_why() -> None:
    text = (
        "job:\n  command: [python3, t.py]\n  log_dir: /srv/logs\n"
        "hosts: [{host: localhost, devices: 2}]\nrank_table: none\n"
    )
    config = parse_config(parse_yaml(text, "job.yaml"), base_dir="/srv")
    plan = build_plan(config, "j", "u", Discovery(devices=lambda: [], device_ips=lambda ids: None, environ=lambda: {}))
    shown = render_plan_table(plan)
    assert "rank table: none (rank_table: none)" in shown
    assert "note: no rank table (rank_table: none): RANK_TABLE_FILE is not set; the 2 ranks cannot use HCCL" in shown


def test_plan_json_writes_each_environment_once_and_every_rank_s_complete_environment_is_there() -> None:
    """Shared base + per-rank differences (planjson): every rank's complete environment, rebuilt with
    full_rank, is exactly the one rank_to_dict gives for it, for local ranks (which inherit the launcher's
    environment, with a variable the YAML removes and one it templates) and remote ones."""
    from npulaunch.plan.planjson import full_rank, rank_to_dict, render_plan_json

    text = (
        "job:\n  command: [python3, t.py]\n  log_dir: /srv/logs\n"
        "hosts: [{host: localhost, devices: 3}, {host: 10.0.0.2, devices: 2}]\nrank_table: none\n"
        "env: {RUN_TAG: 'r{rank}', FOO: bar, DROPPED: null, API_TOKEN: s3cret}\n"
        # session_injection: auto prepends to PYTHONPATH
        "session_options: {hcom_parallel: true, dump_path: '/d/{rank}'}\nsession_injection: auto\n"
    )
    config = parse_config(parse_yaml(text, "job.yaml"), base_dir="/srv")
    plan = build_plan(config, "j", "u", Discovery(devices=lambda: [], device_ips=lambda ids: None, environ=lambda: {}))
    inherited = {"localhost": {"HOME": "/root", "DROPPED": "x", "PATH": "/usr/bin", "RANK_ID": "9", "PYTHONPATH": "/p"}}
    data = json.loads(render_plan_json(plan, inherited))
    assert len(data["env_bases"]) == 2 and data["env_bases"][0]["hosts"] == ["localhost"]
    assert data["env_bases"][0]["env"]["FOO"] == "bar" and data["env_bases"][0]["env"]["API_TOKEN"] == "***"
    for spec, entry in zip(plan.ranks, data["ranks"]):
        assert set(entry["env"]) < {name for name in full_rank(data, entry)["env"]}  # only what differs
        expected = rank_to_dict(spec, inherited.get(spec.host, {}), plan.rank_device(spec))
        assert full_rank(data, entry) == json.loads(json.dumps(expected)), spec.rank
    assert data["ranks"][1]["env"]["RUN_TAG"] == "r1" and "FOO" not in data["ranks"][1]["env"]
    assert "DROPPED" not in full_rank(data, data["ranks"][0])["env"]
    assert full_rank(data, data["ranks"][0])["env"]["PYTHONPATH"].endswith(":/p")


JOB = "job:\n  command: [python3, t.py, --token=abc]\n  log_dir: /srv/logs\n"


@pytest.mark.parametrize(
    "body",
    [
        # hosts the plan cannot see, the same options for every rank: each host's part worked out once
        "hosts: [{host: 10.0.0.2, devices: 4}, {host: 10.0.0.3, devices: [4, 5, 6, 7]}]\nrank_table: none\n"
        "env: {FOO: bar, DB_URL: 'http://u:pw@db'}\nsession_options: {hcom_parallel: true}\n",
        # local ranks (inheriting RANK_ID, PYTHONPATH, a secret) and a remote host, injection on
        "hosts: [{host: localhost, devices: 2}, {host: 127.0.0.1, devices: [2, 3]}, {host: 10.0.0.2, devices: 2}]\n"
        "rank_table: none\nsession_injection: auto\nenv: {MY_SECRET: s, DROPPED: null}\n",
        # rank-table-free: RANK_IDS and the host's CM_* values
        "hosts: [{host: localhost, devices: [6, 7]}]\nrank_table: cm\n",
        # TensorFlow's TF_CONFIG, each rank its own, with its source
        "hosts: [{host: localhost, devices: 3}]\ncpu_fallback: true\n",
        # options each rank has its own of (local_rank_id, local_device_list)
        "hosts: [{host: localhost, devices: [0, 1]}]\nrank_table: none\ndata_preprocess: host_main\n"
        "session_options: {iterations_per_loop: 10}\n",
    ],
    ids=["remote", "local-and-remote", "cm", "cpu-fallback", "own-options"],
)
def test_each_rank_s_json_line_is_json_dumps_of_its_entry_and_holds_its_complete_environment(body: str) -> None:
    """The rank lines are written from each host's shared part and the rank's own values (planjson
    rank_line), not by json.dumps: a line is exactly what json.dumps gives for the dictionary it holds,
    and the rank's complete environment rebuilt from it is the one rank_to_dict gives."""
    from npulaunch.plan.planjson import full_rank, rank_to_dict, render_plan_json

    config = parse_config(parse_yaml(JOB + body, "job.yaml"), base_dir="/srv")
    discovery = Discovery(
        devices=lambda: list(range(8)), device_ips=lambda ids: None, environ=lambda: {}, npu_present=lambda: True
    )
    plan = build_plan(config, "j", "u", discovery)
    shell = {"HOME": "/root", "DROPPED": "x", "RANK_ID": "9", "PYTHONPATH": "/p", "MY_SECRET": "t", "DEVICE_ID": "1"}
    inherited = {host: dict(shell) for host in ("localhost", "127.0.0.1")}
    text = render_plan_json(plan, inherited)
    lines = text.split('\n  "ranks": [\n', 1)[1].splitlines()[: plan.world_size]
    data = json.loads(text)
    assert len(lines) == len(data["ranks"]) == plan.world_size > 1
    for spec, line, entry in zip(plan.ranks, lines, data["ranks"]):
        assert line.strip().rstrip(",") == json.dumps(entry)
        expected = rank_to_dict(spec, inherited.get(spec.host, {}), plan.rank_device(spec))
        assert full_rank(data, entry) == json.loads(json.dumps(expected)), spec.rank
        assert "abc" not in line and "pw@" not in line


def test_plan_rank_shows_one_rank_complete(tmp_path: Path, log_dir: Path) -> None:
    path = write(tmp_path, log_dir)
    shown = run_cli("plan", str(path), "--rank", "1")
    assert shown.returncode == 0, shown.stderr
    assert shown.stdout.startswith("rank 1 of 2 on localhost")
    assert "  RANK_ID" in shown.stdout and "= 1   [launcher]" in shown.stdout
    as_json = json.loads(run_cli("plan", str(path), "--rank", "1", "--json", "--job-id", "same").stdout)
    whole = full_plan(json.loads(run_cli("plan", str(path), "--json", "--job-id", "same").stdout))
    for entry in (as_json, whole["ranks"][1]):
        entry["env"].pop("NPULAUNCH_JOB_UUID")  # new for every plan
    assert as_json == whole["ranks"][1]
    missing = run_cli("plan", str(path), "--rank", "7")
    assert missing.returncode == 2 and "--rank 7: the job has ranks 0 to 1" in missing.stderr
