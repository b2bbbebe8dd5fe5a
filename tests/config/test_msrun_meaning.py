"""msrun's command line with msrun's meaning (npulaunch/msrunflags.py): the flags are the installed
MindSpore's (its msrun parser is read), each maps where msrun's meaning says, and what cannot be read is
refused before anything starts, naming the flag."""

from __future__ import annotations

import importlib.util
import json
import subprocess
import sys
from pathlib import Path

import pytest
from helpers import require, run_cli

from npulaunch.msrunflags import FLAGS

OWN = {"master_addr", "master_port", "node_rank", "log_dir"}  # npulaunch's own flags of the same names


# in a process of its own: importing mindspore sets HCCL_CONNECT_TIMEOUT and LD_LIBRARY_PATH in the
# environment and raises the recursion limit to 10000, which other tests of this process would inherit
READ_PARSER = (
    "import json, sys; sys.argv = ['msrun', 'train.py']; from mindspore.parallel.cluster.run import get_args; "
    "print(json.dumps(sorted(vars(get_args()))))"
)


def test_the_flags_are_those_of_the_installed_msrun() -> None:
    require(importlib.util.find_spec("mindspore") is not None, "mindspore (pip install -e '.[mindspore]')")
    found = subprocess.run([sys.executable, "-c", READ_PARSER], capture_output=True, text=True, timeout=120)
    assert found.returncode == 0, found.stderr[-2000:]
    theirs = set(json.loads(found.stdout.strip().splitlines()[-1])) - {"task_script", "task_script_args"}
    assert theirs == {flag.dest for flag in FLAGS} | OWN


def plan_of(tmp_path: Path, *flags: str) -> dict:
    (tmp_path / "train.py").write_text("import mindspore\n")
    result = run_cli("plan", "--json", *flags, "train.py", cwd=tmp_path)
    assert result.returncode == 0, result.stderr
    return json.loads(result.stdout)


def env_of(plan: dict, rank: int) -> dict:
    spec = next(r for r in plan["ranks"] if r["rank"] == rank)
    return {**plan["env_bases"][spec["env_base"]]["env"], **spec["env"]}


def test_one_node_of_msrun_workers(tmp_path: Path) -> None:
    plan = plan_of(tmp_path, "--worker_num", "4", "--local_worker_num", "4", "--cluster_time_out", "120")
    assert plan["framework"] == "mindspore" and plan["world_size"] == 4
    env = env_of(plan, 0)
    assert (env["MS_WORKER_NUM"], env["MS_TOPO_TIMEOUT"], env["MS_ROLE"]) == ("4", "120", "MS_WORKER")
    assert plan["helpers"][0]["env"]["MS_ROLE"] == "MS_SCHED"  # node 0 starts the scheduler, as msrun does


def test_several_nodes_of_msrun_workers(tmp_path: Path) -> None:
    plan = plan_of(
        tmp_path,
        *("--worker_num", "8", "--local_worker_num", "4", "--node_rank", "1"),
        *("--master_addr", "10.0.0.1", "--master_port", "8118"),
        *("--job-id", "ms8"),  # msrun has no job id; every node's npulaunch must name the same one
    )
    assert plan["world_size"] == 8 and [r["rank"] for r in plan["ranks"] if r["host"] == "node-1"] == [4, 5, 6, 7]
    env = env_of(plan, 4)
    assert (env["MS_SCHED_HOST"], env["MS_SCHED_PORT"], env["MS_NODE_ID"]) == ("10.0.0.1", "8118", "4")


@pytest.mark.parametrize(
    "flags, said",
    [
        (["--worker_num", "6", "--local_worker_num", "4"], "--worker_num: found 6 with --local_worker_num 4"),
        (["--worker_num", "8", "--local_worker_num", "4"], "--node_rank: found none"),
        (["--local_worker_num", "x"], "--local_worker_num: found x; allowed: a whole number"),
        (["--bind_core", "{'0': [1]}"], "for CPU lists per NPU use --cpu-binding"),
        (["--sim_level", "1"], "--sim_level: found 1; allowed: not given: npulaunch runs a real cluster"),
        (["--sim_rank_id", "3"], "MS_SIMULATION_LEVEL=0..3, RANK_SIZE=N and RANK_ID=K"),
        (["--worker_num", "2", "--framework", "pytorch"], "--framework: found pytorch"),
    ],
)
def test_what_cannot_be_read_is_refused_naming_the_flag(tmp_path: Path, flags, said) -> None:
    (tmp_path / "train.py").write_text("import mindspore\n")
    result = run_cli("plan", *flags, "train.py", cwd=tmp_path)
    assert result.returncode == 2 and said in result.stderr, result.stderr
    assert "Traceback" not in result.stderr


def test_flags_with_no_use_are_named_in_the_plan(tmp_path: Path) -> None:
    (tmp_path / "train.py").write_text("import mindspore\n")
    flags = ["--worker_num", "2", "--local_worker_num", "2", "--join", "True", "--rank_table_file", "rt.json"]
    result = run_cli("plan", *flags, "train.py", cwd=tmp_path)
    assert result.returncode == 0, result.stderr
    said = result.stdout + result.stderr
    assert "msrun's --join True is accepted and has no use here" in said
    assert "msrun's --rank_table_file rt.json is accepted and has no use here" in said


@pytest.mark.parametrize("flag", ["--bind_core", "--bind_numa"])
def test_binding_flags_bind_each_worker_near_its_npu(tmp_path: Path, flag: str) -> None:
    plan = plan_of(tmp_path, "--worker_num", "2", "--local_worker_num", "2", flag, "True")
    assert plan["sources"]["job.cpu_binding"] == "cli"
    first, second = (set(r["cpus"] or ()) for r in plan["ranks"])  # no NPU topology here: blocks of the CPUs
    assert first and second and not first & second
    assert any(f"{flag} True: each worker is bound to the CPUs near its NPU" in note for note in plan["notes"])


def test_worker_log_name_is_accepted_with_no_use(tmp_path: Path) -> None:
    plan = plan_of(tmp_path, "--worker_num", "2", "--local_worker_num", "2", "--worker_log_name", "w_{ip}")
    assert any("msrun's --worker_log_name w_{ip} is accepted and has no use here" in n for n in plan["notes"])


def test_tail_worker_log_shows_only_those_workers(tmp_path: Path, marker: str) -> None:
    """msrun tails the chosen workers' logs to the console; npulaunch shows only their lines, and keeps every
    worker's in its log."""
    script = tmp_path / "hello.py"
    script.write_text("import os\nprint('hello from', os.environ.get('MS_ROLE'), os.environ.get('RANK_ID'))\n")
    result = run_cli(
        "run", "--worker_num", "2", "--local_worker_num", "2", "--tail_worker_log", "1", "--framework", "mindspore",
        "--log-dir", str(tmp_path / "logs"), "--job-id", "tail", "--no-live", str(script),
        env={"NPLTEST_MARKER": marker}, cwd=tmp_path,
    )  # fmt: skip
    assert result.returncode == 0, result.stderr
    assert "hello from MS_WORKER 1" in result.stdout and "hello from MS_WORKER 0" not in result.stdout
    assert "hello from MS_WORKER 0" in (tmp_path / "logs" / "tail" / "rank-0" / "stdout.log").read_text()
