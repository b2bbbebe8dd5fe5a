"""What runs on compute hosts (agent, spec, events) is standard library only and Python 3.7
compatible; the CLI stays light (no Fabric, TensorFlow or rich for --help and plan)."""

from __future__ import annotations

import glob
import json
import shutil
import subprocess
import sys
from pathlib import Path

import pytest
from conftest import ROOT, base_env, require

HOST_SIDE = ["npulaunch/__init__.py", "npulaunch/host"]
HEAVY = ("fabric", "paramiko", "invoke", "tensorflow", "rich")


def python37() -> str:
    found = shutil.which("python3.7")
    candidates = ([found] if found else []) + sorted(glob.glob("/root/.pyenv/versions/3.7*/bin/python3.7"))
    for candidate in candidates:
        if subprocess.run([candidate, "-c", "pass"], capture_output=True).returncode == 0:
            return candidate
    return ""


def test_host_side_code_needs_at_most_python_3_7() -> None:
    require(shutil.which("vermin") is not None, "vermin (pip install vermin)")
    result = subprocess.run(["vermin", "--target=3.7-", "--violations", "--no-tips", "--eval-annotations",
                             *HOST_SIDE], cwd=str(ROOT), capture_output=True, text=True)
    assert result.returncode == 0, result.stdout + result.stderr


def test_the_launcher_needs_at_most_python_3_9() -> None:
    require(shutil.which("vermin") is not None, "vermin (pip install vermin)")
    result = subprocess.run(["vermin", "--target=3.9-", "--violations", "--no-tips", "--eval-annotations",
                             "npulaunch"], cwd=str(ROOT), capture_output=True, text=True)
    assert result.returncode == 0, result.stdout + result.stderr


def test_host_side_code_imports_only_the_standard_library() -> None:
    # -S: no site-packages at all, so a stray `import yaml` or `import psutil` fails here
    code = (f"import sys; sys.path.insert(0, {str(ROOT)!r}); import npulaunch.host.agent.agent, "
            "npulaunch.host.agent.guard, npulaunch.host.session")
    result = subprocess.run([sys.executable, "-I", "-S", "-c", code], capture_output=True, text=True)
    assert result.returncode == 0, result.stderr


def test_the_agent_runs_ranks_on_python_3_7(tmp_path: Path) -> None:
    interpreter = python37()
    require(bool(interpreter), "a Python 3.7 interpreter (pyenv 3.7 on these machines)")
    driver = f"""
import json, sys
sys.path.insert(0, {str(ROOT)!r})
from npulaunch.host.agent.agent import Agent
from npulaunch.host.spec import HostPlan, RankSpec
ranks = []
for rank in range(2):
    d = {str(tmp_path)!r} + "/rank-%d" % rank
    ranks.append(RankSpec(rank=rank, local_rank=rank, world_size=2, host="localhost", node_rank=0,
        device_id=rank, argv=("/bin/sh", "-c", "echo hello from $RANK_ID; exit $RANK_ID"), cwd="/",
        env={{"RANK_ID": str(rank)}}, env_unset=(), env_sources={{}}, session_options={{}}, rank_dir=d,
        stdout_path=d + "/stdout.log", stderr_path=d + "/stderr.log", plog_dir=d + "/ascend"))
plan = HostPlan(job_id="py37", job_uuid="u37", host="localhost", node_rank=0, job_dir={str(tmp_path)!r},
                grace_period_s=1.0, ranks=tuple(ranks))
lines = []
outcome = Agent(plan, lambda e: None, lambda spec, stream, got: lines.extend(got)).run()
print(json.dumps({{"version": sys.version_info[:2], "codes": [r.exit_code for r in outcome.ranks],
                   "lines": sorted(lines)}}))
"""
    result = subprocess.run([interpreter, "-I", "-c", driver], capture_output=True, text=True, timeout=60)
    assert result.returncode == 0, result.stderr
    data = json.loads(result.stdout)
    assert data == {"version": [3, 7], "codes": [0, 1], "lines": ["hello from 0", "hello from 1"]}


@pytest.mark.parametrize("args", [["--help"], ["plan", "cluster_configs/two-servers.yaml"],
                                  ["plan", "cluster_configs/local-4.yaml", "--json"]])
def test_the_cli_does_not_import_heavy_modules(args) -> None:
    result = subprocess.run([sys.executable, "-X", "importtime", "-m", "npulaunch", *args], cwd=str(ROOT),
                            env=base_env(), capture_output=True, text=True)
    assert result.returncode == 0, result.stderr
    imported = {line.split("|")[-1].strip().split(".")[0] for line in result.stderr.splitlines() if "|" in line}
    assert imported, "no -X importtime output"
    assert not imported & set(HEAVY)


def test_the_rank_side_helpers_load_on_python_3_7(tmp_path: Path) -> None:
    interpreter = python37()
    require(bool(interpreter), "a Python 3.7 interpreter (pyenv 3.7 on these machines)")
    code = ("import os, sys; sys.path.insert(0, %r); from npulaunch import session; "
            "os.environ['NPULAUNCH_SESSION_OPTIONS'] = '{\"hcom_parallel\": true}'; print(session.options())"
            % str(ROOT))
    env = {"PYTHONPATH": str(ROOT / "npulaunch" / "host" / "inject"), "PATH": "/usr/bin:/bin"}
    result = subprocess.run([interpreter, "-c", code], capture_output=True, text=True, env=env, timeout=60)
    assert result.returncode == 0, result.stderr
    assert result.stdout.strip() == "{'hcom_parallel': True}"
