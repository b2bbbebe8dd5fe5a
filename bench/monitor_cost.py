"""What watching costs: 8 ranks each print 100,000 lines of about 80 bytes. (A) the floor: a
minimal Popen script, ranks writing straight to files; (B) npulaunch run (ranks write their log
files, npulaunch follows them for the console, error signatures and progress; console to
/dev/null). Alternated, medians. Reports wall time and npulaunch's own CPU time (summary.json:
launcher_cpu_s) against the ranks' CPU time. Usage: python3 bench/monitor_cost.py [--repeats 3]."""

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

RANK = [sys.executable, "-S", "-c",
        "import sys\nw = sys.stdout.write\nfor i in range(%d): w('line %%07d %%s\\n' %% (i, 'x' * 60))"]
FLOOR = r"""
import os, subprocess, sys
n, logs = int(sys.argv[1]), sys.argv[2]
procs = [subprocess.Popen(sys.argv[3:], stdout=open(os.path.join(logs, "%d.log" % r), "wb"),
                          env=dict(os.environ, RANK_ID=str(r))) for r in range(n)]
sys.exit(max(p.wait() for p in procs))
"""


def children_cpu() -> float:
    usage = resource.getrusage(resource.RUSAGE_CHILDREN)
    return usage.ru_utime + usage.ru_stime


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--ranks", type=int, default=8)
    parser.add_argument("--lines", type=int, default=100_000)
    parser.add_argument("--repeats", type=int, default=3)
    args = parser.parse_args()
    rank = RANK[:-1] + [RANK[-1] % args.lines]
    work = tempfile.mkdtemp(prefix="npl-monitor-")
    floor_wall, ours_wall, ours_cpu, total_cpu = [], [], [], []
    try:
        for i in range(args.repeats):
            logs = os.path.join(work, f"floor-{i}")
            os.makedirs(logs)
            start = time.perf_counter()
            subprocess.run([sys.executable, "-c", FLOOR, str(args.ranks), logs, *rank], check=True)
            floor_wall.append(time.perf_counter() - start)
            before = children_cpu()
            start = time.perf_counter()
            subprocess.run([sys.executable, "-m", "npulaunch", "run", "--nproc-per-node", str(args.ranks),
                            "--log-dir", work, "--job-id", f"m{i}", "--", *rank], check=True,
                           stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
            ours_wall.append(time.perf_counter() - start)
            total_cpu.append(children_cpu() - before)
            summary = json.load(open(os.path.join(work, f"m{i}", "summary.json")))
            ours_cpu.append(summary["job"]["launcher_cpu_s"])
    finally:
        shutil.rmtree(work, ignore_errors=True)
    fw, ow, oc, tc = (statistics.median(v) for v in (floor_wall, ours_wall, ours_cpu, total_cpu))
    print(f"machine: {os.cpu_count()} cores; {args.ranks} ranks x {args.lines} lines")
    print("| | floor (ranks write files) | npulaunch | ratio |\n|---|---:|---:|---:|")
    print(f"| wall time | {fw:.2f} s | {ow:.2f} s | {ow / fw:.2f} |")
    print(f"| npulaunch's own CPU | - | {oc:.2f} s | {oc / max(tc - oc, 1e-9):.2f} of the ranks' CPU |")


if __name__ == "__main__":
    main()
