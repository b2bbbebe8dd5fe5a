"""The fault history, by value: the ledger's lines read back (a torn last line and a corrupt line skipped and
said, never fatal), a line's size bound, and what the entries keep off at a time: a fault within the window,
MindCluster's escalation to ManuallySeparateNPU (faultCustomization.json's rules) until cleared, clearings in
file order, and whether a ledger path can be written (file, line and key)."""

from __future__ import annotations

import json
from pathlib import Path
from typing import List, Optional

import pytest

from npulaunch.config.load import load_config
from npulaunch.plan.faulthistory import FREQUENCY, MANUALLY_SEPARATE, kept_off, read_history
from npulaunch.plan.ledger import (
    CLEARED,
    HOST_LOST,
    MAX_LINE_BYTES,
    NPU_FAULT,
    Entry,
    ledger_problem,
    load_ledger,
    parse_ledger,
)

H = 3600.0
NOW = 1_800_000_000.0


def fault(host: str, device: Optional[int], code: Optional[str], hours_ago: float, job: str = "j", attempt: int = 1):
    what = NPU_FAULT if device is not None else HOST_LOST
    return Entry(NOW - hours_ago * H, what, host, device, code, "RestartBusiness" if code else None, "", job, attempt)


def clear(host: Optional[str], device: Optional[int] = None) -> Entry:
    return Entry(NOW, CLEARED, host, device, by="me@here")


def keys(entries: List[Entry], window_h: float = 24.0) -> List[str]:
    return sorted(kept_off(entries, NOW, window_h).reasons)


# --- the file ------------------------------------------------------------------------------------


def test_lines_read_back_in_order() -> None:
    entries = [fault("a", 2, "80E01801", 1), fault("b", None, None, 2), clear("a", 2)]
    data = b"".join(e.to_line() for e in entries)
    assert parse_ledger(data, "f").entries == tuple(entries)
    assert parse_ledger(data + b"\n\n", "f").entries == tuple(entries)  # blank lines are nothing


def test_a_torn_last_line_and_a_corrupt_line_are_skipped_and_said_once() -> None:
    good = [fault("a", 2, "80E01801", 1), fault("a", 3, "80E01801", 1)]
    data = good[0].to_line() + b'{"time": 1, "what": "npu_fault", "host": 7}\n' + b"\xff\xfe\n"
    data += good[1].to_line() + good[1].to_line()[:30]  # a writer died mid-line
    ledger = parse_ledger(data, "/x/faults.jsonl")
    assert ledger.entries == tuple(good)
    assert [number for number, _ in ledger.skipped] == [2, 3, 5]
    assert ledger.skipped[2][1] == "torn: no end of line"
    (warning,) = ledger.warnings()
    assert warning.startswith("warning: fault history /x/faults.jsonl: skipped 3 torn or corrupt lines: line 2 (")
    assert "5 (torn: no end of line)" in warning


@pytest.mark.parametrize(
    "line",
    [
        "[1, 2]",
        '{"what": "npu_fault", "host": "a", "device": 1}',
        '{"time": 1, "what": "lost", "host": "a"}',
        '{"time": 1, "what": "npu_fault", "host": "a"}',
        '{"time": 1, "what": "npu_fault", "host": "a", "device": -1}',
        '{"time": 1, "what": "host_lost", "host": null}',
        '{"time": 1, "what": "host_lost", "host": "a", "attempt": "1"}',
        '{"time": 1, "what": "host_lost", "host": "a", "code": 5}',
    ],
)
def test_lines_of_the_wrong_shape_are_skipped(line: str) -> None:
    ledger = parse_ledger(line.encode() + b"\n", "f")
    assert ledger.entries == () and len(ledger.skipped) == 1


def test_a_line_is_bounded_whatever_its_texts() -> None:
    long = Entry(NOW, NPU_FAULT, "h" * 300, 1, "C" * 100, "L" * 100, "é" * 5000, "j" * 500, 1, "b" * 500)
    line = long.to_line()
    assert len(line) <= MAX_LINE_BYTES and line.endswith(b"\n") and line.count(b"\n") == 1
    back = parse_ledger(line, "f").entries[0]
    assert back.what == NPU_FAULT and back.device == 1
    normal = fault("a", 2, "80E01801", 1)
    assert parse_ledger(normal.to_line(), "f").entries == (normal,)


def test_a_missing_ledger_is_empty_and_an_unreadable_one_is_said(tmp_path: Path) -> None:
    assert load_ledger(str(tmp_path / "none.jsonl")).entries == ()
    (tmp_path / "dir.jsonl").mkdir()
    ledger = load_ledger(str(tmp_path / "dir.jsonl"))
    assert ledger.entries == () and "cannot be read" in ledger.warnings()[0]


# --- what it keeps off ---------------------------------------------------------------------------------


def test_a_fault_within_the_window_keeps_its_npu_or_host_off() -> None:
    entries = [fault("a", 2, "80E01801", 23), fault("a", 5, "80E01801", 25), fault("b", None, None, 1)]
    kept = kept_off(entries, NOW, 24)
    assert kept.npus == (("a", 2),) and kept.hosts == ("b",)
    assert "in job j attempt 1" in kept.reasons["a:2"] and "kept off for 24 h, until" in kept.reasons["a:2"]
    assert keys(entries, 1.5) == ["b"] and keys(entries, 0) == []  # 0: only escalated NPUs


def test_the_same_code_twice_within_24_h_is_manually_separate_until_cleared() -> None:
    entries = [fault("a", 2, "80E01801", 30, "j1"), fault("a", 2, "80E01801", 8, "j2")]
    kept = kept_off(entries, NOW, 0)  # long after the window: the escalation holds
    (item,) = kept.items
    assert (item.key, item.level, item.until) == ("a:2", MANUALLY_SEPARATE, None)
    assert "80E01801 2 times within 24 h (j1 attempt 1 at " in item.why and "until a person clears it" in item.why
    assert keys(entries + [clear("a", 2)], 0) == []
    assert keys(entries + [clear("a")], 0) == [] and keys(entries + [clear(None)], 0) == []
    assert keys(entries + [clear("a", 3)], 0) == ["a:2"] and keys(entries + [clear("b")], 0) == ["a:2"]
    # a clearing clears what is before it in the file, whatever the clocks say
    assert keys([clear("a", 2), *entries], 0) == ["a:2"]


def test_what_does_not_escalate() -> None:
    apart = [fault("a", 2, "80E01801", 60, "j1"), fault("a", 2, "80E01801", 30, "j2")]  # 30 h apart
    other_npu = [fault("a", 2, "80E01801", 3, "j1"), fault("a", 3, "80E01801", 2, "j2")]
    one_attempt = [fault("a", 2, "80E01801", 3, "j1"), fault("a", 2, "80E01801", 3, "j1")]  # written twice
    other_code = [fault("a", 2, "80E01801", 3, "j1"), fault("a", 2, "80E18402", 2, "j2")]
    for entries in (apart, other_npu, one_attempt, other_code):
        assert keys(entries, 0) == [], entries


def test_the_device_plugins_own_counts() -> None:
    assert FREQUENCY["80E01801"].times == 2 and FREQUENCY["80E18005"].times == 3 and len(FREQUENCY) == 43
    twice = [fault("a", 1, "80E18005", h, f"j{h}") for h in (5, 4)]
    assert keys(twice, 0) == []
    assert keys(twice + [fault("a", 1, "80E18005", 3, "j3")], 0) == ["a:1"]
    link = [fault("a", 1, "81078603", h, f"j{h}") for h in (20, 19, 18, 17, 16)]
    (item,) = kept_off(link, NOW, 0).items
    assert item.until == NOW - 16 * H + 48 * H  # released 172,800 s after the last
    assert keys([fault("a", 1, "81078603", h, f"j{h}") for h in (60, 59, 58, 57, 56)], 0) == []
    assert keys([fault("a", 1, "1234ABCD", h, f"j{h}") for h in (5, 4)], 0) == ["a:1"]  # any code: twice


def test_the_history_is_only_the_jobs_hosts(tmp_path: Path) -> None:
    ledger = tmp_path / "logs" / "faults.jsonl"
    ledger.parent.mkdir()
    now = __import__("time").time()
    entries = [Entry(now, NPU_FAULT, "a", 1, "80E01801", job_id="x"), Entry(now, HOST_LOST, "zz", None, job_id="x")]
    ledger.write_bytes(b"".join(e.to_line() for e in entries))
    (tmp_path / "job.yaml").write_text(
        "job: {command: [python3, t.py], log_dir: logs}\nhosts: [{host: a, devices: [0, 1]}]\nspares: [s]\n"
    )
    history = read_history(load_config(str(tmp_path / "job.yaml")), now)
    assert history.kept.npus == (("a", 1),) and history.kept.hosts == ()
    assert history.exclusions()[0].reason.startswith("fault history: ")
    assert f"npulaunch faults {ledger} --clear a:1" in history.notes()[0]
    facts = history.facts()
    assert facts["ledger"] == str(ledger) and facts["entries"] == 2 and facts["kept_off"][0]["device"] == 1
    assert json.loads(json.dumps(facts)) == facts
    scheduler = read_history(load_config(str(tmp_path / "job.yaml")), now, applied=False)
    assert scheduler.exclusions() == [] and "the scheduler placed this job" in scheduler.warnings()[0]


# --- can it be written ---------------------------------------------------------------------------------


def _config(tmp_path: Path, recovery: str, log_dir: str = "logs"):
    (tmp_path / "job.yaml").write_text(
        f"job:\n  command: [python3, t.py]\n  log_dir: {log_dir}\nhosts: [localhost]\n{recovery}"
    )
    return load_config(str(tmp_path / "job.yaml"))


def test_a_ledger_that_cannot_be_written_names_file_line_and_key(tmp_path: Path) -> None:
    (tmp_path / "afile").write_text("")
    problem = ledger_problem(_config(tmp_path, "recovery:\n  ledger: afile/faults.jsonl\n"))
    assert problem is not None
    assert (problem.source, problem.line, problem.path) == (str(tmp_path / "job.yaml"), 6, "recovery.ledger")
    assert problem.found == repr(str(tmp_path / "afile" / "faults.jsonl"))
    assert "a file npulaunch can append to" in problem.allowed and f"{tmp_path / 'afile'} is not a directory" in (
        problem.hint
    )
    (tmp_path / "adir").mkdir()
    problem = ledger_problem(_config(tmp_path, "recovery:\n  ledger: adir\n"))
    assert problem is not None and problem.hint == f"{tmp_path / 'adir'} is a directory"


def test_the_default_ledger(tmp_path: Path) -> None:
    assert ledger_problem(_config(tmp_path, "")) is None  # the log_dir is made when the job starts
    assert ledger_problem(_config(tmp_path, "recovery: {ledger: deep/er/f.jsonl}\n")) is None
    (tmp_path / "logs").mkdir()
    (tmp_path / "logs" / "faults.jsonl").mkdir()  # the default's place taken by a directory
    problem = ledger_problem(_config(tmp_path, ""))
    assert problem is not None and (problem.line, problem.path) == (3, "job.log_dir")
    assert "faults.jsonl there unless recovery.ledger says where" in problem.hint
