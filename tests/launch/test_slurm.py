"""npulaunch as a scheduler job's entrypoint, on a real Slurm cluster (n1-n3 here) and real Open MPI: node
mode, rank mode (npulaunch exec per task), a failing rank ending the job, a batch script under sbatch
--wait; Volcano and MindX through their environment."""

from __future__ import annotations

import json
import shutil
import subprocess
import sys
import threading
import time
from pathlib import Path
from typing import Dict

from helpers import (
    RANKS,
    ROOT,
    base_env,
    marked_pids,
    mpirun_argv,
    npulaunch_argv,
    require,
    run_cli,
)

NPULAUNCH = [sys.executable, "-m", "npulaunch"]


def write_job(tmp_path: Path, marker: str, *rank_args: str, devices: str = "2", extra: str = "") -> Path:
    """One hosts entry that every node follows; the marker reaches the ranks through the YAML env."""
    args = ", ".join(json.dumps(a) for a in rank_args)
    config = tmp_path / "job.yaml"
    config.write_text(f"""job:
  name: sched
  command: [{sys.executable}, {RANKS / "rank.py"}, {args}]
  log_dir: {tmp_path / "logs"}
  grace_period_s: 1
hosts:
  - {{host: any-node, devices: {devices}}}
env:
  NPLTEST_MARKER: {marker}
{extra}""")
    return config


def slurm_env(cluster, marker: str, standins: bool = True) -> Dict[str, str]:
    """srun's environment: the cluster's, npulaunch importable, the NPU tool stand-ins on the PATH."""
    return cluster.client_env(base_env({"NPLTEST_MARKER": marker}, standins=standins))


def srun(cluster, marker: str, *argv: str, timeout: float = 90) -> subprocess.CompletedProcess:
    return subprocess.run(
        ["srun", "--kill-on-bad-exit=1", *argv],
        env=slurm_env(cluster, marker),
        cwd=str(ROOT),
        capture_output=True,
        text=True,
        timeout=timeout,
    )


def rank_envs(job: Path) -> Dict[int, Dict[str, str]]:
    """What every rank printed with its ``env`` action, from the rank logs in every node directory."""
    found = {}
    for log in job.glob("node-*/rank-*/stdout.log"):
        line = next(x for x in log.read_text().splitlines() if x.startswith("{"))
        env = json.loads(line)
        found[int(env["RANK_ID"])] = env
    return found


def test_node_mode_on_three_slurm_nodes(slurm_cluster, tmp_path: Path, marker: str) -> None:
    config = write_job(tmp_path, marker, "*=env")
    result = srun(slurm_cluster, marker, "-N", "3", "--ntasks-per-node=1", *NPULAUNCH, "run", str(config))
    assert result.returncode == 0, result.stdout + result.stderr
    jobs = list((tmp_path / "logs").iterdir())
    assert len(jobs) == 1 and jobs[0].name.isdigit()  # JOB_ID is SLURM_JOB_ID: every node agreed
    job = jobs[0]
    envs = rank_envs(job)
    assert sorted(envs) == list(range(6))
    for rank, env in envs.items():
        assert (env["RANK_SIZE"], env["DEVICE_ID"], env["JOB_ID"]) == ("6", str(rank % 2), job.name)
        assert env["NPULAUNCH_HOST"] == f"n{rank // 2 + 1}" and env["NPULAUNCH_NODE_RANK"] == str(rank // 2)
        assert env["RANK_TABLE_FILE"] == str(job / "rank_table.json")
    table = json.loads((job / "rank_table.json").read_text())
    assert [
        (s["server_id"], [(d["device_id"], d["device_ip"], d["rank_id"]) for d in s["device"]])
        for s in table["server_list"]
    ] == [
        ("n1", [("0", "192.168.100.117", "0"), ("1", "192.168.101.117", "1")]),
        ("n2", [("0", "192.168.100.133", "2"), ("1", "192.168.101.133", "3")]),
        ("n3", [("0", "192.168.100.149", "4"), ("1", "192.168.101.149", "5")]),
    ]
    plans = [json.loads((job / f"node-{n}" / "plan.json").read_text()) for n in range(3)]
    assert plans[0]["rank_table"] == plans[1]["rank_table"] == plans[2]["rank_table"] == table
    assert plans[2]["sources"]["hosts[0].device_ips"].startswith("hccn_tool on n1, exchanged in")
    for node in range(3):  # each node's own report
        summary = json.loads((job / f"node-{node}" / "summary.json").read_text())
        assert [r["rank"] for r in summary["ranks"]] == [2 * node, 2 * node + 1]


def test_a_failing_rank_ends_the_slurm_job_and_leaves_nothing(slurm_cluster, tmp_path: Path, marker: str) -> None:
    config = write_job(tmp_path, marker, "3=exit:5@1", "*=hang", extra="rank_table: none\n")
    started = time.monotonic()
    result = srun(slurm_cluster, marker, "-N", "3", "--ntasks-per-node=1", *NPULAUNCH, "run", str(config))
    took = time.monotonic() - started
    assert result.returncode != 0
    assert "root cause: rank 3 exited with code 5" in result.stderr
    assert took < 1 + 1 + 10, took  # the failure, the grace, srun's teardown
    assert not marked_pids(marker)


def test_rank_mode_under_srun_execs_each_rank(slurm_cluster, tmp_path: Path, marker: str) -> None:
    config = write_job(tmp_path, marker, "*=env", devices="[0, 1, 2, 3]")
    result = srun(slurm_cluster, marker, "-N", "2", "--ntasks-per-node=2", *NPULAUNCH, "exec", str(config))
    assert result.returncode == 0, result.stderr
    job = next((tmp_path / "logs").iterdir())
    # each rank keeps its environment as env.json in its directory (srun interleaves long stdout lines of
    # several tasks, so the printed copies are not read back)
    envs = {int(e["RANK_ID"]): e for e in (json.loads(p.read_text()) for p in job.rglob("env.json"))}
    assert sorted(envs) == [0, 1, 2, 3]
    for rank, env in envs.items():
        assert (env["RANK_SIZE"], env["DEVICE_ID"], env["NPULAUNCH_HOST"]) == ("4", str(rank % 2), f"n{rank // 2 + 1}")
        assert env["SLURM_PROCID"] == str(rank)  # the rank is the Slurm task itself: exec, nothing between
    table = json.loads((job / "rank_table.json").read_text())
    assert [s["server_id"] for s in table["server_list"]] == ["n1", "n2"]
    assert not list(job.glob("rank_table.json.*"))  # written once, whole


def test_rank_mode_leaves_no_process_between_slurm_and_the_rank(slurm_cluster, tmp_path: Path, marker: str) -> None:
    config = write_job(tmp_path, marker, "*=parent")
    result = srun(slurm_cluster, marker, "-N", "1", "-n", "2", *NPULAUNCH, "exec", str(config))
    assert result.returncode == 0, result.stderr
    parents = [line.split()[-1] for line in result.stdout.splitlines() if line.startswith("parent ")]
    assert parents == ["slurmstepd", "slurmstepd"]


def test_a_rendered_node_mode_batch_script_runs_under_sbatch_wait(slurm_cluster, tmp_path: Path, marker: str) -> None:
    config = write_job(tmp_path, marker, "*=env", extra=f"slurm: {{nodes: 2, partition: {slurm_cluster.partition}}}\n")
    rendered = run_cli("sbatch", str(config), "--mode", "node")
    assert rendered.returncode == 0, rendered.stderr
    assert "#SBATCH --nodes=2" in rendered.stdout and "srun --kill-on-bad-exit=1" in rendered.stdout
    script = tmp_path / "job.sbatch"
    script.write_text(rendered.stdout)
    done = subprocess.run(
        ["sbatch", "--wait", str(script)],
        env=slurm_env(slurm_cluster, marker),
        cwd=str(tmp_path),
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert done.returncode == 0, done.stdout + done.stderr
    job = next(p for p in (tmp_path / "logs").iterdir() if p.is_dir())
    assert sorted(rank_envs(job)) == [0, 1, 2, 3]


def test_mpirun_rank_mode_and_node_mode(tmp_path: Path, marker: str) -> None:
    require(shutil.which("mpirun") is not None, "mpirun (openmpi-bin)")
    config = write_job(tmp_path, marker, "*=env", devices="[0, 1]")
    env = base_env({"NPLTEST_MARKER": marker}, standins=True)
    ranks = subprocess.run(
        mpirun_argv(2) + npulaunch_argv("exec", str(config), "--job-id", "mpi-ranks"),
        env=env,
        cwd=str(ROOT),
        capture_output=True,
        text=True,
        timeout=90,
    )
    assert ranks.returncode == 0, ranks.stdout + ranks.stderr
    envs = rank_envs_from_dirs(tmp_path / "logs" / "mpi-ranks")
    assert sorted(envs) == [0, 1] and {e["RANK_SIZE"] for e in envs.values()} == {"2"}
    assert {e["OMPI_COMM_WORLD_RANK"] for e in envs.values()} == {"0", "1"}
    node = subprocess.run(
        mpirun_argv(1) + npulaunch_argv("run", str(config)),
        env=env,
        cwd=str(ROOT),
        capture_output=True,
        text=True,
        timeout=90,
    )
    assert node.returncode == 0, node.stdout + node.stderr
    job = next(p for p in (tmp_path / "logs").iterdir() if p.name != "mpi-ranks")
    assert sorted(rank_envs(job)) == [0, 1]  # node mode: this node's npulaunch started both ranks


def rank_envs_from_dirs(job: Path) -> Dict[int, Dict[str, str]]:
    """Rank mode: the ranks' stdout is the scheduler's; they also write env.json (rank.py's env action)."""
    found = {}
    for path in job.glob("node-*/rank-*/env.json"):
        env = json.loads(path.read_text())
        found[int(env["RANK_ID"])] = env
    return found


def volcano_env(marker: str, index: int, extra: Dict[str, str]) -> Dict[str, str]:
    env = base_env(
        {
            "NPLTEST_MARKER": marker,
            "VC_TASK_INDEX": str(index),
            "VC_WORKER_HOSTS": "w0,w1",
            "VOLCANO_JOB_NAME": "vcjob",
            **extra,
        },
        standins=True,
    )
    for name in [n for n in env if n.startswith(("SLURM_", "OMPI_", "PMI_", "PMIX_"))]:
        del env[name]
    return env


def test_volcano_nodes_each_start_their_own_ranks(tmp_path: Path, marker: str) -> None:
    config = write_job(tmp_path, marker, "*=env", extra="rank_table: none\n")
    procs = [
        subprocess.Popen(
            npulaunch_argv("run", str(config)),
            env=volcano_env(marker, i, {}),
            cwd=str(ROOT),
            stdout=subprocess.PIPE,
            stderr=subprocess.PIPE,
            text=True,
        )
        for i in (0, 1)
    ]
    for proc in procs:
        out, err = proc.communicate(timeout=60)
        assert proc.returncode == 0, out + err
    envs = rank_envs(tmp_path / "logs" / "vcjob")
    assert {r: e["NPULAUNCH_HOST"] for r, e in envs.items()} == {0: "w0", 1: "w0", 2: "w1", 3: "w1"}


def test_mindx_rank_table_is_awaited_then_used(tmp_path: Path, marker: str) -> None:
    config = write_job(tmp_path, marker, "*=env")
    mounted = tmp_path / "hccl.json"
    servers = [
        {
            "server_id": f"10.1.0.{n}",
            "device": [
                {"device_id": str(d), "device_ip": f"192.168.{100 + d}.{n}", "rank_id": str(2 * n + d)} for d in (0, 1)
            ],
        }
        for n in (0, 1)
    ]
    mounted.write_text(json.dumps({"status": "initializing", "server_list": []}))

    def complete_later() -> None:
        time.sleep(1.5)
        mounted.write_text(
            json.dumps({"version": "1.0", "server_count": "2", "server_list": servers, "status": "completed"})
        )

    writer = threading.Thread(target=complete_later)
    writer.start()
    started = time.monotonic()
    result = subprocess.run(
        npulaunch_argv("run", str(config)),
        env=volcano_env(marker, 1, {"RANK_TABLE_FILE": str(mounted)}),
        cwd=str(ROOT),
        capture_output=True,
        text=True,
        timeout=60,
    )
    writer.join()
    assert result.returncode == 0, result.stdout + result.stderr
    assert time.monotonic() - started >= 1.5  # it waited for "completed"
    job = tmp_path / "logs" / "vcjob"
    envs = rank_envs(job)
    assert sorted(envs) == [2, 3] and {e["NPULAUNCH_HOST"] for e in envs.values()} == {"10.1.0.1"}
    table = json.loads((job / "rank_table.json").read_text())
    assert table["server_list"] == servers


def test_mindx_rank_table_that_never_completes_is_a_clear_error(tmp_path: Path, marker: str) -> None:
    config = write_job(tmp_path, marker, "*=env")
    mounted = tmp_path / "hccl.json"
    mounted.write_text(json.dumps({"status": "initializing"}))
    result = subprocess.run(
        npulaunch_argv("run", str(config)),
        env=volcano_env(marker, 0, {"RANK_TABLE_FILE": str(mounted), "NPULAUNCH_RANK_TABLE_WAIT_S": "1"}),
        cwd=str(ROOT),
        capture_output=True,
        text=True,
        timeout=60,
    )
    assert result.returncode == 2
    assert str(mounted) in result.stderr and "initializing" in result.stderr and "Traceback" not in result.stderr
    assert not (tmp_path / "logs").exists()


def test_npulaunch_run_in_a_batch_script_holds_the_allocation_and_says_when_no_node_can_be_reached(
    tmp_path: Path, marker: str
) -> None:
    # the batch script's environment with no Slurm to reach: the one npulaunch (steps mode) tries each node's
    # job step, and says what srun said for each; nothing starts
    config = write_job(tmp_path, marker, "*=env")
    env = base_env(
        {
            "SLURM_JOB_ID": "77",
            "SLURM_JOB_NODELIST": "n[1-2]",
            "SLURM_NNODES": "2",
            "SLURM_NODEID": "0",
            "SLURM_TASKS_PER_NODE": "1(x2)",
        }
    )
    env.pop("SLURM_STEP_ID", None)
    result = subprocess.run(
        npulaunch_argv("run", str(config)), env=env, cwd=str(ROOT), capture_output=True, text=True, timeout=30
    )
    assert result.returncode == 2 and "Traceback" not in result.stderr, result.stderr
    assert "cannot start the job; nothing was started" in result.stderr
    assert "n1: " in result.stderr and "n2: " in result.stderr
    assert not list((tmp_path / "logs").glob("*/rank-*"))


def test_sbatch_submit_submits_the_rendered_script(slurm_cluster, tmp_path: Path, marker: str) -> None:
    config = write_job(tmp_path, marker, "*=env", extra="slurm: {nodes: 1}\n")
    result = subprocess.run(
        npulaunch_argv("sbatch", str(config), "--submit", "--job-id", "submitted"),
        env=slurm_env(slurm_cluster, marker),
        cwd=str(tmp_path),
        capture_output=True,
        text=True,
        timeout=60,
    )
    assert result.returncode == 0 and result.stdout.startswith("Submitted batch job "), result.stdout + result.stderr
    job = tmp_path / "logs" / "submitted"
    deadline = time.monotonic() + 60
    while time.monotonic() < deadline and not (job / "node-0" / "summary.json").exists():
        time.sleep(0.2)
    summary = json.loads((job / "node-0" / "summary.json").read_text())
    assert summary["job"]["status"] == "succeeded" and len(summary["ranks"]) == 2
