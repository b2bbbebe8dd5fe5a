"""Package the agent for a host that has nothing but ``python3``: a zip application holding
``npulaunch/host/`` whole (the agent, the rank-side helper and its injection hook, and what they
share with the launcher) and the package's import-free ``__init__``. ``python3 agent.pyz`` runs
the remote agent. Built by the launcher; never imported on compute hosts.
"""

from __future__ import annotations

import importlib.util
import io
import marshal
import os
import zipfile
from typing import List

_UNCHECKED_HASH = (1).to_bytes(4, "little")  # PEP 552 flags: hash-based, not checked against the source
PACKAGE = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))  # npulaunch/
HOST = os.path.join(PACKAGE, "host")


def shipped_files() -> List[str]:
    """What goes to a compute host, relative to ``npulaunch/``: every source file of ``host/``
    (found, not listed: a module added there ships without anyone keeping a list)."""
    found = ["__init__.py"]
    for directory, subdirs, files in os.walk(HOST):
        subdirs[:] = sorted(d for d in subdirs if d != "__pycache__")
        relative = os.path.relpath(directory, PACKAGE)
        found.extend(os.path.join(relative, name) for name in sorted(files) if name.endswith(".py"))
    return found


# Valid in any Python: an interpreter too old for the agent says so as a probe answer, which the
# launcher's preflight reports, instead of dying on a syntax error.
MAIN = """import sys
if sys.version_info < (3, 7):
    sys.stdout.write('{"type": "probe", "python": [%d, %d, %d]}\\n' % tuple(sys.version_info[:3]))
    sys.exit(3)
from npulaunch.host.agent.remote import main
sys.exit(main())
"""


def agent_zip() -> bytes:
    """The zip application, in memory (it travels on the SSH channel's stdin).

    Beside each module goes its bytecode for the launcher's Python (unchecked-hash .pyc, which
    zipimport reads before the source): a host with the same Python skips compiling the agent,
    which is most of its start-up; any other Python ignores it and compiles the source."""
    buffer = io.BytesIO()
    with zipfile.ZipFile(buffer, "w", zipfile.ZIP_DEFLATED) as archive:
        archive.writestr("__main__.py", MAIN)
        for relative in shipped_files():
            with open(os.path.join(PACKAGE, relative), "rb") as source:
                text = source.read()
            archive.writestr("npulaunch/" + relative, text)
            code = compile(text, "npulaunch/" + relative, "exec", dont_inherit=True)
            archive.writestr(
                "npulaunch/" + relative + "c",
                importlib.util.MAGIC_NUMBER + _UNCHECKED_HASH + importlib.util.source_hash(text) + marshal.dumps(code),
            )
    return buffer.getvalue()


def build_agent_zip(path: str) -> List[str]:
    """Write the zip application to ``path`` (mode 0600); return the files it holds."""
    fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o600)
    with os.fdopen(fd, "wb") as out:
        out.write(agent_zip())
    return ["npulaunch/" + relative for relative in shipped_files()]
