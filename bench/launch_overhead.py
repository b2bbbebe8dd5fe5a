"""What a local launch costs on top of starting the ranks yourself.

Runs N trivial ranks (print the rank, exit) with (A) a minimal Popen-and-wait script, the
practical floor, and (B) ``npulaunch run``; alternates A B A B, reports medians and the
difference. Usage: ``python3 bench/launch_overhead.py [--ranks 1,8,32] [--repeats 7]``.
"""

from __future__ import annotations

import argparse
import os
import shutil
import statistics
import subprocess
import sys
import tempfile
import time

RANK = [sys.executable, "-S", "-c", "import os; print(os.environ['RANK_ID'])"]

FLOOR = r"""
import os, subprocess, sys
n, logs = int(sys.argv[1]), sys.argv[2]
procs = []
for rank in range(n):
    env = dict(os.environ, RANK_ID=str(rank), RANK_SIZE=str(n), DEVICE_ID=str(rank))
    out = open(os.path.join(logs, "%d.log" % rank), "wb")
    procs.append(subprocess.Popen(sys.argv[3:], env=env, stdout=out, stderr=subprocess.STDOUT))
sys.exit(max(p.wait() for p in procs))
"""


def timed(argv: list) -> float:
    start = time.perf_counter()
    subprocess.run(argv, check=True, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    return time.perf_counter() - start


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--ranks", default="1,8,32")
    parser.add_argument("--repeats", type=int, default=7)
    args = parser.parse_args()
    work = tempfile.mkdtemp(prefix="npl-bench-")
    print(f"machine: {os.cpu_count()} cores, Python {sys.version.split()[0]}")
    print("| ranks | floor (s) | npulaunch (s) | added (ms) | ratio |")
    print("|---:|---:|---:|---:|---:|")
    try:
        for n in (int(x) for x in args.ranks.split(",")):
            floor, ours = [], []
            for i in range(args.repeats):
                logs = os.path.join(work, f"floor-{n}-{i}")
                os.makedirs(logs)
                floor.append(timed([sys.executable, "-c", FLOOR, str(n), logs, *RANK]))
                ours.append(timed([sys.executable, "-m", "npulaunch", "run", "--nproc-per-node", str(n),
                                   "--log-dir", work, "--job-id", f"b{n}-{i}", "--console", "none",
                                   "--", *RANK]))
            a, b = statistics.median(floor), statistics.median(ours)
            print(f"| {n} | {a:.3f} | {b:.3f} | {1000 * (b - a):.0f} | {b / a:.2f} |")
    finally:
        shutil.rmtree(work, ignore_errors=True)


if __name__ == "__main__":
    main()
