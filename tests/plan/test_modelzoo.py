"""The environment Ascend ModelZoo's TF1 models read (DEVICE_INDEX, RANK_INDEX beside RANK_ID, RANK_SIZE,
DEVICE_ID): set for every rank by the plan; the plan notes where BERT's RANK_INDEX * 8 + DEVICE_ID does
not hold; in rank_table: cm it says what to read instead of RANK_SIZE / RANK_ID and offers it; the
shipped ModelZoo example plans."""

from __future__ import annotations

import json
import subprocess
import sys
from typing import Dict, List

import pytest
from helpers import RANKS, ROOT, full_plan, run_cli

from npulaunch.config.load import parse_config
from npulaunch.config.yamlsource import parse_yaml
from npulaunch.host.errors import ConfigError
from npulaunch.host.topology import HostCpus
from npulaunch.plan.build import build_plan
from npulaunch.plan.launchplan import Discovery, LaunchPlan

NO_NPU_TOOLS = Discovery(devices=lambda: [], device_ips=lambda ids: None)
FORMULA = "ModelZoo's RANK_INDEX * 8 + DEVICE_ID"


def plan_of(hosts: List[str], extra: str = "") -> LaunchPlan:
    """Hosts given as ``"name: devices"`` YAML flow entries; no rank table (the devices are made up)."""
    entries = "".join(f"  - {{{entry}}}\n" for entry in hosts)
    job = "job: {name: mz, command: [python3, train.py], log_dir: /srv/logs}\n"
    text = f"{job}hosts:\n{entries}rank_table: none\n{extra}"
    config = parse_config(parse_yaml(text, "mz.yaml"), base_dir="/srv")
    return build_plan(config, "mz-1", "u", NO_NPU_TOOLS, host_cpus=lambda npus: HostCpus(allowed=(0, 1)))


def envs(plan: LaunchPlan) -> List[Dict[str, str]]:
    return [spec.env for spec in plan.ranks]


@pytest.mark.parametrize("per_host", [4, 8])
def test_every_rank_gets_device_index_its_global_rank_and_rank_index_its_host(per_host: int) -> None:
    plan = plan_of([f"host: 10.0.0.1, devices: {per_host}", f"host: 10.0.0.2, devices: {per_host}"])
    for rank, env in enumerate(envs(plan)):
        assert env["DEVICE_INDEX"] == env["RANK_ID"] == str(rank)
        assert env["RANK_INDEX"] == str(rank // per_host)
        assert env["DEVICE_ID"] == env["ASCEND_DEVICE_ID"] == str(rank % per_host)
        assert env["RANK_SIZE"] == str(2 * per_host)
        assert "DEVICE_INDEX" not in plan.ranks[rank].env_sources  # not listed: the launcher's


def test_the_plan_notes_where_rank_index_times_8_plus_device_id_does_not_hold() -> None:
    eight = plan_of(["host: 10.0.0.1, devices: 8", "host: 10.0.0.2, devices: 8"])
    assert not [n for n in eight.notes if FORMULA in n]  # devices 0-7 on every host: it holds
    four = plan_of(["host: 10.0.0.1, devices: 4", "host: 10.0.0.2, devices: 4"])
    (note,) = [n for n in four.notes if FORMULA in n]
    assert "rank 3: 3, rank 4: 8, rank 5: 9" in note and "not each of 0..7 once" in note
    assert "DEVICE_INDEX is each rank's global rank" in note
    upper = plan_of(["host: localhost, devices: [4, 5, 6, 7]"])  # one host, not from device 0
    assert [n for n in upper.notes if FORMULA in n]
    assert not [n for n in plan_of(["host: localhost, devices: 4"]).notes if FORMULA in n]
    assert not [n for n in plan_of(["host: localhost, devices: [3]"]).notes if FORMULA in n]  # one rank


def test_rank_table_free_jobs_offer_what_to_read_instead_of_rank_size() -> None:
    text = (
        "job: {name: mz, command: [python3, train.py], log_dir: /srv/logs}\n"
        "hosts: [{host: 10.0.0.1, devices: 2}, {host: 10.0.0.2, devices: 2}]\n"
        "rank_table: cm\nenv: {CM_CHIEF_PORT: '29600'}\n"
    )
    config = parse_config(parse_yaml(text, "cm.yaml"), base_dir="/srv")
    plan = build_plan(config, "cm-1", "u", NO_NPU_TOOLS)
    for rank, env in enumerate(envs(plan)):
        assert "RANK_SIZE" not in env and "RANK_ID" not in env
        assert (env["CM_WORKER_SIZE"], env["RANK_SIZES"]) == ("4", "4")
        assert env["DEVICE_INDEX"] == env["RANK_IDS"] == str(rank)
        assert "RANK_SIZE" in plan.ranks[rank].env_unset
    (note,) = [n for n in plan.notes if n.startswith("rank_table: cm: a script that reads RANK_SIZE")]
    assert "the world size is CM_WORKER_SIZE (also RANK_SIZES=4" in note and "DEVICE_INDEX (also RANK_IDS)" in note


def test_env_may_not_set_the_modelzoo_rank_variables(tmp_path) -> None:
    text = "job: {command: [python3, t.py]}\nenv:\n  DEVICE_INDEX: '0'\n  RANK_INDEX: '0'\n"
    with pytest.raises(ConfigError) as refused:
        parse_config(parse_yaml(text, "env.yaml"), base_dir=str(tmp_path))
    shown = str(refused.value)
    assert "env.yaml:3: env.DEVICE_INDEX" in shown and "env.yaml:4: env.RANK_INDEX" in shown
    assert "npulaunch sets it for every rank" in shown


def test_the_shipped_modelzoo_example_plans_as_the_8p_script_would_run_each_device() -> None:
    result = run_cli("plan", "cluster_configs/modelzoo-resnet50-2x8.yaml", "--json")
    assert result.returncode == 0, result.stderr
    plan = full_plan(json.loads(result.stdout))
    assert plan["world_size"] == 16
    rank9 = plan["ranks"][9]
    assert "--model_dir=test/output/1/ckpt" in rank9["argv"]
    assert rank9["make_dirs"]["job.make_dirs"] == [rank9["cwd"] + "/test/output/1/ckpt"]
    assert (rank9["env"]["DEVICE_INDEX"], rank9["env"]["RANK_INDEX"], rank9["env"]["DEVICE_ID"]) == ("9", "1", "1")
    assert rank9["cpus"] is None and rank9["cpu_binding"] == {"mode": "auto", "mapping": {}}  # chosen there
    assert not [n for n in plan["notes"] if FORMULA in n]
    table = run_cli("plan", "cluster_configs/modelzoo-resnet50-2x8.yaml").stdout
    assert "at start" in table and "rank 1: python3.7 src/mains/res50.py" in table


def test_the_modelzoo_rank_program_fails_as_the_models_do_without_the_variables() -> None:
    bare = subprocess.run([sys.executable, str(RANKS / "modelzoo.py")], capture_output=True, text=True, cwd=ROOT)
    assert bare.returncode == 1 and "TypeError: int() argument must be" in bare.stderr
