"""The directories a rank's session options make CANN write to (dump_path, work_path, compile
caches, profiling output): planned per rank and absolute, shown by plan, checked before launch, and
made before each rank starts."""

from __future__ import annotations

import json
from pathlib import Path

from helpers import rank_cmd, run_cli

from npulaunch.plan.rankoptions import written_dirs


def test_every_written_directory_of_a_rank_absolute_from_its_working_directory() -> None:
    options = {
        "dump_path": "dumps/3",
        "work_path": "/srv/aoe",
        "debug_dir": "~/debug",
        "op_compiler_cache_dir": "cache/../kcache",
        "graph_compiler_cache_dir": "",
        "profiling_options": json.dumps({"output": "prof/3", "training_trace": "on"}),
        "enable_dump": True,
    }
    found = dict(written_dirs(options, "/work/job"))
    assert found == {
        "dump_path": "/work/job/dumps/3",
        "work_path": "/srv/aoe",
        "debug_dir": str(Path("~/debug").expanduser()),
        "op_compiler_cache_dir": "/work/job/kcache",
        "profiling_options.output": "/work/job/prof/3",
    }
    assert written_dirs({"profiling_options": json.dumps({"training_trace": "on"})}, "/w") == ()


def job(tmp_path: Path, work_path: str) -> Path:
    config = tmp_path / "job.yaml"
    command = json.dumps(rank_cmd("rank.py", "*=ok")[1:])
    config.write_text(
        f"version: 1\njob: {{name: d, command: {command}, workdir: {tmp_path}, log_dir: {tmp_path / 'logs'}}}\n"
        "hosts: [{host: localhost, devices: [0, 1]}]\n"
        f"session_options: {{enable_dump: true, dump_path: 'dumps/{{rank}}', work_path: '{work_path}'}}\n"
    )
    return config


def test_plan_shows_them_and_run_makes_them_before_the_ranks_start(tmp_path: Path, marker: str) -> None:
    config = job(tmp_path, str(tmp_path / "aoe"))
    shown = run_cli("plan", str(config))
    assert shown.returncode == 0, shown.stderr
    assert f"rank 1: dump_path {tmp_path / 'dumps' / '1'}, work_path {tmp_path / 'aoe'}" in shown.stdout
    as_json = json.loads(run_cli("plan", str(config), "--json").stdout)
    assert as_json["ranks"][0]["make_dirs"] == {
        "dump_path": str(tmp_path / "dumps" / "0"),
        "work_path": str(tmp_path / "aoe"),
    }
    result = run_cli("run", str(config), "--job-id", "d", env={"NPLTEST_MARKER": marker})
    assert result.returncode == 0, result.stderr
    assert (tmp_path / "dumps" / "0").is_dir() and (tmp_path / "dumps" / "1").is_dir() and (tmp_path / "aoe").is_dir()


def test_a_directory_that_cannot_be_made_stops_the_job_before_it_starts(tmp_path: Path, marker: str) -> None:
    (tmp_path / "a-file").write_text("")
    config = job(tmp_path, str(tmp_path / "a-file" / "aoe"))
    result = run_cli("run", str(config), "--job-id", "d", env={"NPLTEST_MARKER": marker})
    assert result.returncode == 2
    assert (
        f"session option work_path of rank 0: directory {tmp_path / 'a-file' / 'aoe'} cannot be made: "
        f"{tmp_path / 'a-file'} is not a directory"
    ) in result.stderr
    assert not (tmp_path / "logs").exists() and not (tmp_path / "dumps").exists()  # nothing was started


def test_a_make_dirs_entry_that_cannot_be_made_is_named_as_such(tmp_path: Path) -> None:
    import sys

    (tmp_path / "a-file").write_text("")
    config = tmp_path / "job.yaml"
    config.write_text(
        f"version: 1\njob:\n  command: [{sys.executable}, -c, pass]\n  log_dir: {tmp_path / 'logs'}\n"
        f"  make_dirs: ['{tmp_path / 'a-file'}/out/{{rank}}']\nhosts: [{{host: localhost, devices: 1}}]\n"
    )
    result = run_cli("check", str(config))
    assert result.returncode == 2
    said = result.stdout + result.stderr  # check lists its findings on stdout
    assert f"job.make_dirs of rank 0: directory {tmp_path / 'a-file' / 'out' / '0'} cannot be made" in said
    assert "session option job.make_dirs" not in said
