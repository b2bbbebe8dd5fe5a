"""Session options reach real TensorFlow (tensorflow-cpu) in real rank processes: the explicit
API and zero-code injection (Session(config=...), Session(), MonitoredTrainingSession), typed
fields, the script's own settings kept, precedence, and the per-rank record of what a session got.
TensorFlow costs ~3 s per process here, so each test starts as few ranks as it can."""

from __future__ import annotations

import importlib.util
import json
import re
import sys
from pathlib import Path
from typing import Dict

import pytest
from conftest import RANKS, require, run_cli

OPTIONS = """session_options:
  hcom_parallel: true
  iterations_per_loop: 10
  precision_mode: allow_mix_precision
  enable_dump: true
  dump_path: {dump}/{{rank}}
"""


@pytest.fixture(scope="module", autouse=True)
def tensorflow_present() -> None:
    require(importlib.util.find_spec("tensorflow") is not None, "tensorflow-cpu (pip install -e '.[tf]')")


def job(tmp_path: Path, ranks: int, ways: str, extra: str = "") -> Path:
    path = tmp_path / "job.yaml"
    path.write_text(f"""version: 1
job:
  command: [{sys.executable}, {RANKS / 'tf_sessions.py'}, {ways}]
  log_dir: {tmp_path / 'logs'}
hosts:
  - {{host: localhost, devices: {ranks}}}
session_injection: auto
{OPTIONS.format(dump=tmp_path / 'dump')}{extra}""")
    return path


def results(stdout: str) -> Dict[int, dict]:
    found = {}
    for match in re.finditer(r"^\[r(\d+) d\d+\] RESULT (.*)$", stdout, re.MULTILINE):
        found[int(match.group(1))] = json.loads(match.group(2))
    return found


def test_options_land_in_every_kind_of_session(tmp_path: Path) -> None:
    result = run_cli("run", str(job(tmp_path, 2, "explicit, config, plain, monitored")), "--job-id", "tf",
                     timeout=180)
    assert result.returncode == 0, result.stderr
    got = results(result.stdout)
    assert sorted(got) == [0, 1]
    for rank, ways in got.items():
        assert sorted(ways) == ["config", "explicit", "monitored", "plain"]
        for way, seen in ways.items():
            params = seen["params"]
            assert params["hcom_parallel"] == ["b", True], way
            assert params["precision_mode"] == ["s", "allow_mix_precision"], way
            assert params["enable_dump"] == ["b", True], way
            assert params["dump_path"] == ["s", str(tmp_path / "dump" / str(rank))], way
            assert seen["remapping"] == 2 and seen["memory_optimization"] == 2  # RewriterConfig.OFF, as CANN asks
            if way == "plain":
                assert params["iterations_per_loop"] == ["i", 10]
            else:  # the script set 5 itself: by default the script wins, with a warning
                assert params["iterations_per_loop"] == ["i", 5], way
                assert seen["soft"] is True and seen["inter_op"] == 2, way  # the script's settings survive
        assert ways["config"]["script_config_unchanged"] is True
    assert "the script sets 5, the YAML sets 10; keeping the script's" in result.stderr
    record = json.loads((tmp_path / "logs" / "tf" / "rank-1" / "session_options.json").read_text())
    assert record["options"]["dump_path"] == str(tmp_path / "dump" / "1")
    assert record["conflicts"] == [] or "iterations_per_loop" in record["conflicts"][0]


def test_yaml_precedence_overrides_the_script(tmp_path: Path) -> None:
    result = run_cli("run", str(job(tmp_path, 1, "config", "session_precedence: yaml\n")), "--job-id", "tf",
                     timeout=120)
    assert result.returncode == 0, result.stderr
    assert results(result.stdout)[0]["config"]["params"]["iterations_per_loop"] == ["i", 10]
    assert "keeping the YAML's" in result.stderr
