"""A flood of output on a terminal (issue 15): 8 ranks x 200,000 lines of 80 bytes, with npulaunch's
live view on a pseudo-terminal (read as fast as the kernel hands it over, as a terminal emulator
would), against the same run off a terminal (stdout to /dev/null); and, during such a flood, the time
from a rank's failure (it writes the time, then exits 1) to the launcher's exit.

Usage: ``python3 bench/console_flood.py [--smoke] [--repeats 5]``; prints a Markdown table.
"""

from __future__ import annotations

import argparse
import json
import os
import pty
import select
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import List

ROOT = Path(__file__).resolve().parent.parent
LINE = "step %d of the flood, padded to eighty bytes with text that means nothing ........"
FLOOD = "import sys\nout = sys.stdout\nfor i in range({n}): out.write('{line}\\n' % i)\nout.flush()"
FAIL = (
    "import os, sys, time\nout = sys.stdout\nstart = time.monotonic()\ni = 0\n"
    "while True:\n    out.write('{line}\\n' % i)\n    i += 1\n"
    "    if os.environ['RANK_ID'] == '3' and time.monotonic() - start > 1.0:\n"
    "        open({stamp!r}, 'w').write(repr(time.time()))\n        os._exit(1)\n"
)
ENV = dict(os.environ, PYTHONPATH=str(ROOT))


def config(workdir: Path, code: str) -> Path:
    path = workdir / "flood.yaml"
    path.write_text(
        f"version: 1\njob:\n  command: [{sys.executable}, -c, {json.dumps(code)}]\n  log_dir: {workdir / 'logs'}\n"
        "hosts: [{host: localhost, devices: 8}]\nrank_table: none\n"
    )
    return path


def argv(path: Path) -> List[str]:
    return [sys.executable, "-m", "npulaunch", "run", str(path), "--job-id", f"f{time.monotonic_ns()}"]


def run_on_a_terminal(path: Path) -> float:
    """Run npulaunch with a pseudo-terminal as stdout/stderr (the live view is on), reading it as fast
    as it comes; returns when the launcher has exited (time.time())."""
    pid, master = pty.fork()
    if pid == 0:
        os.execvpe(sys.executable, argv(path), ENV)
    while True:
        try:
            ready, _, _ = select.select([master], [], [], 1.0)
            if ready:
                os.read(master, 1 << 16)
        except OSError:  # EIO: the launcher is gone
            break
    os.waitpid(pid, 0)
    os.close(master)
    return time.time()


def on_terminal(path: Path) -> float:
    """Wall time of the run on a terminal."""
    start = time.time()
    return run_on_a_terminal(path) - start


def off_terminal(path: Path) -> float:
    start = time.monotonic()
    subprocess.run(argv(path), stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL, env=ENV, check=False)
    return time.monotonic() - start


def failure_to_exit(workdir: Path) -> float:
    """On a terminal: a rank fails during the flood; seconds from its failure to the launcher's exit."""
    stamp = workdir / "failed-at"
    if stamp.exists():
        stamp.unlink()
    ended = run_on_a_terminal(config(workdir, FAIL.format(line=LINE, stamp=str(stamp))))
    return ended - float(stamp.read_text())


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--smoke", action="store_true", help="tiny sizes, one run (the numbers mean nothing)")
    parser.add_argument("--repeats", type=int, default=5)
    args = parser.parse_args()
    lines = 2_000 if args.smoke else 200_000
    repeats = 1 if args.smoke else args.repeats
    with tempfile.TemporaryDirectory(prefix="npl-flood-") as tmp:
        workdir = Path(tmp)
        path = config(workdir, FLOOD.format(n=lines, line=LINE))
        off, on = [], []
        for _ in range(repeats):  # alternated, so both see the same machine
            off.append(off_terminal(path))
            on.append(on_terminal(path))
        failures = [failure_to_exit(workdir) for _ in range(repeats)]
    off_s, on_s = statistics.median(off), statistics.median(on)
    print("| measure | median (s) | ratio |")
    print("|---|---:|---:|")
    print(f"| 8 x {lines:,} lines, off a terminal | {off_s:.2f} | 1.00 |")
    print(f"| 8 x {lines:,} lines, on a terminal (live view) | {on_s:.2f} | {on_s / off_s:.2f} |")
    print(f"| rank failure -> launcher exit, during a flood, on a terminal | {statistics.median(failures):.3f} | |")
    return 0


if __name__ == "__main__":
    sys.exit(main())
