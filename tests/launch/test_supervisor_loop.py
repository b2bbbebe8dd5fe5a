"""The supervisor's loop and its runner: items pulled from a queue (no callbacks into the
supervisor), decisions taken between pulls, stack dumps off the loop with a time limit, and the
--debug log of every decision. Real rank processes; no pid survives."""

from __future__ import annotations

import os
import re
import stat
import time
from pathlib import Path
from typing import List

from helpers import host_plan, live_pids, rank_cmd, run_cli, wait_until

from npulaunch.host.agent.agent import Agent
from npulaunch.host.events import Event, EventKind
from npulaunch.host.records import RankState
from npulaunch.launch.local import LocalRunner
from npulaunch.launch.runner import Item, RankOutput


def pull_until(runner: LocalRunner, predicate, timeout_s: float = 20) -> List[Item]:
    got: List[Item] = []
    deadline = time.monotonic() + timeout_s
    while not predicate(got) and time.monotonic() < deadline and not runner.done:
        got.extend(runner.items(0.1))
    assert predicate(got), got[-5:]
    return got


def kinds(items: List[Item]) -> List[EventKind]:
    return [item.kind for item in items if isinstance(item, Event)]


def test_the_local_runner_hands_out_events_and_output_and_stops_between_pulls(tmp_path: Path, marker: str) -> None:
    runner = LocalRunner(host_plan(tmp_path, marker, "*=hang", grace=1.0), os.environ)
    runner.start()
    try:
        got = pull_until(
            runner,
            lambda g: kinds(g).count(EventKind.RANK_STARTED) == 2 and sum(isinstance(i, RankOutput) for i in g) >= 2,
        )
        pids = [i.data["pid"] for i in got if isinstance(i, Event) and i.kind is EventKind.RANK_STARTED]
        assert {i.block.split()[0] for i in got if isinstance(i, RankOutput)} == {b"ready"}
        assert not runner.done
        runner.stop("the test asked")  # a decision between two pulls, not inside the agent's own calls
        got += pull_until(runner, lambda g: runner.done, timeout_s=10)
    finally:
        runner.close()
    assert EventKind.STOP_REQUESTED in kinds(got)
    assert kinds(got).count(EventKind.RANK_EXITED) == 2
    assert [r.state for r in runner.result().ranks] == [RankState.STOPPED, RankState.STOPPED]
    assert not live_pids(pids)


def test_close_kills_the_ranks_when_the_loop_is_abandoned(tmp_path: Path, marker: str) -> None:
    runner = LocalRunner(host_plan(tmp_path, marker, "*=ignore_term", grace=30.0), os.environ)
    runner.start()
    got = pull_until(runner, lambda g: kinds(g).count(EventKind.RANK_STARTED) == 2)
    pids = [i.data["pid"] for i in got if isinstance(i, Event) and i.kind is EventKind.RANK_STARTED]
    runner.close()  # as when an exception leaves the supervisor's loop: no grace, nothing left behind
    assert wait_until(lambda: not live_pids(pids), 5)


def wedged_py_spy(tmp_path: Path) -> Path:
    """A py-spy that attaches and never answers (a real py-spy can hang on a process in D state)."""
    bin_dir = tmp_path / "bin"
    bin_dir.mkdir()
    tool = bin_dir / "py-spy"
    tool.write_text('#!/bin/sh\necho "py-spy attached to $3"\nexec sleep 3600\n')
    tool.chmod(0o755)
    return bin_dir


def test_a_wedged_stack_dump_is_killed_at_its_limit_and_never_blocks_the_loop(
    tmp_path: Path, marker: str, monkeypatch
) -> None:
    monkeypatch.setenv("PATH", f"{wedged_py_spy(tmp_path)}{os.pathsep}{os.environ['PATH']}")
    events: List[Event] = []
    agent = Agent(host_plan(tmp_path, marker, "*=hang"), events.append, lambda *a: None, stack_dump_limit_s=0.6)
    agent.start()
    try:
        assert wait_until(lambda: agent.step(0.05) and kinds(events).count(EventKind.RANK_STARTED) == 2, 10)
        began = time.monotonic()
        agent.dump_stacks([0, 1])
        turns = []
        while EventKind.STACKS_DUMPED not in kinds(events) and time.monotonic() - began < 5:
            turn = time.monotonic()
            agent.step(0.05)
            turns.append(time.monotonic() - turn)
        took = time.monotonic() - began
        dumped = next(e for e in events if e.kind is EventKind.STACKS_DUMPED)
        assert 0.6 <= took < 2.0, took
        assert max(turns) < 0.3  # the loop kept turning while the dumps ran
        assert len(dumped.data["timed_out"]) == 2 and all("py-spy" in t for t in dumped.data["timed_out"])
        assert dumped.data["files"] == []  # no stack in what the wedged dumpers wrote
        assert "py-spy attached to" in (tmp_path / "rank-0" / "stacks-py-spy.txt").read_text()
        assert {said["evidence"] for said in dumped.data["ranks"].values()} == {"process table"}
        agent.stop("hang")
        while agent.step(0.05):
            pass
        outcome = agent.finish()
    finally:
        agent.close()
    assert outcome.strays_killed == []  # the dumpers were the agent's own, not the job's leftovers


def test_stopping_during_a_stack_dump_is_not_delayed_by_it(tmp_path: Path, marker: str, monkeypatch) -> None:
    monkeypatch.setenv("PATH", f"{wedged_py_spy(tmp_path)}{os.pathsep}{os.environ['PATH']}")
    events: List[Event] = []
    agent = Agent(
        host_plan(tmp_path, marker, "*=hang", grace=1.0), events.append, lambda *a: None, stack_dump_limit_s=60
    )
    agent.start()
    try:
        assert wait_until(lambda: agent.step(0.05) and kinds(events).count(EventKind.RANK_STARTED) == 2, 10)
        agent.dump_stacks([0, 1])
        began = time.monotonic()
        agent.stop("another rank failed")
        while agent.step(0.05):
            pass
        agent.finish()
    finally:
        agent.close()
    assert time.monotonic() - began < 1.5  # the ranks obey SIGTERM; the 60 s dump limit does not matter


def run_failing_job(log_dir: Path, marker: str, *extra: str, env=None):
    result = run_cli(
        "run",
        "--nproc-per-node",
        "3",
        "--log-dir",
        str(log_dir),
        "--job-id",
        "d",
        "--grace-period",
        "1",
        *extra,
        *rank_cmd("rank.py", "1=exit:3@0.3", "*=hang"),
        env=dict({"NPLTEST_MARKER": marker}, **(env or {})),
        timeout=60,
    )
    return result, log_dir / "d"


TIMESTAMP = re.compile(r"^\d{4}-\d\d-\d\d \d\d:\d\d:\d\d\.\d{3} npulaunch\.")


def test_debug_writes_every_decision_to_launcher_log(log_dir: Path, marker: str) -> None:
    result, job = run_failing_job(log_dir, marker, "--debug")
    assert result.returncode == 1, result.stderr
    log = job / "launcher.log"
    assert stat.S_IMODE(log.stat().st_mode) == 0o600
    lines = log.read_text().splitlines()
    assert lines and all(TIMESTAMP.match(line) for line in lines), lines[:3]
    text = "\n".join(lines)
    started = re.findall(r"event rank_started host=localhost rank=(\d) .*'pid': (\d+)", text)
    assert sorted(rank for rank, _ in started) == ["0", "1", "2"]  # every spawn, with its pid
    order = [
        "job d: starting 3 ranks",
        "event rank_exited host=localhost rank=1",
        "rank 1 failed (exited with code 3): stopping the job",
        "stop (rank 1 failed): SIGTERM now",
        "SIGTERM to process groups",
        "closing the runner",
        "attempt finished: failed, exit code 1",
    ]
    at = [text.find(step) for step in order]
    assert all(i >= 0 for i in at) and at == sorted(at), list(zip(order, at))


def test_npulaunch_debug_in_the_environment_does_the_same(log_dir: Path, marker: str) -> None:
    result, job = run_failing_job(log_dir, marker, env={"NPULAUNCH_DEBUG": "1"})
    assert result.returncode == 1, result.stderr
    assert "rank 1 failed (exited with code 3): stopping the job" in (job / "launcher.log").read_text()


def test_without_debug_there_is_no_launcher_log(log_dir: Path, marker: str) -> None:
    result, job = run_failing_job(log_dir, marker)
    assert result.returncode == 1, result.stderr
    assert not (job / "launcher.log").exists()
