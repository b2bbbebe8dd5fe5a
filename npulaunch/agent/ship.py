"""Package the agent for a host that has nothing but ``python3``: a zip application holding the
standard-library-only part of npulaunch (agent, spec, events, monitoring, the rank-side helper
and its injection hook). ``python3 agent.pyz`` runs the remote agent. Built by the launcher;
never imported on compute hosts.
"""

from __future__ import annotations

import os
import zipfile
from typing import List

PACKAGE = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
# What runs beside the ranks: the standard-library-only modules, nothing that needs yaml or psutil.
SHIPPED = ["__init__.py", "spec.py", "events.py", "session.py", "signatures.py", "watchdog.py",
           "agent/__init__.py", "agent/agent.py", "agent/guard.py", "agent/inbox.py", "agent/monitor.py",
           "agent/procs.py", "agent/remote.py", "agent/tail.py", "inject/sitecustomize.py"]
MAIN = "import sys\nfrom npulaunch.agent.remote import main\nsys.exit(main())\n"


def build_agent_zip(path: str) -> List[str]:
    """Write the zip application to ``path`` (mode 0600); return the files it holds."""
    names = []
    fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o600)
    with os.fdopen(fd, "wb") as raw, zipfile.ZipFile(raw, "w", zipfile.ZIP_DEFLATED) as archive:
        archive.writestr("__main__.py", MAIN)
        for relative in SHIPPED:
            archive.write(os.path.join(PACKAGE, relative), "npulaunch/" + relative)
            names.append("npulaunch/" + relative)
    return names
