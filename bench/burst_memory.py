"""The launcher's peak memory when a rank writes a burst it cannot show (issue 15): one rank writes
200 MB (2,000,000 lines of 100 bytes) as fast as it can and exits, or one 20 MB line; npulaunch's
peak RSS (the launcher process alone, sampled every 20 ms from /proc) and its wall time, and that the
log holds every byte. The console goes to /dev/null (as fast as a console can be).

Usage: ``python3 bench/burst_memory.py [--smoke] [--repeats 3]``; prints a Markdown table.
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Dict, List

import psutil

ROOT = Path(__file__).resolve().parent.parent

BURST = (
    "import sys\nout = sys.stdout.buffer\nline = b'x' * 99 + b'\\n'\nfor i in range({n}): out.write(line)\nout.flush()"
)
LONG_LINE = (
    "import sys\nout = sys.stdout.buffer\nfor i in range({n}): out.write(b'y' * (1 << 20))\n"
    "out.write(b'\\n')\nout.flush()"
)


def run_once(workdir: Path, code: str, name: str) -> Dict[str, float]:
    config = workdir / f"{name}.yaml"
    config.write_text(
        f"version: 1\njob:\n  command: [{sys.executable}, -c, {json.dumps(code)}]\n  log_dir: {workdir / 'logs'}\n"
        "hosts: [{host: localhost, devices: 1}]\nrank_table: none\n"
    )
    job_id = f"{name}-{time.monotonic_ns()}"
    argv = [sys.executable, "-m", "npulaunch", "run", str(config), "--job-id", job_id, "--no-live"]
    env = dict(os.environ, PYTHONPATH=str(ROOT))
    start = time.monotonic()
    proc = subprocess.Popen(argv, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL, env=env)
    watched, peak = psutil.Process(proc.pid), 0
    while proc.poll() is None:
        try:
            peak = max(peak, watched.memory_info().rss)
        except psutil.Error:
            pass
        time.sleep(0.02)
    wall = time.monotonic() - start
    if proc.returncode != 0:
        raise SystemExit(f"{name}: npulaunch exited {proc.returncode}")
    size = (workdir / "logs" / job_id / "rank-0" / "stdout.log").stat().st_size
    return {"peak_rss_mb": peak / 2**20, "wall_s": wall, "log_bytes": size}


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--smoke", action="store_true", help="tiny sizes, one run (the numbers mean nothing)")
    parser.add_argument("--repeats", type=int, default=3)
    args = parser.parse_args()
    lines, megabytes = (20_000, 2) if args.smoke else (2_000_000, 20)
    repeats = 1 if args.smoke else args.repeats
    cases = [
        (f"burst of {lines * 100 / 1e6:g} MB ({lines:,} lines)", BURST.format(n=lines), lines * 100),
        (f"one line of {megabytes} MB", LONG_LINE.format(n=megabytes), megabytes * 2**20 + 1),
    ]
    rows: List[str] = ["| case | peak RSS (MB) | wall (s) | log complete |", "|---|---:|---:|---|"]
    with tempfile.TemporaryDirectory(prefix="npl-burst-") as tmp:
        for index, (label, code, expected) in enumerate(cases):
            runs = [run_once(Path(tmp), code, f"case{index}") for _ in range(repeats)]
            peak = statistics.median(r["peak_rss_mb"] for r in runs)
            wall = statistics.median(r["wall_s"] for r in runs)
            complete = all(r["log_bytes"] == expected for r in runs)
            rows.append(f"| {label} | {peak:.0f} | {wall:.2f} | {'yes' if complete else 'NO'} |")
    print("\n".join(rows))
    return 0


if __name__ == "__main__":
    sys.exit(main())
