"""The performance goals of issue 18 (and the flood figure of issue 15), each row side by side with its
floor in one run, with the launcher's own CPU time and peak RSS on every row.

The floor is a minimal Python launcher that starts N processes with their environment (RANK_ID,
RANK_SIZE, DEVICE_ID), each writing straight to its file, and waits; on a failure it sends SIGTERM,
then SIGKILL after the grace period. Every launcher runs under a small wrapper that records its own
resource usage at exit (getrusage(RUSAGE_SELF): its CPU, threads included; VmHWM: its peak RSS), so
the ranks' CPU never counts as the launcher's. Floor and npulaunch alternate (A B A B ...); medians.
Ranks are ``python3 -S``, unbuffered (PYTHONUNBUFFERED=1) for both, as npulaunch makes them.

Rows: launch 8 / 32 trivial ranks; 8 ranks x 200,000 lines of 80 bytes to files (wall, the launcher's
CPU and RSS); a rank's failure -> the launcher's exit, 8 sleeping ranks, and during such a flood;
``npulaunch plan --json`` for 2,048 hosts x 16 NPUs with a rank table (no floor); SSH start-up of 6
hosts against 1 (root only: network-namespace hosts, bench/ssh_startup.py).

Usage: ``python3 bench/goals.py [--smoke] [--repeats 7] [--out bench/results]``; writes goals.md,
goals.json and, with matplotlib, goals.png.
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
import statistics
import subprocess
import sys
import tempfile
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Callable, Dict, List, Optional

HERE = Path(__file__).resolve().parent
sys.path.insert(0, str(HERE))
from launchers import FLOOR  # noqa: E402  (the floor compare.py measures too: Popen, wait, TERM/KILL on a failure)

ROOT = HERE.parent
PY = sys.executable

# Runs a launcher (a script path or -m module, then its arguments) and writes its own usage to OUT.
WRAP = r"""
import atexit, json, resource, runpy, sys
out = sys.argv[1]
def usage():
    r = resource.getrusage(resource.RUSAGE_SELF)
    # VmHWM, not ru_maxrss: ru_maxrss keeps the peak of the process image before exec (the forked parent's)
    with open("/proc/self/status") as f:
        hwm = [int(line.split()[1]) for line in f if line.startswith("VmHWM:")][0]
    with open(out, "w") as f:
        json.dump({"cpu_s": r.ru_utime + r.ru_stime, "rss_mb": hwm / 1024}, f)
atexit.register(usage)
if sys.argv[2] == "-m":
    sys.argv = [sys.argv[3]] + sys.argv[4:]
    runpy.run_module(sys.argv[0], run_name="__main__", alter_sys=True)
else:
    sys.argv = sys.argv[2:]
    runpy.run_path(sys.argv[0], run_name="__main__")
"""


RANK = r"""
import os, sys, time
rank = int(os.environ["RANK_ID"])
mode = sys.argv[1]
if mode == "print":  # and, given a file, when it started (appended: one line per rank)
    print(rank)
    if len(sys.argv) > 2:
        with open(sys.argv[2], "a") as f:
            f.write("%r\n" % time.time())
elif mode == "spam":
    w = sys.stdout.write
    for i in range(int(sys.argv[2])):
        w("line %07d rank %02d %s\n" % (i, rank, "x" * 58))
elif mode in ("fail", "flood-fail"):  # rank 3 writes the time to STAMP and exits 1 after 1 s
    start, i = time.monotonic(), 0
    while True:
        if mode == "flood-fail":
            for _ in range(200):
                sys.stdout.write("line %07d rank %02d %s\n" % (i, rank, "x" * 58))
                i += 1
        else:
            time.sleep(0.01)
        if rank == 3 and time.monotonic() - start > float(sys.argv[3]):
            with open(sys.argv[2], "w") as f:
                f.write(repr(time.time()))
            os._exit(1)
        if time.monotonic() - start > 30:
            break
"""


def count_newlines(path: Path) -> int:
    count = 0
    with open(path, "rb") as f:
        for chunk in iter(lambda: f.read(1 << 20), b""):
            count += chunk.count(b"\n")
    return count


@dataclass
class Run:
    wall_s: float
    cpu_s: float  # the launcher's own
    rss_mb: float  # the launcher's own peak
    exit_s: Optional[float] = None  # failure -> launcher exit
    first_s: Optional[float] = None  # launch -> the first rank's first statement
    last_s: Optional[float] = None  # launch -> the last rank's


class Bench:
    def __init__(self, work: Path) -> None:
        self.work = work
        self.count = 0
        self.rank_py = work / "rank.py"
        self.rank_py.write_text(RANK)
        self.floor_py = work / "floor.py"
        self.floor_py.write_text(FLOOR)
        self.env = {k: v for k, v in os.environ.items() if k not in ("PYTHONDONTWRITEBYTECODE", "RANK_ID", "RANK_SIZE")}
        self.env["PYTHONUNBUFFERED"] = "1"
        self.env["PYTHONPATH"] = str(ROOT)

    def run(self, launcher: str, n: int, mode: List[str], grace: float = 2.0) -> Run:
        self.count += 1
        run_dir = self.work / f"{launcher}-{self.count}"
        run_dir.mkdir()
        usage = run_dir / "usage.json"
        stamp = run_dir / "failed-at"
        args = [a.replace("{stamp}", str(stamp)) for a in mode]
        cmd = [PY, "-S", str(self.rank_py), *args]
        if launcher == "floor":
            argv = [str(self.floor_py), str(n), str(run_dir), str(grace), *cmd]
        else:
            argv = ["-m", "npulaunch", "run", "--nproc-per-node", str(n), "--log-dir", str(run_dir)]
            argv += ["--job-id", "job", "--console", "all", "--grace-period", str(grace), "--", *cmd]
        start = time.time()
        subprocess.run(
            [PY, "-c", WRAP, str(usage), *argv], env=self.env, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL
        )
        end = time.time()
        own = json.loads(usage.read_text()) if usage.exists() else {"cpu_s": float("nan"), "rss_mb": float("nan")}
        stamps = sorted(float(line) for line in stamp.read_text().split()) if stamp.exists() else []
        exit_s = end - stamps[0] if stamps and mode[0] != "print" else None
        first_s, last_s = (stamps[0] - start, stamps[-1] - start) if stamps and mode[0] == "print" else (None, None)
        if mode[0] == "spam":
            logs = sorted(run_dir.glob("rank*.log")) + sorted(run_dir.glob("job/rank-*/stdout.log"))
            lines = sum(count_newlines(path) for path in logs)
            assert lines == n * int(mode[1]), f"{launcher}: {lines} lines in its logs, not {n * int(mode[1])}"
        shutil.rmtree(run_dir, ignore_errors=True)
        return Run(end - start, own["cpu_s"], own["rss_mb"], exit_s, first_s, last_s)

    def pair(self, repeats: int, n: int, mode: List[str]) -> Dict[str, List[Run]]:
        runs: Dict[str, List[Run]] = {"floor": [], "npulaunch": []}
        for _ in range(repeats):
            for launcher in runs:
                runs[launcher].append(self.run(launcher, n, mode))
        return runs


def median(runs: List[Run], key: Callable[[Run], Optional[float]]) -> float:
    values = [v for v in (key(r) for r in runs) if v is not None]
    return statistics.median(values) if values else float("nan")


def plan_json(work: Path, hosts: int, devices: int, repeats: int) -> List[Run]:
    from plan_scale import write_config

    config = write_config(work, hosts, devices)
    runs = []
    for _ in range(repeats):
        usage = work / "plan-usage.json"
        start = time.time()
        with open(os.devnull, "w") as sink:
            subprocess.run(
                [PY, "-c", WRAP, str(usage), "-m", "npulaunch", "plan", str(config), "--json"],
                env=dict(os.environ, PYTHONPATH=str(ROOT)),
                stdout=sink,
                check=True,
            )
        own = json.loads(usage.read_text())
        runs.append(Run(time.time() - start, own["cpu_s"], own["rss_mb"]))
    return runs


def ssh_startup(counts: List[int], repeats: int) -> Optional[Dict[str, Dict[int, List[float]]]]:
    """run -> every rank started, for each host count (bench/ssh_startup.py's test hosts), for
    npulaunch and for the floor (plain ssh, the same ranks), alternated; None when this is not root."""
    if os.geteuid() != 0:
        return None
    from ssh_startup import BENCH_NET, NetnsHosts, floor_once, job, once

    root = Path(tempfile.mkdtemp(prefix="npl-goals-ssh-"))
    hosts = NetnsHosts(root / "hosts", max(counts + [3]), BENCH_NET).up()
    try:
        configs = {count: job(root, hosts, count, "print(1)") for count in counts}
        started: Dict[str, Dict[int, List[float]]] = {who: {c: [] for c in counts} for who in ("floor", "npulaunch")}
        for i in range(repeats):
            for count in counts:
                started["floor"][count].append(floor_once(hosts, count))
                started["npulaunch"][count].append(once(configs[count], f"g{count}-{i}")[0])
        return started
    finally:
        hosts.down()
        shutil.rmtree(root, ignore_errors=True)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--smoke", action="store_true", help="tiny sizes, one run each (CI: does it still work?)")
    parser.add_argument("--repeats", type=int, default=7)
    parser.add_argument("--out", help="default bench/results (with --smoke, a temporary directory)")
    parser.add_argument(
        "--only", help="some rows: launch, logs, failure, flood, plan, ssh (comma-separated; for profiling work)"
    )
    args = parser.parse_args()
    smoke = args.smoke
    repeats = 1 if smoke else args.repeats
    heavy = 1 if smoke else max(3, repeats // 2)
    out = Path(args.out or (tempfile.mkdtemp(prefix="npl-goals-") if smoke else HERE / "results"))
    out.mkdir(parents=True, exist_ok=True)
    work = Path(tempfile.mkdtemp(prefix="npl-goals-work-"))
    lines = 2000 if smoke else 200_000
    plan_hosts, plan_devices = (8, 16) if smoke else (2048, 16)
    subprocess.run(
        [PY, "-m", "npulaunch", "--help"], env={**os.environ, "PYTHONPATH": str(ROOT)}, stdout=subprocess.DEVNULL
    )
    bench = Bench(work)
    for launcher in ("floor", "npulaunch"):  # warm-up: bytecode and npulaunch's code cache written, as users have
        bench.run(launcher, 2, ["print"])
    started = time.monotonic()
    data: Dict[str, Dict[str, List[Run]]] = {}
    only = set(args.only.split(",")) if args.only else {"launch", "logs", "failure", "flood", "plan", "ssh"}
    ssh = None
    try:
        for n in (8, 32) if "launch" in only else ():
            data[f"launch-{n}"] = bench.pair(repeats, n, ["print", "{stamp}"])
            progress(f"launch {n}", data[f"launch-{n}"])
        if "logs" in only:
            data["logs"] = bench.pair(heavy, 8, ["spam", str(lines)])
            progress("logs", data["logs"])
        if "failure" in only:
            data["failure"] = bench.pair(repeats, 8, ["fail", "{stamp}", "1.0"])
            progress("failure", data["failure"])
        if "flood" in only:
            data["flood-failure"] = bench.pair(heavy, 8, ["flood-fail", "{stamp}", "1.0"])
            progress("flood failure", data["flood-failure"])
        if "plan" in only:
            data["plan"] = {"npulaunch": plan_json(work, plan_hosts, plan_devices, heavy)}
            progress("plan --json", data["plan"])
        if "ssh" in only:
            ssh = ssh_startup([1, 2] if smoke else [1, 6], 1 if smoke else 5)
    finally:
        shutil.rmtree(work, ignore_errors=True)
    rows = table(data, ssh, plan_hosts * plan_devices, lines)
    text = render(rows, repeats, heavy, time.monotonic() - started) + rank_starts(data)
    (out / "goals.md").write_text(text)
    (out / "goals.json").write_text(
        json.dumps(
            {
                "rows": rows,
                "runs": {k: {ln: [r.__dict__ for r in v] for ln, v in d.items()} for k, d in data.items()},
                "ssh": ssh,
            },
            indent=1,
        )
    )
    plot(rows, out / "goals.png")
    print(text)


def progress(name: str, runs: Dict[str, List[Run]]) -> None:
    parts = [f"{k} {median(v, lambda r: r.wall_s):.3f} s" for k, v in runs.items()]
    print(f"{name}: " + ", ".join(parts), file=sys.stderr, flush=True)


def table(
    data: Dict[str, Dict[str, List[Run]]], ssh: Optional[Dict[str, Dict[int, List[float]]]], ranks: int, lines: int
) -> list:
    """The rows of the issue's table: (figure, floor, npulaunch, ratio or value, goal, met, CPU, RSS)."""
    rows = []

    def row(name: str, key: str, what: Callable[[Run], Optional[float]], goal: float, ratio: bool, unit: str) -> None:
        if key not in data:
            return
        runs = data[key]
        mine = median(runs["npulaunch"], what)
        floor = median(runs["floor"], what) if "floor" in runs else None
        value = mine / floor if ratio and floor else mine
        rows.append(
            {
                "figure": name,
                "floor": floor,
                "npulaunch": mine,
                "unit": unit,
                "value": value,
                "goal": goal,
                "ratio": ratio,
                "met": value <= goal,
                "cpu_s": median(runs["npulaunch"], lambda r: r.cpu_s),
                "rss_mb": median(runs["npulaunch"], lambda r: r.rss_mb),
                "floor_cpu_s": median(runs["floor"], lambda r: r.cpu_s) if "floor" in runs else None,
                "floor_rss_mb": median(runs["floor"], lambda r: r.rss_mb) if "floor" in runs else None,
            }
        )

    row("launch 8 trivial ranks", "launch-8", lambda r: r.wall_s, 1.3, True, "s")
    row("launch 32 trivial ranks", "launch-32", lambda r: r.wall_s, 1.15, True, "s")
    row(f"8 ranks x {lines:,} lines to files", "logs", lambda r: r.wall_s, 1.2, True, "s")
    row("launcher CPU for those lines", "logs", lambda r: r.cpu_s, 0.4 * lines / 200_000, False, "s")
    row("launcher RSS during that run", "logs", lambda r: r.rss_mb, 40, False, "MB")
    row(f"plan --json, {ranks:,} ranks", "plan", lambda r: r.wall_s, 0.5 * ranks / 32768, False, "s")
    row(f"plan --json, {ranks:,} ranks: peak RSS", "plan", lambda r: r.rss_mb, 64, False, "MB")
    row("rank failure -> launcher exit, 8 ranks", "failure", lambda r: r.exit_s, 0.03, False, "s")
    row("rank failure -> launcher exit during a flood", "flood-failure", lambda r: r.exit_s, 0.5, False, "s")
    if ssh:
        counts = sorted(ssh["npulaunch"])

        def growth(runs: Dict[int, List[float]]) -> float:
            return statistics.median(runs[counts[-1]]) / statistics.median(runs[counts[0]])

        mine, floor = growth(ssh["npulaunch"]), growth(ssh["floor"])
        rows.append(
            {
                "figure": f"SSH start-up, {counts[-1]} hosts vs {counts[0]}",
                "floor": floor,
                "npulaunch": mine,
                "unit": "x",
                "value": mine,
                "goal": 1.3,
                "ratio": True,
                "met": mine <= 1.3,
                "cpu_s": None,
                "rss_mb": None,
                "floor_cpu_s": None,
                "floor_rss_mb": None,
                "seconds": {k: {c: statistics.median(v) for c, v in runs.items()} for k, runs in ssh.items()},
            }
        )
    return rows


def render(rows: list, repeats: int, heavy: int, took: float) -> str:
    def num(value: Optional[float], unit: str) -> str:
        if value is None:
            return "-"
        return f"{value:.3f} s" if unit == "s" else f"{value:.2f}x" if unit == "x" else f"{value:.1f} {unit}"

    out = [
        f"`python3 bench/goals.py`, {time.strftime('%Y-%m-%d')}: {os.cpu_count()} cores, Python "
        f"{sys.version.split()[0]}; medians of {repeats} runs ({heavy} for the log, flood and plan rows), "
        f"floor and npulaunch alternated; {took:.0f} s in all. CPU and RSS are each launcher's own "
        "(CPU from getrusage, peak RSS from VmHWM, at its exit), never its ranks'. "
        "The SSH row compares growths: the start-up of the most hosts over that of one, for npulaunch and for "
        "its floor (OpenSSH's client starting the same ranks, one session a host: the sshd, login shell and "
        "rank start-up every test host pays, on this machine's shared cores).",
        "",
        "| figure | floor | npulaunch | ratio / value | goal | met "
        "| npulaunch CPU | npulaunch peak RSS | floor CPU | floor RSS |",
        "|---|---:|---:|---:|---:|---|---:|---:|---:|---:|",
    ]
    for r in rows:
        value = f"{r['value']:.2f}x" if r["ratio"] else num(r["value"], r["unit"])
        goal = f"<= {r['goal']:g}x" if r["ratio"] else f"<= {r['goal']:g} {r['unit']}"
        out.append(
            f"| {r['figure']} | {num(r['floor'], r['unit'])} | {num(r['npulaunch'], r['unit'])} | {value} | {goal} | "
            f"{'yes' if r['met'] else '**no**'} | {num(r['cpu_s'], 's')} | {num(r['rss_mb'], 'MB')} | "
            f"{num(r['floor_cpu_s'], 's')} | {num(r['floor_rss_mb'], 'MB')} |"
        )
    for r in rows:
        if r.get("seconds"):
            times = {who: " -> ".join(f"{s:.2f} s" for _, s in sorted(by.items())) for who, by in r["seconds"].items()}
            counts = " and ".join(f"{c} host{'s' * (c != 1)}" for c in sorted(r["seconds"]["floor"]))
            out.append(
                f"\nSSH start-up (run -> every rank started), {counts}: floor {times['floor']}, "
                f"npulaunch {times['npulaunch']}."
            )
    return "\n".join(out) + "\n"


def rank_starts(data: Dict[str, Dict[str, List[Run]]]) -> str:
    """Where a launch's time goes: when the first and the last rank started, for each launcher."""
    out = []
    for key in sorted((k for k in data if k.startswith("launch-")), key=lambda k: int(k.split("-")[1])):
        parts = []
        for who, runs in data[key].items():
            first, last = median(runs, lambda r: r.first_s), median(runs, lambda r: r.last_s)
            parts.append(f"{who} {first * 1000:.0f} / {last * 1000:.0f} ms")
        out.append(f"- {key.split('-')[1]} ranks: " + ", ".join(parts))
    if not out:
        return ""
    head = "\nLaunch, run -> the first / the last rank's first statement (medians):"
    return "\n".join([head, *out]) + "\n"


def plot(rows: list, path: Path) -> None:
    """Each figure as a fraction of its goal (1.0 = the goal; below is met)."""
    try:
        import matplotlib

        matplotlib.use("Agg")
        import matplotlib.pyplot as plt
    except ImportError:
        print("matplotlib not installed: no goals.png (bash bench/setup.sh)", file=sys.stderr)
        return
    names = [r["figure"] for r in rows][::-1]
    shares = [r["value"] / r["goal"] for r in rows][::-1]
    fig, ax = plt.subplots(figsize=(9, 0.45 * len(rows) + 1.2))
    ax.barh(names, shares, color=["tab:green" if s <= 1 else "tab:red" for s in shares])
    ax.axvline(1.0, color="black", linewidth=1)
    ax.set_xlim(0, max(shares + [1.0]) * 1.12)  # room for the labels
    ax.set_xlabel("figure / goal (1.0 = the goal of issue 18; left of the line is met)")
    for y, share in enumerate(shares):
        ax.text(share, y, f" {share:.2f}", va="center", fontsize=8)
    fig.tight_layout()
    fig.savefig(path, dpi=110)


if __name__ == "__main__":
    main()
