"""The launcher side stays within Python 3.9 and light: no Fabric, TensorFlow or rich imported for
``--help`` and ``plan``. (What runs on compute hosts is checked in host/test_boundary.py.)"""

from __future__ import annotations

import shutil
import subprocess
import sys

import pytest
from helpers import ROOT, base_env, require

HEAVY = ("fabric", "paramiko", "invoke", "tensorflow", "rich")


def test_the_launcher_needs_at_most_python_3_9() -> None:
    require(shutil.which("vermin") is not None, "vermin (pip install vermin)")
    result = subprocess.run(
        ["vermin", "--target=3.9-", "--violations", "--no-tips", "--eval-annotations", "npulaunch"],
        cwd=str(ROOT),
        capture_output=True,
        text=True,
    )
    assert result.returncode == 0, result.stdout + result.stderr


@pytest.mark.parametrize(
    "args",
    [["--help"], ["plan", "cluster_configs/two-servers.yaml"], ["plan", "cluster_configs/local-4.yaml", "--json"]],
)
def test_the_cli_does_not_import_heavy_modules(args) -> None:
    result = subprocess.run(
        [sys.executable, "-X", "importtime", "-m", "npulaunch", *args],
        cwd=str(ROOT),
        env=base_env(),
        capture_output=True,
        text=True,
    )
    assert result.returncode == 0, result.stderr
    imported = {line.split("|")[-1].strip().split(".")[0] for line in result.stderr.splitlines() if "|" in line}
    assert imported, "no -X importtime output"
    assert not imported & set(HEAVY)
