"""What zero-code session injection costs a rank that never imports TensorFlow: interpreter
start-up with and without npulaunch's sitecustomize first on PYTHONPATH, alternated, medians.
Usage: ``python3 bench/injection_cost.py [--repeats 30]``."""

from __future__ import annotations

import argparse
import os
import statistics
import subprocess
import sys
import time

INJECT = os.path.join(os.path.dirname(os.path.dirname(os.path.abspath(__file__))), "npulaunch", "inject")


def timed(env: dict) -> float:
    start = time.perf_counter()
    subprocess.run([sys.executable, "-c", "import json"], env=env, check=True, stderr=subprocess.DEVNULL)
    return time.perf_counter() - start


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--repeats", type=int, default=30)
    args = parser.parse_args()
    plain = {k: v for k, v in os.environ.items() if k != "PYTHONPATH"}
    injected = dict(plain, PYTHONPATH=INJECT, NPULAUNCH_SESSION_OPTIONS='{"hcom_parallel":true}')
    a, b = [], []
    for _ in range(args.repeats):
        a.append(timed(plain))
        b.append(timed(injected))
    ma, mb = statistics.median(a), statistics.median(b)
    print(
        f"| start-up without injection | with injection | added |\n|---:|---:|---:|\n"
        f"| {1000 * ma:.1f} ms | {1000 * mb:.1f} ms | {1000 * (mb - ma):.1f} ms |"
    )


if __name__ == "__main__":
    main()
