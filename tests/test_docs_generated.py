"""The generated reference pages (docs/reference/, by scripts/gen_docs.py) are what the code says today, and the
YAML reference's schema (npulaunch/config/schema.py) documents exactly the keys the config parsers accept."""

from __future__ import annotations

import importlib
import importlib.util
import subprocess
import sys
from pathlib import Path
from typing import Dict, Tuple

import pytest
from helpers import PACKAGE, ROOT, imports_of, module_name, package_sources

from npulaunch.config.schema import KEYS

GENERATOR = ROOT / "scripts" / "gen_docs.py"
REGENERATE = "python3 scripts/gen_docs.py"
# each parser's tuple of accepted keys (by name, wherever in npulaunch/config/ it lives) -> its YAML path
SECTIONS = {
    "TOP_KEYS": "",
    "JOB_KEYS": "job",
    "HOST_KEYS": "hosts[]",
    "SSH_KEYS": "ssh",
    "MPI_KEYS": "mpi",
    "RECOVERY_KEYS": "recovery",
    "SHRINK_KEYS": "recovery.shrink",
    "MONITOR_KEYS": "monitor",
    "PATTERN_KEYS": "monitor.patterns[]",
    "STRAGGLER_KEYS": "monitor.stragglers",
    "SLURM_KEYS": "slurm",
    "FRAMEWORK_KEYS": "framework",
}


def _generator():
    spec = importlib.util.spec_from_file_location("gen_docs", GENERATOR)
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def test_generated_pages_are_fresh() -> None:
    done = subprocess.run(
        [sys.executable, str(GENERATOR), "--check"], cwd=ROOT, capture_output=True, text=True, timeout=120
    )
    assert done.returncode == 0, f"stale generated docs (regenerate with `{REGENERATE}`):\n{done.stderr}"


def test_the_check_names_a_stale_page(tmp_path: Path) -> None:
    generator = _generator()
    for name, render in generator.PAGES.items():
        page = tmp_path / generator.REFERENCE / name
        page.parent.mkdir(parents=True, exist_ok=True)
        page.write_text(render(), encoding="utf-8")
    assert generator.stale_pages(tmp_path) == []
    cli = tmp_path / generator.REFERENCE / "cli.md"
    cli.write_text(cli.read_text(encoding="utf-8").replace("ranks per host", "ranks per node"), encoding="utf-8")
    (tmp_path / generator.REFERENCE / "codes.md").unlink()
    assert generator.stale_pages(tmp_path) == ["docs/reference/cli.md", "docs/reference/codes.md"]


def test_pages_start_by_saying_they_are_generated() -> None:
    for name in _generator().PAGES:
        first = (ROOT / "docs" / "reference" / name).read_text(encoding="utf-8").splitlines()[0]
        assert first.startswith("Generated: by scripts/gen_docs.py") and "Do not edit by hand" in first, name


def _parser_keys() -> Dict[str, Tuple[str, ...]]:
    """Every ``*_KEYS`` tuple of strings defined in a module of npulaunch/config/, by name."""
    found: Dict[str, Tuple[str, ...]] = {}
    for path in package_sources(PACKAGE / "config"):
        module = importlib.import_module(module_name(path))
        for name, value in vars(module).items():
            if not name.endswith("_KEYS") or not isinstance(value, tuple):
                continue
            if all(isinstance(item, str) for item in value):
                assert found.get(name, value) == value, f"two different {name} in npulaunch/config/"
                found[name] = value
    return found


def test_every_parser_keys_tuple_has_a_yaml_section() -> None:
    unmapped = sorted(set(_parser_keys()) - set(SECTIONS))
    assert not unmapped, (
        f"{unmapped}: add each to SECTIONS in tests/test_docs_generated.py (the YAML path its keys live under), "
        "and its keys to npulaunch/config/schema.py"
    )


def test_schema_documents_exactly_the_keys_the_parsers_accept() -> None:
    tuples = _parser_keys()
    missing_tuples = sorted(set(SECTIONS) - set(tuples))
    assert not missing_tuples, f"no such tuple in npulaunch/config/ any more: {missing_tuples}"
    accepted = {f"{SECTIONS[name]}.{key}".lstrip(".") for name, keys in tuples.items() for key in keys}
    documented = [key.path for key in KEYS]
    assert len(documented) == len(set(documented)), "a key documented twice in npulaunch/config/schema.py"
    undocumented = sorted(accepted - set(documented))
    assert not undocumented, f"accepted but not in npulaunch/config/schema.py: {undocumented}; then `{REGENERATE}`"
    unknown = sorted(set(documented) - accepted)
    assert not unknown, f"in npulaunch/config/schema.py but no parser accepts them: {unknown}"


@pytest.mark.parametrize("field", ["type", "allowed", "description"])
def test_every_key_says_its_type_allowed_values_and_meaning(field: str) -> None:
    assert [k.path for k in KEYS if not getattr(k, field).strip()] == []


def test_nothing_in_the_package_imports_the_schema() -> None:
    importers = [
        found.where
        for path in package_sources()
        if path.name != "schema.py"
        for found in imports_of(path)
        if found.module == "npulaunch.config.schema"
    ]
    assert importers == [], "the schema is for the docs only: keep it out of the command's imports"
