"""monitor.stragglers and --stragglers: on by default (warn), off, a mapping of action, factor and
exclude_after_s; what the ranks get (the injection hook on PYTHONPATH, NPULAUNCH_HOOKS) and bad values
refused with file, line, key and what is allowed."""

from __future__ import annotations

from pathlib import Path
from typing import Any, Dict, List, Optional

import pytest

from npulaunch.config.cluster import ClusterConfig
from npulaunch.config.load import load_config
from npulaunch.config.overrides import Overrides, apply_overrides
from npulaunch.host.errors import ConfigError, ConfigProblem
from npulaunch.host.spec import INJECT_DIR
from npulaunch.plan.build import build_plan
from npulaunch.plan.launchplan import Discovery

HEAD = "version: 1\njob:\n  command: [python3, train.py]\nhosts: [{host: localhost, devices: 2}]\n"  # lines 1-4
NO_NPU_TOOLS = Discovery(devices=lambda: [], device_ips=lambda ids: None)


def load(tmp_path: Path, text: str) -> ClusterConfig:
    path = tmp_path / "job.yaml"
    path.write_text(HEAD + text)
    return load_config(str(path))


def refused(tmp_path: Path, text: str) -> List[ConfigProblem]:
    with pytest.raises(ConfigError) as caught:
        load(tmp_path, text)
    return list(caught.value.problems)


@pytest.mark.parametrize(
    "text, expected",
    [
        ("", {"action": "warn", "factor": 1.2, "exclude_after_s": 120.0}),
        ("monitor: {stragglers: on}\n", {"action": "warn", "factor": 1.2, "exclude_after_s": 120.0}),
        ("monitor: {stragglers: off}\n", None),
        (
            "monitor:\n  stragglers: {action: exclude, factor: 1.5, exclude_after_s: 30}\n",
            {"action": "exclude", "factor": 1.5, "exclude_after_s": 30.0},
        ),
    ],
)
def test_stragglers_settings_reach_the_plan_and_the_ranks(
    tmp_path: Path, text: str, expected: Optional[Dict[str, Any]]
) -> None:
    plan = build_plan(load(tmp_path, text), "job-1", "uuid-1", NO_NPU_TOOLS)
    assert plan.stragglers == expected
    rank = plan.ranks[0]
    if expected is None:
        assert "NPULAUNCH_HOOKS" not in rank.env and "PYTHONPATH" not in rank.env_prepend
        assert not any("monitor.stragglers" in note for note in plan.notes)
    else:
        assert rank.env["NPULAUNCH_HOOKS"] == "pace" and rank.env_prepend["PYTHONPATH"] == INJECT_DIR
        assert any(note.startswith(f"monitor.stragglers ({expected['action']})") for note in plan.notes)


def test_session_injection_and_stragglers_share_one_hook(tmp_path: Path) -> None:
    plan = build_plan(load(tmp_path, "session_injection: auto\n"), "job-1", "uuid-1", NO_NPU_TOOLS)
    assert plan.ranks[0].env["NPULAUNCH_HOOKS"] == "session,pace"
    assert plan.ranks[0].env_prepend["PYTHONPATH"] == INJECT_DIR


@pytest.mark.parametrize("flag, expected", [("off", None), ("warn", "warn"), ("exclude", "exclude")])
def test_the_flag_sets_the_action_and_keeps_the_yamls_numbers(tmp_path: Path, flag: str, expected: object) -> None:
    config = load(tmp_path, "monitor:\n  stragglers: {factor: 1.4}\n")
    changed = apply_overrides(config, Overrides(stragglers=flag))
    given = changed.monitor["stragglers"]
    assert (None if given is None else given["action"]) == expected
    if given is not None:
        assert given["factor"] == 1.4
    assert changed.sources["monitor.stragglers"] == "cli"


@pytest.mark.parametrize(
    "text, line, path, allowed",
    [
        ("monitor: {stragglers: sometimes}\n", 5, "monitor.stragglers", "off, on, or a mapping with keys"),
        ("monitor:\n  stragglers: {action: kill}\n", 6, "monitor.stragglers.action", "warn or exclude"),
        ("monitor:\n  stragglers: {factor: 1.0}\n", 6, "monitor.stragglers.factor", "a number from 1.05 to 100"),
        ("monitor:\n  stragglers: {exclude_after_s: -1}\n", 6, "monitor.stragglers.exclude_after_s", "a number of"),
        ("monitor:\n  stragglers: {factr: 1.3}\n", 6, "monitor.stragglers.factr", "action, factor, exclude_after_s"),
    ],
)
def test_bad_stragglers_settings_are_refused_where_they_are(
    tmp_path: Path, text: str, line: int, path: str, allowed: str
) -> None:
    problems = refused(tmp_path, text)
    assert len(problems) == 1, [p.render() for p in problems]
    problem = problems[0]
    assert (problem.line, problem.path) == (line, path) and problem.allowed.startswith(allowed), problem.render()
    assert problem.source == str(tmp_path / "job.yaml")
