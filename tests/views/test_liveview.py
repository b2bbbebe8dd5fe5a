"""The live status view: drawn in a pseudo-terminal, never on a pipe."""

from __future__ import annotations

import re
import sys
from pathlib import Path

from helpers import RANKS, run_cli, run_on_pty

ANSI = re.compile(r"\x1b\[[0-9;?]*[A-Za-z]")


def run_in_pty(*args: str, timeout_s: float = 60) -> str:
    return ANSI.sub("", run_on_pty(args, timeout_s=timeout_s, expect=None))


def test_the_live_view_is_drawn_on_a_terminal(tmp_path: Path) -> None:
    config = tmp_path / "job.yaml"
    config.write_text(f"""job:
  command: [{sys.executable}, {RANKS / "rank.py"}, "*=say:step-1/4+say:step-2/4@0.3"]
  log_dir: {tmp_path / "logs"}
hosts: [{{host: localhost, devices: 2}}]
monitor: {{progress_regex: "step (\\\\d+)/(\\\\d+)"}}
""")
    screen = run_in_pty("run", str(config), "--job-id", "live")
    assert "lines/s" in screen and "silent" in screen and "last line" in screen  # the table's header
    assert re.search(r"\b1\s+1\s+succeeded\b", screen), screen[-2000:]
    assert "2/4" in screen  # the step parsed from the rank's progress lines
    assert "[r0 d0] step 2 4" in screen or "[r0 d0] step 2/4" in screen
    assert "job live succeeded" in screen


def test_no_live_view_on_a_pipe(tmp_path: Path) -> None:
    result = run_cli(
        "run",
        "--nproc-per-node",
        "2",
        "--log-dir",
        str(tmp_path),
        "--job-id",
        "pipe",
        "--",
        sys.executable,
        str(RANKS / "rank.py"),
        "*=ok",
    )
    assert result.returncode == 0
    assert "\x1b[" not in result.stdout + result.stderr and "lines/s" not in result.stdout + result.stderr


def test_ranks_filter_shows_only_those_ranks(tmp_path: Path) -> None:
    result = run_cli(
        "run",
        "--nproc-per-node",
        "3",
        "--log-dir",
        str(tmp_path),
        "--job-id",
        "f",
        "--ranks",
        "1",
        "--",
        sys.executable,
        str(RANKS / "rank.py"),
        "*=ok",
    )
    assert result.returncode == 0
    assert "[r1 d1] ok" in result.stdout and "[r0 d0]" not in result.stdout and "[r2 d2]" not in result.stdout
    assert "ok" in (tmp_path / "f" / "rank-0" / "stdout.log").read_text()  # files still get every rank
