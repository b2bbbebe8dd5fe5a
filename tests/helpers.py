"""Plain helpers shared by the test modules (no fixtures here: those live in conftest.py): paths, the
CI-aware ``require``, running the real CLI, process checks, a host plan of test ranks, interpreters,
and reading a module's imports. Test modules import it as ``helpers`` (tests/ is on sys.path through
``pythonpath`` in pyproject.toml); no test module imports another test module."""

from __future__ import annotations

import ast
import glob
import itertools
import os
import shutil
import subprocess
import sys
import time
from pathlib import Path
from typing import TYPE_CHECKING, Any, Dict, Iterable, Iterator, List, NamedTuple, Optional, Sequence, Tuple

import psutil
import pytest

if TYPE_CHECKING:
    from npulaunch.host.events import Event

ROOT = Path(__file__).resolve().parent.parent
PACKAGE = ROOT / "npulaunch"
TESTS = ROOT / "tests"
RANKS = TESTS / "ranks"
STANDINS = TESTS / "standins"
GOLDEN = TESTS / "golden"
BROKEN_CONFIGS = TESTS / "broken_configs"
IN_CI = os.environ.get("CI", "").lower() in ("1", "true", "yes")


def require(condition: bool, reason: str) -> None:
    """Skip on a developer machine without the prerequisite; fail under CI, where it must exist."""
    if not condition:
        if IN_CI:
            pytest.fail(f"CI must provide: {reason}")
        pytest.skip(reason)


def python37() -> str:
    """A working Python 3.7 interpreter (CANN's TensorFlow 1.15 stack), or "" when there is none."""
    found = shutil.which("python3.7")
    candidates = ([found] if found else []) + sorted(glob.glob("/root/.pyenv/versions/3.7*/bin/python3.7"))
    for candidate in candidates:
        if subprocess.run([candidate, "-c", "pass"], capture_output=True).returncode == 0:
            return candidate
    return ""


def base_env(extra: Optional[Dict[str, str]] = None, standins: bool = False) -> Dict[str, str]:
    env = dict(os.environ)
    env["PYTHONPATH"] = str(ROOT) + os.pathsep + env.get("PYTHONPATH", "")
    # keep the NPU tools of the stand-in directory out unless a test asks for them
    env["PATH"] = os.pathsep.join(p for p in env.get("PATH", "").split(os.pathsep) if p != str(STANDINS))
    if standins:
        env["PATH"] = str(STANDINS) + os.pathsep + env["PATH"]
    env.update(extra or {})
    return env


def py_spy_denied(directory: Path) -> Dict[str, str]:
    """An environment whose py-spy cannot attach, as where ptrace is not permitted (a container without
    SYS_PTRACE): it prints py-spy's message and fails, so the stacks come from the ranks' own signal."""
    bin_dir = directory / "py-spy-denied"
    bin_dir.mkdir(exist_ok=True)
    tool = bin_dir / "py-spy"
    said = "Permission Denied: Try running again with elevated permissions by going 'sudo env \"PATH=$PATH\" !!'"
    tool.write_text(f'#!/bin/sh\necho "{said}"\nexit 1\n')
    tool.chmod(0o755)
    return {"PATH": f"{bin_dir}{os.pathsep}{os.environ['PATH']}"}


def diagnosis_disagreements(root: Path) -> Tuple[int, List[str]]:
    """``(checked, disagreements)``: how many finished job directories are under ``root``, and each one whose
    root cause ``npulaunch diagnose`` (from the job's own records) names differently from ``report`` (its
    summary.json): ``path: report says X, diagnose says Y``."""
    import json

    from npulaunch.diagnose.offline import is_job_dir, records_failure
    from npulaunch.plan.layout import JobLayout

    found = []
    checked = 0
    for summary_path in sorted(root.rglob("summary.json")):
        directory = summary_path.parent
        if directory.name.startswith("attempt-") or not is_job_dir(str(directory)):
            continue  # an attempt's own summary: its job's summary.json is the report's
        try:
            reported = json.loads(summary_path.read_text()).get("root_cause")
        except (OSError, ValueError):
            continue  # a test's deliberately damaged record
        layout = JobLayout.open(str(directory))
        if '"kind": "job_finished"' not in Path(layout.events_path).read_text(errors="replace"):
            continue  # records a test wrote by hand (no job ran to its end there)
        checked += 1
        failure = records_failure(layout, str(directory))
        said = failure.to_json() if failure is not None else None
        keys = ("rank", "cls", "code")
        report_says = tuple(reported[k] for k in keys) if reported else None
        diagnose_says = tuple(said[k] for k in keys) if said else None
        if report_says != diagnose_says:
            found.append(f"{directory}: report says {report_says}, diagnose says {diagnose_says}")
    return checked, found


def run_on_pty(args: Sequence[str], columns: int = 140, timeout_s: float = 60, expect: Optional[int] = 0) -> str:
    """``npulaunch ARGS`` with a new pseudo-terminal as stdin, stdout and stderr; everything it wrote
    there, as read from the master side (the line discipline's \\r\\n kept); ``expect``: its exit code
    (None: any)."""
    import pty
    import select

    master, slave = pty.openpty()
    env = base_env({"COLUMNS": str(columns), "LINES": "40", "TERM": "xterm"})
    proc = subprocess.Popen(npulaunch_argv(*args), stdin=slave, stdout=slave, stderr=slave, env=env, close_fds=True)
    os.close(slave)
    chunks = []
    deadline = time.monotonic() + timeout_s
    while time.monotonic() < deadline:
        ready, _, _ = select.select([master], [], [], 0.2)
        if ready:
            try:
                data = os.read(master, 65536)
            except OSError:  # EIO: every process holding the terminal is gone
                break
            if not data:
                break
            chunks.append(data)
        elif proc.poll() is not None:
            break
    code = proc.wait(timeout=10)
    assert expect is None or code == expect, code
    os.close(master)
    return b"".join(chunks).decode("utf-8", "replace")


def npulaunch_argv(*args: str) -> List[str]:
    return [sys.executable, "-m", "npulaunch", *args]


def run_cli(
    *args: str,
    env: Optional[Dict[str, str]] = None,
    cwd: Optional[Path] = None,
    timeout: float = 60,
    standins: bool = False,
) -> subprocess.CompletedProcess:
    """Run ``npulaunch ARGS`` to completion and capture its output."""
    return subprocess.run(
        npulaunch_argv(*args),
        cwd=str(cwd or ROOT),
        env=base_env(env, standins),
        capture_output=True,
        text=True,
        timeout=timeout,
    )


def run_local(log_dir: Path, marker: str, *args: str, nproc: int = 4, timeout: float = 60):
    """``npulaunch run`` of job "m" with ``nproc`` local ranks (``args``: flags, then ``-- command``)."""
    return run_cli(
        "run",
        "--nproc-per-node",
        str(nproc),
        "--log-dir",
        str(log_dir),
        "--job-id",
        "m",
        "--grace-period",
        "1",
        *args,
        env={"NPLTEST_MARKER": marker},
        timeout=timeout,
    )


def run_restarted_job(log_dir: Path, marker: str, max_restarts: int, failures: int, others: str = "*=ok@0.2"):
    """Job ``m`` of 2 ranks where rank 0 fails retryably (EJ0001: the NPU's HCCP process did not start) on its first
    ``failures`` attempts, run with ``--max-restarts``."""
    return run_local(
        log_dir,
        marker,
        "--max-restarts",
        str(max_restarts),
        "--",
        sys.executable,
        str(RANKS / "rank.py"),
        f"0=hccp_fails_until:{failures}",
        others,
        nproc=2,
    )


PORT_BAND = 192  # ports per parallel worker (slots 0-63 fit below the usual ephemeral range, 32768)
_port_turns = itertools.count()


def free_port_window(count: int = 32) -> int:
    """The first port of ``count`` consecutive TCP ports that are free now and lie outside the kernel's
    ephemeral range, so no outgoing connection of another test can take one while a test uses them. Each
    parallel worker looks in a band of its own first (PORT_BAND ports from 20000 + slot * PORT_BAND), and
    takes the windows of its band in turn: two workers never find the same port free at the same moment,
    nor one worker a port its previous test still holds."""
    import socket

    from netns_hosts import slot

    low, high = (int(n) for n in Path("/proc/sys/net/ipv4/ip_local_port_range").read_text().split())
    band = 20000 + slot() * PORT_BAND
    own = list(range(band, min(band + PORT_BAND, low) - count + 1, count))
    turn = next(_port_turns) % len(own) if own else 0
    candidates = [*own[turn:], *own[:turn], *range(20000, low - count, count), *range(high + 1, 65536 - count, count)]
    for base in candidates:
        try:
            for port in range(base, base + count):
                with socket.socket() as sock:
                    sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
                    sock.bind(("0.0.0.0", port))
        except OSError:
            continue
        return base
    raise AssertionError(f"no {count} free ports outside the ephemeral range {low}-{high}")


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
                f"{k}={v}" for k, v in (proc.info["environ"] or {}).items()
            )
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


def host_plan(tmp_path: Path, marker: str, *rank_args: str, ranks: int = 2, grace: float = 1.0):
    """A HostPlan of ``ranks`` tests/ranks/rank.py ranks on this host, marked with ``marker``."""
    from npulaunch.host.spec import HostPlan, RankSpec

    specs = []
    for rank in range(ranks):
        rank_dir = tmp_path / f"rank-{rank}"
        specs.append(
            RankSpec(
                rank=rank,
                local_rank=rank,
                world_size=ranks,
                host="localhost",
                node_rank=0,
                device_id=rank,
                argv=(sys.executable, str(RANKS / "rank.py"), *rank_args),
                cwd=str(tmp_path),
                env={"RANK_ID": str(rank), "NPLTEST_MARKER": marker, "NPULAUNCH_JOB_UUID": marker},
                env_unset=(),
                env_sources={},
                session_options={},
                rank_dir=str(rank_dir),
                stdout_path=str(rank_dir / "stdout.log"),
                stderr_path=str(rank_dir / "stderr.log"),
                plog_dir=str(rank_dir / "ascend"),
            )
        )
    return HostPlan(
        job_id="t",
        job_uuid=marker,
        host="localhost",
        node_rank=0,
        job_dir=str(tmp_path),
        grace_period_s=grace,
        ranks=tuple(specs),
    )


def host_plan_dict(tmp_path: Path, marker: str, *rank_args: str) -> Dict:
    """``host_plan`` as the agent receives it on its channel (the JSON form)."""
    return host_plan(tmp_path, marker, *rank_args).to_dict()


def job_dirs(log_root: Path) -> Sequence[Path]:
    return sorted(p for p in log_root.iterdir() if p.is_dir()) if log_root.exists() else []


# Open MPI 4.1 (Debian's openmpi-bin) on this one machine, as root, more ranks than cores, also from
# inside a Slurm job: without plm isolated + ras ^slurm, mpirun inside an srun step launches its daemons
# through Slurm and hangs. pml ob1 + btl self,vader,tcp skip probing UCX/OFI/openib (half the start-up
# time, and their warnings in containers); no single-copy (CMA needs ptrace rights some containers
# lack); TCP on loopback only. Open MPI refuses an MCA parameter given twice: override through ``mca``.
MPIRUN_MCA = {
    "plm": "isolated",
    "ras": "^slurm",
    "pml": "ob1",
    "btl": "self,vader,tcp",
    "btl_vader_single_copy_mechanism": "none",
    "btl_tcp_if_include": "lo",
    "oob_tcp_if_include": "lo",
}


def mpirun_argv(n: int, mca: Optional[Dict[str, str]] = None) -> List[str]:
    """``mpirun ... -n N``: the argv prefix for N ranks of Open MPI on this machine (command follows)."""
    argv = ["mpirun", "--allow-run-as-root", "--oversubscribe", "--bind-to", "none"]
    for name, value in {**MPIRUN_MCA, **(mca or {})}.items():
        argv += ["--mca", name, value]
    return argv + ["-n", str(n)]


# --- the package's source, read without importing it (for the boundary and layering checks)


def package_sources(folder: Path = PACKAGE) -> List[Path]:
    """Every ``.py`` under ``folder``, found by walking it (``__pycache__`` and the like skipped)."""
    return sorted(p for p in folder.rglob("*.py") if "__pycache__" not in p.parts)


def module_name(path: Path) -> str:
    """``npulaunch/host/agent/agent.py`` -> ``npulaunch.host.agent.agent``; a package's ``__init__`` is
    the package."""
    parts = list(path.resolve().relative_to(ROOT).with_suffix("").parts)
    return ".".join(parts[:-1] if parts[-1] == "__init__" else parts)


class Import(NamedTuple):
    """One module an import statement names, made absolute (``from a import b`` gives ``a.b`` too)."""

    where: str  # path:line, relative to the repository
    module: str
    in_function: bool  # inside a def: imported when called, not when the module loads


def imports_of(path: Path, name: str = "") -> Iterator[Import]:
    """Every import in a source file, at any depth: module level, in functions, under ``if
    TYPE_CHECKING:`` or ``try:``. Relative imports are resolved against the package of ``name``
    (by default the file's own module name). For ``from X import Y`` both ``X`` and ``X.Y`` are given
    (``Y`` may be a module, as in ``from npulaunch import session``); for ``from X import *`` only ``X``."""
    tree = ast.parse(path.read_text(encoding="utf-8"), str(path))
    name = name or module_name(path)
    package = name if path.name == "__init__.py" else name.rpartition(".")[0]
    resolved = path.resolve()
    where = str(resolved.relative_to(ROOT)) if resolved.is_relative_to(ROOT) else str(path)
    functions = [n for n in ast.walk(tree) if isinstance(n, (ast.FunctionDef, ast.AsyncFunctionDef))]
    inside = {id(child) for f in functions for child in ast.walk(f) if child is not f}
    for node in ast.walk(tree):
        in_function = id(node) in inside
        if isinstance(node, ast.Import):
            for alias in node.names:
                yield Import(f"{where}:{node.lineno}", alias.name, in_function)
        elif isinstance(node, ast.ImportFrom):
            if node.level:
                base = package.split(".")
                base = base[: len(base) + 1 - node.level]
                source = ".".join(base + ([node.module] if node.module else []))
            else:
                source = node.module or ""
            if node.module is not None or not node.level:
                yield Import(f"{where}:{node.lineno}", source, in_function)
            for alias in node.names:
                if alias.name != "*":
                    yield Import(f"{where}:{node.lineno}", f"{source}.{alias.name}", in_function)


def full_plan(plan: Dict[str, Any]) -> Dict[str, Any]:
    """plan.json / plan --json with every rank's complete environment (planjson.full_rank), as tests read it."""
    from npulaunch.plan.planjson import full_rank

    return {**plan, "ranks": [full_rank(plan, rank) for rank in plan["ranks"]]}


FAULT_CODE, FAULT_LEVEL = "80E01801", "RestartBusiness"  # HBM multi-bit ECC; MindCluster's level of it


def npu_health_event(
    host: str,
    device: int,
    when: float,
    action: str = "reschedule",
    codes: Sequence[str] = (FAULT_CODE,),
    levels: Optional[Dict[str, str]] = None,
    level: str = FAULT_LEVEL,
    ranks: Sequence[int] = (),
    **extra: Any,
) -> "Event":
    """An NPU_HEALTH event as the agent's health watch emits it (npulaunch/host/health/watch.py)."""
    from npulaunch.host.events import Event, EventKind

    data: Dict[str, Any] = {
        "device": device,
        "npu": 8 + device,
        "chip": 0,
        "health": "Critical",
        "codes": list(codes),
        "levels": dict(levels) if levels is not None else {c: level for c in codes},
        "level": level,
        "action": action,
        "info": "MindCluster: isolate the chip and reschedule the job",
        "ranks": list(ranks),
    }
    data.update(extra)
    return Event(EventKind.NPU_HEALTH, "j", host, None, data, time=when)


def agent_lost_event(host: str, when: float, status: Optional[int] = 255) -> "Event":
    """An AGENT_LOST event as the SSH runner emits it (npulaunch/launch/fleet/run.py)."""
    from npulaunch.host.events import Event, EventKind

    return Event(EventKind.AGENT_LOST, "j", host, None, {"exit_status": status}, time=when)
