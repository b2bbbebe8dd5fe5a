"""The agent in-process: an unhandled error inside the launcher still takes every rank down."""

from __future__ import annotations

from pathlib import Path

import pytest
from helpers import host_plan, live_pids, wait_until

from npulaunch.host.agent.agent import Agent
from npulaunch.host.records import RankState
from npulaunch.host.tail import split_lines


def test_an_error_in_the_launcher_kills_every_rank(tmp_path: Path, marker: str) -> None:
    started = []

    def on_event(event) -> None:
        if event.kind.value == "rank_started":
            started.append(event.data["pid"])

    def on_output(spec, stream, block) -> None:
        if any(line.startswith("grandchild") for line in split_lines(block)):
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
        lambda spec, stream, block: seen.extend((spec.rank, line) for line in split_lines(block)),
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


FLOOD_ON_TERM = """
import signal, sys, time
def flood(*_):
    out = sys.stdout.buffer
    for i in range(60000):
        out.write(b"line %d\\n" % i)
        if i == 30000:
            out.write(b"[ERROR] RUNTIME EZ9999: Inner Error! aicore error at op X\\n")
    out.flush()
    sys.exit(143)
signal.signal(signal.SIGTERM, flood)
print("ready", flush=True)
time.sleep(60)
"""


def test_a_stopped_ranks_big_backlog_is_scanned_but_not_shown(
    tmp_path: Path, marker: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Rank 0 floods when told to stop; its backlog (over the fast-drain threshold, set low here) is
    looked at for signatures as whole blocks and counted on the console instead of shown."""
    import sys
    from dataclasses import replace

    from npulaunch.host.agent import ranklogs as agent_module

    monkeypatch.setattr(agent_module, "FAST_DRAIN_BYTES", 0)
    monkeypatch.setattr(agent_module, "TURN_READ_BYTES", 64)  # a backlog is certain to be left at the end
    plan = host_plan(tmp_path, marker, "0=exit:1@1.0", "1=exit:1@1.0")
    ranks = (replace(plan.ranks[0], argv=(sys.executable, "-c", FLOOD_ON_TERM)), plan.ranks[1])
    events, shown = [], []
    agent = Agent(
        replace(plan, ranks=ranks), events.append, lambda spec, stream, block: shown.extend(split_lines(block))
    )
    agent.start()
    while agent.step(0.1):
        if any(e.kind.value == "rank_exited" and e.rank == 1 for e in events) and not agent._stopping:
            agent.stop("rank 1 failed")
    agent.finish()
    found = [e for e in events if e.kind.value == "signature_matched" and e.rank == 0]
    assert found and found[0].data["code"] == "EZ9999"
    notes = [line for line in shown if "lines written before the rank stopped are not shown" in line]
    assert len(notes) == 1
    counted = int(notes[0].split("[npulaunch: ")[1].split(" lines")[0].replace(",", ""))
    shown_lines = [line for line in shown if line.startswith("line ") or "EZ9999" in line]
    assert len(shown_lines) + counted == 60000 + 1  # every line of the flood and the error: shown or counted
    log = (tmp_path / "rank-0" / "stdout.log").read_text()
    assert log.count("\n") == 60000 + 2  # "ready", the lines and the error: all in the log
