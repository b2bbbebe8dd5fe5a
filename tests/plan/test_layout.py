"""JobLayout: every path of a job directory by value (a node's own directory under a scheduler,
attempt directories with restarts, a remote host's own copy of its ranks), the plan's rank paths
taken from it, opening a directory a user names, and a real run writing where it says."""

from __future__ import annotations

import os
from pathlib import Path
from typing import Dict, Optional

import pytest
from helpers import run_restarted_job

from npulaunch.config.load import parse_config
from npulaunch.config.yamlsource import parse_yaml
from npulaunch.host.errors import UsageError
from npulaunch.plan.build import build_plan
from npulaunch.plan.launchplan import Discovery
from npulaunch.plan.layout import JobLayout, RankPaths

J = "/logs/job-1"


def paths_of(layout: JobLayout) -> Dict[str, str]:
    return {
        "own_dir": layout.own_dir,
        "attempt_dir": layout.attempt_dir,
        "plan": layout.plan_path,
        "attempt_plan": layout.attempt_plan_path,
        "events": layout.events_path,
        "summary": layout.summary_path,
        "failure": layout.failure_path,
        "attempt_summary": layout.attempt_summary_path,
        "attempt_failure": layout.attempt_failure_path,
        "launcher": layout.launcher_path,
        "launcher_log": layout.launcher_log_path,
        "rank_table": layout.rank_table_path,
        "rendezvous": layout.rendezvous_dir,
        "rendezvous_record": layout.rendezvous_record(1),
    }


@pytest.mark.parametrize(
    "node, attempt, own, here",
    [
        (None, 0, J, J),
        (None, 3, J, f"{J}/attempt-3"),
        (2, 0, f"{J}/node-2", f"{J}/node-2"),
        (1, 2, f"{J}/node-1", f"{J}/node-1/attempt-2"),
    ],
)
def test_every_path_of_a_job_directory(node: Optional[int], attempt: int, own: str, here: str) -> None:
    assert paths_of(JobLayout(J, node, attempt)) == {
        "own_dir": own,
        "attempt_dir": here,
        "plan": f"{own}/plan.json",
        "attempt_plan": f"{here}/plan.json",
        "events": f"{here}/events.jsonl",
        "summary": f"{own}/summary.json",
        "failure": f"{own}/failure.json",
        "attempt_summary": f"{here}/summary.json",
        "attempt_failure": f"{here}/failure.json",
        "launcher": f"{own}/launcher.json",
        "launcher_log": f"{own}/launcher.log",
        # shared by every node of a scheduler's job, whatever the attempt; a job npulaunch places itself has
        # one per attempt from the second on (a recovery moves ranks)
        "rank_table": f"{here}/rank_table.json" if node is None and attempt > 1 else f"{J}/rank_table.json",
        "rendezvous": f"{J}/rendezvous",
        "rendezvous_record": f"{J}/rendezvous/node-1.json",
    }


@pytest.mark.parametrize(
    "host, rank_dir",
    [
        (None, "/logs/job-1/attempt-2/rank-5"),  # a local rank's own directory, or the gathered copies
        ("10.0.0.12", "/logs/job-1/attempt-2/hosts/10.0.0.12/rank-5"),  # the remote host's own copy
    ],
)
def test_rank_paths(host: Optional[str], rank_dir: str) -> None:
    assert JobLayout(J, None, 2).rank_paths(5, host) == RankPaths(
        rank_dir, f"{rank_dir}/stdout.log", f"{rank_dir}/stderr.log", f"{rank_dir}/ascend"
    )


def test_under_a_log_dir_and_for_an_attempt() -> None:
    layout = JobLayout.under("/logs", "job-1", node=3)
    assert layout == JobLayout(J, 3, 0) and layout.for_attempt(4) == JobLayout(J, 3, 4)


MIXED = """\
job: {command: [python3, train.py], log_dir: /logs}
hosts:
  - {host: localhost, devices: [0, 1]}
  - {host: 10.0.0.12, devices: [4]}
rank_table: none
"""


@pytest.mark.parametrize("attempt, node", [(0, None), (2, None), (1, 1)])
def test_the_plan_takes_every_rank_path_from_its_layout(attempt: int, node: Optional[int]) -> None:
    config = parse_config(parse_yaml(MIXED, "job.yaml"), base_dir="/srv")
    plan = build_plan(
        config, "job-1", "uuid", Discovery(devices=lambda: [], device_ips=lambda ids: None), attempt=attempt, node=node
    )
    layout = plan.layout
    assert layout == JobLayout(J, node, attempt)
    assert (plan.job_dir, plan.own_dir, plan.attempt_dir) == (J, layout.own_dir, layout.attempt_dir)
    for spec in plan.ranks:
        local = spec.host in plan.local_names
        mine = layout.rank_paths(spec.rank, None if local else spec.host)
        assert RankPaths(spec.rank_dir, spec.stdout_path, spec.stderr_path, spec.plog_dir) == mine
        assert spec.env["ASCEND_PROCESS_LOG_PATH"] == mine.plog_dir
        gathered = layout.rank_paths(spec.rank)  # where the launcher reads (or gathers) the rank's logs
        assert plan.log_paths(spec) == (gathered.stdout, gathered.stderr)
    assert plan.ranks[2].rank_dir == os.path.join(layout.attempt_dir, "hosts", "10.0.0.12", "rank-2")


def make_job_dir(path: Path, *names: str) -> Path:
    path.mkdir(parents=True)
    for name in names:
        if name.endswith("/"):
            (path / name).mkdir()
        else:
            (path / name).write_text("{}\n")
    return path


def test_open_a_job_directory_without_restarts(tmp_path: Path) -> None:
    job = make_job_dir(tmp_path / "job", "plan.json", "events.jsonl", "rank-0/")
    assert JobLayout.open(str(job)) == JobLayout(str(job))
    assert JobLayout.open(str(job) + "/") == JobLayout(str(job))


def test_open_finds_the_latest_attempt(tmp_path: Path) -> None:
    job = make_job_dir(
        tmp_path / "job", "plan.json", "launcher.json", "attempt-1/", "attempt-10/", "attempt-2/", "attempt-11"
    )  # a file, not an attempt
    layout = JobLayout.open(str(job))
    assert layout == JobLayout(str(job), None, 10) and layout.attempts_found() == [1, 2, 10]
    assert layout.events_path == str(job / "attempt-10" / "events.jsonl")
    assert layout.summary_path == str(job / "summary.json")  # the job's, listing every attempt


def test_open_a_nodes_directory_of_a_scheduler_job(tmp_path: Path) -> None:
    job = make_job_dir(tmp_path / "77", "rank_table.json", "rendezvous/")
    make_job_dir(job / "node-0", "plan.json")
    make_job_dir(job / "node-1", "plan.json", "events.jsonl", "attempt-1/")
    layout = JobLayout.open(str(job / "node-1"))
    assert layout == JobLayout(str(job), 1, 1) and layout.own_dir == str(job / "node-1")
    assert layout.rank_table_path == str(job / "rank_table.json")
    with pytest.raises(UsageError) as err:  # which node's?
        JobLayout.open(str(job))
    assert f"{job} holds a job run under a scheduler" in str(err.value)
    assert f"{job / 'node-0'}, {job / 'node-1'}" in str(err.value)


def test_a_job_named_like_a_node_reads_the_same_files(tmp_path: Path) -> None:
    job = make_job_dir(tmp_path / "logs" / "node-3", "plan.json", "events.jsonl")
    layout = JobLayout.open(str(job))
    assert layout.own_dir == str(job) and layout.events_path == str(job / "events.jsonl")


def test_open_a_directory_that_is_no_job(tmp_path: Path) -> None:
    layout = JobLayout.open(str(tmp_path))  # the readers say it is not a job directory
    assert layout == JobLayout(str(tmp_path)) and not os.path.exists(layout.events_path)


def test_a_run_with_restarts_writes_where_the_layout_says(log_dir: Path, marker: str) -> None:
    result = run_restarted_job(log_dir, marker, 2, 2, "*=ok")
    assert result.returncode == 0, result.stderr
    layout = JobLayout.open(str(log_dir / "m"))
    assert layout == JobLayout.under(str(log_dir), "m", None, 2)
    for path in (layout.plan_path, layout.launcher_path, layout.summary_path):
        assert os.path.isfile(path), path
    for attempt in layout.attempts_found():
        here = layout.for_attempt(attempt)
        for path in (here.attempt_plan_path, here.events_path, here.attempt_summary_path):
            assert os.path.isfile(path), path
        for rank in (0, 1):
            paths = here.rank_paths(rank)
            assert os.path.isfile(paths.stdout) and os.path.isfile(paths.stderr) and os.path.isdir(paths.plog_dir)
    assert os.path.isfile(layout.for_attempt(1).attempt_failure_path)  # attempt 1 failed (EJ0001)
    assert not os.path.exists(layout.failure_path)  # the job succeeded
