"""The code ``dataclasses`` compiles for every class, cached between runs of the npulaunch command.

``@dataclass`` writes each class's methods (``__init__``, ``__repr__``, ``__eq__``, ...) as source text
and compiles it with ``exec`` every time the class is defined, which is every time the module is
imported: 39 classes and about 28 ms of a launch's 60 ms of imports went to compiling those few
hundred small functions (measured on the project's 2-core machine). Here ``dataclasses`` gets an
``exec`` of its own that runs the compiled code of a source text it has seen before (kept beside
the package's bytecode, in ``__pycache__``, like ``.pyc`` files) and compiles only what is new:
the same code, compiled once. Nothing else changes: ``exec(text)`` and ``exec(compile(text,
"<string>", "exec"))`` are the same. Installed by the command's entry point only (``npulaunch`` and
``python -m npulaunch``), never by ``import npulaunch``: a training script that imports
``npulaunch.session`` gets its interpreter as it was. A cache that cannot be read or written is
ignored; none is written under ``PYTHONDONTWRITEBYTECODE``, as no ``.pyc`` is.
"""

from __future__ import annotations

import atexit
import builtins
import dataclasses
import marshal
import os
import sys
from typing import Any, Dict, Optional

MAX_ENTRIES = 4000  # beyond, the file keeps only what the last run used
_path = os.path.join(os.path.dirname(os.path.abspath(__file__)), "__pycache__", "dataclasses.%s.marshal")


class _CodeCache:
    def __init__(self, path: str) -> None:
        self.path = path
        self.known: Dict[str, Any] = {}
        self.used: Dict[str, Any] = {}
        self.added = 0
        try:
            with open(path, "rb") as handle:
                # whole, then decoded: marshal.load(handle) reads the file object by object, 12 ms for
                # a 0.5 MB cache against 2 ms (measured on the project's 2-core machine)
                loaded = marshal.loads(handle.read())
            if isinstance(loaded, dict):
                self.known = loaded
        except (OSError, ValueError, EOFError, TypeError):
            pass

    def exec(self, source: Any, globals: Optional[Dict[str, Any]] = None, locals: Any = None) -> None:
        if isinstance(source, str):
            code = self.known.get(source)
            if code is None:
                code = self.known[source] = compile(source, "<string>", "exec")
                self.added += 1
            self.used[source] = code
            source = code
        builtins.exec(source, globals, locals)

    def save(self) -> None:
        if not self.added or sys.dont_write_bytecode:  # PYTHONDONTWRITEBYTECODE: no .pyc, no cache either
            return
        kept = self.known if len(self.known) <= MAX_ENTRIES else self.used
        temporary = "%s.%d.tmp" % (self.path, os.getpid())
        try:
            with open(temporary, "wb") as handle:
                marshal.dump(kept, handle)
            os.replace(temporary, self.path)  # whole or not at all: several launches may write at once
        except OSError:
            try:
                os.unlink(temporary)
            except OSError:
                pass


def install() -> None:
    """Give ``dataclasses`` the cached ``exec`` for the rest of this process (the launcher's)."""
    if getattr(dataclasses, "exec", None) is not None or sys.implementation.name != "cpython":
        return
    cache = _CodeCache(_path % sys.implementation.cache_tag)
    dataclasses.exec = cache.exec  # type: ignore[attr-defined]  # found before the builtin by name lookup
    atexit.register(cache.save)
