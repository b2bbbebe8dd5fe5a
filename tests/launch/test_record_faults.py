"""The job record when the disk says no (issue 15): a log directory that is a file, a read-only or full
file system at start (the job does not start: exit 2, one line), and a disk that fills up or a job
directory that is removed mid-run (the launcher keeps supervising, reports the root cause on the
console, and says the record is incomplete). Real tmpfs mounts, real ranks."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path
from typing import Iterator

import pytest
from helpers import marked_pids, require, run_cli, wait_until


@pytest.fixture
def small_fs(tmp_path: Path) -> Iterator[Path]:
    """A 1 MiB tmpfs of its own."""
    require(os.geteuid() == 0, "root, to mount a small tmpfs")
    mount = tmp_path / "fs"
    mount.mkdir()
    subprocess.run(["mount", "-t", "tmpfs", "-o", "size=1m,mode=0755", "tmpfs", str(mount)], check=True)
    try:
        yield mount
    finally:
        subprocess.run(["umount", "-l", str(mount)], check=False)


def job(tmp_path: Path, log_dir: Path, code: str, ranks: int = 2) -> Path:
    path = tmp_path / "job.yaml"
    path.write_text(
        f"version: 1\njob:\n  command: [{sys.executable}, -c, {json.dumps(code)}]\n  log_dir: {log_dir}\n"
        f"hosts: [{{host: localhost, devices: {ranks}}}]\nrank_table: none\n"
    )
    return path


def assert_one_clean_line(stderr: str, *needles: str) -> None:
    assert "Traceback" not in stderr, stderr
    errors = [line for line in stderr.splitlines() if line.startswith("npulaunch: error:")]
    assert len(errors) == 1, stderr
    for needle in needles:
        assert needle in errors[0], errors[0]


def test_a_log_dir_that_is_a_file_is_refused_in_one_line(tmp_path: Path) -> None:
    (tmp_path / "afile").write_text("")
    result = run_cli("run", str(job(tmp_path, tmp_path / "afile", "pass")), "--job-id", "x")
    assert result.returncode == 2
    assert_one_clean_line(result.stderr, f"cannot create job directory {tmp_path / 'afile' / 'x'}", "is a file")


def test_a_read_only_file_system_at_start_starts_nothing(tmp_path: Path, small_fs: Path) -> None:
    subprocess.run(["mount", "-o", "remount,ro", str(small_fs)], check=True)
    marker = "ro-start-marker"
    result = run_cli("run", str(job(tmp_path, small_fs, f"print('{marker}')")), "--job-id", "ro")
    assert result.returncode == 2
    assert_one_clean_line(result.stderr, "Read-only file system")
    assert not marked_pids(marker) and "ro-start-marker" not in result.stdout


def test_a_full_disk_at_start_leaves_nothing_behind(tmp_path: Path, small_fs: Path) -> None:
    filler = small_fs / "filler"
    with open(filler, "wb", buffering=0) as handle:  # fill the file system to the last block
        try:
            while True:
                handle.write(b"x" * 4096)
                handle.flush()
        except OSError:
            pass
    result = run_cli("run", str(job(tmp_path, small_fs, "print('never')")), "--job-id", "full")
    assert result.returncode == 2
    assert_one_clean_line(result.stderr, "No space left on device", "nothing was started")
    assert sorted(os.listdir(small_fs)) == ["filler"]  # no half-made job directory


FILL_THEN_FAIL = """
import os, sys, time
rank = os.environ['RANK_ID']
if rank == '0':
    print('rank 0 started', flush=True)  # fills the job's file system to the last byte, then waits to be stopped
    with open(os.path.join(os.environ['NPULAUNCH_RANK_DIR'], 'ballast'), 'wb', buffering=0) as handle:
        try:
            while True:
                handle.write(b'x' * 4096)
                handle.flush()
        except OSError:
            pass
    time.sleep(60)
else:  # fails once the disk is full (printing nothing: a write could fail with the disk full)
    while not os.path.exists(os.path.join(os.environ['NPULAUNCH_JOB_DIR'], 'rank-0', 'ballast')):
        time.sleep(0.05)
    time.sleep(1.0)
    sys.exit(3)
"""


def test_a_disk_that_fills_up_mid_run_keeps_the_root_cause(tmp_path: Path, small_fs: Path) -> None:
    result = run_cli("run", str(job(tmp_path, small_fs, FILL_THEN_FAIL)), "--job-id", "fill", timeout=60)
    assert result.returncode == 1, result.stderr
    assert "Traceback" not in result.stderr, result.stderr
    assert "root cause: rank 1 exited with code 3" in result.stderr, result.stderr
    assert "No space left on device" in result.stderr
    assert "the job record on disk is incomplete" in result.stderr
    job_dir = small_fs / "fill"
    summary = job_dir / "summary.json"
    if summary.exists():  # whole or absent, never half a file
        json.loads(summary.read_text())
    assert not list(job_dir.glob("*.tmp"))
    lines = (job_dir / "events.jsonl").read_bytes().split(b"\n")
    for line in lines[:-2]:  # every complete line is a whole event; the last may be cut by the full disk
        json.loads(line)
    report = run_cli("report", str(job_dir))
    assert "Traceback" not in report.stderr, report.stderr


REMOVED = """
import os, shutil, sys, time
if os.environ['RANK_ID'] == '0':
    time.sleep(0.5)
    shutil.rmtree(os.environ['NPULAUNCH_JOB_DIR'])
    sys.exit(4)
time.sleep(60)
"""


def test_a_job_directory_removed_mid_run(tmp_path: Path) -> None:
    marker = str(tmp_path / "logs")
    result = run_cli("run", str(job(tmp_path, tmp_path / "logs", REMOVED)), "--job-id", "gone", timeout=60)
    assert result.returncode == 1, result.stderr
    assert "Traceback" not in result.stderr, result.stderr
    assert "root cause: rank 0 exited with code 4" in result.stderr
    assert "the job record on disk is incomplete" in result.stderr
    assert wait_until(lambda: not marked_pids(marker), 10)


def test_two_launches_into_one_job_directory_at_once(tmp_path: Path) -> None:
    # the job directory is made with one mkdir: of two launchers, one gets it, the other refuses cleanly
    from helpers import base_env, npulaunch_argv

    path = job(tmp_path, tmp_path / "logs", "import time; time.sleep(1)")
    argv = npulaunch_argv("run", str(path), "--job-id", "same", "--no-live")
    procs = [subprocess.Popen(argv, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, env=base_env())]
    procs.append(subprocess.Popen(argv, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, env=base_env()))
    results = [(p.wait(60), p.communicate()[1]) for p in procs]
    assert sorted(code for code, _ in results) == [0, 2], results
    refused = next(err for code, err in results if code == 2)
    assert "Traceback" not in refused
    assert f"job directory {tmp_path / 'logs' / 'same'} already exists: choose another --job-id" in refused
