"""Preflight of every remote host, in parallel, before anything starts: python3 and its version,
the working directory and the command's script, the NPU count where npu-smi exists, free disk
for the job directory, and the clock against the launcher's. One SSH command per host runs a
small standard-library probe; every host's problems are reported together.
"""

from __future__ import annotations

import json
import shlex
import time
from concurrent.futures import ThreadPoolExecutor
from typing import Any, Dict, List, Tuple

from ..plan import LaunchPlan
from ..preflight import python_script

MIN_PYTHON = (3, 7)
MAX_CLOCK_SKEW_S = 2.0  # ranks' timestamps are compared when choosing the root cause
MIN_FREE_BYTES = 1 << 30

PROBE = r"""
import json, os, shutil, subprocess, sys, time
ask = json.loads(sys.argv[1])
out = {"python": list(sys.version_info[:3]), "time": time.time(), "workdir": os.path.isdir(ask["workdir"])}
script = ask.get("script")
out["script"] = script is None or os.path.isfile(os.path.join(ask["workdir"], script))
out["program"] = os.sep in ask["program"] or shutil.which(ask["program"]) is not None
path = ask["job_dir"]
while path and not os.path.exists(path):
    path = os.path.dirname(path)
out["free_bytes"] = shutil.disk_usage(path or "/").free
out["npus"] = None
if shutil.which("npu-smi"):
    try:
        text = subprocess.run(["npu-smi", "info"], stdout=subprocess.PIPE, universal_newlines=True, timeout=20).stdout
        out["npus"] = sum(1 for line in text.splitlines() if line.startswith("|") and "0000:" in line)
    except Exception as exc:
        out["npus_error"] = str(exc)
print(json.dumps(out))
"""


def _ask(plan: LaunchPlan, node_rank: int) -> Dict[str, Any]:
    spec = next(r for r in plan.ranks if r.node_rank == node_rank)
    return {"workdir": spec.cwd, "script": python_script(spec.argv), "program": spec.argv[0], "job_dir": plan.job_dir,
            "devices": sorted(r.device_id for r in plan.ranks if r.node_rank == node_rank)}


def check_host(connection: Any, plan: LaunchPlan, node_rank: int, python: str = "python3") -> Tuple[List[str], List[str]]:
    """``(problems, warnings)`` of one host."""
    host = plan.hosts[node_rank]
    ask = _ask(plan, node_rank)
    sent = time.time()
    result = connection.run(f"{shlex.quote(python)} -I -S -c {shlex.quote(PROBE)} {shlex.quote(json.dumps(ask))}",
                            hide=True, warn=True, in_stream=False)
    received = time.time()
    if result.exited != 0:
        detail = (result.stderr or result.stdout).strip().splitlines()
        return [f"{host}: {python} does not run ({detail[-1] if detail else 'exit ' + str(result.exited)})"], []
    try:
        found = json.loads(result.stdout.strip().splitlines()[-1])
    except (ValueError, IndexError):
        return [f"{host}: the preflight probe printed no answer"], []
    problems, warnings = [], []
    if tuple(found["python"][:2]) < MIN_PYTHON:
        problems.append(f"{host}: python3 is {'.'.join(map(str, found['python']))}; the agent needs 3.7 or newer")
    if not found["workdir"]:
        problems.append(f"{host}: working directory {ask['workdir']} does not exist")
    elif not found["script"]:
        problems.append(f"{host}: script {ask['script']} does not exist in {ask['workdir']}")
    if not found["program"]:
        problems.append(f"{host}: command {ask['program']!r} is not on the PATH")
    if found.get("npus") is not None and ask["devices"] and max(ask["devices"]) >= found["npus"]:
        problems.append(f"{host}: npu-smi lists {found['npus']} NPUs, the plan uses devices {ask['devices']}")
    skew = found["time"] - (sent + received) / 2
    if abs(skew) > MAX_CLOCK_SKEW_S + (received - sent) / 2:
        warnings.append(f"{host}: its clock is {skew:+.1f} s off the launcher's; root-cause ordering across "
                        "hosts relies on timestamps")
    if found["free_bytes"] < MIN_FREE_BYTES:
        warnings.append(f"{host}: only {found['free_bytes'] >> 20} MB free for {plan.job_dir}")
    return problems, warnings


def check_hosts(connections: Dict[str, Any], plan: LaunchPlan, parallel: int = 32,
                python: str = "python3") -> Tuple[List[str], List[str]]:
    """Every host's problems and warnings, checked in parallel."""
    with ThreadPoolExecutor(max_workers=max(1, min(parallel, len(plan.hosts)))) as pool:
        found = list(pool.map(lambda n: check_host(connections[plan.hosts[n]], plan, n, python),
                              range(len(plan.hosts))))
    return [p for ps, _ in found for p in ps], [w for _, ws in found for w in ws]
