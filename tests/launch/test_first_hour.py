"""What a new user meets in the first hour (issue 17): a missing extra, preconditions checked before
any side effect. Through the CLI, as a user runs it."""

from __future__ import annotations

import json
import sys
from pathlib import Path

from helpers import ROOT, run_cli

TWO_HOSTS = """version: 1
job:
  command: [python3, -c, pass]
  log_dir: {logs}
hosts:
  - {{host: 10.200.0.1, devices: 1, device_ips: [192.168.1.1]}}
  - {{host: 10.200.0.2, devices: 1, device_ips: [192.168.1.2]}}
"""


def test_a_multi_host_job_without_the_ssh_extra_is_one_line(tmp_path: Path) -> None:
    # Fabric importable but its Paramiko missing, as after `pip install npulaunch` without [ssh]
    shim = tmp_path / "shim"
    shim.mkdir()
    (shim / "fabric.py").write_text("raise ModuleNotFoundError(\"No module named 'paramiko'\", name='paramiko')\n")
    (shim / "paramiko.py").write_text("raise ModuleNotFoundError(\"No module named 'paramiko'\", name='paramiko')\n")
    config = tmp_path / "job.yaml"
    config.write_text(TWO_HOSTS.format(logs=tmp_path / "logs"))
    for command in ("run", "check"):
        result = run_cli(command, str(config), env={"PYTHONPATH": f"{shim}:{Path(__file__).parents[2]}"})
        assert result.returncode == 2, result.stderr
        assert "Traceback" not in result.stderr
        assert result.stderr.strip().splitlines() == [
            "npulaunch: error: a job on several hosts needs the ssh extra (paramiko is not installed): "
            "python3 -m pip install 'npulaunch[ssh]'"
        ]
    assert not (tmp_path / "logs").exists()


def test_sbatch_submit_without_sbatch_creates_nothing(tmp_path: Path) -> None:
    config = tmp_path / "job.yaml"
    config.write_text(
        f"version: 1\njob:\n  command: [{sys.executable}, -c, pass]\n  log_dir: {tmp_path / 'logs'}\n"
        "hosts: [{host: localhost, devices: 1}]\n"
    )
    result = run_cli("sbatch", str(config), "--submit", env={"PATH": "/nonexistent"})
    assert result.returncode == 2, result.stderr
    assert "sbatch" in result.stderr and "Traceback" not in result.stderr
    assert not (tmp_path / "logs").exists()  # no side effect before the failed precondition


def test_no_empty_stack_files_are_left_behind(tmp_path: Path) -> None:
    # every rank that registers the stack-dump handler opens its file; none was asked for a dump
    code = "from npulaunch import session\nassert session.register_stack_dump()\nprint('registered')"
    config = tmp_path / "job.yaml"
    config.write_text(
        f"version: 1\njob:\n  command: [{sys.executable}, -c, {json.dumps(code)}]\n  log_dir: {tmp_path / 'logs'}\n"
        f"hosts: [{{host: localhost, devices: 2}}]\nrank_table: none\nenv:\n  PYTHONPATH: {ROOT}\n"
    )
    result = run_cli("run", str(config), "--job-id", "stacks", "--no-live")
    assert result.returncode == 0, result.stderr
    assert result.stdout.count("registered") == 2
    job = tmp_path / "logs" / "stacks"
    assert sorted(p.name for p in job.glob("rank-*/*") if p.is_file()) == [
        "stderr.log",
        "stderr.log",
        "stdout.log",
        "stdout.log",
    ]


def test_run_says_what_happens_before_the_ranks_start(tmp_path: Path) -> None:
    # the phases a spinner shows on a terminal, in order, and none once the ranks run
    from npulaunch.config.overrides import Overrides
    from npulaunch.launch.job import run_job
    from npulaunch.plan.prepare import load
    from npulaunch.views.console import Console

    config = tmp_path / "job.yaml"
    config.write_text(
        f"version: 1\njob:\n  command: [{sys.executable}, -c, pass]\n  log_dir: {tmp_path / 'logs'}\n"
        "hosts: [{host: localhost, devices: 1}]\n"
    )
    said: list = []
    started: list = []

    def console(plan):  # the console is made once the phases are over
        started.append(list(said))
        return Console()

    loaded = load(str(config), Overrides(job_id="phases"), starting=True)
    assert run_job(loaded, console, phase=said.append) == 0
    assert started == [["planning the job", None]]
    assert said == ["planning the job", None]
