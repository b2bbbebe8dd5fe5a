"""The package's stages, read from the source (ast, every import at any depth, ``if TYPE_CHECKING:``
included): host < config < plan < diagnose < {launch, views} < cli/command/__main__/session; a stage imports
only itself and the stages below it, and launch and views do not import each other."""

from __future__ import annotations

from pathlib import Path
from typing import Optional

import pytest
from helpers import PACKAGE, imports_of, module_name, package_sources

# the rank of each stage; "init" is npulaunch/__init__.py (import-free: anyone may import it)
RANK = {"init": -1, "host": 0, "config": 1, "plan": 2, "diagnose": 3, "launch": 4, "views": 4, "top": 5}
# the public face: the command line (its entry point and code cache), ``python -m``, the scripts' import
TOP = ("cli", "cliargs", "command", "codecache", "dropin", "msrunflags", "__main__", "session")


def stage_of(module: str) -> Optional[str]:
    """The stage a module of npulaunch belongs to; "init" for the package itself and its attributes
    (``from npulaunch import __version__``); the bare name when it belongs to no stage; None when the
    module is not npulaunch's."""
    parts = module.split(".")
    if parts[0] != "npulaunch":
        return None
    if len(parts) == 1 or not ((PACKAGE / parts[1]).is_dir() or (PACKAGE / f"{parts[1]}.py").is_file()):
        return "init"
    return "top" if parts[1] in TOP else parts[1]


def violation(importer: str, imported: str) -> str:
    """Why module ``importer`` may not import ``imported`` ("" when it may)."""
    source, target = stage_of(importer), stage_of(imported)
    if target is None or target == source or target == "init":
        return ""
    for stage in (source, target):
        if stage not in RANK:
            return f"npulaunch.{stage} belongs to no stage (add it to RANK in tests/test_layering.py)"
    assert source is not None and target is not None
    if {source, target} == {"launch", "views"}:
        return "launch and views must not import each other"
    if RANK[target] < RANK[source]:
        return ""
    return f"{source} may import only itself and the stages below it, not {target}"


def test_every_part_of_the_package_has_a_stage() -> None:
    parts = {p.relative_to(PACKAGE).parts[0].removesuffix(".py") for p in package_sources()}
    unstaged = sorted(part for part in parts - {"__init__"} if stage_of(f"npulaunch.{part}") not in RANK)
    assert not unstaged, f"parts of npulaunch in no stage: {unstaged}"


def test_each_stage_imports_only_itself_and_the_stages_below() -> None:
    problems = {}  # (where, module) -> line; ``from X import Y`` is reported once, as X, when X is wrong
    for source in package_sources():
        importer = module_name(source)
        for found in imports_of(source):
            if any(where == found.where and found.module.startswith(module + ".") for where, module in problems):
                continue
            why = violation(importer, found.module)
            if why:
                problems[found.where, found.module] = f"{found.where}: {importer} imports {found.module}: {why}"
    if problems:
        pytest.fail("imports against the stage order:\n" + "\n".join(problems.values()), pytrace=False)


@pytest.mark.parametrize(
    "importer, imported, allowed",
    [
        ("npulaunch.plan.build", "npulaunch.config.cluster", True),
        ("npulaunch.plan.build", "npulaunch.plan.rankenv", True),
        ("npulaunch.plan.build", "npulaunch.host.spec.HostPlan", True),
        ("npulaunch.diagnose.report", "npulaunch.plan.build", True),
        ("npulaunch.launch.supervisor", "npulaunch.diagnose.rootcause", True),
        ("npulaunch.cli", "npulaunch.views.console", True),
        ("npulaunch.session", "npulaunch.host.session", True),
        ("npulaunch.host.spec", "npulaunch", True),
        ("npulaunch.host.spec", "npulaunch.__version__", True),
        ("npulaunch.config.checker", "yaml", True),
        ("npulaunch.config.checker", "npulaunch.plan.build", False),
        ("npulaunch.host.spec", "npulaunch.config.cluster", False),
        ("npulaunch.plan.build", "npulaunch.diagnose.report", False),
        ("npulaunch.launch.supervisor", "npulaunch.views.console", False),
        ("npulaunch.views.jobview", "npulaunch.launch.jobdir", False),
        ("npulaunch.views.jobview", "npulaunch.cli", False),
        ("npulaunch.launch.job", "npulaunch.session", False),
    ],
)
def test_the_stage_rule(importer: str, imported: str, allowed: bool) -> None:
    assert (violation(importer, imported) == "") is allowed


def test_imports_are_found_at_any_depth(tmp_path: Path) -> None:
    source = tmp_path / "probe.py"
    source.write_text(
        "from __future__ import annotations\nfrom typing import TYPE_CHECKING\n"
        "if TYPE_CHECKING:\n    from ..views.console import Console\n"
        "def later():\n    from . import jobdir\n    import npulaunch.cli\n"
    )
    found = {(f.where.rsplit(":", 1)[1], f.module, f.in_function) for f in imports_of(source, "npulaunch.launch.probe")}
    assert {
        ("4", "npulaunch.views.console", False),
        ("6", "npulaunch.launch.jobdir", True),
        ("7", "npulaunch.cli", True),
    } <= found, found
