"""Steps recognised in common training output without configuration (host/progress.py)."""

from __future__ import annotations

import re

import pytest

from npulaunch.host.progress import find_step


@pytest.mark.parametrize(
    "line, step",
    [
        ("INFO:tensorflow:loss = 0.12, step = 120 (0.5 sec)", (120, None)),
        ("INFO:tensorflow:global_step/sec: 3.2", None),
        ("I1123 global_step = 4200, loss = 1.3", (4200, None)),
        ("step 120/1000 loss 0.3", (120, 1000)),
        ("Step [120/1000] lr 0.1", (120, 1000)),
        ("step 7 of 50", (7, 50)),
        ("  45/100 [============>.................] - ETA: 3s - loss: 0.2", (45, 100)),
        ("Epoch 3/10", (3, 10)),
        ("loss: 0.31 accuracy: 0.9", None),
    ],
)
def test_forms(line: str, step) -> None:
    assert find_step([line]) == step


def test_the_latest_line_wins_and_a_job_regex_overrides() -> None:
    assert find_step(["step 1/10", "noise", "step 2/10"]) == (2, 10)
    assert find_step(["iter=77 of run"], re.compile(r"iter=(\d+)")) == (77, None)
    assert find_step(["step 5/10"], re.compile(r"iter=(\d+)")) is None  # the job's own form only
