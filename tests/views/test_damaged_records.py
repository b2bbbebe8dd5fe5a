"""``status`` and ``report`` on a damaged job directory (issue 15): invalid UTF-8 and truncated lines in
events.jsonl, a summary.json cut short or of the wrong shape, events of the wrong shape. They print what
they can and one line on the damage; never a traceback. The job directory is a real one, then damaged."""

from __future__ import annotations

import json
import shutil
import sys
from pathlib import Path
from typing import Callable

import pytest
from helpers import run_cli


@pytest.fixture(scope="module")
def finished_job(tmp_path_factory: pytest.TempPathFactory) -> Path:
    root = tmp_path_factory.mktemp("damaged")
    path = root / "job.yaml"
    path.write_text(
        f"version: 1\njob:\n  command: [{sys.executable}, -c, \"print('hello')\"]\n  log_dir: {root / 'logs'}\n"
        "hosts: [{host: localhost, devices: 2}]\nrank_table: none\n"
    )
    result = run_cli("run", str(path), "--job-id", "good", "--no-live")
    assert result.returncode == 0, result.stderr
    return root / "logs" / "good"


def _append(name: str, data: bytes) -> Callable[[Path], None]:
    def damage(job: Path) -> None:
        with open(job / name, "ab") as handle:
            handle.write(data)

    return damage


def _replace(name: str, data: bytes) -> Callable[[Path], None]:
    return lambda job: (job / name).write_bytes(data)


def _truncate(name: str, size: int) -> Callable[[Path], None]:
    return lambda job: (job / name).write_bytes((job / name).read_bytes()[:size])


DAMAGES = {  # id: (damage, the command that reads it, what it says of it)
    "events-invalid-utf8": (
        _append("events.jsonl", b'{"kind": "rank_exited", "x": "\xff\xfe"}\n'),
        "status",
        "1 damaged line(s) skipped",
    ),
    "events-not-json": (_append("events.jsonl", b"not json at all\n{}\n"), "status", "2 damaged line(s) skipped"),
    "events-wrong-shape": (
        _append("events.jsonl", b'{"kind": "rank_started", "time": "x", "job_id": 1, "host": 2, "rank": 0}\n'),
        "status",
        "",
    ),
    "summary-truncated": (_truncate("summary.json", 120), "report", "damaged: cannot read"),
    "summary-wrong-shape": (_replace("summary.json", b'{"job": 5, "ranks": "no"}'), "report", "damaged:"),
    "summary-invalid-utf8": (_replace("summary.json", b'{"job": "\xff"}'), "report", "damaged:"),
}


@pytest.mark.parametrize("damage_id", sorted(DAMAGES))
def test_status_and_report_read_what_they_can(finished_job: Path, tmp_path: Path, damage_id: str) -> None:
    job = tmp_path / "good"
    shutil.copytree(finished_job, job)
    damage, reader, said = DAMAGES[damage_id]
    damage(job)
    for command in ("status", "report"):
        result = run_cli(command, str(job))
        assert "Traceback" not in result.stderr + result.stdout, result.stderr
        assert result.returncode == 0, (command, result.stderr)
        if command == reader:
            assert said in result.stdout, (command, result.stdout)
        # what is still readable is shown: the ranks and how the job ended
        assert "succeeded" in result.stdout, (command, result.stdout)


def test_a_summary_of_the_wrong_shape_is_named_with_its_field(finished_job: Path, tmp_path: Path) -> None:
    job = tmp_path / "good"
    shutil.copytree(finished_job, job)
    document = json.loads((job / "summary.json").read_text())
    document["job"]["exit_code"] = "zero"
    (job / "summary.json").write_text(json.dumps(document))
    result = run_cli("report", str(job))
    assert result.returncode == 0 and "Traceback" not in result.stderr
    assert result.stdout.startswith("damaged: ") and "exit_code" in result.stdout.splitlines()[0]
