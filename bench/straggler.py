"""Straggler detection (issue 36): what it costs a clean torch job, and how long it takes to name a rank
that slows down.

1. Cost, rank side in isolation (bench/straggler_hook.py): one process, a one-rank DDP model, npulaunch's
   timing switched on and off on that same model between single steps (ABBA, thread CPU time): the cost is
   the median of the paired differences over the median step, with a bootstrap interval, for a tiny model
   (where the hooks' own microseconds show), the job's MLP and a deep one (48 parameters).
2. Cost, whole job: ``npulaunch run --framework pytorch`` of 2 ranks (bench/straggler_rank.py: DDP, gloo,
   CPU, a 3-layer MLP, one thread; each rank pinned to a core of its own with ``--cpu-binding``),
   ``--stragglers warn`` (the default) and ``--stragglers off`` alternated (on off on off ...). Each rank
   times its own steps after a warm-up (the same in both: npulaunch's pace file exists only when on):
   the job's seconds a step is the slower rank's. Two ranks because this machine has 2 cores: a rank a
   core is a clean job (more ranks would share cores and time each other's scheduling, not the hook).
   The runs with detection on must name nobody.
3. Time to named: the same job (detection on), trained until stopped; a fixed time after the warm-up,
   rank 1 is slowed by 20 %, 50 % or 100 % (its work takes 1.2x, 1.5x, 2x as long) with the cgroup v1
   CPU controller: both ranks sit in cgroups of their own (cpu.shares 8192, so the machine's other work
   takes little of their cores), each pinned to its core, and rank 1's group gets
   cpu.cfs_quota_us = cpu.cfs_period_us / slowdown (period 10 ms: a step of ~0.1 s spans many periods,
   so the quota cannot phase-lock with the step the way a long SIGSTOP/SIGCONT duty cycle does). The
   delay is from the quota written to the ``rank_slow`` event with state "slow" in events.jsonl (its
   "time"). The achieved slowdown is checked from npulaunch's own ``rank_pace`` events: rank 1's busy
   time over rank 0's in the windows wholly after the quota, over the same ratio before it; and from the
   job's step time (rank 0's ``.steps`` file) before and after.

Goals (issue 36): cost <= 1 % of the step time; a rank 20 % slower or more named within 60 s.

Usage: ``python3 bench/straggler.py [--smoke] [--pairs 3] [--repeats 3] [--after 20] [--out DIR]
[--only hook,cost,named]``; writes straggler.md and straggler.json. --only: run those parts and take the
others from straggler.json in --out. Section 3 needs root and a writable cgroup v1 cpu controller at
/sys/fs/cgroup/cpu (without, it is skipped). --smoke: tiny sizes, one run of each kind (2x only), 1 s pace
windows (NPULAUNCH_TIMING, npulaunch/host/timing.py), into a temporary directory.
"""

from __future__ import annotations

import argparse
import json
import os
import platform
import shutil
import signal
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Any, Dict, List, Optional

HERE = Path(__file__).resolve().parent
ROOT = HERE.parent
PY = sys.executable
CGROUP = Path("/sys/fs/cgroup/cpu")
PERIOD_US = 10000
SHARES = 8192
SLOWDOWNS = (1.2, 1.5, 2.0)
WINDOW_S = 5.0  # the agent's rank_pace window (host/agent/paces.py)
GOAL_COST = 1.01
GOAL_NAMED_S = 60.0
RANK_SLOWED = 1


def env() -> Dict[str, str]:
    drop = {"RANK", "LOCAL_RANK", "WORLD_SIZE", "LOCAL_WORLD_SIZE", "MASTER_ADDR", "MASTER_PORT", "OMP_NUM_THREADS"}
    out = {k: v for k, v in os.environ.items() if k not in drop and not k.startswith("TORCHELASTIC_")}
    out["PYTHONPATH"] = os.pathsep.join([str(ROOT)] + [p for p in [os.environ.get("PYTHONPATH")] if p])
    out["GLOO_SOCKET_IFNAME"] = "lo"
    return out


def progress(text: str) -> None:
    print(text, file=sys.stderr, flush=True)


def load() -> str:
    with open("/proc/loadavg") as f:
        return " ".join(f.read().split()[:3])


def med(values: List[float]) -> Optional[float]:
    values = [v for v in values if v is not None]
    return statistics.median(values) if values else None


def events(job_dir: Path) -> List[Dict[str, Any]]:
    try:
        with open(job_dir / "events.jsonl") as f:
            return [json.loads(line) for line in f if line.endswith("\n")]
    except OSError:
        return []


def why(job_dir: Path) -> str:
    """The job's root cause as its summary.json says it ('' when there is none)."""
    try:
        cause = json.loads((job_dir / "summary.json").read_text()).get("root_cause")
    except (OSError, ValueError):
        return "; no summary.json"
    return f"; root cause: {json.dumps(cause)[:600]}" if cause else ""


# ---- the job ----------------------------------------------------------------------------------


class Job:
    """One ``npulaunch run`` of 2 straggler_rank.py ranks, each pinned to its core."""

    def __init__(self, work: Path, name: str, stragglers: str, warmup: int, steps: int) -> None:
        self.dir = work / name
        self.stamps = work / (name + "-stamps")
        self.stamps.mkdir(parents=True)
        argv = [PY, "-m", "npulaunch", "run", "--framework", "pytorch", "--no-live", "--console", "none"]
        argv += ["--nproc-per-node", "2", "--cpu-binding", "0=0;1=1", "--stragglers", stragglers]
        argv += ["--log-dir", str(work), "--job-id", name, "--"]
        argv += [PY, str(HERE / "straggler_rank.py"), str(self.stamps), "--warmup", str(warmup), "--steps", str(steps)]
        quiet = {"stdin": subprocess.DEVNULL, "stdout": subprocess.DEVNULL, "stderr": subprocess.DEVNULL}
        self.proc = subprocess.Popen(argv, env=env(), start_new_session=True, **quiet)

    def pids(self) -> Dict[int, int]:
        return {e["rank"]: e["pid"] for e in events(self.dir) if e["kind"] == "rank_started"}

    def started(self, rank: int) -> Optional[float]:
        try:
            return float((self.stamps / f"rank{rank}.started").read_text())
        except (OSError, ValueError):
            return None

    def stop(self) -> Optional[int]:
        if self.proc.poll() is None:
            os.kill(self.proc.pid, signal.SIGTERM)
        try:
            return self.proc.wait(60)
        except subprocess.TimeoutExpired:
            os.killpg(self.proc.pid, signal.SIGKILL)
            return self.proc.wait()

    def result(self) -> Dict[str, Any]:
        ranks = []
        for r in range(2):
            try:
                ranks.append(json.loads((self.stamps / f"rank{r}.json").read_text()))
            except (OSError, ValueError):
                pass
        return {"ranks": ranks, "step_s": max((r["step_s"] for r in ranks), default=None)}


def slow_events(evs: List[Dict[str, Any]]) -> List[Dict[str, Any]]:
    return [e for e in evs if e["kind"] == "rank_slow" and e.get("state") == "slow"]


# ---- 1. the hook alone ------------------------------------------------------------------------


def hook_cost(smoke: bool) -> Dict[str, Any]:
    argv = [PY, str(HERE / "straggler_hook.py")]
    argv += ["--scale", "0.02"] if smoke else []
    done = subprocess.run(argv, env=env(), capture_output=True, text=True, timeout=600)
    if done.returncode:
        return {"error": done.stderr[-2000:]}
    return json.loads(done.stdout)


# ---- 2. the whole job, on and off ---------------------------------------------------------------


def job_cost(work: Path, pairs: int, warmup: int, steps: int, errors: List[str]) -> Dict[str, Any]:
    runs: Dict[str, List[Dict[str, Any]]] = {"warn": [], "off": []}
    for pair in range(pairs):
        for order, mode in enumerate(
            ("warn", "off") if pair % 2 == 0 else ("off", "warn")
        ):  # ABBA: drift cancels in pairs
            job = Job(work, f"cost-{mode}-{pair}", mode, warmup, steps)
            code = job.proc.wait(900)
            evs = events(job.dir)
            run = job.result()
            run.update(
                code=code,
                pair=pair,
                order=order,
                named=[{"rank": e["rank"], "factor": e["factor"]} for e in slow_events(evs)],
                pace_events=sum(1 for e in evs if e["kind"] == "rank_pace"),
                pace_file=(job.dir / "rank-0" / "pace").exists(),
                load=load(),
            )
            if code != 0 or run["step_s"] is None:
                errors.append(f"cost run {mode} {pair}: exit {code}, {len(run['ranks'])} ranks timed{why(job.dir)}")
            if (mode == "warn") != run["pace_file"]:
                errors.append(f"cost run {mode} {pair}: pace file {'missing' if mode == 'warn' else 'present'}")
            runs[mode].append(run)
            progress(f"cost {mode} pair {pair}: {run['step_s']} s a step, named {run['named']}, load {run['load']}")
    return runs


# ---- 3. time to named -------------------------------------------------------------------------


def cgroup_ok() -> str:
    """'' when the cpu controller can be used, else why not."""
    if os.geteuid() != 0:
        return "needs root (cgroup v1 cpu controller)"
    if not (CGROUP / "cgroup.procs").exists():
        return f"no cgroup v1 cpu controller at {CGROUP}"
    return ""


def write(group: Path, name: str, value: Any) -> None:
    (group / name).write_text(str(value))


def join(group: Path, pid: int) -> None:
    write(group, "cgroup.procs", pid)  # v1: the whole process, every thread


def achieved(evs: List[Dict[str, Any]], applied: float, started: float) -> Dict[str, Any]:
    """Rank 1's busy time over rank 0's, in the windows wholly after the quota over those between the
    warm-up and the quota (the slowdown the detector saw)."""
    before, after = [], []
    for e in evs:
        if e["kind"] != "rank_pace" or not {"0", "1"} <= set(e["ranks"]):
            continue
        ratio = e["ranks"]["1"]["busy_s"] / e["ranks"]["0"]["busy_s"]
        begin = e["time"] - e.get("window_s", WINDOW_S)
        if begin >= started and e["time"] <= applied:
            before.append(ratio)
        elif begin >= applied:
            after.append(ratio)
    b, a = med(before), med(after)
    return {"before": b, "after": a, "windows": [len(before), len(after)], "busy": a / b if a and b else None}


def step_rate(stamps: Path, applied: float) -> Optional[float]:
    """The job's step time after the quota over before it (rank 0's step lines)."""
    try:
        lines = [tuple(map(float, line.split())) for line in (stamps / "rank0.steps").read_text().splitlines()]
    except (OSError, ValueError):
        return None
    before = [p for p in lines if p[0] <= applied]
    after = [p for p in lines if p[0] >= applied + 1.0]
    if len(before) < 2 or len(after) < 2:
        return None
    b = (before[-1][0] - before[0][0]) / (before[-1][1] - before[0][1])
    a = (after[-1][0] - after[0][0]) / (after[-1][1] - after[0][1])
    return a / b


def time_to_named(work: Path, slowdown: float, count: int, after_s: float, limit_s: float) -> Dict[str, Any]:
    groups = {r: CGROUP / f"npl-straggler-bench-{os.getpid()}-{r}" for r in (0, 1)}
    for group in groups.values():
        group.mkdir(exist_ok=True)
        write(group, "cpu.shares", SHARES)
        write(group, "cpu.cfs_period_us", PERIOD_US)
        write(group, "cpu.cfs_quota_us", -1)
    job = Job(work, f"slow-{round(slowdown * 100)}-{count}", "warn", 20, 0)  # no "." in a job id
    run: Dict[str, Any] = {"slowdown": slowdown, "load_before": load()}
    try:
        deadline = time.monotonic() + 180
        while len(job.pids()) < 2 and time.monotonic() < deadline and job.proc.poll() is None:
            time.sleep(0.05)
        for rank, pid in job.pids().items():
            join(groups[rank], pid)
        while (job.started(0) is None or job.started(1) is None) and time.monotonic() < deadline:
            time.sleep(0.1)
        started = max(job.started(0) or 0.0, job.started(1) or 0.0)
        if not started:
            run["error"] = "the ranks never finished their warm-up"
            return run
        time.sleep(max(0.0, started + after_s - time.time()))
        write(groups[RANK_SLOWED], "cpu.cfs_quota_us", int(PERIOD_US / slowdown))
        applied = time.time()
        named: Optional[Dict[str, Any]] = None
        # until named and three windows wholly after the quota (the achieved slowdown), or the limit
        while time.time() < applied + limit_s and job.proc.poll() is None:
            found = slow_events(events(job.dir))
            named = named or next(iter(found), None)
            if named and time.time() > applied + 3.2 * WINDOW_S:
                break
            time.sleep(0.2)
        evs = events(job.dir)
        found = slow_events(evs)
        run.update(
            started=started,
            applied=applied,
            named_s=named["time"] - applied if named else None,
            named_rank=named["rank"] if named else None,
            factor=named["factor"] if named else None,
            since_s=named["since"] - applied if named else None,
            early=[e["rank"] for e in found if e["time"] < applied],
            wrong=[e["rank"] for e in found if e["rank"] != RANK_SLOWED],
            achieved=achieved(evs, applied, started),
            step_ratio=step_rate(job.stamps, applied),
            throttled=(groups[RANK_SLOWED] / "cpu.stat").read_text().split(),
        )
    finally:
        run["code"] = job.stop()
        run["load_after"] = load()
        for group in groups.values():
            for _ in range(50):
                try:
                    group.rmdir()
                    break
                except OSError:
                    time.sleep(0.1)
    return run


def time_to_named_all(work: Path, cfg: Dict[str, Any], errors: List[str]) -> tuple:
    """Every slowdown, ``repeats`` times, one of each in turn (the machine's drift spreads over all)."""
    skipped = cgroup_ok()
    named: List[Dict[str, Any]] = []
    for count in range(0 if skipped else cfg["repeats"]):
        for slowdown in cfg["slowdowns"]:
            run = time_to_named(work, slowdown, count, cfg["after_s"], cfg["limit_s"])
            named.append(run)
            progress(
                f"{slowdown:g}x: named after {fmt(run.get('named_s'), 1)} s (rank {run.get('named_rank')}), "
                f"achieved {run.get('achieved')}, step x{fmt(run.get('step_ratio'), 2)}, load {load()}"
            )
            if run.get("error"):
                errors.append(f"time to named, {slowdown:g}x: {run['error']}")
    return named, skipped


# ---- the report -------------------------------------------------------------------------------


def fmt(value: Optional[float], digits: int = 3) -> str:
    return "-" if value is None else f"{value:.{digits}f}"


def paired_cost(times: Dict[str, Any]) -> Dict[str, float]:
    """The median of the paired differences (on - off) of adjacent steps, over the median off step, with a
    95 % bootstrap interval (1000 resamples of the pairs, seeded: the page is reproducible)."""
    import random

    pairs = [a - b for a, b in zip(times["on"], times["off"])]
    base = statistics.median(times["off"])
    rng = random.Random(36)
    resampled = sorted(statistics.median(rng.choices(pairs, k=len(pairs))) for _ in range(1000))
    return {
        "diff_s": statistics.median(pairs),
        "cost": statistics.median(pairs) / base,
        "low": resampled[25] / base,
        "high": resampled[974] / base,
        "base_s": base,
    }


def render_cost(data: Dict[str, Any]) -> List[str]:
    lines = ["## Cost", ""]
    hook = data["hook"]
    if "error" in hook:
        lines += [f"Rank side: straggler_hook.py failed: {hook['error']}", ""]
    elif "hooked" not in hook.get("mlp", {}):
        lines += ["Rank side: straggler.json holds an older result; run `--only hook` again.", ""]
    else:
        lines += [
            "Rank side in isolation (`straggler_hook.py`: one process, a one-rank DDP model, npulaunch's timing "
            "switched on and off on that same model between single steps, ABBA, each step in the thread's CPU "
            f"time; {hook['pace_lines']} pace lines written): the cost is the median of the paired differences "
            "(on - off) over the median step, with its 95 % bootstrap interval.",
            "",
            "| model | parameters (hooked once learned) | pairs of steps | median step off (ms) "
            "| on - off (µs a step, median of pairs) | cost | 95 % interval | goal |",
            "|---|---:|---:|---:|---:|---:|---:|---:|",
        ]
        labels = {
            "tiny": "tiny, 64 -> 64, batch 32",
            "mlp": "the job's MLP, batch 256",
            "deep": "deep, 24 layers 128 wide, batch 64",
        }
        for name, label in labels.items():
            if name not in hook:
                continue
            t = hook[name]
            c = paired_cost(t)
            lines.append(
                f"| {label} | {t['params']} ({t['hooked']}) | {len(t['on'])} | {c['base_s'] * 1e3:.3f} "
                f"| {c['diff_s'] * 1e6:+.1f} | {c['cost'] * 100:+.2f} % "
                f"| {c['low'] * 100:+.2f} - {c['high'] * 100:+.2f} % | <= {(GOAL_COST - 1) * 100:.0f} % |"
            )
        lines.append("")
    runs = data["cost"]
    on = [r["step_s"] for r in runs["warn"] if r["step_s"]]
    off = [r["step_s"] for r in runs["off"] if r["step_s"]]
    paired = [a["step_s"] / b["step_s"] for a, b in zip(runs["warn"], runs["off"]) if a["step_s"] and b["step_s"]]
    mon, moff = med(on), med(off)
    ratio = mon / moff if mon and moff else None
    cfg = data["config"]
    lines += [
        f"Whole job (`npulaunch run`, 2 ranks pinned one a core, {cfg['steps']} timed steps after "
        f"{cfg['warmup']} of warm-up, each rank timing itself; {len(on)} runs with detection on "
        f"(`--stragglers warn`) and {len(off)} off, alternated in pairs ABBA): the job's seconds a step "
        f"(the slower rank's).",
        "",
        "| detection | runs | median s a step | min - max | ratio of medians | median paired ratio | goal |",
        "|---|---:|---:|---:|---:|---:|---:|",
        f"| off | {len(off)} | {fmt(moff, 4)} | {fmt(min(off, default=None), 4)} - {fmt(max(off, default=None), 4)} "
        "| 1.000 | - | |",
        f"| on (warn) | {len(on)} | {fmt(mon, 4)} | {fmt(min(on, default=None), 4)} - {fmt(max(on, default=None), 4)} "
        f"| {fmt(ratio)} | {fmt(med(paired))} | <= {GOAL_COST:.2f} |",
        "",
        "Each run's seconds a step, in order: "
        + ", ".join(
            f"{r['mode']} {fmt(r['step_s'], 4)} (load {r['load'].split()[0]})"
            for r in sorted(
                [dict(r, mode=m) for m in ("warn", "off") for r in runs[m]],
                key=lambda r: (r["pair"], r["order"]),
            )
        )
        + ".",
        "",
    ]
    named = [n for r in runs["warn"] for n in r["named"]]
    lines.append(
        f"Ranks named in the clean runs with detection on: {named or 'none'} "
        f"({sum(r['pace_events'] for r in runs['warn'])} rank_pace windows judged)."
    )
    return lines + [""]


def render_named(data: Dict[str, Any]) -> List[str]:
    lines = ["## Time to named", ""]
    if data["named_skipped"]:
        return lines + [f"Skipped: {data['named_skipped']}.", ""]
    cfg = data["config"]
    lines += [
        f"Rank 1 of the same 2-rank job (detection on) slowed {cfg['after_s']:g} s after the warm-up by a CPU quota "
        f"(cgroup v1, period {PERIOD_US // 1000} ms, quota = period / slowdown; both ranks in groups with "
        f"cpu.shares {SHARES}, pinned one a core); the delay is from the quota to the `rank_slow` event "
        f"(state slow). Achieved: rank 1's busy time over rank 0's in `rank_pace` windows wholly after the "
        "quota, over the same before it (median of windows); step: the job's step time after / before. A run whose "
        "rank was named before the quota (its own core slower under the machine's load) counts as named before "
        "the slowdown and is left out of the delays.",
        "",
        "| slowdown | runs | named | delay median (s) | min - max (s) | `since` - quota (s, median) | factor said "
        "| achieved busy ratio (median, min - max) | step time after / before | named before the slowdown "
        "| wrong rank named | goal |",
        "|---|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|",
    ]
    for slowdown in cfg["slowdowns"]:
        runs = [r for r in data["named"] if r["slowdown"] == slowdown and "error" not in r]
        early = sum(1 for r in runs if r["early"])  # named before the quota: the machine, not the slowdown
        delays = [r["named_s"] for r in runs if r["named_s"] is not None and not r["early"]]
        busy = [r["achieved"]["busy"] for r in runs if r["achieved"]["busy"]]
        wrong = sum(len(r["wrong"]) for r in runs)
        lines.append(
            f"| {int(round((slowdown - 1) * 100))} % ({slowdown:g}x) | {len(runs)} | {len(delays)} "
            f"| {fmt(med(delays), 1)} | {fmt(min(delays, default=None), 1)} - {fmt(max(delays, default=None), 1)} "
            f"| {fmt(med([r['since_s'] for r in runs if r['since_s'] is not None]), 1)} "
            f"| {fmt(med([r['factor'] for r in runs if r['factor']]), 2)} "
            f"| {fmt(med(busy), 2)} ({fmt(min(busy, default=None), 2)} - {fmt(max(busy, default=None), 2)}) "
            f"| {fmt(med([r['step_ratio'] for r in runs if r['step_ratio']]), 2)} | {early} | {wrong} "
            f"| <= {GOAL_NAMED_S:g} s |"
        )
    lines += ["", "Each run: slowdown, delay (s), achieved busy ratio (windows before / after), load before / after:"]
    for r in data["named"]:
        if "error" in r:
            lines.append(f"- {r['slowdown']:g}x: {r['error']}")
            continue
        a = r["achieved"]
        lines.append(
            f"- {r['slowdown']:g}x: named {fmt(r['named_s'], 1)} s (rank {r['named_rank']}, factor {r['factor']}"
            + (f"; named before the slowdown: ranks {r['early']}" if r["early"] else "")
            + "), "
            + f"busy ratio {fmt(a['before'], 2)} -> {fmt(a['after'], 2)} = {fmt(a['busy'], 2)} "
            f"({a['windows'][0]} / {a['windows'][1]} windows), step time x{fmt(r['step_ratio'], 2)}, "
            f"load {r['load_before']} / {r['load_after']}"
        )
    return lines + [""]


def render(data: Dict[str, Any]) -> str:
    m = data["machine"]
    lines = [
        f"# Straggler detection: cost and time to named ({m['date']})",
        "",
        "bench/straggler.py; goals (issue 36): cost <= 1 % of the step time, a rank >= 20 % slower named "
        "within 60 s. Torch DDP, gloo, CPU.",
        "",
        *render_cost(data),
        *render_named(data),
        f"Machine: {m['cores']} cores, Python {m['python']}, torch {m['torch']}; load (1, 5, 15 min) "
        f"{m['load_before']} before, {m['load_after']} after; this run took {m['run_s']:.0f} s.",
    ]
    if data.get("parts"):
        lines.append(
            "Each part's run and load (1, 5, 15 min) before / after: "
            + "; ".join(f"{k} {v['start']}, {v['load_before']} / {v['load_after']}" for k, v in data["parts"].items())
            + "."
        )
    if data["errors"]:
        lines += ["", "Errors:", *[f"- {e}" for e in data["errors"]]]
    return "\n".join(lines) + "\n"


# ---- main -------------------------------------------------------------------------------------


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--smoke", action="store_true", help="tiny sizes, one run of each kind (CI)")
    parser.add_argument("--pairs", type=int, default=3, help="on/off pairs of the whole-job cost (default 3)")
    parser.add_argument("--repeats", type=int, default=3, help="runs per slowdown (default 3)")
    parser.add_argument("--after", type=float, default=20.0, help="seconds of clean training before the slowdown")
    parser.add_argument("--out", help="where straggler.md/.json go (default bench/results; --smoke: a temp dir)")
    parser.add_argument(
        "--only",
        default="hook,cost,named",
        help="the parts to run (hook, cost, named); the others' results are taken from straggler.json in --out",
    )
    args = parser.parse_args()
    parts = set(args.only.split(","))
    smoke = args.smoke
    if smoke:  # a named rank in seconds, not tens: the smoke run's figures are not judged
        global WINDOW_S
        WINDOW_S = 1.0
        os.environ["NPULAUNCH_TIMING"] = "pace_window_s=1"
    cfg = {
        "smoke": smoke,
        "pairs": 1 if smoke else args.pairs,
        "warmup": 3 if smoke else 20,
        "steps": 5 if smoke else 150,
        "repeats": 1 if smoke else args.repeats,
        "slowdowns": [2.0] if smoke else list(SLOWDOWNS),
        "after_s": 0.0 if smoke else args.after,
        "limit_s": 12.0 if smoke else 120.0,
    }
    out = Path(args.out or (tempfile.mkdtemp(prefix="npl-straggler-out-") if smoke else HERE / "results"))
    out.mkdir(parents=True, exist_ok=True)
    began, load_before = time.monotonic(), load()
    work = Path(tempfile.mkdtemp(prefix="npl-straggler-"))
    errors: List[str] = []
    if subprocess.run([PY, "-c", "import torch"], capture_output=True, check=False).returncode:
        (out / "straggler.md").write_text(f"# Straggler detection\n\nSkipped: torch is not importable by {PY}.\n")
        progress(f"skipped: torch is not importable by {PY}")
        return 0
    subprocess.run([PY, "-m", "npulaunch", "--help"], env=env(), stdout=subprocess.DEVNULL, check=False)
    previous: Dict[str, Any] = {}
    if parts != {"hook", "cost", "named"} and (out / "straggler.json").exists():
        previous = json.loads((out / "straggler.json").read_text())
    done = dict(previous.get("parts", {}))
    cost_cfg = ("pairs", "warmup", "steps")
    cfg.update({k: v for k, v in previous.get("config", {}).items() if k in cost_cfg and "cost" not in parts})
    cfg.update({k: v for k, v in previous.get("config", {}).items() if k not in cost_cfg and "named" not in parts})
    hook, cost = previous.get("hook", {"error": "not run"}), previous.get("cost", {"warn": [], "off": []})
    named, skipped = previous.get("named", []), previous.get("named_skipped", "not run")
    for part in ("hook", "cost", "named"):
        if part not in parts:
            continue
        began_part, load_part = time.strftime("%Y-%m-%d %H:%M"), load()
        progress(f"load {load_part}; {part}")
        if part == "hook":
            hook = hook_cost(smoke)
            if "error" in hook:
                errors.append("straggler_hook.py failed")
        elif part == "cost":
            cost = job_cost(work, cfg["pairs"], cfg["warmup"], cfg["steps"], errors)
        else:
            named, skipped = time_to_named_all(work, cfg, errors)
        done[part] = {"start": began_part, "load_before": load_part, "load_after": load()}
    torch_version = subprocess.run(
        [PY, "-c", "import torch; print(torch.__version__)"], capture_output=True, text=True, check=False
    ).stdout.strip()
    data = {
        "config": cfg,
        "hook": hook,
        "cost": cost,
        "named": named,
        "named_skipped": skipped,
        "parts": done,
        "errors": errors,
        "machine": {
            "cores": os.cpu_count(),
            "python": platform.python_version(),
            "torch": torch_version,
            "load_before": load_before,
            "load_after": load(),
            "date": time.strftime("%Y-%m-%d"),
            "run_s": time.monotonic() - began,
        },
    }
    shutil.rmtree(work, ignore_errors=True)
    (out / "straggler.json").write_text(json.dumps(data, indent=1))
    text = render(data)
    (out / "straggler.md").write_text(text)
    progress(f"{data['machine']['run_s']:.0f} s; wrote {out}/straggler.md and straggler.json")
    print(text, end="")
    return 1 if errors else 0


if __name__ == "__main__":
    sys.exit(main())
