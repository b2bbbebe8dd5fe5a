"""Shared fixtures: a log directory, a marker that proves no process of a test survives it, and the
SSH test hosts and Slurm cluster. Plain helpers (paths, run_cli, require, ...) are in helpers.py."""

from __future__ import annotations

import os
from pathlib import Path

import pytest
from helpers import diagnosis_disagreements, marked_pids, require, wait_until


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


@pytest.fixture(scope="session")
def slurm_nodes(tmp_path_factory):
    """A real Slurm cluster whose nodes n1-n3 are network-namespace hosts (their own address, hostname and
    network stack, tests/netns_hosts.py), one slurmd inside each: a node can die as a machine does, every
    process killed and its link down (``cluster.kill_node``). Clients as for slurm_cluster."""
    from netns_hosts import SLURM_NET, NetnsHosts
    from netns_hosts import available as netns_available
    from slurm_cluster import SlurmCluster, available

    missing = available() or netns_available()
    require(not missing, f"what the Slurm test cluster on network-namespace nodes needs: {missing}")
    root = tmp_path_factory.mktemp("slurm-nodes")
    hosts = NetnsHosts(root / "hosts", 3, SLURM_NET, name_prefix="n")
    cluster = None
    try:
        hosts.up()
        cluster = SlurmCluster(root / "cluster", netns=hosts)
        yield cluster.up()
    finally:
        if cluster is not None:
            cluster.down()
        hosts.down()


def pytest_sessionfinish(session: pytest.Session, exitstatus: int) -> None:
    """One diagnosis: over every job directory the suite's tests left (each failure kind the suite produces:
    exits, signals, exceptions, CANN codes, hangs, lost peers, NPU faults, restarts, ...), ``npulaunch diagnose``
    judging the job's records must name the root cause ``report`` names. A disagreement fails the run."""
    factory = getattr(session.config, "_tmp_path_factory", None)
    if factory is None or session.config.option.collectonly:
        return
    try:
        base = factory.getbasetemp()
    except (OSError, ValueError):
        return
    checked, disagreements = diagnosis_disagreements(Path(base))
    reporter = session.config.pluginmanager.get_plugin("terminalreporter")
    if reporter is not None and checked:
        if disagreements:
            reporter.write_line(
                f"one diagnosis: diagnose and report disagree on {len(disagreements)} of {checked} jobs:"
            )
        else:
            reporter.write_line(f"one diagnosis: diagnose names report's root cause in all {checked} job directories")
        for line in disagreements:
            reporter.write_line("  " + line, red=True)
    if disagreements:
        session.exitstatus = pytest.ExitCode.TESTS_FAILED
