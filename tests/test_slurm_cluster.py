"""The test infrastructure itself: a real Slurm cluster (n1-n3 on this machine) and real Open MPI."""

from __future__ import annotations

import ctypes.util
import json
import shutil
import subprocess
import sys
import time
from pathlib import Path
from typing import List

from helpers import marked_pids, mpirun_argv, require, wait_until

PRINT_SLURM_ENV = (
    "import json, os; print(json.dumps({k: os.environ.get(k) for k in ('SLURM_PROCID', "
    "'SLURM_LOCALID', 'SLURM_NODEID', 'SLURMD_NODENAME', 'SLURM_JOB_NODELIST', "
    "'SLURM_TASKS_PER_NODE')}), flush=True)"
)


def run(argv, env, timeout: float = 30, **kwargs) -> subprocess.CompletedProcess:
    return subprocess.run(argv, env=env, capture_output=True, text=True, timeout=timeout, **kwargs)


def test_cluster_is_up_with_every_node_idle(slurm_cluster) -> None:
    assert slurm_cluster.node_names == ["n1", "n2", "n3"]
    assert slurm_cluster.node_states() == {"n1": "idle", "n2": "idle", "n3": "idle"}
    out = run(["sinfo", "-h", "-o", "%P %D %c"], slurm_cluster.client_env())
    assert out.stdout.split() == [f"{slurm_cluster.partition}*", "3", "8"], out
    assert slurm_cluster.startup_s < 15, f"cluster took {slurm_cluster.startup_s:.1f} s to come up"


def test_srun_three_nodes_two_tasks_each(slurm_cluster, tmp_path: Path) -> None:
    out = run(
        [
            "srun",
            "-p",
            slurm_cluster.partition,
            "-N",
            "3",
            "-n",
            "6",
            "--ntasks-per-node=2",
            sys.executable,
            "-c",
            PRINT_SLURM_ENV,
        ],
        slurm_cluster.client_env(),
        cwd=tmp_path,
    )
    assert out.returncode == 0, out
    tasks = [json.loads(line) for line in out.stdout.splitlines()]
    seen = sorted(
        (int(t["SLURM_PROCID"]), int(t["SLURM_LOCALID"]), int(t["SLURM_NODEID"]), t["SLURMD_NODENAME"]) for t in tasks
    )
    # default block distribution: tasks 0,1 on n1, 2,3 on n2, 4,5 on n3
    assert seen == [
        (0, 0, 0, "n1"),
        (1, 1, 0, "n1"),
        (2, 0, 1, "n2"),
        (3, 1, 1, "n2"),
        (4, 0, 2, "n3"),
        (5, 1, 2, "n3"),
    ], out.stdout
    assert {t["SLURM_JOB_NODELIST"] for t in tasks} == {slurm_cluster.nodelist} == {"n[1-3]"}
    assert {t["SLURM_TASKS_PER_NODE"] for t in tasks} == {"2(x3)"}


def test_sbatch_wait_returns_the_job_exit_code(slurm_cluster, tmp_path: Path) -> None:
    result = tmp_path / "result.txt"
    good = tmp_path / "good.sh"
    good.write_text(f'#!/bin/sh\necho "hello $SLURM_JOB_ID from $SLURMD_NODENAME" > {result}\necho to-stdout\n')
    bad = tmp_path / "bad.sh"
    bad.write_text("#!/bin/sh\necho failing\nexit 3\n")
    env = slurm_cluster.client_env()
    started = time.monotonic()
    # both at once: sbatch --wait polls every 2 s
    procs = [
        subprocess.Popen(
            ["sbatch", "--wait", "-N", "1", str(script)],
            env=env,
            cwd=tmp_path,
            stdout=subprocess.PIPE,
            stderr=subprocess.PIPE,
            text=True,
        )
        for script in (good, bad)
    ]
    (good_out, good_err), (bad_out, bad_err) = (p.communicate(timeout=30) for p in procs)
    took = time.monotonic() - started
    assert procs[0].returncode == 0, (good_out, good_err)
    assert procs[1].returncode == 3, (bad_out, bad_err)
    job_id = good_out.split()[-1]
    assert good_out.startswith("Submitted batch job ") and job_id.isdigit(), good_out
    assert result.read_text() == f"hello {job_id} from n1\n"
    # Slurm's own output file lands under the cluster's root, not in the submit directory
    assert (slurm_cluster.job_dir / f"slurm-{job_id}.out").read_text() == "to-stdout\n"
    assert not list(tmp_path.glob("slurm-*.out"))
    assert took < 15, f"sbatch --wait took {took:.1f} s"


def test_kill_on_bad_exit_stops_every_task(slurm_cluster, tmp_path: Path, marker: str) -> None:
    """Task 1 exits 1 once the others sleep; srun must end the step at once and leave no sleeper."""
    program = f"""\
import os, sys, time
marker = {marker!r}
rank = int(os.environ["SLURM_PROCID"])
if rank == 1:
    deadline = time.monotonic() + 15
    while not all(os.path.exists(f"started-{{r}}") for r in (0, 2, 3)) and time.monotonic() < deadline:
        time.sleep(0.05)
    sys.exit(1)
open(f"started-{{rank}}", "w").close()
time.sleep(60)
"""
    started = time.monotonic()
    out = run(
        ["srun", "-N", "3", "-n", "4", "--kill-on-bad-exit=1", sys.executable, "-c", program],
        slurm_cluster.client_env(),
        cwd=tmp_path,
        timeout=40,
    )
    took = time.monotonic() - started
    assert out.returncode != 0, out
    assert sorted(p.name for p in tmp_path.glob("started-*")) == ["started-0", "started-2", "started-3"]
    assert took < 10, f"srun took {took:.1f} s to end the step after the bad exit: {out}"
    assert wait_until(lambda: not marked_pids(marker), 5), f"tasks survived: {marked_pids(marker)}"


def rank_results(directory: Path) -> List[str]:
    return sorted(p.read_text() for p in directory.glob("out-*"))


# Each rank writes its own file: mpirun gives every rank a pty for stdout and forwards what it reads, so
# lines of different ranks can interleave in the middle ("1 5 103 5 10") in mpirun's stdout.
def test_mpirun_two_ranks(tmp_path: Path) -> None:
    require(shutil.which("mpirun") is not None, "mpirun (openmpi-bin)")
    program = (
        "import json, os; open(f'out-{os.getpid()}', 'w').write(json.dumps({k: os.environ.get(k) for k in ("
        "'OMPI_COMM_WORLD_RANK', 'OMPI_COMM_WORLD_SIZE', 'OMPI_COMM_WORLD_LOCAL_RANK', 'PMIX_NAMESPACE')}))"
    )
    out = run([*mpirun_argv(2), sys.executable, "-c", program], None, cwd=tmp_path)
    assert out.returncode == 0, out
    ranks = [json.loads(text) for text in rank_results(tmp_path)]
    assert sorted(r["OMPI_COMM_WORLD_RANK"] for r in ranks) == ["0", "1"], ranks
    assert {r["OMPI_COMM_WORLD_SIZE"] for r in ranks} == {"2"}
    assert sorted(r["OMPI_COMM_WORLD_LOCAL_RANK"] for r in ranks) == ["0", "1"]
    assert len({r["PMIX_NAMESPACE"] for r in ranks}) == 1  # one job (None for both where PMIx is absent)


MPI_ALLREDUCE = """\
import ctypes, ctypes.util, os
mpi = ctypes.CDLL(ctypes.util.find_library("mpi"), mode=ctypes.RTLD_GLOBAL)
handle = lambda name: ctypes.byref(ctypes.c_void_p.in_dll(mpi, name))  # MPI_COMM_WORLD is &ompi_mpi_comm_world
assert mpi.MPI_Init(None, None) == 0
world = handle("ompi_mpi_comm_world")
rank, size, total = ctypes.c_int(), ctypes.c_int(), ctypes.c_int()
mpi.MPI_Comm_rank(world, ctypes.byref(rank))
mpi.MPI_Comm_size(world, ctypes.byref(size))
mpi.MPI_Allreduce(ctypes.byref(rank), ctypes.byref(total), 1, handle("ompi_mpi_int"), handle("ompi_mpi_op_sum"), world)
open(f"out-{os.getpid()}", "w").write(f"{rank.value} {size.value} {total.value}")
mpi.MPI_Finalize()
"""


def test_real_mpi_inside_a_slurm_step_with_more_ranks_than_cores(slurm_cluster, tmp_path: Path) -> None:
    """mpirun_argv also works inside a Slurm job (where plain mpirun would launch through Slurm and hang)."""
    require(bool(ctypes.util.find_library("mpi")), "libmpi (libopenmpi3, from openmpi-bin)")
    out = run(
        ["srun", "-N", "1", "-n", "1", *mpirun_argv(5), sys.executable, "-c", MPI_ALLREDUCE],
        slurm_cluster.client_env(),
        cwd=tmp_path,
    )
    assert out.returncode == 0, out
    assert rank_results(tmp_path) == [f"{r} 5 10" for r in range(5)], out
