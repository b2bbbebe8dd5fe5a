"""Ask this host's NPU tools what they have: devices (``npu-smi info``) and NPU NIC addresses
(``hccn_tool -i <id> -ip -g``).

``parse_*`` are pure and read the tools' documented text formats; ``discover_*`` run the tools
through an injectable runner. Used by the plan only for ``devices: all`` and rank-table IPs.
"""

from __future__ import annotations

import re
import shutil
from dataclasses import dataclass
from typing import Callable, List, Optional, Sequence, Tuple

from npulaunch.host.errors import PlanError

Runner = Callable[[Sequence[str]], str]
TOOL_TIMEOUT_S = 20.0

# "| 0     910B2C              | OK            | 86.8        35     ..." (one per NPU card)
_NPU_ROW = re.compile(r"^\|\s*(\d+)\s+(\S+)\s*\|\s*([A-Za-z]+)\s*\|")
# "| 0                         | 0000:66:00.0  | 0           0    / 0 ..." (one per chip)
_CHIP_ROW = re.compile(r"^\|\s*(\d+)\s*\|\s*([0-9A-Fa-f]{4,8}:[0-9A-Fa-f]{2}:[0-9A-Fa-f]{2}\.[0-7])\s*\|")
_IPADDR = re.compile(r"^\s*ipaddr\s*:\s*(\d{1,3}(?:\.\d{1,3}){3})\s*$", re.MULTILINE)


@dataclass(frozen=True)
class NpuChip:
    """One chip as ``npu-smi info`` lists it; chips get logical ids 0..N-1 in listing order."""

    logical_id: int
    npu_id: int
    chip_id: int
    name: str
    health: str
    bus_id: str


def parse_npu_smi_info(text: str) -> Tuple[NpuChip, ...]:
    """Chips of the device table of ``npu-smi info`` (the process table after it is ignored)."""
    chips: List[NpuChip] = []
    card: Optional[Tuple[int, str, str]] = None
    for line in text.splitlines():
        if "Process id" in line:  # start of the process table
            break
        npu = _NPU_ROW.match(line)
        if npu and "Bus-Id" not in line:
            card = (int(npu.group(1)), npu.group(2), npu.group(3))
            continue
        chip = _CHIP_ROW.match(line)
        if chip and card is not None:
            chips.append(NpuChip(len(chips), card[0], int(chip.group(1)), card[1], card[2], chip.group(2)))
    return tuple(chips)


def parse_hccn_ip(text: str) -> Optional[str]:
    """The address in ``hccn_tool -i N -ip -g`` output (``ipaddr:192.168.100.101``), if any."""
    match = _IPADDR.search(text)
    return match.group(1) if match else None


def run_tool(argv: Sequence[str]) -> str:
    """Run a vendor tool and return its stdout; raise PlanError with its own words on failure."""
    import subprocess

    try:
        done = subprocess.run(list(argv), capture_output=True, text=True, timeout=TOOL_TIMEOUT_S, check=False)
    except FileNotFoundError:
        raise PlanError(f"{argv[0]} not found on PATH") from None
    except subprocess.TimeoutExpired:
        raise PlanError(f"{' '.join(argv)} did not answer within {TOOL_TIMEOUT_S:g} s") from None
    if done.returncode != 0:
        detail = (done.stderr or done.stdout).strip().splitlines()
        raise PlanError(f"{' '.join(argv)} exited with {done.returncode}: {detail[-1] if detail else 'no output'}")
    return done.stdout


def discover_devices(runner: Runner = run_tool) -> Tuple[NpuChip, ...]:
    """The chips of this host, or PlanError saying why they cannot be known."""
    if runner is run_tool and shutil.which("npu-smi") is None:
        raise PlanError(
            "devices: all needs npu-smi to list this host's NPUs, and npu-smi is not on PATH; "
            "list the devices (devices: [0, 1, 2, 3]) or give a count (--nproc-per-node 4)"
        )
    chips = parse_npu_smi_info(runner(["npu-smi", "info"]))
    if not chips:
        raise PlanError("npu-smi info listed no NPU chips; list the devices in the YAML instead")
    return chips


USABLE_HEALTH = ("OK", "Warning")


def discover_usable_devices(runner: Runner = run_tool) -> Tuple[int, ...]:
    """Logical ids for ``devices: all``; refuses when npu-smi reports a chip as unusable, since a
    rank on it would fail after the others had started."""
    chips = discover_devices(runner)
    bad = [c for c in chips if c.health not in USABLE_HEALTH]
    if bad:
        listed = ", ".join(f"device {c.logical_id} (NPU {c.npu_id}) health {c.health}" for c in bad)
        raise PlanError(f"npu-smi info reports {listed}; list the healthy devices explicitly")
    return tuple(c.logical_id for c in chips)


def discover_device_ips(device_ids: Sequence[int], runner: Runner = run_tool) -> Optional[Tuple[str, ...]]:
    """NPU NIC addresses from hccn_tool, or None when hccn_tool is absent or silent for a device."""
    if runner is run_tool and shutil.which("hccn_tool") is None:
        return None
    ips = []
    for device in device_ids:
        try:
            ip = parse_hccn_ip(runner(["hccn_tool", "-i", str(device), "-ip", "-g"]))
        except PlanError:
            return None
        if ip is None:
            return None
        ips.append(ip)
    return tuple(ips)


def free_loopback_ports(count: int) -> Tuple[int, ...]:
    """``count`` distinct TCP ports free on 127.0.0.1 right now (the kernel picks them)."""
    import socket

    sockets = []
    try:
        for _ in range(count):
            sock = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
            sock.bind(("127.0.0.1", 0))
            sockets.append(sock)
        return tuple(sock.getsockname()[1] for sock in sockets)
    finally:
        for sock in sockets:
            sock.close()
