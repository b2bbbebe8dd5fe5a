"""mypy runs on the package as part of the test suite (STYLE: everything is annotated)."""

from __future__ import annotations

import shutil
import subprocess
import sys

from helpers import ROOT, require


def test_the_package_type_checks() -> None:
    require(shutil.which("mypy") is not None, "mypy (pip install -e '.[test]')")
    result = subprocess.run([sys.executable, "-m", "mypy"], cwd=str(ROOT), capture_output=True, text=True)
    assert result.returncode == 0, result.stdout + result.stderr
