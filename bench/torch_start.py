"""The same N torch ranks from ``run`` to the first all-reduce done on every rank: npulaunch
(``framework: pytorch``) beside torchrun and the Popen floor in one run, with the launchers' own CPU
and memory.

Every rank runs one program: ``import torch``, ``init_process_group("gloo")`` from the environment
alone, one ``all_reduce`` of rank+1 (the sum is checked), then it writes the wall-clock times of its
first statement, of ``import torch`` done, of ``init_process_group`` done and of the all-reduce done to
a file of its own, and exits 0. Launchers: the floor (a minimal Python script that sets torchrun's
variables itself, MASTER_PORT a free port, and Popens and waits), ``torchrun --standalone`` and
``npulaunch run --framework pytorch``; each starts the same rank command. Alternated (A B C A B C);
medians. The launcher's own CPU is read from /proc/PID/stat once it has exited and before it is
reaped (``waitid(WNOWAIT)``: threads included, ranks and helpers not; 10 ms ticks); its peak RSS is
its VmHWM sampled every 20 ms; helper processes (npulaunch's guard) are sampled the same way.

Usage: ``python3 bench/torch_start.py [--smoke] [--repeats 5] [--out bench/results]``; writes
torch_start.md and torch_start.json. --smoke: 2 ranks, one run each, into a temporary directory.
"""

from __future__ import annotations

import argparse
import importlib.util
import json
import os
import platform
import shutil
import signal
import statistics
import subprocess
import sys
import tempfile
import threading
import time
from dataclasses import asdict, dataclass, field
from typing import Callable

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, HERE)
from launchers import PY, VENV_PY, dist_version, venv_or_system_python  # noqa: E402
from procwatch import RUN_TIMEOUT_S, become_subreaper, hwm_kb, marked, read_cmdline, reap_orphans  # noqa: E402

SAMPLE_S = 0.02
TICK_S = 1 / os.sysconf("SC_CLK_TCK")

# argv: STAMP_DIR. The stamp directory's path is also the run's marker in every rank's argv.
RANK_PY = r"""
import json, os, sys, time
started = time.time()
import torch
import torch.distributed as dist
imported = time.time()
dist.init_process_group("gloo")
joined = time.time()
rank, world = dist.get_rank(), dist.get_world_size()
total = torch.tensor([float(rank + 1)])
dist.all_reduce(total)
done = time.time()
with open(os.path.join(sys.argv[1], "rank%d.json" % rank), "w") as f:
    json.dump({"started": started, "imported": imported, "joined": joined, "done": done, "world": world,
               "sum": total.item(), "local_rank": os.environ.get("LOCAL_RANK"),
               "omp": os.environ.get("OMP_NUM_THREADS")}, f)
dist.destroy_process_group()
sys.exit(0 if total.item() == world * (world + 1) / 2 else 3)
"""

# torchrun's per-worker contract, set by hand: what a user's own Popen loop would do. Each rank in a
# session of its own, as torchrun and npulaunch start them: with autogroup scheduling (Linux's
# default) a session is one share of the CPU, so ranks sharing one would get 1/N of the others'.
FLOOR = r"""
import os, socket, subprocess, sys
n, logs = int(sys.argv[1]), sys.argv[2]
with socket.socket() as s:
    s.bind(("127.0.0.1", 0))
    port = s.getsockname()[1]
base = dict(os.environ, MASTER_ADDR="127.0.0.1", MASTER_PORT=str(port), WORLD_SIZE=str(n), LOCAL_WORLD_SIZE=str(n))
base.setdefault("OMP_NUM_THREADS", "1")
procs = []
for r in range(n):
    with open(os.path.join(logs, "rank%d.log" % r), "wb") as out:
        env = dict(base, RANK=str(r), LOCAL_RANK=str(r))
        procs.append(
            subprocess.Popen(sys.argv[3:], env=env, stdout=out, stderr=subprocess.STDOUT, start_new_session=True)
        )
sys.exit(int(any([p.wait() != 0 for p in procs])))
"""

PHASES = ("started", "imported", "joined", "done")


@dataclass
class Launcher:
    name: str
    version: str
    missing: str  # why it cannot run ("" when it can)
    argv: Callable[[int, str, list[str]], list[str]] = field(repr=False, default=lambda n, d, cmd: [])


@dataclass
class Run:
    code: int | None
    exit_s: float  # launcher start -> its exit
    cpu_s: float  # the launcher process's own (utime + stime, threads included)
    rss_mb: float  # its VmHWM, sampled
    helpers: dict[str, list[float]]  # helper's cmdline -> [CPU s, VmHWM MB], last sample
    first_started_s: float | None = None  # launcher start -> the first rank's first statement
    last: dict[str, float] = field(default_factory=dict)  # phase -> launcher start to the last rank's


def torchrun_launcher() -> Launcher:
    """bench/.venv's torchrun if there is one, else ``python -m torch.distributed.run`` (the venv's
    python, or this one) as compare.py runs it."""
    py = venv_or_system_python("torch")
    if not py:
        return Launcher("torchrun", "", "not installed (torch not importable; bash bench/setup.sh)")
    script = os.path.join(os.path.dirname(VENV_PY), "torchrun")
    head = [script] if os.path.exists(script) else [py, "-m", "torch.distributed.run"]
    where = "bench/.venv/bin/torchrun" if os.path.exists(script) else f"{py} -m torch.distributed.run"

    def argv(n: int, run_dir: str, cmd: list[str]) -> list[str]:
        logs = os.path.join(run_dir, "torchrun")  # its error files, not /tmp
        return [*head, "--standalone", "--nproc-per-node", str(n), "--log-dir", logs, "--no-python", *cmd]

    return Launcher("torchrun", f"torch {dist_version(py, 'torch')}, {where}", "", argv)


def build_launchers(floor_py: str) -> list[Launcher]:
    floor = Launcher(
        "floor", f"Python {platform.python_version()}", "", lambda n, d, cmd: [PY, floor_py, str(n), d, *cmd]
    )
    run = [PY, "-m", "npulaunch", "run", *"--framework pytorch --no-live --console none --job-id job".split()]
    npulaunch = Launcher(
        "npulaunch",
        dist_version(PY, "npulaunch"),
        "",
        lambda n, d, cmd: [*run, "--nproc-per-node", str(n), "--log-dir", d, "--", *cmd],
    )
    if subprocess.run([PY, "-c", "import npulaunch"], check=False, stderr=subprocess.DEVNULL).returncode:
        npulaunch = Launcher("npulaunch", "", "not importable by python3 (pip install -e .)")
    return [floor, torchrun_launcher(), npulaunch]


# ---- one run ----------------------------------------------------------------------------------


def cpu_of(pid: int) -> float | None:
    """utime + stime of a process (its threads included, its reaped children not), from /proc."""
    try:
        with open(f"/proc/{pid}/stat", "rb") as f:
            stat = f.read()
    except OSError:
        return None
    fields = stat[stat.rindex(b")") + 2 :].split()
    return (int(fields[11]) + int(fields[12])) * TICK_S


def children_of(pid: int) -> set[int]:
    found: set[int] = set()
    try:
        for tid in os.listdir(f"/proc/{pid}/task"):
            with open(f"/proc/{pid}/task/{tid}/children") as f:
                found.update(int(c) for c in f.read().split())
    except OSError:
        pass
    return found


def short_name(cmd: list[str]) -> str:
    """``python3 -I -S -c``, ``setpriv``: the program and its options up to the first other word."""
    words = [os.path.basename(cmd[0])]
    for arg in cmd[1:]:
        if not arg.startswith("-"):
            break
        words.append(arg)
    return " ".join(words)


def sample_helpers(root: int, own_cmd: list[str], marker: str, helpers: dict[int, tuple]) -> None:
    """The launcher's descendants that are not ranks (nor a fork of it not yet exec'd): their
    cmdline, CPU and VmHWM at this sample."""
    todo = list(children_of(root))
    while todo:
        pid = todo.pop()
        cmd = read_cmdline(pid)
        if not cmd or cmd == own_cmd or any(marker in arg for arg in cmd):
            continue  # ranks (and their own children) are not the launcher's
        cpu, hwm = cpu_of(pid), hwm_kb(pid)
        if cpu is not None and hwm is not None:
            helpers[pid] = (short_name(cmd), cpu, hwm / 1024)
        todo.extend(children_of(pid))


def watch(argv: list[str], env: dict[str, str], marker: str) -> tuple:
    """Run one launcher: (exit code or None on timeout, time.time() at start and at its exit, its own
    CPU, its peak RSS in MB, helpers {cmdline: [CPU, MB]})."""
    start = time.time()
    quiet = {"stdin": subprocess.DEVNULL, "stdout": subprocess.DEVNULL, "stderr": subprocess.DEVNULL}
    proc = subprocess.Popen(argv, env=env, start_new_session=True, **quiet)
    ended: list[float] = []
    exited = threading.Event()

    def wait_exit() -> None:  # blocks until the launcher is a zombie, without reaping it
        try:
            os.waitid(os.P_PID, proc.pid, os.WEXITED | os.WNOWAIT)
        finally:
            ended.append(time.time())
            exited.set()

    threading.Thread(target=wait_exit, daemon=True).start()
    own_cmd, peak_kb, helpers, timed_out = argv, 0, {}, False
    deadline = time.monotonic() + RUN_TIMEOUT_S
    while not exited.wait(SAMPLE_S):
        peak_kb = max(peak_kb, hwm_kb(proc.pid) or 0)
        sample_helpers(proc.pid, own_cmd, marker, helpers)
        if time.monotonic() > deadline and not timed_out:
            timed_out = True
            os.killpg(proc.pid, signal.SIGKILL)
    cpu = cpu_of(proc.pid)  # a zombie's /proc/PID/stat still has its final times
    code = proc.wait()
    reap_orphans()
    by_cmd: dict[str, list[float]] = {}
    for cmd, helper_cpu, mb in helpers.values():
        total = by_cmd.setdefault(cmd, [0.0, 0.0])
        total[0] += helper_cpu
        total[1] = max(total[1], mb)
    return None if timed_out else code, start, ended[0], cpu or 0.0, peak_kb / 1024, by_cmd


def run_once(launcher: Launcher, n: int, work: str, env: dict[str, str], count: int, errors: list[str]) -> Run:
    run_dir = os.path.join(work, f"{launcher.name}-{count}")
    stamps = os.path.join(run_dir, "stamps")
    os.makedirs(stamps)
    cmd = [PY, os.path.join(work, "rank.py"), stamps]
    code, start, end, cpu, rss, helpers = watch(launcher.argv(n, run_dir, cmd), env, stamps)
    run = Run(code, end - start, cpu, rss, helpers)
    ranks = []
    for r in range(n):
        try:
            with open(os.path.join(stamps, f"rank{r}.json")) as f:
                ranks.append(json.load(f))
        except (OSError, ValueError):
            pass
    where = f"{launcher.name}, {n} ranks, run {count}"
    if code != 0:
        errors.append(f"{where}: exit code {code}")
    if len(ranks) != n:
        errors.append(f"{where}: {len(ranks)} of {n} ranks reached the all-reduce")
    bad = [s for s in ranks if s["world"] != n or s["sum"] != n * (n + 1) / 2]
    bad += [s for s in ranks if s["local_rank"] is None or s["omp"] != "1"]  # torchrun's contract, N > 1
    if bad:
        errors.append(f"{where}: wrong world size, sum, LOCAL_RANK or OMP_NUM_THREADS: {bad[0]}")
    left = marked(stamps)
    if left:
        errors.append(f"{where}: {len(left)} ranks still running after the launcher's exit")
        for pid in left:
            os.kill(pid, signal.SIGKILL)
    if ranks:
        run.first_started_s = min(s["started"] for s in ranks) - start
        run.last = {phase: max(s[phase] for s in ranks) - start for phase in PHASES}
    shutil.rmtree(run_dir, ignore_errors=True)
    return run


# ---- the report -------------------------------------------------------------------------------


def med(values) -> float | None:
    values = [v for v in values if v is not None]
    return statistics.median(values) if values else None


def fmt(value: float | None, digits: int = 2) -> str:
    return "-" if value is None else f"{value:.{digits}f}"


def render(data: dict, launchers: list[Launcher]) -> str:
    cfg, lines = data["config"], []
    lines.append(f"# torch start-up: `run` to the first all-reduce on every rank ({data['machine']['date']})\n")
    lines.append(
        f"Medians of {cfg['repeats']} alternated runs; seconds from just before the launcher's Popen; "
        "vs floor: the median over rounds of the time / the floor's in the same round. "
        'Ranks: `import torch`, `init_process_group("gloo")` from the environment, one `all_reduce`. '
        "Launcher CPU and peak RSS are the launcher process's own (not its ranks'); helpers are the "
        "other processes it starts (sampled every 20 ms: a lower bound).\n"
    )
    lines += [
        "| ranks | launcher | to first all-reduce on every rank (s) | vs floor (paired) | to launcher exit (s) "
        "| launcher CPU (s) | launcher peak RSS (MB) | helpers: CPU (s), RSS (MB) |",
        "|---:|---|---:|---:|---:|---:|---:|---|",
    ]
    for n in cfg["sizes"]:
        runs = data["runs"][str(n)]
        floors = [r["last"].get("done") for r in runs.get("floor", [])]
        for ln in launchers:
            if ln.missing:
                lines.append(f"| {n} | {ln.name} | {ln.missing} | - | - | - | - | - |")
                continue
            rs = runs[ln.name]
            done = med(r["last"].get("done") for r in rs)
            # paired: each run against the floor's run of the same round (the load drifts between rounds)
            paired = med(r["last"]["done"] / f for r, f in zip(rs, floors) if f and r["last"].get("done"))
            names = sorted({name for r in rs for name in r["helpers"]})
            helpers = "; ".join(
                f"`{name}`: {fmt(med(r['helpers'].get(name, [0, 0])[0] for r in rs), 3)}, "
                f"{fmt(med(r['helpers'].get(name, [0, 0])[1] for r in rs), 1)}"
                for name in names
            )
            lines.append(
                f"| {n} | {ln.name} | {fmt(done, 3)} | {fmt(paired)} "
                f"| {fmt(med(r['exit_s'] for r in rs), 3)} | {fmt(med(r['cpu_s'] for r in rs), 3)} "
                f"| {fmt(med(r['rss_mb'] for r in rs), 1)} | {helpers or 'none'} |"
            )
    lines += [
        "",
        "Where the time goes (seconds from the launcher's start to the first rank's first statement, then "
        "to the last rank's: first statement, `import torch` done, `init_process_group` done, all-reduce "
        "done; then the launcher's exit; each column its own median). The wait in `init_process_group` "
        "once every rank has imported torch is the TCPStore: under the floor rank 0 hosts it, and a rank "
        "that tried before it listened retries with a backoff; torchrun's agent and npulaunch's serve it "
        "before any rank starts (TORCHELASTIC_USE_AGENT_STORE=True).",
        "",
        "| ranks | launcher | first rank started | last rank started | last import torch | last init | "
        "last all-reduce | launcher exit | waited in init (last init - last import) |",
        "|---:|---|---:|---:|---:|---:|---:|---:|---:|",
    ]
    for n in cfg["sizes"]:
        for ln in launchers:
            if ln.missing:
                continue
            rs = data["runs"][str(n)][ln.name]
            cells = [fmt(med(r["first_started_s"] for r in rs), 3)]
            cells += [fmt(med(r["last"].get(p) for r in rs), 3) for p in PHASES]
            cells.append(fmt(med(r["exit_s"] for r in rs), 3))
            cells.append(fmt(med(r["last"]["joined"] - r["last"]["imported"] for r in rs if r["last"]), 3))
            lines.append(f"| {n} | {ln.name} | " + " | ".join(cells) + " |")
    m = data["machine"]
    lines += [
        "",
        "Launchers: " + "; ".join(f"{ln.name}: {ln.missing or ln.version}" for ln in launchers) + ".",
        f"Machine: {m['cores']} cores, Python {m['python']}, load {m['load_before']} before; "
        f"this run took {m['run_s']:.0f} s.",
    ]
    if data["errors"]:
        lines += ["", "Errors:", *[f"- {e}" for e in data["errors"]]]
    return "\n".join(lines) + "\n"


# ---- main -------------------------------------------------------------------------------------


def base_env() -> dict[str, str]:
    """This environment without any rank's variables (the launchers set them), gloo on loopback."""
    drop = {"RANK", "LOCAL_RANK", "WORLD_SIZE", "LOCAL_WORLD_SIZE", "MASTER_ADDR", "MASTER_PORT", "GROUP_RANK"}
    drop |= {"OMP_NUM_THREADS", "RANK_ID", "RANK_SIZE", "DEVICE_ID", "PYTHONDONTWRITEBYTECODE"}
    env = {k: v for k, v in os.environ.items() if k not in drop and not k.startswith("TORCHELASTIC_")}
    env["GLOO_SOCKET_IFNAME"] = "lo"
    return env


def progress(text: str) -> None:
    print(text, file=sys.stderr, flush=True)


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--smoke", action="store_true", help="2 ranks, one run each (CI: does it still work?)")
    parser.add_argument("--repeats", type=int, default=5, help="runs per launcher and size (default 5)")
    parser.add_argument("--out", help="where torch_start.md/.json go (default bench/results; --smoke: a temp dir)")
    args = parser.parse_args()
    cfg = {"smoke": args.smoke, "repeats": 1 if args.smoke else args.repeats, "sizes": [2] if args.smoke else [4, 8]}
    out_dir = args.out or (tempfile.mkdtemp(prefix="npl-torch-out-") if args.smoke else os.path.join(HERE, "results"))
    os.makedirs(out_dir, exist_ok=True)
    started, load = time.monotonic(), os.getloadavg()[0]
    become_subreaper()
    work = tempfile.mkdtemp(prefix="npl-torch-")
    with open(os.path.join(work, "rank.py"), "w") as f:
        f.write(RANK_PY)
    with open(os.path.join(work, "floor.py"), "w") as f:
        f.write(FLOOR)
    env = base_env()
    errors: list[str] = []
    if not importlib.util.find_spec("torch"):
        launchers = [Launcher("all", "", f"torch not importable by {PY}: the ranks need it")]
        cfg["sizes"] = []
    else:
        launchers = build_launchers(os.path.join(work, "floor.py"))
        # Bytecode written once (users' launchers run with it); the first torch import warms the cache.
        subprocess.run([PY, "-m", "npulaunch", "--help"], env=env, stdout=subprocess.DEVNULL, check=False)
    ready = [ln for ln in launchers if not ln.missing]
    for ln in launchers:
        progress(f"{ln.name}: {ln.missing or ln.version}")
    runs: dict = {str(n): {ln.name: [] for ln in ready} for n in cfg["sizes"]}
    count = 0
    try:
        if ready and not args.smoke:
            run_once(ready[0], 2, work, env, 0, errors)  # warm-up, not counted
        for n in cfg["sizes"]:
            for _ in range(cfg["repeats"]):
                for ln in ready:
                    count += 1
                    runs[str(n)][ln.name].append(asdict(run_once(ln, n, work, env, count, errors)))
            progress(
                f"{n} ranks, first all-reduce on every rank: "
                + ", ".join(f"{k} {fmt(med(r['last'].get('done') for r in v), 3)} s" for k, v in runs[str(n)].items())
            )
    finally:
        shutil.rmtree(work, ignore_errors=True)
    data = {
        "config": cfg,
        "runs": runs,
        "errors": errors,
        "launchers": {ln.name: {"version": ln.version, "missing": ln.missing} for ln in launchers},
        "machine": {
            "cores": os.cpu_count(),
            "python": platform.python_version(),
            "load_before": f"{load:.2f}",
            "date": time.strftime("%Y-%m-%d"),
            "run_s": time.monotonic() - started,
        },
    }
    with open(os.path.join(out_dir, "torch_start.json"), "w") as f:
        json.dump(data, f, indent=1)
    text = render(data, launchers)
    with open(os.path.join(out_dir, "torch_start.md"), "w") as f:
        f.write(text)
    progress(f"{data['machine']['run_s']:.0f} s; wrote {out_dir}/torch_start.md and torch_start.json")
    print(text, end="")
    return 1 if errors else 0


if __name__ == "__main__":
    sys.exit(main())
