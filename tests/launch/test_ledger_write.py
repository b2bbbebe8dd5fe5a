"""Writing the fault history (launch/ledgerwrite.py) with real processes: two writers appending at once lose
and tear nothing, a torn line a dead writer left stays a skipped line of its own and never swallows the next
entry, and a reader holding the lock sees whole lines only."""

from __future__ import annotations

import subprocess
import sys
import textwrap
from pathlib import Path

from helpers import ROOT, base_env

from npulaunch.launch.ledgerwrite import append_entries, clearing, fault_entries
from npulaunch.plan.ledger import NPU_FAULT, Entry, load_ledger
from npulaunch.plan.placement import Exclusion

WRITER = textwrap.dedent(
    """
    import sys
    from npulaunch.launch.ledgerwrite import append_entries
    from npulaunch.plan.ledger import Entry
    path, name, count = sys.argv[1], sys.argv[2], int(sys.argv[3])
    print("ready", flush=True)
    sys.stdin.readline()  # both start together
    for i in range(count):
        append_entries(path, [Entry(1.0 + i, "npu_fault", name, i % 8, "80E01801", "RestartBusiness",
                                    "x" * (i % 300), name, i + 1)])
    """
)
COUNT = 1500


def test_two_writers_at_once_lose_and_tear_nothing(tmp_path: Path) -> None:
    path = tmp_path / "shared" / "faults.jsonl"
    writers = [
        subprocess.Popen(
            [sys.executable, "-c", WRITER, str(path), name, str(COUNT)],
            stdin=subprocess.PIPE,
            stdout=subprocess.PIPE,
            text=True,
            env=base_env(),
            cwd=str(ROOT),
        )
        for name in ("w1", "w2")
    ]
    for writer in writers:
        assert writer.stdout is not None and writer.stdout.readline() == "ready\n"
    for writer in writers:
        assert writer.stdin is not None
        writer.stdin.write("go\n")
        writer.stdin.close()
    middle = load_ledger(str(path))  # read while they write: whole lines only
    assert middle.skipped == ()
    for writer in writers:
        assert writer.wait(timeout=120) == 0
    ledger = load_ledger(str(path))
    assert ledger.skipped == () and len(ledger.entries) == 2 * COUNT
    for name in ("w1", "w2"):
        mine = [e for e in ledger.entries if e.host == name]
        assert [e.attempt for e in mine] == list(range(1, COUNT + 1))  # each once, in its own order
        assert all(e.reason == "x" * ((e.attempt - 1) % 300) for e in mine)
    assert path.read_bytes().count(b"\n") == 2 * COUNT


def test_a_torn_line_stays_a_line_of_its_own(tmp_path: Path) -> None:
    path = tmp_path / "faults.jsonl"
    first = Entry(1.0, NPU_FAULT, "a", 1, "80E01801", job_id="j", attempt=1)
    path.write_bytes(first.to_line() + first.to_line()[:25])  # a writer died mid-line
    nxt = Entry(2.0, NPU_FAULT, "a", 2, "80E01801", job_id="k", attempt=1)
    append_entries(str(path), [nxt, clearing("a", 1, now=3.0)])
    ledger = load_ledger(str(path))
    assert [(e.host, e.device, e.what) for e in ledger.entries] == [("a", 1, NPU_FAULT), ("a", 2, NPU_FAULT)] + [
        ("a", 1, "cleared")
    ]
    assert [number for number, _ in ledger.skipped] == [2]
    assert ledger.entries[-1].by  # who cleared


def test_what_an_attempt_excluded_becomes_entries() -> None:
    class Plan:
        job_id, attempt = "rec", 2

    found = [
        Exclusion("h1", 2, "NPU fault 80E01801 (RestartBusiness)", "80E01801", "RestartBusiness", 2),
        Exclusion("h2", None, "host lost (exit status 255)", None, None, 2),
    ]
    one, two = fault_entries(Plan(), found, now=5.0)  # type: ignore[arg-type]
    assert (one.what, one.host, one.device, one.code, one.level, one.job_id, one.attempt) == (
        "npu_fault",
        "h1",
        2,
        "80E01801",
        "RestartBusiness",
        "rec",
        2,
    )
    assert (two.what, two.host, two.device, two.reason) == ("host_lost", "h2", None, "host lost (exit status 255)")
