"""Every shipped YAML is loaded and planned through the CLI; what ``plan --json`` shows of the
environment (redaction, where each variable came from)."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from helpers import ROOT, base_env, full_plan, job_dirs, npulaunch_argv, run_cli

# world size of every shipped YAML; a new file must be added here (see the test below)
WORLD_SIZES = {
    "cluster_configs/local-4.yaml": 4,
    "cluster_configs/local-4-recovery.yaml": 4,
    "cluster_configs/local-4-quick.yaml": 4,
    "cluster_configs/local-4-torch.yaml": 4,
    "cluster_configs/server-8npu.yaml": 8,
    "cluster_configs/two-servers.yaml": 16,
    "cluster_configs/slurm-4x8.yaml": 8,  # outside Slurm: the one entry; under Slurm 4 nodes x 8
    "cluster_configs/slurm-recovery.yaml": 8,  # outside Slurm: the one entry; under Slurm 4 nodes x 8, 1 spare
    "cluster_configs/modelzoo-resnet50-2x8.yaml": 16,
    "examples/dump-and-profile.yaml": 2,
    "examples/legacy.yaml": 2,
}


def shipped_yamls() -> set:
    found = set()
    for folder in ("cluster_configs", "examples"):
        for pattern in ("*.yaml", "*.yml"):
            found |= {
                str(p.relative_to(ROOT))
                for p in (ROOT / folder).rglob(pattern)
                if not p.name.endswith(".manifest.yaml")
            }  # Kubernetes manifests, not cluster YAMLs
    return found


def test_every_shipped_yaml_has_an_expected_world_size() -> None:
    assert shipped_yamls() == set(WORLD_SIZES)


@pytest.mark.parametrize("name, world_size", sorted(WORLD_SIZES.items()))
def test_shipped_yaml_plans(name: str, world_size: int) -> None:
    result = run_cli("plan", name, "--json")
    assert result.returncode == 0, result.stderr
    plan = full_plan(json.loads(result.stdout))
    assert plan["world_size"] == world_size == len(plan["ranks"])
    assert [r["rank"] for r in plan["ranks"]] == list(range(world_size))
    size = {"tensorflow": "RANK_SIZE", "pytorch": "WORLD_SIZE", "mindspore": "RANK_SIZE"}[plan["framework"]]
    assert {r["env"][size] for r in plan["ranks"]} == {str(world_size)}
    if plan["rank_table"] is not None:
        ranks = [d["rank_id"] for s in plan["rank_table"]["server_list"] for d in s["device"]]
        assert ranks == [str(i) for i in range(world_size)]


@pytest.mark.parametrize(
    "name, has_table",
    [
        ("cluster_configs/local-4.yaml", False),
        ("cluster_configs/server-8npu.yaml", True),
        ("cluster_configs/two-servers.yaml", True),
    ],
)
def test_shipped_yaml_rank_table_decision(name: str, has_table: bool) -> None:
    plan = full_plan(json.loads(run_cli("plan", name, "--json").stdout))
    assert (plan["rank_table"] is not None) == has_table
    assert all(("RANK_TABLE_FILE" in r["env"]) == has_table for r in plan["ranks"])


def test_check_local_4_passes() -> None:
    logs = ROOT / "npulaunch-logs"
    before = job_dirs(logs)
    result = run_cli("check", "cluster_configs/local-4.yaml")
    assert result.returncode == 0, result.stderr
    assert "ok: 4 ranks on 1 host; nothing was started" in result.stdout
    assert job_dirs(logs) == before


def test_plan_table_of_local_4() -> None:
    result = run_cli("plan", "cluster_configs/local-4.yaml")
    assert result.returncode == 0, result.stderr
    assert "(4 ranks on 1 host)" in result.stdout
    assert "command: python3 examples/tf_train.py --steps 300" in result.stdout


YAML_WITH_ENV = """\
version: 1
job:
  command: [python3, train.py]
  log_dir: LOG
hosts:
  - host: localhost
    devices: 2
env:
  MY_API_TOKEN: hunter2-secret-value
  NPLTEST_PLAIN_VAR: visible
  HCCL_CONNECT_TIMEOUT: 900
"""


@pytest.fixture
def env_plan(tmp_path: Path, log_dir: Path) -> dict:
    path = tmp_path / "with env.yaml"
    path.write_text(YAML_WITH_ENV.replace("LOG", json.dumps(str(log_dir))))
    result = run_cli("plan", str(path), "--json", env={"NPLTEST_INHERITED_PASSWORD": "inherited-secret"})
    assert result.returncode == 0, result.stderr
    assert job_dirs(log_dir) == []
    return {"plan": full_plan(json.loads(result.stdout)), "stdout": result.stdout}


def test_plan_json_redacts_secrets(env_plan: dict) -> None:
    for rank in env_plan["plan"]["ranks"]:
        assert rank["env"]["MY_API_TOKEN"] == "***"
        assert rank["env"]["NPLTEST_INHERITED_PASSWORD"] == "***"
        assert rank["env"]["NPLTEST_PLAIN_VAR"] == "visible"
    assert "hunter2-secret-value" not in env_plan["stdout"]
    assert "inherited-secret" not in env_plan["stdout"]


@pytest.mark.parametrize(
    "name, source, value",
    [
        ("NPLTEST_PLAIN_VAR", "yaml", "visible"),
        ("MY_API_TOKEN", "yaml", "***"),
        ("HCCL_CONNECT_TIMEOUT", "yaml", "900"),
        ("PYTHONUNBUFFERED", "default", "1"),
        ("RANK_ID", "launcher", None),
        ("DEVICE_ID", "launcher", None),
        ("NPLTEST_INHERITED_PASSWORD", "inherited", "***"),
    ],
)
def test_plan_json_env_sources(env_plan: dict, name: str, source: str, value: str) -> None:
    for rank in env_plan["plan"]["ranks"]:
        assert rank["env_sources"][name] == source
        assert rank["env"][name] == (value if value is not None else str(rank["rank"]))


def test_the_volcano_manifest_runs_npulaunch_in_node_mode() -> None:
    import yaml

    manifest = yaml.safe_load((ROOT / "cluster_configs" / "kubernetes" / "volcano-job.manifest.yaml").read_text())
    assert manifest["kind"] == "Job" and {"svc", "env"} <= set(manifest["spec"]["plugins"])
    container = manifest["spec"]["tasks"][0]["template"]["spec"]["containers"][0]
    assert container["command"][:5] == ["python3", "-m", "npulaunch", "run", "--scheduler"]
    assert {e["name"] for e in container["env"]} == {"VOLCANO_JOB_NAME", "RANK_TABLE_FILE"}


def test_plan_json_to_a_reader_that_stops_early_is_quiet(tmp_path: Path) -> None:
    import subprocess

    config = tmp_path / "big.yaml"  # about 2 MB of plan: far more than a pipe holds
    config.write_text(
        "job:\n  command: [python3, t.py]\nrank_table: none\nhosts:\n"
        + "".join(f"  - {{host: node{i}, devices: 8}}\n" for i in range(128))
    )
    proc = subprocess.Popen(
        npulaunch_argv("plan", "--json", str(config)),
        cwd=str(ROOT),
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        env=base_env(),
    )
    assert proc.stdout is not None
    proc.stdout.readline()
    proc.stdout.close()  # like `| head -1`
    err = proc.stderr.read().decode() if proc.stderr else ""
    assert proc.wait(timeout=30) == 141 and "Traceback" not in err


def test_plan_json_streams_one_line_per_rank_and_server() -> None:
    text = run_cli("plan", "--json", "cluster_configs/two-servers.yaml").stdout
    plan = json.loads(text)
    lines = text.splitlines()
    assert sum(line.startswith('    {"rank": ') for line in lines) == 16 == len(plan["ranks"])
    assert sum(line.startswith('    {"server_id": ') for line in lines) == 2
    assert plan["rank_table"]["server_list"][1]["device"][0]["rank_id"] == "8"
