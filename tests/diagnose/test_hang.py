"""Hangs and waiting ranks with real torch (gloo) jobs, end to end through ``npulaunch run``: the root cause of a
hang is the rank outside any collective (by every rank's stack, py-spy's, else the process table), not the ranks
silent longest; ranks that called different collectives; a rank that left while the others still needed it
(the peers' "Connection closed by peer" are symptoms); and a failure's place is the script's own line."""

from __future__ import annotations

import importlib.util
import json
import shutil
from pathlib import Path
from typing import Any, Dict, List, Sequence

import pytest
from helpers import RANKS, marked_pids, py_spy_denied, require, run_cli

SCRIPT = RANKS / "torch_hang.py"


@pytest.fixture(autouse=True)
def _torch() -> None:
    require(importlib.util.find_spec("torch") is not None, "torch (pip install -e '.[torch]')")


def line_of(marker: str) -> int:
    """The line of torch_hang.py that carries ``# MARKER``."""
    return next(i for i, text in enumerate(SCRIPT.read_text().splitlines(), 1) if text.rstrip().endswith("# " + marker))


def run_job(
    tmp_path: Path,
    marker: str,
    mode: str,
    who: int,
    env: Dict[str, str] = {},  # noqa: B006
    flags: Sequence[str] = (),
) -> Dict[str, Any]:
    """``npulaunch run`` of 4 torch ranks of torch_hang.py; the job's failure.json, events and stderr."""
    log_dir = tmp_path / "logs"
    result = run_cli(
        "run",
        *flags,
        "--nproc-per-node",
        "4",
        "--hang-timeout",
        "3",
        "--grace-period",
        "1",
        "--log-dir",
        str(log_dir),
        "--job-id",
        "h",
        "--no-live",
        str(SCRIPT),
        mode,
        str(who),
        env={"NPLTEST_MARKER": marker, "GLOO_SOCKET_IFNAME": "lo", **env},
        timeout=180,
    )
    assert result.returncode == 1, result.stderr
    assert not marked_pids(marker)  # no rank outlived the job
    job = log_dir / "h"
    events = [json.loads(line) for line in (job / "events.jsonl").read_text().splitlines()]
    return {"failure": json.loads((job / "failure.json").read_text()), "events": events, "stderr": result.stderr}


def dumped(events: List[Dict[str, Any]]) -> Dict[str, Any]:
    return next(e for e in events if e["kind"] == "stacks_dumped")


def test_a_rank_stuck_in_its_own_code_is_the_cause_not_the_ranks_waiting_in_the_all_reduce(
    tmp_path: Path, marker: str
) -> None:
    require(shutil.which("py-spy") is not None, "py-spy (pip install -e '.[test]')")
    job = run_job(tmp_path, marker, "stall", 1)
    failure = job["failure"]
    assert failure["rank"] == 1 and failure["cls"] == "hang", failure
    assert f"torch_hang.py:{line_of('STALL')}, in load_batch" in failure["first_line"]
    assert "ranks 0, 2-3 wait in torch.distributed.all_reduce" in failure["why"]
    assert "evidence: stacks by py-spy" in failure["why"]
    assert any(text.startswith("load_batch (") for text in failure["excerpt"])  # its stack, innermost last
    assert {tuple(g["ranks"]): g["what"] for g in failure["others"]} == {
        (0, 2, 3): "waiting in torch.distributed.all_reduce, for rank 1"
    }
    stacks = dumped(job["events"])
    assert sorted(stacks["ranks"]) == ["0", "1", "2", "3"]  # every rank's stack, not only the silent ones
    assert len(stacks["files"]) == 4 and all(Path(path).stat().st_size > 0 for path in stacks["files"])
    assert all(f"stack dump: {path}" in job["stderr"] for path in stacks["files"])


def test_in_a_ddp_loop_the_others_wait_in_backward_and_the_stalled_rank_is_named(tmp_path: Path, marker: str) -> None:
    require(shutil.which("py-spy") is not None, "py-spy (pip install -e '.[test]')")
    failure = run_job(tmp_path, marker, "ddp-stall", 2)["failure"]
    assert failure["rank"] == 2, failure
    assert f"torch_hang.py:{line_of('STALL')}, in load_batch" in failure["first_line"]
    assert "wait in backward (DDP's gradient all-reduce runs in it)" in failure["why"]


def test_without_a_stack_the_process_table_names_the_odd_rank_out(tmp_path: Path, marker: str) -> None:
    # py-spy cannot attach and the ranks register no signal (no injection hook: stragglers off): the main threads'
    # kernel waits decide (the stuck rank sleeps on a timer, the three in the all-reduce wait on a lock)
    job = run_job(tmp_path, marker, "stall", 3, env=py_spy_denied(tmp_path), flags=("--stragglers", "off"))
    failure = job["failure"]
    assert failure["rank"] == 3, failure
    assert "the process table" in failure["why"] and "no Python stack could be taken" in failure["why"]
    assert dumped(job["events"])["files"] == []
    assert "no stack by py-spy for ranks 0-3 (py-spy: Permission Denied" in job["stderr"]


def test_ranks_that_called_different_collectives_name_the_odd_one(tmp_path: Path, marker: str) -> None:
    require(shutil.which("py-spy") is not None, "py-spy (pip install -e '.[test]')")
    failure = run_job(tmp_path, marker, "mismatch", 1)["failure"]
    assert failure["rank"] == 1, failure
    assert (
        "rank 1 waits in torch.distributed.barrier while ranks 0, 2-3 wait in torch.distributed.all_reduce"
        in (failure["why"])
    )


def test_a_rank_that_left_is_the_cause_and_the_peers_closed_connections_are_symptoms(
    tmp_path: Path, marker: str
) -> None:
    failure = run_job(tmp_path, marker, "exit", 2)["failure"]
    assert failure["rank"] == 2 and failure["cls"] == "exit", failure
    assert "after rank 2 ended on its own" in failure["why"]
    # the others saw their peer close its connection (or were stopped before they printed it)
    groups = {g["what"]: g["ranks"] for g in failure["others"]}
    assert groups.get("peer-gone, waiting on rank 2") and set(groups) <= {
        "peer-gone, waiting on rank 2",
        "stopped by npulaunch",
    }, groups
    assert sorted(rank for ranks in groups.values() for rank in ranks) == [0, 1, 3]


def test_a_failure_inside_ddp_is_placed_at_the_scripts_line(tmp_path: Path, marker: str) -> None:
    failure = run_job(tmp_path, marker, "bad-shape", 1)["failure"]
    assert failure["rank"] == 1, failure
    assert f'File "{SCRIPT}", line {line_of("BAD-SHAPE")}, in bad_shape' in failure["first_line"], failure
    excerpt = "\n".join(failure["excerpt"])
    assert "torch/nn/parallel/distributed.py" in excerpt  # the framework's frames stay in the excerpt
