"""npulaunch/codecache.py: dataclasses' generated code compiled once and reused, with the same
classes as without it; installed by the command only."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path
from typing import List

DEFINE = """
import dataclasses, sys
from npulaunch import codecache
codecache._path = sys.argv[1] + ".%s"
codecache.install()
cache = dataclasses.exec.__self__

@dataclasses.dataclass(frozen=True)
class Point:
    x: int
    y: int = 2

p = Point(1)
assert (p, repr(p), hash(p) == hash(Point(1, 2))) == (Point(1, 2), "Point(x=1, y=2)", True)
try:
    p.x = 5
except dataclasses.FrozenInstanceError:
    pass
else:
    raise SystemExit("not frozen")
print(cache.added, len(cache.known))
cache.save()
"""


def run(path: Path, **env: str) -> List[str]:
    environ = {k: v for k, v in os.environ.items() if k != "PYTHONDONTWRITEBYTECODE"}
    done = subprocess.run(
        [sys.executable, "-c", DEFINE, str(path)], capture_output=True, text=True, timeout=60, env={**environ, **env}
    )
    assert done.returncode == 0, done.stderr
    return done.stdout.split()


def test_the_second_run_compiles_nothing_and_gets_the_same_classes(tmp_path: Path) -> None:
    cache = tmp_path / "cache"
    added, known = run(cache)
    assert int(added) > 0 and int(known) == int(added)
    assert run(cache) == ["0", known]  # everything came from the file


def test_a_damaged_cache_is_ignored_and_replaced(tmp_path: Path) -> None:
    cache = tmp_path / "cache"
    tag = sys.implementation.cache_tag
    Path(f"{cache}.{tag}").write_bytes(b"\x00not marshal")
    added, _ = run(cache)
    assert int(added) > 0
    assert run(cache)[0] == "0"


def test_importing_npulaunch_does_not_install_it() -> None:
    code = "import dataclasses, npulaunch.session, npulaunch.cli; print(hasattr(dataclasses, 'exec'))"
    done = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=60)
    assert done.stdout.strip() == "False", done.stderr


def test_no_cache_is_written_where_no_bytecode_is(tmp_path: Path) -> None:
    cache = tmp_path / "cache"
    run(cache, PYTHONDONTWRITEBYTECODE="1")
    assert not list(tmp_path.iterdir())
