"""The boundary of npulaunch/host/ (what runs on compute hosts): every module imports on Python 3.7 and
on this Python without site-packages, nothing imports from outside host/ or beyond the standard
library, the agent zip ships the folder whole, and the agent and rank-side helper work on Python 3.7."""

from __future__ import annotations

import importlib.util
import io
import json
import shutil
import subprocess
import sys
import zipfile
from pathlib import Path
from typing import List

import pytest
from helpers import PACKAGE, ROOT, imports_of, module_name, package_sources, python37, require

HOST = PACKAGE / "host"
HOST_SOURCES = package_sources(HOST)
INJECT_HOOK = HOST / "inject" / "sitecustomize.py"  # run by path at a rank's start-up, not imported
LAZY_ONLY = ("tensorflow", "npu_bridge", "torch", "mindspore")  # the rank-side helpers import these inside functions
PY37 = "python3.7 (pyenv 3.7 on these machines)"

# Imports one module with nothing but the standard library and the repository root on sys.path, and
# checks the isolation held: no site-packages, and npulaunch found in this repository.
IMPORT_ONE = """
import importlib, importlib.util, json, sys
root, name, path = sys.argv[1:4]
sys.path.insert(0, root)
if path:
    spec = importlib.util.spec_from_file_location(name, path)
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
else:
    module = importlib.import_module(name)
print(json.dumps({"version": list(sys.version_info[:2]), "file": module.__file__,
                  "package": sys.modules["npulaunch"].__file__ if "npulaunch" in sys.modules else None,
                  "site": [p for p in sys.path if "site-packages" in p or "dist-packages" in p]}))
"""


@pytest.fixture(scope="module")
def interpreters() -> dict:
    return {"3.7": python37(), "current": sys.executable}


def rel(path: Path) -> str:
    return str(path.relative_to(ROOT))


def test_the_walk_finds_the_host_side() -> None:
    found = {rel(p) for p in HOST_SOURCES}
    assert {
        "npulaunch/host/agent/agent.py",
        "npulaunch/host/spec.py",
        "npulaunch/host/session.py",
        rel(INJECT_HOOK),
    } <= found, found


@pytest.mark.parametrize("source", HOST_SOURCES, ids=[str(p.relative_to(HOST)) for p in HOST_SOURCES])
@pytest.mark.parametrize("which", ["3.7", "current"])
def test_every_host_module_imports_in_isolation(which: str, source: Path, interpreters: dict) -> None:
    interpreter = interpreters[which]
    require(bool(interpreter), PY37)
    by_path = source == INJECT_HOOK
    name = "sitecustomize" if by_path else module_name(source)
    argv = [interpreter, "-I", "-S", "-c", IMPORT_ONE, str(ROOT), name, str(source) if by_path else ""]
    result = subprocess.run(argv, capture_output=True, text=True, timeout=60, cwd="/", env={"PATH": "/usr/bin:/bin"})
    assert result.returncode == 0, f"{rel(source)} does not import on {interpreter} -I -S:\n{result.stderr}"
    seen = json.loads(result.stdout.splitlines()[-1])
    assert seen["site"] == [], f"site-packages on sys.path despite -I -S: {seen['site']}"
    assert Path(seen["file"]).resolve() == source.resolve()
    if not by_path:
        assert Path(seen["package"]).resolve() == (PACKAGE / "__init__.py").resolve()
    if which == "3.7":
        assert seen["version"] == [3, 7]


def host_import_problems(path: Path, name: str = "") -> List[str]:
    """What a host-side file imports that a compute host may not have, as ``file:line: why``."""
    stdlib = sys.stdlib_module_names
    problems = {}  # (where, module) -> why; ``from X import Y`` is reported once, as X, when X is wrong
    for found in imports_of(path, name):
        if any(where == found.where and found.module.startswith(module + ".") for where, module in problems):
            continue
        top = found.module.split(".")[0]
        why = ""
        if top == "npulaunch":
            if found.module not in ("npulaunch", "npulaunch.host") and not found.module.startswith("npulaunch.host."):
                why = "outside npulaunch.host (it does not ship)"
        elif top in LAZY_ONLY:
            if not found.in_function:
                why = "at module level (allowed only inside functions)"
        elif top not in stdlib:
            why = "not in the standard library"
        if why:
            problems[found.where, found.module] = why
    return [f"{where}: imports {module}: {why}" for (where, module), why in problems.items()]


def test_host_imports_only_itself_and_the_standard_library() -> None:
    require(hasattr(sys, "stdlib_module_names"), "Python 3.10+ to run the tests (sys.stdlib_module_names)")
    problems = [problem for source in HOST_SOURCES for problem in host_import_problems(source)]
    if problems:
        pytest.fail("host-side code imports what a compute host may lack:\n" + "\n".join(problems), pytrace=False)


def test_the_host_import_check_catches_each_kind_of_offence(tmp_path: Path) -> None:
    require(hasattr(sys, "stdlib_module_names"), "Python 3.10+ to run the tests (sys.stdlib_module_names)")
    bad = tmp_path / "bad.py"
    bad.write_text(
        "import os.path\nimport yaml\nfrom npulaunch import session\nfrom ...config import cluster\n"
        "from . import spec\nimport tensorflow\nfrom typing import TYPE_CHECKING\n"
        "if TYPE_CHECKING:\n    from npulaunch.plan.build import LaunchPlan\n"
        "def lazy():\n    import tensorflow as tf\n    from npu_bridge.estimator import npu_ops\n"
    )
    problems = host_import_problems(bad, "npulaunch.host.agent.bad")
    lines = sorted(int(p.split(":")[1]) for p in problems)
    assert lines == [2, 3, 4, 6, 9], problems
    assert all(p.startswith(f"{bad}:") for p in problems)


def test_the_agent_zip_ships_host_whole() -> None:
    from npulaunch.launch.fleet.ship import agent_zip

    sources = [PACKAGE / "__init__.py", *HOST_SOURCES]
    with zipfile.ZipFile(io.BytesIO(agent_zip())) as archive:
        names = set(archive.namelist())
        expected = {"__main__.py"}
        for source in sources:
            expected |= {rel(source), rel(source) + "c"}
        assert names == expected, f"missing: {sorted(expected - names)}; unexpected: {sorted(names - expected)}"
        for source in sources:
            text = source.read_bytes()
            assert archive.read(rel(source)) == text, rel(source)
            pyc = archive.read(rel(source) + "c")
            assert pyc[:4] == importlib.util.MAGIC_NUMBER, rel(source)
            assert pyc[8:16] == importlib.util.source_hash(text), f"{rel(source)}c is not of its source"


def test_host_side_code_needs_at_most_python_3_7() -> None:
    require(shutil.which("vermin") is not None, "vermin (pip install vermin)")
    result = subprocess.run(
        [
            "vermin",
            "--target=3.7-",
            "--violations",
            "--no-tips",
            "--eval-annotations",
            "npulaunch/__init__.py",
            "npulaunch/host",
        ],
        cwd=str(ROOT),
        capture_output=True,
        text=True,
    )
    assert result.returncode == 0, result.stdout + result.stderr


def test_the_agent_runs_ranks_on_python_3_7(tmp_path: Path) -> None:
    interpreter = python37()
    require(bool(interpreter), PY37)
    driver = f"""
import json, sys
sys.path.insert(0, {str(ROOT)!r})
from npulaunch.host.agent.agent import Agent
from npulaunch.host.tail import split_lines
from npulaunch.host.spec import HostPlan, RankSpec
ranks = []
for rank in range(2):
    d = {str(tmp_path)!r} + "/rank-%d" % rank
    ranks.append(RankSpec(rank=rank, local_rank=rank, world_size=2, host="localhost", node_rank=0,
        device_id=rank, argv=("/bin/sh", "-c", "echo hello from $RANK_ID; exit $RANK_ID"), cwd="/",
        env={{"RANK_ID": str(rank)}}, env_unset=(), env_sources={{}}, session_options={{}}, rank_dir=d,
        stdout_path=d + "/stdout.log", stderr_path=d + "/stderr.log", plog_dir=d + "/ascend"))
plan = HostPlan(job_id="py37", job_uuid="u37", host="localhost", node_rank=0, job_dir={str(tmp_path)!r},
                grace_period_s=1.0, ranks=tuple(ranks))
lines = []
outcome = Agent(plan, lambda e: None, lambda spec, stream, got: lines.extend(split_lines(got))).run()
print(json.dumps({{"version": sys.version_info[:2], "codes": [r.exit_code for r in outcome.ranks],
                   "lines": sorted(lines)}}))
"""
    result = subprocess.run([interpreter, "-I", "-c", driver], capture_output=True, text=True, timeout=60)
    assert result.returncode == 0, result.stderr
    data = json.loads(result.stdout)
    assert data == {"version": [3, 7], "codes": [0, 1], "lines": ["hello from 0", "hello from 1"]}


def test_the_rank_side_helpers_load_on_python_3_7(tmp_path: Path) -> None:
    interpreter = python37()
    require(bool(interpreter), PY37)
    code = (
        "import os, sys; sys.path.insert(0, %r); from npulaunch import session; "
        "os.environ['NPULAUNCH_SESSION_OPTIONS'] = '{\"hcom_parallel\": true}'; print(session.options())" % str(ROOT)
    )
    env = {"PYTHONPATH": str(HOST / "inject"), "PATH": "/usr/bin:/bin"}
    result = subprocess.run([interpreter, "-c", code], capture_output=True, text=True, env=env, timeout=60)
    assert result.returncode == 0, result.stderr
    assert result.stdout.strip() == "{'hcom_parallel': True}"
