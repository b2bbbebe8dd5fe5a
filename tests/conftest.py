"""Shared fixtures: run the real CLI in a subprocess, stand-ins for the NPU tools, and a check
that no process of a job survives it."""

from __future__ import annotations

import os
import subprocess
import sys
import time
from pathlib import Path
from typing import Dict, Iterable, List, Optional, Sequence

import psutil
import pytest

ROOT = Path(__file__).resolve().parent.parent
TESTS = ROOT / "tests"
RANKS = TESTS / "ranks"
STANDINS = TESTS / "standins"
IN_CI = os.environ.get("CI", "").lower() in ("1", "true", "yes")


def require(condition: bool, reason: str) -> None:
    """Skip on a developer machine without the prerequisite; fail under CI, where it must exist."""
    if not condition:
        if IN_CI:
            pytest.fail(f"CI must provide: {reason}")
        pytest.skip(reason)


def base_env(extra: Optional[Dict[str, str]] = None, standins: bool = False) -> Dict[str, str]:
    env = dict(os.environ)
    env["PYTHONPATH"] = str(ROOT) + os.pathsep + env.get("PYTHONPATH", "")
    # keep the NPU tools of the stand-in directory out unless a test asks for them
    env["PATH"] = os.pathsep.join(p for p in env.get("PATH", "").split(os.pathsep) if p != str(STANDINS))
    if standins:
        env["PATH"] = str(STANDINS) + os.pathsep + env["PATH"]
    env.update(extra or {})
    return env


def npulaunch_argv(*args: str) -> List[str]:
    return [sys.executable, "-m", "npulaunch", *args]


def run_cli(*args: str, env: Optional[Dict[str, str]] = None, cwd: Optional[Path] = None,
            timeout: float = 60, standins: bool = False) -> subprocess.CompletedProcess:
    """Run ``npulaunch ARGS`` to completion and capture its output."""
    return subprocess.run(npulaunch_argv(*args), cwd=str(cwd or ROOT), env=base_env(env, standins),
                          capture_output=True, text=True, timeout=timeout)


def rank_cmd(script: str, *args: str) -> List[str]:
    """``-- python3 tests/ranks/<script> args`` for the CLI."""
    return ["--", sys.executable, str(RANKS / script), *args]


def live_pids(pids: Iterable[int]) -> List[int]:
    """The given pids that still exist and are not zombies (this sandbox's init reaps late)."""
    alive = []
    for pid in pids:
        try:
            if psutil.Process(pid).status() != psutil.STATUS_ZOMBIE:
                alive.append(pid)
        except psutil.NoSuchProcess:
            pass
    return alive


def marked_pids(job_uuid_or_marker: str) -> List[int]:
    """Live processes whose environment or command line mentions a marker."""
    found = []
    for proc in psutil.process_iter(["pid", "cmdline", "environ", "status"]):
        try:
            if proc.info["status"] == psutil.STATUS_ZOMBIE:
                continue
            text = " ".join(proc.info["cmdline"] or []) + " ".join(
                f"{k}={v}" for k, v in (proc.info["environ"] or {}).items())
        except (psutil.NoSuchProcess, psutil.AccessDenied):
            continue
        if job_uuid_or_marker in text and proc.info["pid"] != os.getpid():
            found.append(proc.info["pid"])
    return found


def wait_until(predicate, timeout_s: float, interval_s: float = 0.05) -> bool:
    deadline = time.monotonic() + timeout_s
    while time.monotonic() < deadline:
        if predicate():
            return True
        time.sleep(interval_s)
    return predicate()


@pytest.fixture
def log_dir(tmp_path: Path) -> Path:
    path = tmp_path / "logs with space"
    return path


@pytest.fixture
def marker(request) -> str:
    """A unique word to put in a test's environment; afterwards no process may carry it."""
    word = f"npltest{os.getpid()}x{abs(hash(request.node.nodeid)) % 10**8}"
    yield word
    survivors = wait_until(lambda: not marked_pids(word), 5.0)
    leftover = marked_pids(word)
    for pid in leftover:
        try:
            os.kill(pid, 9)
        except OSError:
            pass
    assert survivors and not leftover, f"processes survived the test: {leftover}"


def host_plan(tmp_path: Path, marker: str, *rank_args: str, ranks: int = 2, grace: float = 1.0):
    """A HostPlan of ``ranks`` tests/ranks/rank.py ranks on this host, marked with ``marker``."""
    from npulaunch.host.spec import HostPlan, RankSpec

    specs = []
    for rank in range(ranks):
        rank_dir = tmp_path / f"rank-{rank}"
        specs.append(RankSpec(
            rank=rank, local_rank=rank, world_size=ranks, host="localhost", node_rank=0, device_id=rank,
            argv=(sys.executable, str(RANKS / "rank.py"), *rank_args), cwd=str(tmp_path),
            env={"RANK_ID": str(rank), "NPLTEST_MARKER": marker, "NPULAUNCH_JOB_UUID": marker},
            env_unset=(), env_sources={}, session_options={}, rank_dir=str(rank_dir),
            stdout_path=str(rank_dir / "stdout.log"), stderr_path=str(rank_dir / "stderr.log"),
            plog_dir=str(rank_dir / "ascend")))
    return HostPlan(job_id="t", job_uuid=marker, host="localhost", node_rank=0, job_dir=str(tmp_path),
                    grace_period_s=grace, ranks=tuple(specs))


def job_dirs(log_root: Path) -> Sequence[Path]:
    return sorted(p for p in log_root.iterdir() if p.is_dir()) if log_root.exists() else []


@pytest.fixture(scope="session")
def netns_hosts(tmp_path_factory):
    """Three SSH test hosts (h1-h3), each a network namespace with its own hostname and sshd."""
    from netns_hosts import NetnsHosts, available

    missing = available()
    require(not missing, f"what the SSH test hosts need: {missing}")
    hosts = NetnsHosts(tmp_path_factory.mktemp("netns") / "hosts", 3)
    try:
        yield hosts.up()
    finally:
        hosts.down()


@pytest.fixture(scope="session")
def slurm_cluster(tmp_path_factory):
    """A real Slurm cluster on this machine: munged, slurmctld and slurmd n1-n3 (8 CPUs each), partition
    npltest; run srun/sbatch/squeue with ``env=cluster.client_env()`` (or os.environ plus cluster.env())."""
    from slurm_cluster import SlurmCluster, available

    missing = available()
    require(not missing, f"what the Slurm test cluster needs: {missing}")
    cluster = SlurmCluster(tmp_path_factory.mktemp("slurm") / "cluster")
    try:
        yield cluster.up()
    finally:
        cluster.down()


# Open MPI 4.1 (Debian's openmpi-bin) on this one machine, as root, more ranks than cores, also from
# inside a Slurm job: without plm isolated + ras ^slurm, mpirun inside an srun step launches its daemons
# through Slurm and hangs. pml ob1 + btl self,vader,tcp skip probing UCX/OFI/openib (half the start-up
# time, and their warnings in containers); no single-copy (CMA needs ptrace rights some containers
# lack); TCP on loopback only. Open MPI refuses an MCA parameter given twice: override through ``mca``.
MPIRUN_MCA = {"plm": "isolated", "ras": "^slurm", "pml": "ob1", "btl": "self,vader,tcp",
              "btl_vader_single_copy_mechanism": "none", "btl_tcp_if_include": "lo", "oob_tcp_if_include": "lo"}


def mpirun_argv(n: int, mca: Optional[Dict[str, str]] = None) -> List[str]:
    """``mpirun ... -n N``: the argv prefix for N ranks of Open MPI on this machine (command follows)."""
    argv = ["mpirun", "--allow-run-as-root", "--oversubscribe", "--bind-to", "none"]
    for name, value in {**MPIRUN_MCA, **(mca or {})}.items():
        argv += ["--mca", name, value]
    return argv + ["-n", str(n)]

