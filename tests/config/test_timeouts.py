"""HCCL_EXEC_TIMEOUT / hccl_timeout by product line and CANN version (config/timeouts.py), as the
rules, the ranks' environment and the hang watchdog use them."""

from __future__ import annotations

from pathlib import Path

import pytest
from helpers import full_plan, run_cli

from npulaunch.config.rules import ERROR, WARNING, RuleContext, check_rules
from npulaunch.config.timeouts import exec_timeout, parse_version


@pytest.mark.parametrize(
    "text, version",
    [
        ("6.0.RC1", (6, 0, 0, 1)),
        ("6.0.1", (6, 0, 1, 1)),
        ("8.0.RC2", (8, 0, 0, 2)),
        ("8.2.RC1.alpha003", (8, 2, 0, 1)),
        ("9.0.0", (9, 0, 1, 0)),
        ("8.0", None),
        ("latest", None),
    ],
)
def test_versions_parse_and_release_candidates_sort_first(text: str, version: object) -> None:
    assert parse_version(text) == version


def test_release_candidates_come_before_their_release() -> None:
    order = ["6.0.RC1", "6.0.1", "6.3.RC2", "7.0.RC1", "7.0.0", "8.0.RC2", "8.0.0", "9.0.0"]
    assert sorted(order, key=parse_version) == order


@pytest.mark.parametrize(
    "product, version, default, low, high, step",
    [
        ("atlas-training", "6.0.RC1", 600, 60, 17340, 0),
        ("atlas-training", "6.0.1", 1800, 68, 17340, 68),
        ("atlas-a2", "6.3.RC2", 1800, 0, 2147483647, 0),
        ("atlas-training", "7.0.0", 1836, 1, 17340, 68),
        ("atlas-a2", "8.0.RC2", 1836, 0, 2147483647, 0),
        ("atlas-a3", "9.0.0", 1836, 0, 2147483647, 0),
        (None, None, 1836, 1, 17340, 68),
    ],
)
def test_the_table(product, version, default, low, high, step) -> None:
    table = exec_timeout(product, parse_version(version) if version else None)
    assert (table.default_s, table.low, table.high, table.step_s) == (default, low, high, step)


def test_atlas_training_rounds_down_to_68_second_steps() -> None:
    table = exec_timeout("atlas-training", parse_version("8.0.0"))
    assert [table.in_effect(v) for v in (600, 1800, 1836, 10)] == [544, 1768, 1836, 68]
    assert exec_timeout("atlas-a2", None).in_effect(1800) == 1800


def findings(options=None, env=None, product=None, version=None, world_size=8):
    env = env or {}
    ctx = RuleContext(options or {}, env, dict(env), world_size, product, version)
    return check_rules(ctx)


def test_hccl_exec_timeout_in_the_env_is_checked_like_hccl_timeout() -> None:
    (error,) = [f for f in findings(env={"HCCL_EXEC_TIMEOUT": "20000"}, product="atlas-training") if f.level == ERROR]
    assert error.names == ("env:HCCL_EXEC_TIMEOUT",)
    assert error.allowed == "1 to 17340 seconds on atlas-training, CANN version not given"
    assert not findings(env={"HCCL_EXEC_TIMEOUT": "20000"}, product="atlas-a2")
    (warned,) = findings(env={"HCCL_EXEC_TIMEOUT": "1800"}, product="atlas-training")
    assert warned.level == WARNING and "round it to 1768 s" in warned.hint


def test_old_versions_have_their_own_range() -> None:
    (error,) = findings({"hccl_timeout": 30}, product="atlas-training", version="6.0.RC1")
    assert error.allowed == "60 to 17340 seconds on atlas-training, CANN 6.0.RC1"
    assert not findings({"hccl_timeout": 30}, product="atlas-training", version="8.0.0") == []  # 68 s steps


def test_stream_sync_is_compared_with_cann_s_default_for_the_version() -> None:
    # 1,700,000 ms is less than 1836 s (7.0 on) but more than 600 s (6.0.RC1)
    (error,) = findings({"stream_sync_timeout": 1700000}, product="atlas-a2", version="8.0.0")
    assert error.names == ("stream_sync_timeout", "env:HCCL_EXEC_TIMEOUT") and "CANN's default 1836 s" in error.hint
    assert not findings({"stream_sync_timeout": 1700000}, product="atlas-training", version="6.0.RC1")


def write(tmp_path: Path, extra: str) -> Path:
    path = tmp_path / "job.yaml"
    path.write_text(
        f"version: 1\njob:\n  command: [python3, -c, pass]\n  log_dir: {tmp_path / 'logs'}\n"
        f"hosts: [{{host: localhost, devices: 2}}]\nrank_table: none\n{extra}"
    )
    return path


def test_ranks_get_cann_s_own_exec_timeout_and_the_watchdog_waits_longer(tmp_path: Path) -> None:
    import json

    result = run_cli("plan", str(write(tmp_path, 'cann_version: "6.0.1"\nproduct: atlas-training\n')), "--json")
    assert result.returncode == 0, result.stderr
    data = full_plan(json.loads(result.stdout))
    assert all("HCCL_EXEC_TIMEOUT" not in rank["env"] for rank in data["ranks"])
    assert data["monitor"]["hang_timeout_s"] == 1800 + 60
    result = run_cli("plan", str(write(tmp_path, "")), "--json")
    assert json.loads(result.stdout)["monitor"]["hang_timeout_s"] == 1836 + 60


def test_a_bad_cann_version_names_the_forms(tmp_path: Path) -> None:
    result = run_cli("plan", str(write(tmp_path, "cann_version: 8.0\n")))
    assert result.returncode == 2
    assert "job.yaml:7: cann_version: found 8.0 (a number); allowed: a CANN version such as 6.0.RC1" in result.stderr
    assert 'quote it: "8.0.RC2"' in result.stderr
