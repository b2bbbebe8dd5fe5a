"""What a host has, asked by the launcher's preflight before anything starts: the python version,
the clock, the working directory and the command's script, free disk for the job directory, the
NPUs ``npu-smi info`` lists (by physical id), the ASCEND_VISIBLE_DEVICES / ASCEND_RT_VISIBLE_DEVICES
the ranks would inherit there and, when the rank table needs them, the NPU NIC addresses
``hccn_tool -i <id> -ip -g`` reports. Runs inside the remote agent (standard library only).

With a ``health`` question it also gathers the NPU health, NIC, version and HCCL host facts
(host/health/gather.py); a second round asks only ``ping`` (NPU-to-NPU pings to other hosts' NPUs).
The probe only gathers facts; the launcher judges them (plan/checks/remote.py, plan/checks/health.py), so
every host's problems can be reported together in one place.
"""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
import time
from typing import Any, Dict, List, Optional

from npulaunch.host.discovery import (
    CONTAINER_VISIBLE_VAR,
    RT_VISIBLE_VAR,
    TOOL_TIMEOUT_S,
    NpuChip,
    parse_hccn_ip,
    parse_npu_smi_info,
    physical_ids,
)
from npulaunch.host.health import gather as health
from npulaunch.host.topology import read_host_cpus


def _tool(argv: List[str]) -> str:
    done = subprocess.run(
        argv, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, universal_newlines=True, timeout=TOOL_TIMEOUT_S
    )
    if done.returncode != 0:
        lines = done.stdout.strip().splitlines()
        raise RuntimeError(f"{' '.join(argv)} exited with {done.returncode}: {lines[-1] if lines else 'no output'}")
    return done.stdout


def probe(ask: Dict[str, Any]) -> Dict[str, Any]:
    """``ask``: workdir, script (or None), program, job_dir, devices (ids, or None for all),
    need_ips, health (optional, see health.gather); or only ``ping`` (see health.pings). Everything
    found is plain JSON."""
    if "ping" in ask:
        return {"ping": health.pings(ask["ping"]), "time": time.time()}
    workdir = ask["workdir"]
    script = ask.get("script")
    found: Dict[str, Any] = {
        "python": list(sys.version_info[:3]),
        "time": time.time(),
        "workdir": os.path.isdir(workdir),
        "script": script is None or os.path.isfile(os.path.join(workdir, script)),
        "program": os.sep in ask["program"] or shutil.which(ask["program"]) is not None,
        "free_bytes": shutil.disk_usage(_existing_parent(ask["job_dir"])).free,
        "npus": None,
        "device_ips": None,
        # the ranks inherit the agent's environment: these decide their ASCEND_DEVICE_ID (plan/hosts.py)
        "visible": {name: os.environ.get(name) for name in (CONTAINER_VISIBLE_VAR, RT_VISIBLE_VAR)},
        "errors": [],
    }
    chips: List[NpuChip] = []
    ids: List[int] = []
    smi_text: Optional[str] = None
    if shutil.which("npu-smi"):
        try:
            smi_text = _tool(["npu-smi", "info"])
            chips = list(parse_npu_smi_info(smi_text))
            ids = list(physical_ids(chips, os.environ.get(CONTAINER_VISIBLE_VAR)))
            found["npus"] = [[device, c.health] for device, c in zip(ids, chips)]
        except (OSError, RuntimeError, subprocess.SubprocessError) as exc:
            smi_text = None
            found["errors"].append(f"npu-smi info: {exc}")
    devices = ask.get("devices")
    if devices is None and found["npus"] is not None:
        devices = [chip[0] for chip in found["npus"]]
    if ask.get("health") is not None:
        found["health"] = health.gather(dict(ask["health"], devices=devices or []), chips, ids, smi_text, os.environ)
    # job.cpu_binding: the CPUs the agent may use and the NUMA nodes (host/topology.py; file reads only)
    found["cpu_topology"] = read_host_cpus(npus=False).to_dict()
    if ask.get("need_ips"):
        nics = (found.get("health") or {}).get("nics") or {}
        if nics:  # the health check asked already (within its time limits): not twice
            found["device_ips"] = {str(d): (nics.get(str(d)) or {}).get("ip") for d in devices or []}
        else:
            found["device_ips"] = _device_ips(devices or [], found["errors"])
    return found


def _device_ips(devices: List[int], errors: List[str]) -> Optional[Dict[str, Optional[str]]]:
    """Device id -> address; None when hccn_tool is absent."""
    if not shutil.which("hccn_tool"):
        return None
    ips: Dict[str, Optional[str]] = {}
    for device in devices:
        try:
            ips[str(device)] = parse_hccn_ip(_tool(["hccn_tool", "-i", str(device), "-ip", "-g"]))
        except (OSError, RuntimeError, subprocess.SubprocessError) as exc:
            ips[str(device)] = None
            errors.append(str(exc))
    return ips


def _existing_parent(path: str) -> str:
    while path and not os.path.exists(path):
        path = os.path.dirname(path)
    return path or "/"
