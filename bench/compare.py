"""npulaunch side by side with the launchers users would otherwise use, in one run on one machine.

Launchers: floor (a minimal Popen-and-wait script, ranks writing straight to files), bash (the loop
Ascend users write: ``RANK_ID=$r CMD 2>&1 | tee log &``, then ``wait``), torchrun (from bench/.venv,
see bench/setup.sh), npulaunch, and MindSpore's msrun when installed. Missing tools are reported as
"not installed" rows. Launchers are alternated (A B C D A B C D); medians. Measures:
1. launch overhead (N trivial ranks), 2. failure propagation (rank 3 fails after 1 s, the others
sleep; again with ranks that ignore SIGTERM), 3. log throughput (wall, CPU, lines arrived),
4. the launcher's peak memory with 32 ranks. Writes compare.md and compare.json to --out.
Usage: python3 bench/compare.py [--smoke] [--repeats 5] [--heavy-repeats 3] [--out DIR]
"""

from __future__ import annotations

import argparse
import contextlib
import ctypes
import glob
import json
import os
import platform
import resource
import shutil
import signal
import statistics
import subprocess
import sys
import tempfile
import threading
import time
from dataclasses import dataclass, field
from typing import Callable

HERE = os.path.dirname(os.path.abspath(__file__))
VENV_PY = os.path.join(HERE, ".venv", "bin", "python")
PY = sys.executable
GRACE_S = 2  # floor, npulaunch (--grace-period) and torchrun (--shutdown-timeout, an integer)
RUN_TIMEOUT_S = 180

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
        if os.path.exists(py) and subprocess.run([py, "-c", probe], check=False, stdout=subprocess.DEVNULL,
                                                 stderr=subprocess.DEVNULL).returncode == 0:
            return py
    return None


def dist_version(py: str, dist: str) -> str:
    out = subprocess.run([py, "-c", f"import importlib.metadata as m; print(m.version('{dist}'))"],
                         check=False, capture_output=True, text=True)
    return out.stdout.strip() or "?"


def rank_files(*names: str) -> Callable[[Job], list[list[str]]]:
    """Per-rank log files; names are formatted with {r}, relative to the run directory."""
    return lambda j: [[os.path.join(j.run_dir, name.format(r=r)) for name in names] for r in range(j.n)]


def floor_launcher() -> Launcher:
    return Launcher("floor", f"Python {platform.python_version()}", "",
                    lambda j: [PY, "-c", FLOOR, str(j.n), j.run_dir, str(GRACE_S), *j.cmd],
                    rank_files("rank{r}.log"), f"{GRACE_S} s")


def bash_launcher() -> Launcher:
    bash = shutil.which("bash")
    if not bash:
        return Launcher("bash", "", "bash not found")
    version = subprocess.run([bash, "-c", "echo $BASH_VERSION"], check=False, capture_output=True, text=True)
    return Launcher("bash", version.stdout.strip(), "",
                    lambda j: [bash, "-c", BASH, "bash", str(j.n), j.run_dir, *j.cmd],
                    rank_files("rank{r}.log"), "none: `wait` signals no one")


def torchrun_launcher() -> Launcher:
    py = venv_or_system_python("torch")
    if not py:
        return Launcher("torchrun", "", "torch not installed (bash bench/setup.sh)")

    def logs(j: Job) -> list[list[str]]:  # DIR/<rdzv id>_<random>/attempt_0/<local rank>/std{out,err}.log
        return [sorted(glob.glob(os.path.join(j.run_dir, "*", "attempt_0", str(r), "std*.log"))) for r in range(j.n)]
    return Launcher("torchrun", f"torch {dist_version(py, 'torch')}", "",
                    lambda j: [py, "-m", "torch.distributed.run", "--standalone", "--nproc-per-node", str(j.n),
                               "--log-dir", j.run_dir, "--redirects", "3", "--tee", "3",
                               "--shutdown-timeout", str(GRACE_S), "--no-python", *j.cmd],
                    logs, f"30 s on a rank failure (`_stop_workers` ignores --shutdown-timeout {GRACE_S})")


def npulaunch_launcher() -> Launcher:
    if subprocess.run([PY, "-c", "import npulaunch"], check=False, stderr=subprocess.DEVNULL).returncode:
        return Launcher("npulaunch", "", "npulaunch not importable by python3 (pip install -e .)")
    return Launcher("npulaunch", dist_version(PY, "npulaunch"), "",
                    lambda j: [PY, "-m", "npulaunch", "run", "--nproc-per-node", str(j.n), "--log-dir", j.run_dir,
                               "--job-id", "job", "--console", j.console, "--grace-period", str(GRACE_S),
                               "--", *j.cmd],
                    rank_files("job/rank-{r}/stdout.log", "job/rank-{r}/stderr.log"),
                    f"{GRACE_S} s (--grace-period)")


def msrun_launcher(shim_dir: str) -> Launcher:
    venv_msrun = os.path.join(HERE, ".venv", "bin", "msrun")
    msrun = venv_msrun if os.path.exists(venv_msrun) else shutil.which("msrun")
    if not msrun:
        return Launcher("msrun", "", "mindspore not installed (bash bench/setup.sh)")
    # msrun runs `python3 ARGS` from PATH: shim_dir/python3 is this interpreter, not pyenv's shim.
    os.symlink(PY, os.path.join(shim_dir, "python3"))
    version = dist_version(os.path.join(os.path.dirname(msrun), "python"), "mindspore")
    return Launcher("msrun", f"mindspore {version}", "",
                    lambda j: [msrun, "--worker_num", str(j.n), "--local_worker_num", str(j.n), "--log_dir",
                               j.run_dir, "--join", "True", "python3", *j.cmd[1:]],
                    rank_files("worker_{r}.log"), "none: SIGKILL at once (after its 1 s poll)")


def build_launchers(shim_dir: str) -> list[Launcher]:
    return [floor_launcher(), bash_launcher(), torchrun_launcher(), npulaunch_launcher(), msrun_launcher(shim_dir)]


# ---- processes ---------------------------------------------------------------------------------

def become_subreaper() -> None:
    """Orphans (a launcher's helpers it never waited for) become our children: we reap them, and
    their CPU time lands in RUSAGE_CHILDREN like everyone else's."""
    try:
        ctypes.CDLL(None, use_errno=True).prctl(36, 1, 0, 0, 0)  # PR_SET_CHILD_SUBREAPER
    except (OSError, AttributeError):
        pass


def reap_orphans() -> None:
    while True:
        try:
            pid, _ = os.waitpid(-1, os.WNOHANG)
        except ChildProcessError:
            return
        if not pid:
            return


def read_cmdline(pid: int) -> list[str]:
    try:
        with open(f"/proc/{pid}/cmdline", "rb") as f:
            return f.read().decode(errors="replace").split("\0")[:-1]
    except OSError:
        return []


def marked(marker: str) -> list[int]:
    """Live processes whose argv carries this run's marker (its ranks), zombies excluded."""
    found = []
    for name in os.listdir("/proc"):
        if name.isdigit() and int(name) != os.getpid() and marker in read_cmdline(int(name)):
            try:
                with open(f"/proc/{name}/stat", "rb") as f:
                    stat = f.read()
            except OSError:
                continue
            if stat[stat.rindex(b")") + 2:][:1] != b"Z":
                found.append(int(name))
    return found


def parents() -> dict[int, int]:
    table = {}
    for name in os.listdir("/proc"):
        if name.isdigit():
            try:
                with open(f"/proc/{name}/stat", "rb") as f:
                    stat = f.read()
            except OSError:
                continue
            table[int(name)] = int(stat[stat.rindex(b")") + 2:].split()[1])
    return table


def hwm_kb(pid: int) -> int | None:
    try:
        with open(f"/proc/{pid}/status") as f:
            for line in f:
                if line.startswith("VmHWM:"):
                    return int(line.split()[1])
    except OSError:
        pass
    return None


@dataclass
class Outcome:
    code: int | None
    wall_s: float
    end_time: float  # time.time() at the launcher's exit
    cpu_s: float  # RUSAGE_CHILDREN delta: launcher, its helpers and the ranks
    tree: dict[int, tuple] = field(default_factory=dict)  # pid -> (cmdline, VmHWM kB, ppid) at last sample


def launch(argv: list[str], env: dict[str, str], sample_ms: float = 0) -> Outcome:
    """Run one launcher, console to /dev/null; with sample_ms, sample its process tree.
    Waits in a blocking waitpid: Popen.wait(timeout) polls with sleeps of up to 50 ms."""
    usage = resource.getrusage(resource.RUSAGE_CHILDREN)
    start = time.perf_counter()
    proc = subprocess.Popen(argv, env=env, stdin=subprocess.DEVNULL, stdout=subprocess.DEVNULL,
                            stderr=subprocess.DEVNULL, start_new_session=True)
    timed_out = threading.Event()

    def kill() -> None:
        timed_out.set()
        with contextlib.suppress(ProcessLookupError):
            os.killpg(proc.pid, signal.SIGKILL)
    timer = threading.Timer(RUN_TIMEOUT_S, kill)
    timer.start()
    tree: dict[int, tuple] = {}
    try:
        if sample_ms:
            while proc.poll() is None:
                sample_tree(proc.pid, tree)
                time.sleep(sample_ms / 1000)
        code: int | None = proc.wait()
    finally:
        timer.cancel()
    wall, end = time.perf_counter() - start, time.time()
    reap_orphans()
    after = resource.getrusage(resource.RUSAGE_CHILDREN)
    cpu = after.ru_utime + after.ru_stime - usage.ru_utime - usage.ru_stime
    return Outcome(None if timed_out.is_set() else code, wall, end, cpu, tree)


def sample_tree(root: int, tree: dict[int, tuple]) -> None:
    children: dict[int, list[int]] = {}
    table = parents()
    for child, parent in table.items():
        children.setdefault(parent, []).append(child)
    members, todo = set(), [root]
    while todo:
        pid = todo.pop()
        members.add(pid)
        todo.extend(children.get(pid, ()))
    for pid in members:
        hwm, cmdline = hwm_kb(pid), read_cmdline(pid)
        if hwm is not None and cmdline:
            tree[pid] = (cmdline, hwm, table.get(pid, 0))


def stop_survivors(marker: str, wait_s: float) -> tuple:
    """(ranks alive at the launcher's exit, time.time() when the last was gone); kills what is
    still there after wait_s."""
    left = marked(marker)
    deadline = time.monotonic() + wait_s
    while marked(marker) and time.monotonic() < deadline:
        time.sleep(0.01)
    gone = time.time()
    for pid in marked(marker):
        os.kill(pid, signal.SIGKILL)
    time.sleep(0.05)
    reap_orphans()
    return len(left), gone


# ---- the four measurements --------------------------------------------------------------------

@dataclass
class Bench:
    """Where runs happen and what every run shares: the rank program, the environment, a counter."""
    work: str
    launchers: list[Launcher]
    env: dict[str, str]
    errors: list[str] = field(default_factory=list)
    count: int = 0

    @property
    def rank_py(self) -> str:
        return os.path.join(self.work, "rank.py")

    @property
    def ready(self) -> list[Launcher]:
        return [l for l in self.launchers if not l.missing]

    def job(self, launcher: Launcher, n: int, mode: list[str], console: str = "none") -> tuple:
        """(Job, marker): a fresh run directory ("{run_dir}" in mode), a marker in every rank's argv."""
        self.count += 1
        marker = f"npl-compare-{os.getpid()}-{self.count}"
        run_dir = os.path.join(self.work, f"{launcher.name}-{self.count}")
        os.makedirs(run_dir)
        mode = [arg.replace("{run_dir}", run_dir) for arg in mode]
        return Job(n, [PY, "-S", self.rank_py, *mode, marker], run_dir, console), marker

    def run(self, launcher: Launcher, job: Job, marker: str, expect: int | None = 0,
            sample_ms: float = 0) -> Outcome:
        out = launch(launcher.argv(job), self.env, sample_ms)
        if expect is None:
            return out
        if out.code != expect:
            self.errors.append(f"{launcher.name}: exit code {out.code} (expected {expect}) for {job.n} ranks,"
                               f" `{job.cmd[3]}`")
        left = marked(marker)
        if left:
            self.errors.append(f"{launcher.name}: {len(left)} ranks still running after a `{job.cmd[3]}` run")
            stop_survivors(marker, 0)
        return out


def progress(text: str) -> None:
    print(text, file=sys.stderr, flush=True)


def measure_launch(bench: Bench, sizes: list[int], repeats: int) -> dict:
    walls: dict = {str(n): {l.name: [] for l in bench.ready} for n in sizes}
    for n in sizes:
        for _ in range(repeats):
            for launcher in bench.ready:
                job, marker = bench.job(launcher, n, ["print"])
                walls[str(n)][launcher.name].append(bench.run(launcher, job, marker).wall_s)
                shutil.rmtree(job.run_dir, ignore_errors=True)
        progress(f"launch {n} ranks: " + ", ".join(f"{k} {statistics.median(v):.3f} s"
                                                   for k, v in walls[str(n)].items()))
    return walls


def measure_failure(bench: Bench, ignore_term: bool, repeats: int, n: int, after_s: float,
                    sleep_s: float) -> dict:
    """Rank 3 (or the last) exits 1 after after_s; the others sleep sleep_s."""
    runs: dict = {l.name: [] for l in bench.ready}
    failing = min(3, n - 1)
    for _ in range(repeats):
        for launcher in bench.ready:
            job, marker = bench.job(launcher, n, ["fail", str(failing), str(after_s), str(sleep_s),
                                                  "{run_dir}/failed-at", "1" if ignore_term else "0"])
            stamp = os.path.join(job.run_dir, "failed-at")
            out = bench.run(launcher, job, marker, expect=None)
            left, gone = stop_survivors(marker, sleep_s + 5)
            try:
                with open(stamp) as f:
                    failed = float(f.read())
            except (OSError, ValueError):
                bench.errors.append(f"{launcher.name}: rank {failing} never wrote its failure time")
                continue
            exit_s = out.end_time - failed
            runs[launcher.name].append({"exit_s": exit_s, "gone_s": max(exit_s, gone - failed) if left else exit_s,
                                        "left_at_exit": left, "code": out.code})
            shutil.rmtree(job.run_dir, ignore_errors=True)
    progress(f"failure ({'SIGTERM ignored' if ignore_term else 'SIGTERM honoured'}): " + ", ".join(
        f"{k} {statistics.median(r['exit_s'] for r in v):.2f} s" for k, v in runs.items() if v))
    return runs


def count_lines(paths: list[str]) -> int:
    total = 0
    for path in paths:
        try:
            with open(path, "rb") as f:
                total += f.read().count(b"line ")
        except OSError:
            pass
    return total


def measure_logs(bench: Bench, repeats: int, n: int, lines: int) -> dict:
    runs: dict = {l.name: [] for l in bench.ready}
    for _ in range(repeats):
        for launcher in bench.ready:
            job, marker = bench.job(launcher, n, ["spam", str(lines)], console="all")
            out = bench.run(launcher, job, marker)
            runs[launcher.name].append({"wall_s": out.wall_s, "cpu_s": out.cpu_s,
                                        "lines": [count_lines(paths) for paths in launcher.logs(job)]})
            shutil.rmtree(job.run_dir, ignore_errors=True)
    progress("logs: " + ", ".join(f"{k} {statistics.median(r['wall_s'] for r in v):.2f} s"
                                  for k, v in runs.items()))
    return runs


def describe(cmdline: list[str]) -> str:
    """A short name: `python3 -m npulaunch`, `python3 -c`, `python msrun`, `tee`."""
    name = os.path.basename(cmdline[0])
    for i, arg in enumerate(cmdline[1:], 1):
        if arg == "-m" and i + 1 < len(cmdline):
            return f"{name} -m {cmdline[i + 1]}"
        if arg == "-c":
            return f"{name} -c"
        if not arg.startswith("-"):
            return f"{name} {os.path.basename(arg)}" if name.startswith("python") else name
    return name


def measure_memory(bench: Bench, repeats: int, n: int, sleep_s: float) -> dict:
    runs: dict = {l.name: [] for l in bench.ready}
    for _ in range(repeats):
        for launcher in bench.ready:
            job, marker = bench.job(launcher, n, ["sleep", str(sleep_s)])
            out = bench.run(launcher, job, marker, sample_ms=10)
            ranks = {pid for pid, (cmd, _, _) in out.tree.items() if cmd[1:3] == ["-S", bench.rank_py]}
            # A child seen between fork and exec still shows its parent's argv and (vfork) its memory.
            unexeced = {pid for pid, (cmd, _, ppid) in out.tree.items()
                        if ppid in out.tree and out.tree[ppid][0] == cmd}
            own = [(cmd, kb) for pid, (cmd, kb, _) in out.tree.items() if pid not in ranks | unexeced]
            kinds: dict[str, int] = {}
            for cmd, _ in own:
                kinds[describe(cmd)] = kinds.get(describe(cmd), 0) + 1
            runs[launcher.name].append({"mb": sum(kb for _, kb in own) / 1024, "processes": kinds,
                                        "ranks_seen": len(ranks), "unexeced_forks_seen": len(unexeced)})
            shutil.rmtree(job.run_dir, ignore_errors=True)
    progress("memory: " + ", ".join(f"{k} {statistics.median(r['mb'] for r in v):.1f} MB" for k, v in runs.items()))
    return runs


# ---- report -----------------------------------------------------------------------------------

NOTES_MARK = "<!-- hand-written notes: compare.py keeps everything below this line -->"


def med(values) -> float | None:
    values = list(values)
    return statistics.median(values) if values else None


def fmt(value: float | None, digits: int = 2) -> str:
    return "-" if value is None else f"{value:.{digits}f}"


def ratio(value: float | None, floor: float | None) -> str:
    return "-" if value is None or not floor else f"{value / floor:.2f}"


def missing_row(launcher: Launcher, columns: int) -> str:
    return f"| {launcher.name} | not installed" + " | -" * (columns - 2) + " |"


def launch_table(data: dict, launchers: list[Launcher]) -> list[str]:
    sizes = list(data["launch"])
    head = "| launcher | " + " | ".join(f"{n} rank{'s' * (n != '1')} (s) | ratio" for n in sizes) + " |"
    lines = [head, "|---|" + "---:|---:|" * len(sizes)]
    for l in launchers:
        if l.missing:
            lines.append(missing_row(l, 1 + 2 * len(sizes)))
            continue
        cells = []
        for n in sizes:
            wall, floor = med(data["launch"][n][l.name]), med(data["launch"][n]["floor"])
            cells += [fmt(wall, 3), ratio(wall, floor)]
        lines.append(f"| {l.name} | " + " | ".join(cells) + " |")
    return lines


def failure_table(runs: dict, launchers: list[Launcher]) -> list[str]:
    lines = [("| launcher | grace (SIGTERM -> SIGKILL) | failure -> launcher exit (s) | ratio | ranks left at exit"
             " | failure -> all ranks gone (s) | launcher's exit code |"), "|---|---|---:|---:|---:|---:|---|"]
    floor = med(r["exit_s"] for r in runs.get("floor", []))
    for l in launchers:
        if l.missing:
            lines.append(missing_row(l, 7))
            continue
        rs = runs[l.name]
        exit_s = med(r["exit_s"] for r in rs)
        codes = sorted({str(r["code"]) for r in rs})
        lines.append(f"| {l.name} | {l.grace} | {fmt(exit_s, 3)} | {ratio(exit_s, floor)} | "
                     f"{fmt(med(r['left_at_exit'] for r in rs), 0)} | {fmt(med(r['gone_s'] for r in rs), 3)} | "
                     f"{', '.join(codes)} |")
    return lines


def logs_table(runs: dict, launchers: list[Launcher], n: int, lines_per_rank: int) -> list[str]:
    lines = [("| launcher | wall (s) | ratio | CPU of the whole run (s) | ratio | launcher's own CPU (s) | "
             "lines in its per-rank logs |"), "|---|---:|---:|---:|---:|---:|---|"]
    floor_wall, floor_cpu = (med(r[k] for r in runs.get("floor", [])) for k in ("wall_s", "cpu_s"))
    for l in launchers:
        if l.missing:
            lines.append(missing_row(l, 7))
            continue
        rs = runs[l.name]
        wall, cpu = med(r["wall_s"] for r in rs), med(r["cpu_s"] for r in rs)
        own = "-" if l.name == "floor" or cpu is None or floor_cpu is None else fmt(cpu - floor_cpu)
        got = [sum(r["lines"]) for r in rs]
        short = [r for r in rs if any(c != lines_per_rank for c in r["lines"])]
        arrived = (f"all {n} x {lines_per_rank:,} in {len(rs)} runs" if not short else
                   f"MISSING: {min(got):,} of {n * lines_per_rank:,} (worst run)")
        lines.append(f"| {l.name} | {fmt(wall)} | {ratio(wall, floor_wall)} | {fmt(cpu)} | "
                     f"{ratio(cpu, floor_cpu)} | {own} | {arrived} |")
    return lines


def memory_table(runs: dict, launchers: list[Launcher]) -> list[str]:
    lines = ["| launcher | peak RSS (MB) | ratio | processes counted (last run) |", "|---|---:|---:|---|"]
    floor = med(r["mb"] for r in runs.get("floor", []))
    for l in launchers:
        if l.missing:
            lines.append(missing_row(l, 4))
            continue
        rs = runs[l.name]
        mb = med(r["mb"] for r in rs)
        kinds = ", ".join(f"{count} x `{kind}`" for kind, count in sorted(rs[-1]["processes"].items()))
        lines.append(f"| {l.name} | {fmt(mb, 1)} | {ratio(mb, floor)} | {kinds} |")
    return lines


def render(data: dict, launchers: list[Launcher], cfg: dict) -> str:
    m = data["machine"]
    out = ["# npulaunch beside the other launchers", "",
           (f"`python3 bench/compare.py{' --smoke' if cfg['smoke'] else ''}`, {m['date']}: {m['cores']} cores, "
           f"Python {m['python']}, Linux {m['kernel']}, load average {m['load_before']} before the run; "
           f"{m['run_s']:.0f} s in all. Launchers alternated ({', '.join(l.name for l in launchers if not l.missing)}, "
           f"floor, ...); medians of {cfg['repeats']} runs ({cfg['heavy']} for the log test and the "
           "ranks that ignore SIGTERM). Every launcher's console goes to /dev/null."), "",
           "| launcher | version | how it is run |", "|---|---|---|"]
    how = {"floor": "`python3 -c FLOOR N DIR GRACE CMD...`: Popen per rank (RANK_ID, RANK_SIZE, DEVICE_ID),"
                    " stdout+stderr to DIR/rankN.log, os.wait(); on a failure SIGTERM, SIGKILL after GRACE",
           "bash": "`for r ...; do RANK_ID=$r RANK_SIZE=$n DEVICE_ID=$r CMD 2>&1 \\| tee DIR/rank$r.log & done; wait`",
           "torchrun": "`bench/.venv/bin/python -m torch.distributed.run --standalone --nproc-per-node N "
                       "--log-dir DIR --redirects 3 --tee 3 --shutdown-timeout 2 --no-python CMD...` "
                       "(defaults kept: --monitor-interval 0.1, --start-method spawn, --max-restarts 0)",
           "npulaunch": f"`python3 -m npulaunch run --nproc-per-node N --log-dir DIR --job-id job --console none "
                        f"--grace-period {GRACE_S} -- CMD...` (--console all in the log test)",
           "msrun": "`bench/.venv/bin/msrun --worker_num N --local_worker_num N --log_dir DIR --join True python3 "
                    "ARGS...` (python3 on PATH is this interpreter)"}
    for l in launchers:
        out.append(f"| {l.name} | {l.missing or l.version} | {how[l.name]} |")
    out += ["", "Every rank is `python3 -S rank.py MODE ... MARKER`; the marker finds the ranks in /proc.", "",
            "## 1. Launch overhead", "",
            "Wall time of N trivial ranks (print the rank, exit), and its ratio to the floor's.", ""]
    out += launch_table(data, launchers)
    f = cfg["failure"]
    for key, title in (("failure_term", "ranks honour SIGTERM"), ("failure_ignore", "ranks ignore SIGTERM")):
        if key not in data:
            continue
        out += ["", f"## 2. Failure propagation: {title}", "",
                (f"{f['n']} ranks; rank {min(3, f['n'] - 1)} writes time.time() to a file and exits 1 after "
                f"{f['after_s']:g} s, the others sleep {f['sleep_s']:g} s. From that time to the launcher's exit; "
                "ranks still alive then are counted (scanning /proc for the run's marker) and waited for."), ""]
        out += failure_table(data[key], launchers)
    lg = cfg["logs"]
    out += ["", "## 3. Log throughput", "",
            (f"{lg['n']} ranks x {lg['lines']:,} lines of 80 bytes. CPU = RUSAGE_CHILDREN over the run (launcher, "
            "its helpers, the ranks; orphans are reaped by this script as subreaper); the launcher's own CPU = "
            "that minus the floor's (ranks writing files directly). Lines counted in each launcher's per-rank "
            "log files."), ""]
    out += logs_table(data["logs"], launchers, lg["n"], lg["lines"])
    mm = cfg["memory"]
    out += ["", "## 4. Launcher memory", "",
            (f"{mm['n']} ranks sleeping {mm['sleep_s']:g} s. The launcher's process tree without the ranks, sampled "
            "every 10 ms from /proc; VmHWM of each process at its last sample, summed (MB = 2^20 bytes)."), ""]
    out += memory_table(data["memory"], launchers)
    if data["errors"]:
        out += ["", "## Problems seen during the run", ""] + [f"- {e}" for e in data["errors"]]
    return "\n".join(out) + "\n"


def write_report(out_dir: str, data: dict, launchers: list[Launcher], cfg: dict) -> str:
    os.makedirs(out_dir, exist_ok=True)
    with open(os.path.join(out_dir, "compare.json"), "w") as f:
        json.dump(data, f, indent=1)
    path = os.path.join(out_dir, "compare.md")
    kept = ""
    if os.path.exists(path):
        with open(path) as f:
            text = f.read()
        if NOTES_MARK in text:
            kept = text[text.index(NOTES_MARK):]
    with open(path, "w") as f:
        f.write(render(data, launchers, cfg) + ("\n" + kept if kept else ""))
    return path


# ---- main -------------------------------------------------------------------------------------

def config(args: argparse.Namespace) -> dict:
    if args.smoke:
        return {"smoke": True, "repeats": 1, "heavy": 1, "sizes": [2],
                "failure": {"n": 4, "after_s": 0.2, "sleep_s": 2.0, "ignore": False},
                "logs": {"n": 8, "lines": 2000}, "memory": {"n": 4, "sleep_s": 0.5}}
    return {"smoke": False, "repeats": args.repeats, "heavy": args.heavy_repeats, "sizes": [1, 8, 32],
            "failure": {"n": 8, "after_s": 1.0, "sleep_s": 20.0, "ignore": True},
            "logs": {"n": 8, "lines": 200_000}, "memory": {"n": 32, "sleep_s": 2.0}}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--smoke", action="store_true", help="tiny sizes, 1 run each (CI: does it still work?)")
    parser.add_argument("--repeats", type=int, default=5, help="runs per launcher (default 5)")
    parser.add_argument("--heavy-repeats", type=int, default=3,
                        help="runs for the log test and the SIGTERM-ignoring ranks (default 3)")
    parser.add_argument("--out", help="where compare.md and compare.json go (default bench/results; "
                                      "with --smoke a temporary directory)")
    args = parser.parse_args()
    cfg = config(args)
    out_dir = args.out or (tempfile.mkdtemp(prefix="npl-compare-out-") if args.smoke
                           else os.path.join(HERE, "results"))
    become_subreaper()
    started, load = time.monotonic(), os.getloadavg()[0]
    work = tempfile.mkdtemp(prefix="npl-compare-")
    shim = os.path.join(work, "bin")
    os.makedirs(shim)
    launchers = build_launchers(shim)
    # PYTHONDONTWRITEBYTECODE would make every Python launcher compile its modules on every start
    # (npulaunch: ~25 ms), which is not how users run them; bytecode is written once, below.
    env = {k: v for k, v in os.environ.items()
           if k not in ("RANK_ID", "RANK", "RANK_SIZE", "DEVICE_ID", "MS_ROLE", "PYTHONDONTWRITEBYTECODE")}
    env["PATH"] = shim + os.pathsep + env.get("PATH", "")
    subprocess.run([sys.executable, "-m", "npulaunch", "--help"], env=env, stdout=subprocess.DEVNULL)
    bench = Bench(work, launchers, env)
    with open(bench.rank_py, "w") as f:
        f.write(RANK_PY)
    for l in launchers:
        progress(f"{l.name}: {l.missing or l.version}")
    f = cfg["failure"]
    data: dict = {}
    try:
        data["launch"] = measure_launch(bench, cfg["sizes"], cfg["repeats"])
        data["failure_term"] = measure_failure(bench, False, cfg["repeats"], f["n"], f["after_s"], f["sleep_s"])
        if f["ignore"]:
            data["failure_ignore"] = measure_failure(bench, True, cfg["heavy"], f["n"], f["after_s"], f["sleep_s"])
        data["logs"] = measure_logs(bench, cfg["heavy"], cfg["logs"]["n"], cfg["logs"]["lines"])
        data["memory"] = measure_memory(bench, cfg["repeats"], cfg["memory"]["n"], cfg["memory"]["sleep_s"])
    finally:
        shutil.rmtree(work, ignore_errors=True)
    data["errors"] = bench.errors
    data["config"] = cfg
    data["launchers"] = {l.name: {"version": l.version, "missing": l.missing, "grace": l.grace} for l in launchers}
    data["machine"] = {"cores": os.cpu_count(), "python": platform.python_version(), "kernel": platform.release(),
                       "load_before": f"{load:.2f}", "date": time.strftime("%Y-%m-%d"),
                       "run_s": time.monotonic() - started}
    path = write_report(out_dir, data, launchers, cfg)
    progress(f"{time.monotonic() - started:.0f} s; wrote {path} and compare.json")
    with open(path) as f:
        print(f.read())


if __name__ == "__main__":
    main()
