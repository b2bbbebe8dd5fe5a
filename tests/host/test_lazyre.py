"""lazy_re: module-level patterns that compile at their first use, and behave as compiled ones."""

from __future__ import annotations

import re
import subprocess
import sys

from npulaunch.host.lazyre import lazy_re


def test_a_lazy_pattern_compiles_at_first_use_and_then_is_the_compiled_pattern_s_methods() -> None:
    pattern = lazy_re(r"^step (\d+)/(\d+)$", re.IGNORECASE | re.MULTILINE)
    assert "search" not in vars(pattern)  # nothing compiled yet
    assert pattern.pattern == r"^step (\d+)/(\d+)$" and pattern.flags == re.IGNORECASE | re.MULTILINE
    found = pattern.search("loss 1\nSTEP 3/10\n")
    assert found is not None and found.groups() == ("3", "10")
    assert vars(pattern)["search"].__self__ is vars(pattern)["match"].__self__  # the compiled pattern's own
    assert pattern.groups == 2
    assert [m.group(1) for m in pattern.finditer("step 1/2\nstep 2/2")] == ["1", "2"]
    assert pattern.sub("x", "step 1/2") == "x" and pattern.fullmatch("step 1/2 ") is None
    assert lazy_re("a|b").split("1a2b3") == ["1", "2", "3"]


def test_the_launch_path_compiles_no_pattern_of_its_own_when_imported() -> None:
    """Importing what ``npulaunch run`` imports compiles none of npulaunch's patterns (only what the
    standard library's modules compile as they are imported)."""
    code = (
        "import re._compiler as c, traceback\n"
        "orig = c.compile\n"
        "ours = []\n"
        "def compile(p, flags=0):\n"
        "    caller = [f for f in traceback.extract_stack()[:-1] if '/re/' not in f.filename][-1]\n"
        "    if 'npulaunch' in caller.filename:\n"
        "        ours.append(p)\n"
        "    return orig(p, flags)\n"
        "c.compile = compile\n"
        "import npulaunch.cli, npulaunch.launch.job, npulaunch.launch.local, npulaunch.launch.supervisor\n"
        "import npulaunch.views.jobview, npulaunch.views.htmlreport, npulaunch.host.agent.probe\n"
        "import npulaunch.plan.build, npulaunch.plan.planjson, npulaunch.config.load\n"
        "print(ours)\n"
    )
    shown = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True).stdout
    assert shown.strip() == "[]", shown
