"""Every benchmark, one after the other (never two at once: they share the machine), with its
results in bench/results/. ``--smoke``: tiny sizes and one run each, into a temporary directory
unless --out is given: CI runs it so the benchmarks cannot rot; its numbers mean nothing.

Usage: ``python3 bench/run_all.py [--smoke] [--out DIR]`` (run bench/setup.sh first for torchrun
and the plot; the SSH start-up, and recovery's SSH rows, need root, iproute2, util-linux and
openssh-server).
"""

from __future__ import annotations

import argparse
import os
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import List, Tuple

BENCH = Path(__file__).resolve().parent

# (name, arguments of the full run, arguments of the smoke run, writes its own files under --out)
BENCHMARKS: List[Tuple[str, List[str], List[str], bool]] = [
    ("compare", [], ["--smoke"], True),
    ("goals", [], ["--smoke"], True),
    ("plan_scale", [], ["--hosts", "1,64", "--devices", "8", "--repeats", "1"], True),
    ("injection_cost", [], ["--repeats", "2"], False),
    ("burst_memory", [], ["--smoke"], False),
    ("console_flood", [], ["--smoke"], False),
    ("log_path", [], ["--smoke"], True),
    ("ssh_startup", [], ["--hosts", "1", "--repeats", "1"], False),
    ("recovery", [], ["--smoke"], True),  # its SSH rows need root (full run only); without, local rows only
    ("health_watch", [], ["--smoke"], False),
    ("torch_start", [], ["--smoke"], True),  # torch ranks to their first all-reduce; needs torch in python3
    ("straggler", [], ["--smoke"], True),  # straggler detection's cost and time to named; torch; cgroup rows: root
]


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--smoke", action="store_true", help="tiny sizes, one run each (for CI)")
    parser.add_argument("--out", help="where results go (default: bench/results; a temporary directory with --smoke)")
    args = parser.parse_args()
    out = Path(args.out or (tempfile.mkdtemp(prefix="npl-bench-smoke-") if args.smoke else BENCH / "results"))
    out.mkdir(parents=True, exist_ok=True)
    failed = []
    for name, full, smoke, own_files in BENCHMARKS:
        argv = [sys.executable, str(BENCH / f"{name}.py"), *(smoke if args.smoke else full)]
        if own_files:
            argv += ["--out", str(out)]
        if name == "ssh_startup" and os.geteuid() != 0:
            print(f"== {name}: skipped (needs root for its network-namespace hosts)", flush=True)
            continue
        print(f"== {name}: {' '.join(argv[1:])}", flush=True)
        start = time.monotonic()
        done = subprocess.run(argv, stdout=subprocess.PIPE, text=True)
        print(done.stdout, end="", flush=True)
        if not own_files:
            (out / f"{name}.md").write_text(done.stdout)
        print(f"== {name}: exit {done.returncode} after {time.monotonic() - start:.1f} s", flush=True)
        if done.returncode != 0:
            failed.append(name)
    print(f"results in {out}" + (f"; failed: {', '.join(failed)}" if failed else ""))
    return 1 if failed else 0


if __name__ == "__main__":
    sys.exit(main())
