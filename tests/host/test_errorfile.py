"""A rank's error file (host/errorfile.py): files written by real torch's ``@record`` read back, bad and
oversize files refused without an exception, a file left from an earlier attempt removed before the rank
starts, and what the agent reports of a failed rank's file, locally and over the wire."""

from __future__ import annotations

import importlib.util
import json
import os
import subprocess
import sys
import textwrap
import time
from dataclasses import replace
from pathlib import Path
from typing import Dict

import pytest
from helpers import host_plan, require

from npulaunch.host import wire
from npulaunch.host.agent.agent import Agent
from npulaunch.host.errorfile import (
    ERROR_FILE_VAR,
    MAX_FILE_BYTES,
    MAX_MESSAGE_CHARS,
    MAX_TRACEBACK_CHARS,
    RankErrorFile,
    load_error_file,
    parse_error_file,
    raised_text,
)
from npulaunch.host.events import Event, EventKind
from npulaunch.host.records import RankResult, RankState

# One process imports torch once (1.5 s) and has its real @record write a file for each case: the handler
# reads TORCHELASTIC_ERROR_FILE when it records, so each case sets it first.
TORCH_SCRIPT = textwrap.dedent(
    """
    import json, os, sys
    from torch.distributed.elastic.multiprocessing.errors import ErrorHandler, record

    out = sys.argv[1]

    def step(batch):
        raise ValueError(f"bad batch {batch}")  # LINE step

    def train():
        step(7)

    def load_config():
        return json.loads("{")  # LINE load_config

    def reload():
        try:
            {}["lr"]
        except KeyError:
            raise RuntimeError("config has no lr\\nsee the docs")  # LINE reload

    def run(name, fn):
        os.environ["TORCHELASTIC_ERROR_FILE"] = os.path.join(out, name + ".json")
        try:
            record(fn)()
        except Exception:
            pass

    run("raise", train)
    run("library", load_config)
    run("chained", reload)
    # a launcher under @record whose child failed copies the child's file with errorCode set (dump_error_file)
    os.environ["TORCHELASTIC_ERROR_FILE"] = os.path.join(out, "parent.json")
    ErrorHandler().dump_error_file(os.path.join(out, "raise.json"), 7)
    """
)


def line_of(marker: str) -> int:
    return next(n for n, line in enumerate(TORCH_SCRIPT.splitlines(), 1) if line.endswith(f"# LINE {marker}"))


@pytest.fixture(scope="module")
def torch_files(tmp_path_factory: pytest.TempPathFactory) -> Dict[str, Path]:
    require(importlib.util.find_spec("torch") is not None, "torch (the CPU build) to write real error files")
    folder = tmp_path_factory.mktemp("torch error files")
    script = folder / "train.py"
    script.write_text(TORCH_SCRIPT)
    env = dict(os.environ, OMP_NUM_THREADS="1")
    done = subprocess.run([sys.executable, str(script), str(folder)], env=env, capture_output=True, text=True)
    assert done.returncode == 0, done.stderr
    files = {name: folder / f"{name}.json" for name in ("raise", "library", "chained", "parent")}
    assert all(path.is_file() for path in files.values()), done.stderr
    return files


def test_a_record_decorated_mains_exception_is_read_back(torch_files: Dict[str, Path]) -> None:
    path = torch_files["raise"]
    raw = json.loads(path.read_text())
    assert set(raw) == {"message"} and set(raw["message"]) == {"message", "extraInfo"}  # torch's shape, as cited
    raised = load_error_file(str(path))
    assert raised is not None
    assert raised["exception"] == "ValueError" and raised["message"] == "bad batch 7"
    assert raised["where"] == f"train.py:{line_of('step')}, in step"
    assert raised["traceback"].startswith("Traceback (most recent call last):\n")
    assert 'errors/__init__.py"' in raised["traceback"]  # torch's wrapper is in it, but is not "where"
    assert raised["traceback"].endswith("ValueError: bad batch 7\n")
    assert isinstance(raised["timestamp"], int) and abs(raised["timestamp"] - raised["written"]) <= 1.5
    assert abs(raised["written"] - path.stat().st_mtime) < 0.01 and raised["path"] == str(path)
    assert raised_text(raised) == f"ValueError: bad batch 7 (train.py:{line_of('step')}, in step)"


def test_where_is_the_users_line_not_the_librarys(torch_files: Dict[str, Path]) -> None:
    raised = load_error_file(str(torch_files["library"]))
    assert raised is not None and raised["exception"] == "JSONDecodeError"
    assert raised["message"].startswith("Expecting property name enclosed in double quotes")
    assert raised["where"] == f"train.py:{line_of('load_config')}, in load_config"
    assert "json/decoder.py" in raised["traceback"]  # the innermost frame, in the standard library


def test_a_chained_exception_is_the_last_one(torch_files: Dict[str, Path]) -> None:
    raised = load_error_file(str(torch_files["chained"]))
    assert raised is not None and raised["exception"] == "RuntimeError"
    assert raised["message"] == "config has no lr\nsee the docs"
    assert raised["where"] == f"train.py:{line_of('reload')}, in reload"
    assert "During handling of the above exception" in raised["traceback"]
    assert raised_text(raised) == f"RuntimeError: config has no lr ... (train.py:{line_of('reload')}, in reload)"


def test_a_parent_launchers_copy_carries_the_childs_exit_code(torch_files: Dict[str, Path]) -> None:
    raised = load_error_file(str(torch_files["parent"]))
    assert raised is not None and raised["error_code"] == 7
    assert raised["exception"] == "ValueError" and raised["where"] == f"train.py:{line_of('step')}, in step"


def test_torchruns_other_message_shape() -> None:
    # ProcessFailure._get_error_data: {"message": "<text>", "timestamp": N}
    raised = parse_error_file(json.dumps({"message": "Signal 6 (SIGABRT) received by PID 12", "timestamp": 5}))
    assert raised == {
        "exception": "",
        "message": "Signal 6 (SIGABRT) received by PID 12",
        "where": "",
        "traceback": "",
        "timestamp": 5,
    }


@pytest.mark.parametrize(
    "text",
    [
        "",
        "not json",
        '{"message": {"message": "ValueError: cut here',  # a file cut short (a full disk)
        "[1, 2]",
        '"a string"',
        '{"foo": 1}',
        '{"message": 3}',
        '{"message": {"extraInfo": "x"}}',
        "[" * 200_000 + "]" * 200_000,  # deeper than the decoder goes
        "\x00\xff garbage",
    ],
    ids=["empty", "not-json", "truncated", "list", "string", "other-keys", "number", "no-text", "deep", "binary"],
)
def test_a_file_that_is_not_torchs_record_is_none(tmp_path: Path, text: str) -> None:
    path = tmp_path / "error.json"
    path.write_bytes(text.encode("utf-8", "surrogateescape"))
    assert load_error_file(str(path)) is None


def test_a_corrupt_real_file_is_none(tmp_path: Path, torch_files: Dict[str, Path]) -> None:
    data = torch_files["raise"].read_bytes()
    path = tmp_path / "error.json"
    path.write_bytes(data[: len(data) // 2])
    assert load_error_file(str(path)) is None


def test_an_oversize_file_is_not_read_and_a_long_one_is_cut(tmp_path: Path, torch_files: Dict[str, Path]) -> None:
    record = json.loads(torch_files["raise"].read_text())
    record["message"]["message"] = "ValueError: " + "x" * MAX_FILE_BYTES
    path = tmp_path / "error.json"
    path.write_text(json.dumps(record))
    assert load_error_file(str(path)) is None
    frames = "".join(f'  File "/work/train.py", line {n}, in f{n}\n    f{n + 1}()\n' for n in range(5000))
    callstack = "Traceback (most recent call last):\n" + frames + "RecursionError: too deep\n"
    record = {"message": {"message": "RecursionError: " + "y" * 100_000, "extraInfo": {"py_callstack": callstack}}}
    path.write_text(json.dumps(record))
    assert path.stat().st_size < MAX_FILE_BYTES
    raised = load_error_file(str(path))
    assert raised is not None and raised["timestamp"] is None
    assert len(raised["message"]) < MAX_MESSAGE_CHARS + 50 and raised["message"].endswith("characters not shown)")
    assert len(raised["traceback"]) < MAX_TRACEBACK_CHARS + 100
    assert raised["traceback"].startswith("Traceback (most recent call last):\n  ... (")
    assert raised["traceback"].endswith("RecursionError: too deep\n")
    assert raised["where"] == "train.py:4999, in f4999"  # found in the whole traceback, before it is cut


def test_a_fifo_at_the_path_does_not_block(tmp_path: Path) -> None:
    path = tmp_path / "error.json"
    os.mkfifo(path)
    began = time.monotonic()
    assert load_error_file(str(path)) is None
    assert time.monotonic() - began < 1.0


def test_an_earlier_attempts_file_is_removed_before_the_rank_starts(tmp_path: Path) -> None:
    path = tmp_path / "rank-0" / "error.json"
    assert RankErrorFile.prepare({}, str(tmp_path), time.time()) is None
    assert RankErrorFile.prepare({ERROR_FILE_VAR: ""}, str(tmp_path), time.time()) is None  # torch's "none"
    made = RankErrorFile.prepare({ERROR_FILE_VAR: "rank-0/error.json"}, str(tmp_path), time.time())
    assert made is not None and made.path == str(path) and not made.kept_stale  # relative: to the rank's cwd
    assert oct(path.parent.stat().st_mode & 0o777) == "0o700"  # made: torch's handler does not make it
    path.write_text(json.dumps({"message": "ValueError: from the attempt before"}))
    again = RankErrorFile.prepare({ERROR_FILE_VAR: str(path)}, "/", time.time())
    assert again is not None and not path.exists() and again.read() is None


def test_a_file_that_could_not_be_removed_counts_only_when_written_after_the_start(tmp_path: Path) -> None:
    path = tmp_path / "error.json"
    path.write_text(json.dumps({"message": "ValueError: old"}))
    hour_ago = time.time() - 3600
    os.utime(path, (hour_ago, hour_ago))
    assert load_error_file(str(path), not_before=time.time()) is None
    assert load_error_file(str(path), not_before=hour_ago)["message"] == "old"  # type: ignore[index]
    blocked = tmp_path / "dir.json"
    blocked.mkdir()  # a directory at the path: it cannot be removed, and it is not read
    kept = RankErrorFile.prepare({ERROR_FILE_VAR: str(blocked)}, str(tmp_path), time.time())
    assert kept is not None and kept.kept_stale and kept.read() is None


# what torch's record_exception writes (its shape; the real thing is read above), then the exit
WRITE_AND_FAIL = """
import json, os, sys, time
json.dump({"message": {"message": "ValueError: bad batch 3", "extraInfo": {
    "py_callstack": 'Traceback (most recent call last):\\n  File "train.py", line 41, in step\\n'
                    '    raise ValueError("bad batch 3")\\nValueError: bad batch 3\\n',
    "timestamp": str(int(time.time()))}}}, open(os.environ["TORCHELASTIC_ERROR_FILE"], "w"))
sys.exit(1)
"""


def test_the_agent_reports_what_a_failed_rank_raised_before_its_exit(tmp_path: Path, marker: str) -> None:
    plan = host_plan(tmp_path, marker)
    ranks = []
    for spec, code in zip(plan.ranks, ("import sys; sys.exit(3)", WRITE_AND_FAIL)):
        stale = Path(spec.rank_dir) / "error.json"
        stale.parent.mkdir(parents=True)
        stale.write_text(json.dumps({"message": "KeyError: an earlier attempt's"}))
        env = dict(spec.env, **{ERROR_FILE_VAR: str(stale)})
        ranks.append(replace(spec, argv=(sys.executable, "-c", code), env=env))
    events = []
    outcome = Agent(replace(plan, ranks=tuple(ranks)), events.append, lambda *a: None).run()
    assert [r.state for r in outcome.ranks] == [RankState.FAILED, RankState.FAILED]
    assert outcome.ranks[0].raised is None  # its earlier attempt's file was removed before it started
    raised = outcome.ranks[1].raised
    assert raised is not None and raised["exception"] == "ValueError" and raised["where"] == "train.py:41, in step"
    kinds = [e.kind for e in events if e.rank == 1]
    assert kinds[-2:] == [EventKind.RANK_ERROR_FILE, EventKind.RANK_EXITED]
    said = next(e for e in events if e.kind is EventKind.RANK_ERROR_FILE)
    assert said.data == raised
    assert not [e for e in events if e.kind is EventKind.RANK_ERROR_FILE and e.rank == 0]


def test_what_a_rank_raised_crosses_the_wire() -> None:
    raised = parse_error_file(
        json.dumps({"message": {"message": "ValueError: bad", "extraInfo": {"py_callstack": "", "timestamp": "9"}}})
    )
    assert raised is not None
    event = Event(EventKind.RANK_ERROR_FILE, "j", "h1", 1, dict(raised))
    sent = json.loads(wire.encode(wire.event_to_json(event)))
    back = wire.from_agent(sent)
    assert isinstance(back, Event) and back.kind is EventKind.RANK_ERROR_FILE and back.data == raised
    result = RankResult(1, "h1", 1, 100, RankState.FAILED, 1.0, 2.0, 1, None, raised=raised)
    done = wire.from_agent(json.loads(wire.encode(wire.Done([result]).to_json())))
    assert isinstance(done, wire.Done) and done.ranks == [result]
    plain = RankResult(0, "h1", 0, 99, RankState.STOPPED, 1.0, 2.0, None, "SIGTERM")
    assert "raised" not in plain.to_json() and RankResult.from_json(plain.to_json()) == plain
