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
import os
import platform
import shutil
import statistics
import subprocess
import sys
import tempfile
import time
from dataclasses import dataclass, field

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from compare_report import write_report  # noqa: E402
from launchers import HERE, PY, RANK_PY, Job, Launcher, build_launchers  # noqa: E402
from procwatch import Outcome, become_subreaper, launch, marked, stop_survivors  # noqa: E402


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
        return [ln for ln in self.launchers if not ln.missing]

    def job(self, launcher: Launcher, n: int, mode: list[str], console: str = "none") -> tuple:
        """(Job, marker): a fresh run directory ("{run_dir}" in mode), a marker in every rank's argv."""
        self.count += 1
        marker = f"npl-compare-{os.getpid()}-{self.count}"
        run_dir = os.path.join(self.work, f"{launcher.name}-{self.count}")
        os.makedirs(run_dir)
        mode = [arg.replace("{run_dir}", run_dir) for arg in mode]
        return Job(n, [PY, "-S", self.rank_py, *mode, marker], run_dir, console), marker

    def run(self, launcher: Launcher, job: Job, marker: str, expect: int | None = 0, sample_ms: float = 0) -> Outcome:
        out = launch(launcher.argv(job), self.env, sample_ms)
        if expect is None:
            return out
        if out.code != expect:
            self.errors.append(
                f"{launcher.name}: exit code {out.code} (expected {expect}) for {job.n} ranks, `{job.cmd[3]}`"
            )
        left = marked(marker)
        if left:
            self.errors.append(f"{launcher.name}: {len(left)} ranks still running after a `{job.cmd[3]}` run")
            stop_survivors(marker, 0)
        return out


def progress(text: str) -> None:
    print(text, file=sys.stderr, flush=True)


def measure_launch(bench: Bench, sizes: list[int], repeats: int) -> dict:
    walls: dict = {str(n): {ln.name: [] for ln in bench.ready} for n in sizes}
    for n in sizes:
        for _ in range(repeats):
            for launcher in bench.ready:
                job, marker = bench.job(launcher, n, ["print"])
                walls[str(n)][launcher.name].append(bench.run(launcher, job, marker).wall_s)
                shutil.rmtree(job.run_dir, ignore_errors=True)
        progress(
            f"launch {n} ranks: " + ", ".join(f"{k} {statistics.median(v):.3f} s" for k, v in walls[str(n)].items())
        )
    return walls


def measure_failure(bench: Bench, ignore_term: bool, repeats: int, n: int, after_s: float, sleep_s: float) -> dict:
    """Rank 3 (or the last) exits 1 after after_s; the others sleep sleep_s."""
    runs: dict = {ln.name: [] for ln in bench.ready}
    failing = min(3, n - 1)
    for _ in range(repeats):
        for launcher in bench.ready:
            job, marker = bench.job(
                launcher,
                n,
                ["fail", str(failing), str(after_s), str(sleep_s), "{run_dir}/failed-at", "1" if ignore_term else "0"],
            )
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
            runs[launcher.name].append(
                {
                    "exit_s": exit_s,
                    "gone_s": max(exit_s, gone - failed) if left else exit_s,
                    "left_at_exit": left,
                    "code": out.code,
                }
            )
            shutil.rmtree(job.run_dir, ignore_errors=True)
    progress(
        f"failure ({'SIGTERM ignored' if ignore_term else 'SIGTERM honoured'}): "
        + ", ".join(f"{k} {statistics.median(r['exit_s'] for r in v):.2f} s" for k, v in runs.items() if v)
    )
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
    runs: dict = {ln.name: [] for ln in bench.ready}
    for _ in range(repeats):
        for launcher in bench.ready:
            job, marker = bench.job(launcher, n, ["spam", str(lines)], console="all")
            out = bench.run(launcher, job, marker)
            runs[launcher.name].append(
                {
                    "wall_s": out.wall_s,
                    "cpu_s": out.cpu_s,
                    "lines": [count_lines(paths) for paths in launcher.logs(job)],
                }
            )
            shutil.rmtree(job.run_dir, ignore_errors=True)
    progress("logs: " + ", ".join(f"{k} {statistics.median(r['wall_s'] for r in v):.2f} s" for k, v in runs.items()))
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
    runs: dict = {ln.name: [] for ln in bench.ready}
    for _ in range(repeats):
        for launcher in bench.ready:
            job, marker = bench.job(launcher, n, ["sleep", str(sleep_s)])
            out = bench.run(launcher, job, marker, sample_ms=10)
            ranks = {pid for pid, (cmd, _, _) in out.tree.items() if cmd[1:3] == ["-S", bench.rank_py]}
            # A child seen between fork and exec still shows its parent's argv and (vfork) its memory.
            unexeced = {
                pid for pid, (cmd, _, ppid) in out.tree.items() if ppid in out.tree and out.tree[ppid][0] == cmd
            }
            own = [(cmd, kb) for pid, (cmd, kb, _) in out.tree.items() if pid not in ranks | unexeced]
            kinds: dict[str, int] = {}
            for cmd, _ in own:
                kinds[describe(cmd)] = kinds.get(describe(cmd), 0) + 1
            runs[launcher.name].append(
                {
                    "mb": sum(kb for _, kb in own) / 1024,
                    "processes": kinds,
                    "ranks_seen": len(ranks),
                    "unexeced_forks_seen": len(unexeced),
                }
            )
            shutil.rmtree(job.run_dir, ignore_errors=True)
    progress("memory: " + ", ".join(f"{k} {statistics.median(r['mb'] for r in v):.1f} MB" for k, v in runs.items()))
    return runs


# ---- report -----------------------------------------------------------------------------------


def config(args: argparse.Namespace) -> dict:
    if args.smoke:
        return {
            "smoke": True,
            "repeats": 1,
            "heavy": 1,
            "sizes": [2],
            "failure": {"n": 4, "after_s": 0.2, "sleep_s": 2.0, "ignore": False},
            "logs": {"n": 8, "lines": 2000},
            "memory": {"n": 4, "sleep_s": 0.5},
        }
    return {
        "smoke": False,
        "repeats": args.repeats,
        "heavy": args.heavy_repeats,
        "sizes": [1, 8, 32],
        "failure": {"n": 8, "after_s": 1.0, "sleep_s": 20.0, "ignore": True},
        "logs": {"n": 8, "lines": 200_000},
        "memory": {"n": 32, "sleep_s": 2.0},
    }


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--smoke", action="store_true", help="tiny sizes, 1 run each (CI: does it still work?)")
    parser.add_argument("--repeats", type=int, default=5, help="runs per launcher (default 5)")
    parser.add_argument(
        "--heavy-repeats", type=int, default=3, help="runs for the log test and the SIGTERM-ignoring ranks (default 3)"
    )
    parser.add_argument(
        "--out", help="where compare.md and compare.json go (default bench/results; with --smoke a temporary directory)"
    )
    args = parser.parse_args()
    cfg = config(args)
    out_dir = args.out or (tempfile.mkdtemp(prefix="npl-compare-out-") if args.smoke else os.path.join(HERE, "results"))
    become_subreaper()
    started, load = time.monotonic(), os.getloadavg()[0]
    work = tempfile.mkdtemp(prefix="npl-compare-")
    shim = os.path.join(work, "bin")
    os.makedirs(shim)
    launchers = build_launchers(shim)
    # PYTHONDONTWRITEBYTECODE would make every Python launcher compile its modules on every start
    # (npulaunch: ~25 ms), which is not how users run them; bytecode is written once, below.
    env = {
        k: v
        for k, v in os.environ.items()
        if k not in ("RANK_ID", "RANK", "RANK_SIZE", "DEVICE_ID", "MS_ROLE", "PYTHONDONTWRITEBYTECODE")
    }
    env["PATH"] = shim + os.pathsep + env.get("PATH", "")
    subprocess.run([sys.executable, "-m", "npulaunch", "--help"], env=env, stdout=subprocess.DEVNULL)
    bench = Bench(work, launchers, env)
    with open(bench.rank_py, "w") as f:
        f.write(RANK_PY)
    for ln in launchers:
        progress(f"{ln.name}: {ln.missing or ln.version}")
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
    data["launchers"] = {ln.name: {"version": ln.version, "missing": ln.missing, "grace": ln.grace} for ln in launchers}
    data["machine"] = {
        "cores": os.cpu_count(),
        "python": platform.python_version(),
        "kernel": platform.release(),
        "load_before": f"{load:.2f}",
        "date": time.strftime("%Y-%m-%d"),
        "run_s": time.monotonic() - started,
    }
    path = write_report(out_dir, data, launchers, cfg)
    progress(f"{time.monotonic() - started:.0f} s; wrote {path} and compare.json")
    with open(path) as f:
        print(f.read())


if __name__ == "__main__":
    main()
