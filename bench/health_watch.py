"""What the live NPU health watch costs (npulaunch/host/health/watch.py): a local job of 8 ranks that sleep
D seconds, under ``npulaunch run`` (the agent runs in the launcher's process), with the watch off
(``monitor.health_interval_s: 0``), every 30 s (the default) and every 1 s, each with two npu-smi tools on
the PATH: the tests' stand-in (a Python script) and a minimal shell script that prints the documented OK
output (the stand-in's device table and its three OK lines), both counting their calls in a file.

Measured per run: the launcher's own CPU (getrusage(RUSAGE_SELF) at its exit, goals.py's wrapper) and its
children's CPU (this script's RUSAGE_CHILDREN across the run, minus the launcher's own: the ranks, reaped
by the launcher, and the watch's tool calls). The ranks are the same in every run, so the tool calls'
CPU is the children's CPU with the watch on minus that with it off (same tool); a round's cost is the
difference over the 1 s runs divided by their rounds (calls / 8). Tool configurations alternate
(A B C D E F, A B C ...); medians. Also each tool called alone, for its wall time and CPU per call.

Usage: ``python3 bench/health_watch.py [--smoke] [--repeats 5] [--seconds 20]``; prints a markdown report.
"""

from __future__ import annotations

import argparse
import json
import os
import resource
import shutil
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Dict, List, Tuple

HERE = Path(__file__).resolve().parent
ROOT = HERE.parent
sys.path.insert(0, str(HERE))
from goals import WRAP  # noqa: E402  (the launcher's own usage at its exit)

PY = sys.executable
RANK = ROOT / "tests" / "ranks" / "rank.py"
STANDIN = ROOT / "tests" / "standins" / "npu-smi"
DEVICES = 8
COUNT_LINE = 'if os.environ.get("NPU_CALLS"):\n    open(os.environ["NPU_CALLS"], "a").write("c\\n")\n'

# npu-smi as a shell script: `info` prints the device table (the watch's first round maps each device to
# its card and chip with it), `info -t health ...` the OK answer (tests/standins/npu-smi, from
# mind-cluster docs/en/faultdiag/user_guide/03_collecting_logs.md).
SHELL_TOOL = """#!/bin/sh
[ -n "$NPU_CALLS" ] && echo c >> "$NPU_CALLS"
if [ "$#" -eq 1 ] && [ "$1" = info ]; then
cat <<'EOF'
{table}EOF
elif [ "$1" = info ] && [ "$2" = -t ] && [ "$3" = health ]; then
echo ' Health Status                  : OK'
echo ' Error Code                     : NA'
echo ' Error Information              : NA'
else
echo "npu-smi (bench): only 'info' and 'info -t health -i N -c C'" >&2
exit 2
fi
"""

NOTES = """How the CPU is split: the launcher's own CPU is getrusage(RUSAGE_SELF) at its exit; the agent runs in
its process, so the watch's scheduling, reaping and judging are in it. Its children's CPU (this script's
RUSAGE_CHILDREN across the run, minus the launcher's own) is the 8 ranks, the preflight's one `npu-smi
info` and the watch's calls (the calls are counted by the tools themselves, a line appended to a file).
All but the watch's calls are the same with the watch off, so the calls' CPU is the children's CPU minus
that of the watch-off runs with the same tool. Each call is started through `setpriv --pdeathsig KILL`
(it dies with the agent), about 1 ms of CPU a call. At the default 30 s a 20 s job sees one round, at its
start (the device table, then 8 health calls); the per-hour figures are the per-round cost of the 1 s
runs times 3600 / interval. What decides the cost on an NPU host is the real npu-smi's CPU a call (it
asks the driver): an hour at the default is 8 x 120 of its calls, plus the launcher's few ms a round.
"""

INTERVALS: List[Tuple[str, float]] = [("off", 0.0), ("30 s (default)", 30.0), ("1 s", 1.0)]


def make_tools(work: Path) -> Dict[str, Path]:
    """{tool name: a directory holding it as npu-smi}: the stand-in (with one line that counts its calls)
    and the shell script."""
    tools = {}
    standin_dir = work / "tool-standin"
    standin_dir.mkdir()
    text = STANDIN.read_text()
    text = text.replace("import time\n", "import time\n\n" + COUNT_LINE, 1)
    (standin_dir / "npu-smi").write_text(text)
    tools["stand-in (Python)"] = standin_dir
    shell_dir = work / "tool-shell"
    shell_dir.mkdir()
    table = subprocess.run([PY, str(STANDIN), "info"], capture_output=True, text=True, check=True).stdout
    (shell_dir / "npu-smi").write_text(SHELL_TOOL.replace("{table}", table))
    tools["shell script"] = shell_dir
    for directory in tools.values():
        os.chmod(directory / "npu-smi", 0o755)
    return tools


def tool_env(tool_dir: Path, calls: Path) -> Dict[str, str]:
    env = {k: v for k, v in os.environ.items() if k not in ("PYTHONDONTWRITEBYTECODE", "RANK_ID", "RANK_SIZE")}
    path = [p for p in env.get("PATH", "").split(os.pathsep) if p != str(STANDIN.parent)]
    env.update(PATH=os.pathsep.join([str(tool_dir), *path]), PYTHONPATH=str(ROOT), NPU_CALLS=str(calls))
    env["NPU_STANDIN_COUNT"] = str(DEVICES)
    return env


def children_cpu_s() -> float:
    usage = resource.getrusage(resource.RUSAGE_CHILDREN)
    return usage.ru_utime + usage.ru_stime


def run_once(work: Path, tool_dir: Path, interval_s: float, seconds: float, tag: str) -> Dict[str, float]:
    """One ``npulaunch run``: wall, the launcher's own CPU, its children's CPU, the tool's calls."""
    run_dir = work / tag
    run_dir.mkdir()
    config = run_dir / "job.yaml"
    config.write_text(
        f"job:\n  command: [{PY}, -S, {RANK}, '*=ok@{seconds:g}']\n  log_dir: {run_dir / 'logs'}\n"
        f"  grace_period_s: 2\nrank_table: none\nhosts:\n  - host: localhost\n    devices: {DEVICES}\n"
        f"monitor: {{health_interval_s: {interval_s:g}}}\n"
    )
    usage, calls = run_dir / "usage.json", run_dir / "calls"
    before = children_cpu_s()
    start = time.monotonic()
    done = subprocess.run(
        [PY, "-c", WRAP, str(usage), "-m", "npulaunch", "run", str(config), "--job-id", "job"],
        env=tool_env(tool_dir, calls),
        cwd=run_dir,
        stdout=subprocess.DEVNULL,
        stderr=subprocess.PIPE,
        text=True,
    )
    wall = time.monotonic() - start
    total = children_cpu_s() - before
    if done.returncode != 0:
        raise SystemExit(f"{tag}: npulaunch run exited {done.returncode}:\n{done.stderr[-2000:]}")
    own = json.loads(usage.read_text())["cpu_s"]
    count = len(calls.read_text().splitlines()) if calls.exists() else 0
    shutil.rmtree(run_dir)
    return {"wall_s": wall, "own_s": own, "children_s": total - own, "calls": count}


def tool_alone(tool_dir: Path, work: Path, count: int) -> Tuple[float, float]:
    """(wall s, CPU s) of one ``npu-smi info -t health -i 0 -c 0``, medians of ``count`` calls."""
    env = tool_env(tool_dir, work / "alone-calls")
    argv = [str(tool_dir / "npu-smi"), "info", "-t", "health", "-i", "0", "-c", "0"]
    walls, cpus = [], []
    for _ in range(count):
        before, start = children_cpu_s(), time.monotonic()
        subprocess.run(argv, env=env, stdout=subprocess.DEVNULL, check=True)
        walls.append(time.monotonic() - start)
        cpus.append(children_cpu_s() - before)
    return statistics.median(walls), statistics.median(cpus)


def report(runs: Dict[Tuple[str, str], List[Dict[str, float]]], alone: Dict[str, Tuple[float, float]], args) -> str:
    med = {key: {k: statistics.median(r[k] for r in rs) for k in rs[0]} for key, rs in runs.items()}
    lines = [
        f"`{' '.join(['python3 bench/health_watch.py', *sys.argv[1:]])}`, {time.strftime('%Y-%m-%d')}: "
        f"{os.cpu_count()} cores, Python {sys.version.split()[0]}; a local job of {DEVICES} ranks that sleep "
        f"{args.seconds:g} s (`rank.py '*=ok@{args.seconds:g}'`, `python3 -S`), `npulaunch run` (the agent in "
        f"the launcher's process); medians of {args.repeats} runs, configurations alternated.\n",
        "| npu-smi | watch | calls | wall | launcher CPU | its children's CPU | launcher + "
        "(children - off) | tool calls' CPU (children - off) |",
        "|---|---|---:|---:|---:|---:|---:|---:|",
    ]
    for tool in alone:
        off = med[(tool, "off")]
        for name, _ in INTERVALS:
            m = med[(tool, name)]
            extra = m["children_s"] - off["children_s"]
            lines.append(
                f"| {tool} | {name} | {m['calls']:.0f} | {m['wall_s']:.2f} s | {m['own_s'] * 1000:.0f} ms | "
                f"{m['children_s'] * 1000:.0f} ms | {(m['own_s'] + extra) * 1000:.0f} ms | "
                + ("" if name == "off" else f"{extra * 1000:.0f} ms")
                + " |"
            )
    lines += [
        "",
        "Per round (8 health calls), from the 1 s runs: (1 s - off) / rounds, rounds = (calls - calls off - 1 "
        "table) / 8; per hour: that cost x 3600 / interval.\n",
        "| npu-smi | one call alone: wall / CPU | rounds (1 s runs) | launcher CPU a round | tool CPU a round "
        "| per call | CPU per hour at 30 s | % of one core at 30 s | CPU per hour at 1 s | % of one core at 1 s |",
        "|---|---:|---:|---:|---:|---:|---:|---:|---:|---:|",
    ]
    for tool, (wall, cpu) in alone.items():
        off, fast = med[(tool, "off")], med[(tool, "1 s")]
        rounds = max(1.0, (fast["calls"] - off["calls"] - 1) / DEVICES)
        own = (fast["own_s"] - off["own_s"]) / rounds
        calls = (fast["children_s"] - off["children_s"]) / rounds
        hour = {i: (own + calls) * 3600 / i for i in (30.0, 1.0)}
        lines.append(
            f"| {tool} | {wall * 1000:.1f} / {cpu * 1000:.1f} ms | {rounds:.1f} | {own * 1000:.1f} ms | "
            f"{calls * 1000:.1f} ms | {calls / DEVICES * 1000:.1f} ms | {hour[30.0]:.0f} s | "
            f"{hour[30.0] / 36:.2f} % | {hour[1.0]:.0f} s | {hour[1.0] / 36:.1f} % |"
        )
    return "\n".join(lines) + "\n\n" + NOTES


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--smoke", action="store_true", help="2 s jobs, one run each (does it work?)")
    parser.add_argument("--repeats", type=int, default=5)
    parser.add_argument("--seconds", type=float, default=20.0, help="how long the ranks sleep (D)")
    args = parser.parse_args()
    if args.smoke:
        args.repeats, args.seconds = 1, 2.0
    work = Path(tempfile.mkdtemp(prefix="npl-healthwatch-"))
    started = time.monotonic()
    try:
        tools = make_tools(work)
        alone = {name: tool_alone(directory, work, 3 if args.smoke else 30) for name, directory in tools.items()}
        run_once(work, tools["shell script"], 0.0, 0.1, "warm-up")  # bytecode written once, as users have it
        runs: Dict[Tuple[str, str], List[Dict[str, float]]] = {(t, i): [] for t in tools for i, _ in INTERVALS}
        count = 0
        for _ in range(args.repeats):
            for tool, directory in tools.items():
                for name, interval in INTERVALS:
                    count += 1
                    runs[(tool, name)].append(run_once(work, directory, interval, args.seconds, f"r{count}"))
    finally:
        shutil.rmtree(work, ignore_errors=True)
    print(report(runs, alone, args) + f"\n{time.monotonic() - started:.0f} s in all.")


if __name__ == "__main__":
    main()
