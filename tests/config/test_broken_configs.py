"""``npulaunch check`` on realistic broken cluster files (tests/broken_configs/): exit 2, with each
``# expect:`` line of the file found in the message; and exit 0 on every shipped config."""

from __future__ import annotations

from pathlib import Path

import pytest
from helpers import BROKEN_CONFIGS, ROOT, run_cli

BROKEN = sorted(BROKEN_CONFIGS.glob("*.yaml"))
SHIPPED = sorted((ROOT / "cluster_configs").glob("*.yaml")) + sorted((ROOT / "examples").glob("*.yaml"))


@pytest.mark.parametrize("path", BROKEN, ids=lambda p: p.stem)
def test_broken_config_is_refused_with_its_message(path: Path) -> None:
    expected = [line[len("# expect: ") :] for line in path.read_text().splitlines() if line.startswith("# expect: ")]
    assert expected, "each broken config says what it expects"
    result = run_cli("check", "--offline", str(path))
    assert result.returncode == 2, result.stdout + result.stderr
    assert "Traceback" not in result.stderr
    for phrase in expected:
        assert phrase in result.stderr, f"{phrase!r} not in:\n{result.stderr}"


@pytest.mark.parametrize("path", SHIPPED, ids=lambda p: p.stem)
def test_shipped_config_checks_clean(path: Path) -> None:
    result = run_cli("check", "--offline", str(path))
    assert result.returncode == 0, result.stderr
    assert "warning" not in result.stdout + result.stderr


def test_there_are_enough_broken_configs() -> None:
    assert len(BROKEN) >= 12
