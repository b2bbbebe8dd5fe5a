"""The log path's cost before and after a change: 8 ranks x 200,000 ordinary lines each through
``npulaunch run`` from two source trees (a base commit, checked out with ``git worktree``, and this
tree), alternated, the launcher's own CPU (getrusage at its exit, the ranks' never counted) and its
peak RSS, medians. Two kinds of ordinary lines: goals.py's (80 bytes of "line N rank R xxx..."), and a
training job's (TensorFlow/Keras logging: INFO and W lines, progress bars, metric names with "error"
in them, numbers, paths; every character a CANN code or phrase has, but no code and no failure).

Usage: ``python3 bench/log_path.py [--base REV] [--repeats 5] [--lines 200000] [--smoke] [--out DIR]``;
writes log_path.md and log_path.json. Issue 26's goal: this tree's CPU within 10 % of the base's.
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
from pathlib import Path
from typing import Dict, List

HERE = Path(__file__).resolve().parent
ROOT = HERE.parent
sys.path.insert(0, str(HERE))
from goals import WRAP, count_newlines  # noqa: E402  (the same wrapper: the launcher's own usage at its exit)

PY = sys.executable
RANK = r"""
import os, sys
rank = int(os.environ["RANK_ID"])
kind, count = sys.argv[1], int(sys.argv[2])
w = sys.stdout.write
if kind == "plain":
    for i in range(count):
        w("line %07d rank %02d %s\n" % (i, rank, "x" * 58))
else:
    lines = (
        "I1126 04:05:06.123456 140123 basic_session_run_hooks.py:260] loss = %.4f, step = %d (0.312 sec)\n",
        "INFO:tensorflow:global_step/sec: 3.2051 examples/sec: 409.3 step %d loss %.4f\n",
        "W1126 04:05:06.223344 140123 deprecation.py:323] From /usr/lib/python3.7/site-packages/tensorflow_core/"
        "python/ops/math_grad.py:%d: The name tf.Session is deprecated; loss %.4f\n",
        "Epoch 3/10 %d/5000 [=====>........] - ETA: 3s - loss: %.4f - mean_squared_error: 0.0213 - val_error: 0.1\n",
        "2026-11-26 04:05:06,789 - INFO - train.py:88 - Evaluating batch %d: accuracy=0.913 top5=0.992 lr=%.6f\n",
    )
    for i in range(count):
        line = lines[i % 5]
        w(line % ((0.25 + i % 7 / 100, i) if i % 5 < 2 else (i, 0.25 + i % 7 / 100)))
"""


def run_once(tree: Path, work: Path, kind: str, lines: int, tag: str) -> Dict[str, float]:
    run_dir = work / tag
    run_dir.mkdir()
    usage = run_dir / "usage.json"
    cmd = [PY, "-S", str(work / "rank.py"), kind, str(lines)]
    argv = ["-m", "npulaunch", "run", "--nproc-per-node", "8", "--log-dir", str(run_dir), "--job-id", "job"]
    argv += ["--console", "all", "--", *cmd]
    env = {k: v for k, v in os.environ.items() if k not in ("PYTHONDONTWRITEBYTECODE", "RANK_ID", "RANK_SIZE")}
    env.update(PYTHONUNBUFFERED="1", PYTHONPATH=str(tree))
    start = time.monotonic()
    subprocess.run([PY, "-c", WRAP, str(usage), *argv], env=env, cwd=tree, stdout=subprocess.DEVNULL, check=False)
    wall = time.monotonic() - start
    own = json.loads(usage.read_text())
    written = sum(count_newlines(p) for p in run_dir.glob("job/rank-*/stdout.log"))
    assert written == 8 * lines, f"{tag}: {written} lines in the logs, not {8 * lines}"
    shutil.rmtree(run_dir)
    return {"wall_s": wall, "cpu_s": own["cpu_s"], "rss_mb": own["rss_mb"]}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--base", default="5607cf4", help="the commit to compare with (default: before issue 26)")
    parser.add_argument("--repeats", type=int, default=5)
    parser.add_argument("--lines", type=int, default=200_000)
    parser.add_argument("--smoke", action="store_true", help="tiny sizes, one run, against HEAD (does it work?)")
    parser.add_argument("--out", help="default bench/results (with --smoke, a temporary directory)")
    args = parser.parse_args()
    base_rev = "HEAD" if args.smoke else args.base
    repeats, lines = (1, 2000) if args.smoke else (args.repeats, args.lines)
    out = Path(args.out or (tempfile.mkdtemp(prefix="npl-logpath-") if args.smoke else HERE / "results"))
    out.mkdir(parents=True, exist_ok=True)
    work = Path(tempfile.mkdtemp(prefix="npl-logpath-work-"))
    base = work / "base"
    subprocess.run(
        ["git", "-C", str(ROOT), "worktree", "add", "--detach", str(base), base_rev],
        check=True,
        stdout=subprocess.DEVNULL,
        stderr=subprocess.DEVNULL,
    )
    commit = subprocess.run(
        ["git", "-C", str(base), "rev-parse", "--short", "HEAD"], capture_output=True, text=True, check=True
    ).stdout.strip()
    (work / "rank.py").write_text(RANK)
    trees = {f"base ({commit})": base, "this tree": ROOT}
    runs: Dict[str, Dict[str, List[Dict[str, float]]]] = {k: {t: [] for t in trees} for k in ("plain", "training")}
    started = time.monotonic()
    try:
        for name, tree in trees.items():  # warm-up: bytecode and the code cache written, as users have
            run_once(tree, work, "plain", 100, f"warm-{len(name)}")
        count = 0
        for _ in range(repeats):
            for kind in runs:
                for name, tree in trees.items():
                    count += 1
                    runs[kind][name].append(run_once(tree, work, kind, lines, f"r{count}"))
    finally:
        subprocess.run(["git", "-C", str(ROOT), "worktree", "remove", "--force", str(base)], check=False)
        shutil.rmtree(work, ignore_errors=True)
    rows = []
    for kind, by_tree in runs.items():
        med = {
            t: {k: statistics.median(r[k] for r in rs) for k in ("wall_s", "cpu_s", "rss_mb")}
            for t, rs in by_tree.items()
        }
        names = list(by_tree)
        ratio = med[names[1]]["cpu_s"] / med[names[0]]["cpu_s"]
        rows.append((kind, med, names, ratio))
    text = [
        f"`python3 bench/log_path.py`, {time.strftime('%Y-%m-%d')}: {os.cpu_count()} cores, Python "
        f"{sys.version.split()[0]}; 8 ranks x {lines:,} lines, medians of {repeats} runs, trees alternated; "
        f"{time.monotonic() - started:.0f} s in all. CPU and RSS are the launcher's own.\n",
        "| lines | tree | launcher CPU | wall | peak RSS | CPU vs base |",
        "|---|---|---:|---:|---:|---:|",
    ]
    for kind, med, names, ratio in rows:
        for name in names:
            m = med[name]
            shown = f"{ratio:.2f}x" if name == names[1] else ""
            text.append(
                f"| {kind} | {name} | {m['cpu_s']:.3f} s | {m['wall_s']:.2f} s | {m['rss_mb']:.1f} MB | {shown} |"
            )
    (out / "log_path.md").write_text("\n".join(text) + "\n")
    (out / "log_path.json").write_text(json.dumps({"base": commit, "lines": lines, "runs": runs}, indent=1) + "\n")
    print("\n".join(text))


if __name__ == "__main__":
    main()
