"""The agent in-process: an unhandled error inside the launcher still takes every rank down."""

from __future__ import annotations

from pathlib import Path

import pytest
from helpers import host_plan, live_pids, wait_until

from npulaunch.host.agent.agent import Agent
from npulaunch.host.records import RankState


def test_an_error_in_the_launcher_kills_every_rank(tmp_path: Path, marker: str) -> None:
    started = []

    def on_event(event) -> None:
        if event.kind.value == "rank_started":
            started.append(event.data["pid"])

    def on_output(spec, stream, lines) -> None:
        if any(line.startswith("grandchild") for line in lines):
            raise RuntimeError("a bug in the supervisor")

    agent = Agent(host_plan(tmp_path, marker, "*=grandchild:hang"), on_event, on_output)
    with pytest.raises(RuntimeError, match="a bug in the supervisor"):
        agent.run()
    assert len(started) == 2
    assert wait_until(lambda: not live_pids(started), 5.0)
    # the marker fixture checks the grandchildren are gone too


def test_outcome_of_a_clean_run(tmp_path: Path, marker: str) -> None:
    seen = []
    outcome = Agent(
        host_plan(tmp_path, marker, "0=exit:0", "1=exit:0"),
        lambda e: None,
        lambda spec, stream, lines: seen.extend((spec.rank, line) for line in lines),
    ).run()
    assert [r.state for r in outcome.ranks] == [RankState.SUCCEEDED, RankState.SUCCEEDED]
    assert outcome.stop_signal is None and outcome.strays_killed == []
    assert sorted(text.split()[0] for _, text in seen) == ["ready", "ready"]


def test_a_directory_the_options_write_to_is_made_first_or_the_rank_fails_saying_which(
    tmp_path: Path, marker: str
) -> None:
    from dataclasses import replace

    plan = host_plan(tmp_path, marker, "*=exit:0")
    blocker = tmp_path / "a-file"
    blocker.write_text("")
    made = tmp_path / "dumps" / "0"
    ranks = (
        replace(plan.ranks[0], make_dirs=(("dump_path", str(made)),)),
        replace(plan.ranks[1], make_dirs=(("work_path", str(blocker / "aoe")),)),
    )
    events = []
    outcome = Agent(replace(plan, ranks=ranks), events.append, lambda *a: None).run()
    assert made.is_dir() and oct(made.stat().st_mode & 0o777) == "0o700"
    assert [r.state for r in outcome.ranks] == [RankState.SUCCEEDED, RankState.SPAWN_FAILED]
    assert outcome.ranks[1].error == f"cannot create work_path {blocker / 'aoe'}: Not a directory"
    assert [e.kind.value for e in events if e.rank == 1] == ["rank_spawn_failed"]
