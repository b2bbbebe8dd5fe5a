"""Shared fixtures: a log directory, a marker that proves no process of a test survives it, and the
SSH test hosts and Slurm cluster. Plain helpers (paths, run_cli, require, ...) are in helpers.py."""

from __future__ import annotations

import os
import signal
import sys
from pathlib import Path
from typing import IO, Optional

import pytest
from helpers import ROOT, diagnosis_disagreements, marked_pids, require, wait_until

# what launcher code run inside the test process may change and must give back when it returns (the signal
# inbox's handlers and wakeup fd, --nohup's SIGHUP, the agent's subreaper setting): a leak here is what
# left Ctrl-C caught and ignored for the rest of a run, and zombies collecting in the pytest process
PROCESS_SIGNALS = (signal.SIGINT, signal.SIGTERM, signal.SIGHUP, signal.SIGCHLD, signal.SIGUSR1, signal.SIGUSR2)


@pytest.fixture(autouse=True)
def process_settings_given_back():
    """Every test leaves this process's signal handlers, signal wakeup fd and subreaper setting as it found
    them; one that does not fails (and they are put back, so the next tests and Ctrl-C are not affected)."""
    from npulaunch.host import procs

    handlers = {signum: signal.getsignal(signum) for signum in PROCESS_SIGNALS}
    subreaper = procs.is_subreaper()
    wakeup_fd = signal.set_wakeup_fd(-1)
    signal.set_wakeup_fd(wakeup_fd)
    yield
    changed = [signal.Signals(n).name for n, h in handlers.items() if signal.getsignal(n) != h]
    for signum, handler in handlers.items():
        signal.signal(signum, handler if handler is not None else signal.SIG_DFL)
    left_fd = signal.set_wakeup_fd(wakeup_fd)
    if procs.is_subreaper() != subreaper:
        changed.append("the child subreaper setting")
        if not subreaper:
            procs.stop_being_subreaper()
    if left_fd != wakeup_fd:
        changed.append(f"the signal wakeup fd ({left_fd})")
    assert not changed, f"the test left this process changed: {', '.join(changed)}"


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


# The expensive fixtures: every test that uses one runs on the same pytest-xdist worker (--dist loadgroup in
# pyproject.toml), which sets it up once. Their names, subnets and ports are per worker anyway (netns_hosts.slot);
# the SSH test hosts and the mpirun hosts (a subnet of their own) share one worker.
FIXTURE_GROUPS = {"slurm_cluster": "slurm", "slurm_nodes": "slurm", "netns_hosts": "netns", "mpi_hosts": "netns"}
ALONE_GROUP = "alone"  # the tests marked alone, one after the other on one worker (MachineShare, below)
# The CPU-heavy modules (real TensorFlow, torch and MindSpore jobs of several ranks, the benchmarks' smoke run) in
# lanes, one test at a time in each: a few heavy jobs at once, not a dozen (a load of 15 starved ranks into false
# verdicts). The lanes hold about the same time (measured: docs/contributing.md).
HEAVY_LANES = {  # each lane's modules in the order they run, the long ones early (walls: docs/contributing.md)
    "heavy-a": (
        "host/test_tf.py",
        "launch/test_recovery.py",
        "launch/test_msrun_form.py",
        "launch/test_torch_errorfile.py",
    ),
    "heavy-b": (
        "launch/test_recovery_torch.py",
        "diagnose/test_hang.py",
        "launch/test_torchrun_rendezvous.py",
        "launch/test_torchrun_elastic.py",
        "launch/test_torch.py",
        "launch/test_mindspore.py",
        "launch/test_torchrun_restarts.py",
        "launch/test_torchrun_flags.py",
    ),
    "bench": ("test_bench.py",),  # the benchmarks' smoke run: one test of 100 s alone, 280 s beside the others
    # two ranks of DDP that all-reduce every few ms: little CPU, but minutes beside a heavy lane's job
    "pace": ("host/test_pace.py",),
}
FILE_GROUPS = {module: lane for lane, modules in HEAVY_LANES.items() for module in modules}
# The groups' tests right after the alone ones, in this order: each group is a chain of tests on one worker, and
# there are no more groups than workers (7 here, the alone one among them), so every chain starts on a worker of
# its own once the alone tests end (the Slurm chain, queued behind another on the alone tests' worker, started
# 470 s in and ended the run 190 s after the rest)
GROUPS_FIRST = ("slurm", "netns", *HEAVY_LANES)
# What makes a test slow (`pytest -m "not slow"` leaves it out): real ranks (the marker fixture proves none
# survives), test hosts, a cluster, or a real framework's import in every rank.
SLOW_FIXTURES = {"marker", *FIXTURE_GROUPS}
# ungrouped tests of 30 s or more beside the others, first among the slow ones (mypy's run without its cache, 45 s,
# came last and ended the run)
LONG_FIRST = ("test_typing.py", "test_compat.py", "host/test_checkpoint.py")
# and the modules whose tests each take half a second of CPU or more without a marker (measured: docs/contributing.md)
SLOW_FILES = {
    *FILE_GROUPS,
    "test_suite_interrupt.py",
    "test_typing.py",  # mypy over the package
    "test_compat.py",  # vermin, Python 3.7
    "host/test_checkpoint.py",  # TensorFlow writes the checkpoints
    "host/test_torch_checkpoint.py",  # torch, in the test
    "host/test_errorfile.py",
    "host/test_tcpstore.py",  # gloo ranks
    "config/test_torchrun_meaning.py",  # the installed torchrun's parser
    "config/test_msrun_meaning.py",  # the installed msrun's
    "host/test_health_watch.py",  # rounds of the NPU tools' stand-ins
    "launch/test_check_health.py",
    "launch/test_fault_history.py",  # jobs one after the other
    "views/test_html_report.py",  # chromium
    "views/test_console_lines.py",  # a terminal's live view
}


def pytest_xdist_auto_num_workers(config: pytest.Config) -> int:
    """``-n auto``: three workers a core and one, at least 4 (most tests wait on ranks, daemons and timeouts, not
    the CPU; the heavy lanes, Slurm and the SSH hosts hold one each); NPULAUNCH_TEST_WORKERS sets it."""
    return int(os.environ.get("NPULAUNCH_TEST_WORKERS") or max(4, 3 * (os.cpu_count() or 1) + 1))


def where(item: pytest.Item) -> str:
    """The test's module, relative to tests/."""
    return Path(str(item.fspath)).relative_to(Path(__file__).parent).as_posix()


def group_rank(item: pytest.Item) -> int:
    """The place of the test's group in GROUPS_FIRST (after them: not in a group)."""
    groups = [m.args[0] for m in item.iter_markers("xdist_group") if m.args]
    return min((GROUPS_FIRST.index(g) for g in groups if g in GROUPS_FIRST), default=len(GROUPS_FIRST))


@pytest.hookimpl(tryfirst=True)  # before pytest-xdist turns the groups into its nodeid suffixes
def pytest_collection_modifyitems(config: pytest.Config, items: list) -> None:
    """Groups and the slow marker (above); the alone tests first (MachineShare), then the groups', then the other slow
    ones (the workers take the long ones before the many short ones, so the run does not end waiting on one long test
    started last), each lane in its order."""
    for item in items:
        module = where(item)
        group = next((g for f, g in FIXTURE_GROUPS.items() if f in item.fixturenames), None) or FILE_GROUPS.get(module)
        if item.get_closest_marker("alone") is not None:
            group = ALONE_GROUP
        if group is not None and item.get_closest_marker("xdist_group") is None:
            item.add_marker(pytest.mark.xdist_group(group))
        if group is not None or module in SLOW_FILES or SLOW_FIXTURES & set(item.fixturenames):  # alone: slow too
            item.add_marker(pytest.mark.slow)
    order = {module: index for modules in HEAVY_LANES.values() for index, module in enumerate(modules)}
    items.sort(
        key=lambda item: (
            item.get_closest_marker("alone") is None,
            group_rank(item),
            item.get_closest_marker("slow") is None,
            where(item) not in LONG_FIRST,
            order.get(where(item), len(order)),
        )
    )


class MachineShare:
    """The tests marked ``alone`` run first, with nothing beside them (their verdict depends on the machine's time: a
    straggler named or not, heartbeats, torchrun's own elastic timing); every other test waits for the last of them
    to end. They are one group, ordered first (pytest_collection_modifyitems, and --no-loadscope-reorder), so they
    are the first work of the worker that runs them. That worker holds a lock on a file in the run's directory
    while it runs them and marks their end; the others wait until the mark is there, or until the lock is free once
    they began (a worker that died lets go of it), or STARTED_WITHIN_S passes with no sign of them."""

    STARTED_WITHIN_S = 300.0

    def __init__(self) -> None:
        self.pending = False  # alone tests were collected and have not ended
        self.held: Optional[IO[str]] = None  # the lock, while this worker runs them

    def pytest_collection_finish(self, session: pytest.Session) -> None:
        self.pending = any(item.get_closest_marker("alone") is not None for item in session.items)

    @pytest.hookimpl(hookwrapper=True)
    def pytest_runtest_protocol(self, item: pytest.Item, nextitem: Optional[pytest.Item]):
        alone = item.get_closest_marker("alone") is not None
        root = item.config._tmp_path_factory.getbasetemp().parent  # type: ignore[attr-defined]  # the controller's
        if alone and self.held is None:
            self._begin(root)
        elif not alone and self.pending:
            self._wait(root)
        try:
            yield
        finally:
            if self.held is not None and not (nextitem is not None and nextitem.get_closest_marker("alone")):
                (root / "alone.done").touch()
                self.held.close()  # the lock goes with it
                self.held = None
                self.pending = False

    def _begin(self, root: Path) -> None:
        import fcntl

        self.held = open(root / "alone.lock", "a")
        fcntl.flock(self.held, fcntl.LOCK_EX)
        (root / "alone.started").touch()

    def _wait(self, root: Path) -> None:
        import fcntl
        import time

        deadline = time.monotonic() + self.STARTED_WITHIN_S
        while not (root / "alone.done").exists():
            if (root / "alone.started").exists():
                with open(root / "alone.lock", "a") as lock:
                    try:
                        fcntl.flock(lock, fcntl.LOCK_SH | fcntl.LOCK_NB)
                        break  # free: the worker that ran them is gone
                    except BlockingIOError:
                        pass
            elif time.monotonic() > deadline:
                break
            time.sleep(0.2)
        self.pending = False


def pytest_configure(config: pytest.Config) -> None:
    # Bytecode, written even under PYTHONDONTWRITEBYTECODE (set on this project's machines): pytest keeps its
    # rewritten test modules (each worker's collection: 1.5 s of CPU, not 3.7), and the package and the tests'
    # helpers are compiled once, before the workers start, for every process the suite starts that imports
    # them (a CLI call, an agent, a rank's injected hooks: 0.1 s each of compiling, a few hundred seconds in all)
    sys.dont_write_bytecode = False
    if hasattr(config, "workerinput"):  # a pytest-xdist worker; one process alone has nothing beside it
        config.pluginmanager.register(MachineShare(), "npulaunch-machine-share")
    else:
        import compileall

        for directory in (ROOT / "npulaunch", ROOT / "tests", ROOT / "bench"):
            compileall.compile_dir(str(directory), quiet=2, workers=0)  # 0: a process a core


def pytest_sessionfinish(session: pytest.Session, exitstatus: int) -> None:
    """One diagnosis: over every job directory the suite's tests left (each failure kind the suite produces:
    exits, signals, exceptions, CANN codes, hangs, lost peers, NPU faults, restarts, ...), ``npulaunch diagnose``
    judging the job's records must name the root cause ``report`` names. A disagreement fails the run."""
    factory = getattr(session.config, "_tmp_path_factory", None)
    if factory is None or session.config.option.collectonly or hasattr(session.config, "workerinput"):
        return  # a pytest-xdist worker: the controller looks once, over every worker's directories
    if exitstatus == pytest.ExitCode.INTERRUPTED:
        return  # Ctrl-C: stop now (the jobs it interrupted were never finished)
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
