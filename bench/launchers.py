"""The launchers bench/compare.py compares, and the one rank program they all start: how each is
run (argv for N ranks) and where each puts the ranks' logs. A launcher whose tool is missing is
kept with the reason, so the tables say "not installed" instead of failing.
"""

from __future__ import annotations

import glob
import os
import platform
import shutil
import subprocess
import sys
from dataclasses import dataclass, field
from typing import Callable

HERE = os.path.dirname(os.path.abspath(__file__))
VENV_PY = os.path.join(HERE, ".venv", "bin", "python")
PY = sys.executable
GRACE_S = 2  # floor, npulaunch (--grace-period) and torchrun (--shutdown-timeout, an integer)

# One program for every rank. msrun also runs it as its scheduler (MS_ROLE=MS_SCHED): without
# MindSpore's init() there is nothing to schedule, so that process exits at once.
RANK_PY = r"""
import os, signal, sys, time
if os.environ.get("MS_ROLE") == "MS_SCHED":
    sys.exit(0)
rank = int(os.environ.get("RANK_ID", os.environ.get("RANK", "-1")))
mode = sys.argv[1]
if mode == "print":
    print(rank)
elif mode == "sleep":
    time.sleep(float(sys.argv[2]))
elif mode == "spam":
    w = sys.stdout.write
    for i in range(int(sys.argv[2])):
        w("line %07d rank %02d %s\n" % (i, rank, "x" * 58))
elif mode == "fail":  # fail FAILING_RANK AFTER_S SLEEP_S STAMP_FILE IGNORE_TERM
    if sys.argv[6] == "1":
        signal.signal(signal.SIGTERM, signal.SIG_IGN)
    if rank == int(sys.argv[2]):
        time.sleep(float(sys.argv[3]))
        with open(sys.argv[5], "w") as f:
            f.write(repr(time.time()))
        sys.exit(1)
    time.sleep(float(sys.argv[4]))
"""

FLOOR = r"""
import os, signal, subprocess, sys, time
n, logs, grace = int(sys.argv[1]), sys.argv[2], float(sys.argv[3])
procs = []
for r in range(n):
    env = dict(os.environ, RANK_ID=str(r), RANK_SIZE=str(n), DEVICE_ID=str(r))
    with open(os.path.join(logs, "rank%d.log" % r), "wb") as out:
        procs.append(subprocess.Popen(sys.argv[4:], env=env, stdout=out, stderr=subprocess.STDOUT))
live, code = {p.pid for p in procs}, 0
while live:
    pid, status = os.wait()
    live.discard(pid)
    if os.waitstatus_to_exitcode(status) != 0 and not code:
        code = 1
        for pid in live:
            os.kill(pid, signal.SIGTERM)
        deadline = time.monotonic() + grace
        while live and time.monotonic() < deadline:
            pid, status = os.waitpid(-1, os.WNOHANG)
            if pid:
                live.discard(pid)
            else:
                time.sleep(0.005)
        for pid in live:
            os.kill(pid, signal.SIGKILL)
sys.exit(code)
"""

BASH = r"""
n=$1; logs=$2; shift 2
for ((r = 0; r < n; r++)); do
    RANK_ID=$r RANK_SIZE=$n DEVICE_ID=$r "$@" 2>&1 | tee "$logs/rank$r.log" &
done
wait
"""


@dataclass(frozen=True)
class Job:
    """One launch: N ranks of cmd, files under run_dir, console 'none' or 'all' (npulaunch)."""

    n: int
    cmd: list[str]
    run_dir: str
    console: str = "none"


@dataclass
class Launcher:
    name: str
    version: str
    missing: str  # why it is not available ("" when it is)
    argv: Callable[[Job], list[str]] = field(repr=False, default=lambda job: [])
    logs: Callable[[Job], list[list[str]]] = field(repr=False, default=lambda job: [])  # files per rank
    grace: str = ""


def venv_or_system_python(module: str) -> str | None:
    """bench/.venv's python if it has the module, else python3 if it has it, else None."""
    probe = f"import importlib.util, sys; sys.exit(not importlib.util.find_spec('{module}'))"
    for py in (VENV_PY, PY):
        if (
            os.path.exists(py)
            and subprocess.run(
                [py, "-c", probe], check=False, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL
            ).returncode
            == 0
        ):
            return py
    return None


def dist_version(py: str, dist: str) -> str:
    out = subprocess.run(
        [py, "-c", f"import importlib.metadata as m; print(m.version('{dist}'))"],
        check=False,
        capture_output=True,
        text=True,
    )
    return out.stdout.strip() or "?"


def rank_files(*names: str) -> Callable[[Job], list[list[str]]]:
    """Per-rank log files; names are formatted with {r}, relative to the run directory."""
    return lambda j: [[os.path.join(j.run_dir, name.format(r=r)) for name in names] for r in range(j.n)]


def floor_launcher() -> Launcher:
    return Launcher(
        "floor",
        f"Python {platform.python_version()}",
        "",
        lambda j: [PY, "-c", FLOOR, str(j.n), j.run_dir, str(GRACE_S), *j.cmd],
        rank_files("rank{r}.log"),
        f"{GRACE_S} s",
    )


def bash_launcher() -> Launcher:
    bash = shutil.which("bash")
    if not bash:
        return Launcher("bash", "", "bash not found")
    version = subprocess.run([bash, "-c", "echo $BASH_VERSION"], check=False, capture_output=True, text=True)
    return Launcher(
        "bash",
        version.stdout.strip(),
        "",
        lambda j: [bash, "-c", BASH, "bash", str(j.n), j.run_dir, *j.cmd],
        rank_files("rank{r}.log"),
        "none: `wait` signals no one",
    )


def torchrun_launcher() -> Launcher:
    py = venv_or_system_python("torch")
    if not py:
        return Launcher("torchrun", "", "torch not installed (bash bench/setup.sh)")

    def logs(j: Job) -> list[list[str]]:  # DIR/<rdzv id>_<random>/attempt_0/<local rank>/std{out,err}.log
        return [sorted(glob.glob(os.path.join(j.run_dir, "*", "attempt_0", str(r), "std*.log"))) for r in range(j.n)]

    return Launcher(
        "torchrun",
        f"torch {dist_version(py, 'torch')}",
        "",
        lambda j: [
            py,
            "-m",
            "torch.distributed.run",
            "--standalone",
            "--nproc-per-node",
            str(j.n),
            "--log-dir",
            j.run_dir,
            "--redirects",
            "3",
            "--tee",
            "3",
            "--shutdown-timeout",
            str(GRACE_S),
            "--no-python",
            *j.cmd,
        ],
        logs,
        f"30 s on a rank failure (`_stop_workers` ignores --shutdown-timeout {GRACE_S})",
    )


def npulaunch_launcher() -> Launcher:
    if subprocess.run([PY, "-c", "import npulaunch"], check=False, stderr=subprocess.DEVNULL).returncode:
        return Launcher("npulaunch", "", "npulaunch not importable by python3 (pip install -e .)")
    return Launcher(
        "npulaunch",
        dist_version(PY, "npulaunch"),
        "",
        lambda j: [
            PY,
            "-m",
            "npulaunch",
            "run",
            "--nproc-per-node",
            str(j.n),
            "--log-dir",
            j.run_dir,
            "--job-id",
            "job",
            "--console",
            j.console,
            "--grace-period",
            str(GRACE_S),
            "--",
            *j.cmd,
        ],
        rank_files("job/rank-{r}/stdout.log", "job/rank-{r}/stderr.log"),
        f"{GRACE_S} s (--grace-period)",
    )


def msrun_launcher(shim_dir: str) -> Launcher:
    venv_msrun = os.path.join(HERE, ".venv", "bin", "msrun")
    msrun = venv_msrun if os.path.exists(venv_msrun) else shutil.which("msrun")
    if not msrun:
        return Launcher("msrun", "", "mindspore not installed (bash bench/setup.sh)")
    # msrun runs `python3 ARGS` from PATH: shim_dir/python3 is this interpreter, not pyenv's shim.
    os.symlink(PY, os.path.join(shim_dir, "python3"))
    version = dist_version(os.path.join(os.path.dirname(msrun), "python"), "mindspore")
    return Launcher(
        "msrun",
        f"mindspore {version}",
        "",
        lambda j: [
            msrun,
            "--worker_num",
            str(j.n),
            "--local_worker_num",
            str(j.n),
            "--log_dir",
            j.run_dir,
            "--join",
            "True",
            "python3",
            *j.cmd[1:],
        ],
        rank_files("worker_{r}.log"),
        "none: SIGKILL at once (after its 1 s poll)",
    )


def build_launchers(shim_dir: str) -> list[Launcher]:
    return [floor_launcher(), bash_launcher(), torchrun_launcher(), npulaunch_launcher(), msrun_launcher(shim_dir)]


# ---- processes ---------------------------------------------------------------------------------
