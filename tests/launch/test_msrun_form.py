"""msrun's command line, pasted: ``npulaunch run --worker_num 2 --local_worker_num 2 train.py`` runs a real
MindSpore job (the CPU build) as ``msrun`` does with the same flags and script: the same workers, world
and AllReduce result, the scheduler started beside them, MS_TOPO_TIMEOUT from --cluster_time_out."""

from __future__ import annotations

import importlib.util
import json
import subprocess
import sys
from pathlib import Path

from helpers import RANKS, base_env, free_port_window, require, run_cli
from test_torch import rank_lines

MS_RANK = RANKS / "mindspore_rank.py"


def test_msruns_command_line_runs_as_msrun_runs_it(tmp_path: Path, marker: str) -> None:
    require(importlib.util.find_spec("mindspore") is not None, "mindspore (pip install -e '.[mindspore]')")
    flags = ["--worker_num", "2", "--local_worker_num", "2", "--cluster_time_out", "120", "--join", "True"]
    ours = run_cli(
        "run", *flags, "--log_dir", str(tmp_path / "ours"), "--no-live", str(MS_RANK),
        env={"NPLTEST_MARKER": marker}, timeout=240,
    )  # fmt: skip
    assert ours.returncode == 0, ours.stderr
    mine = rank_lines(ours.stdout)
    port = str(free_port_window(1))
    theirs = subprocess.run(
        [sys.executable, "-m", "mindspore.parallel.cluster.run", *flags, "--master_port", port]
        + ["--log_dir", str(tmp_path / "msrun"), str(MS_RANK)],
        env=base_env({"NPLTEST_MARKER": marker}),
        cwd=str(tmp_path),
        capture_output=True,
        text=True,
        timeout=240,
    )
    assert theirs.returncode == 0, theirs.stdout[-3000:] + theirs.stderr[-3000:]
    ref = []
    for log in sorted((tmp_path / "msrun").glob("worker_*.log")):
        ref += [json.loads(line) for line in log.read_text().splitlines() if line.startswith('{"rank"')]
    ref.sort(key=lambda entry: entry["rank"])
    assert [(e["rank"], e["sum"]) for e in mine] == [(e["rank"], e["sum"]) for e in ref] == [(0, 3.0), (1, 3.0)]
    for ran in (mine, ref):
        assert [(e["env"]["MS_WORKER_NUM"], e["env"]["MS_TOPO_TIMEOUT"], e["env"]["MS_ROLE"]) for e in ran] == [
            ("2", "120", "MS_WORKER")
        ] * 2
    job = next((tmp_path / "ours").iterdir())
    assert (job / "scheduler" / "stdout.log").exists()  # npulaunch started the scheduler, as msrun does
