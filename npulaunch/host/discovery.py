"""Ask this host's NPU tools what they have: devices, the processes holding them and the driver version
(``npu-smi info``) and NPU NIC addresses (``hccn_tool -i <id> -ip -g``); read the two variables that
decide which devices a process sees (``ASCEND_VISIBLE_DEVICES``, ``ASCEND_RT_VISIBLE_DEVICES``).

``parse_*`` are pure and read the tools' documented text formats; ``discover_*`` run the tools
through an injectable runner. Used by the plan for ``devices: all``, rank-table IPs and the
physical -> logical -> ASCEND_DEVICE_ID mapping (plan/hosts.py), and by a remote host's probe.
"""

from __future__ import annotations

import re
import shutil
from dataclasses import dataclass
from typing import Callable, List, Mapping, Optional, Sequence, Tuple

from npulaunch.host.errors import PlanError
from npulaunch.host.lazyre import lazy_re

Runner = Callable[[Sequence[str]], str]
TOOL_TIMEOUT_S = 20.0

# "| 0     910B2C              | OK            | 86.8        35     ..." (one per NPU card)
_NPU_ROW = lazy_re(r"^\|\s*(\d+)\s+(\S+)\s*\|\s*([A-Za-z]+)\s*\|")
# "| 0                         | 0000:66:00.0  | 0           0    / 0 ..." (one per chip); Atlas A3's
# npu-smi adds a Phy-ID column after the chip ("| 1     1                   | 0000:9F:00.0 ..."), its two
# dies being two devices (vllm-project/vllm-ascend issue 2035, npu-smi 24.1.rc3.7)
_CHIP_ROW = lazy_re(r"^\|\s*(\d+)(?:\s+(\d+))?\s*\|\s*([0-9A-Fa-f]{4,8}:[0-9A-Fa-f]{2}:[0-9A-Fa-f]{2}\.[0-7])\s*\|")
_IPADDR = lazy_re(r"^\s*ipaddr\s*:\s*(\d{1,3}(?:\.\d{1,3}){3})\s*$", re.MULTILINE)


@dataclass(frozen=True)
class NpuChip:
    """One chip as ``npu-smi info`` lists it; chips get logical ids 0..N-1 in listing order."""

    logical_id: int
    npu_id: int
    chip_id: int
    name: str
    health: str
    bus_id: str
    phy_id: Optional[int] = None  # the Phy-ID column (Atlas A3), else not shown


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
            phy = None if chip.group(2) is None else int(chip.group(2))
            chips.append(NpuChip(len(chips), card[0], int(chip.group(1)), card[1], card[2], chip.group(3), phy))
    return tuple(chips)


@dataclass(frozen=True)
class NpuProcess:
    """One row of the process table after ``npu-smi info``'s device table: a process holding a chip."""

    npu_id: int
    chip_id: int
    pid: int
    name: str  # empty for a process in another container (vllm-project/vllm-ascend issue 6512)


# "| 2       0                 | 1333928       |                          | 37709                   |" (NPU, Chip,
# pid, name, memory; npu-smi 25.2.0, vllm-project/vllm-ascend issue 6512), also with a trailing
# "| NA |" column "Process id in container" (npu-smi 26.0.rc2, vllm-ascend issue 12980); Ascend 950's
# table has one "NPU ID" column and no chip (hicann/driver docs/en/Ascend_950_npu-smi querying-basic-information.md)
_PROCESS_ROW = lazy_re(r"^\|\s*(\d+)(?:\s+(\d+))?\s*\|\s*(\d+)\s*\|([^|]*)\|")
# "| npu-smi 25.2.0                   Version: 25.2.0      |": the driver version after "Version:"
_SMI_VERSION = lazy_re(r"^\|\s*npu-smi\s+\S+\s+Version:\s*(\S+)", re.MULTILINE)


def parse_npu_smi_processes(text: str) -> Tuple[NpuProcess, ...]:
    """The process table of ``npu-smi info`` ("No running processes found in NPU N" rows list nothing)."""
    processes: List[NpuProcess] = []
    in_table = False
    for line in text.splitlines():
        if "Process id" in line:
            in_table = True
            continue
        match = _PROCESS_ROW.match(line) if in_table else None
        if match:
            chip = int(match.group(2)) if match.group(2) is not None else 0
            processes.append(NpuProcess(int(match.group(1)), chip, int(match.group(3)), match.group(4).strip()))
    return tuple(processes)


def parse_npu_smi_version(text: str) -> Optional[str]:
    """The driver version in the header of ``npu-smi info`` (``Version: 23.0.rc3``), if shown."""
    match = _SMI_VERSION.search(text)
    return match.group(1) if match else None


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


def discover_usable_devices(runner: Runner = run_tool, environ: Optional[Mapping[str, str]] = None) -> Tuple[int, ...]:
    """Physical ids for ``devices: all`` (see physical_ids); refuses when npu-smi reports a chip as
    unusable, since a rank on it would fail after the others had started."""
    import os

    chips = discover_devices(runner)
    ids = physical_ids(chips, (os.environ if environ is None else environ).get(CONTAINER_VISIBLE_VAR))
    bad = [(c, p) for c, p in zip(chips, ids) if c.health not in USABLE_HEALTH]
    if bad:
        listed = ", ".join(f"device {p} (NPU {c.npu_id}) health {c.health}" for c, p in bad)
        raise PlanError(f"npu-smi info reports {listed}; list the healthy devices explicitly")
    return ids


# --- which devices a process sees

CONTAINER_VISIBLE_VAR = "ASCEND_VISIBLE_DEVICES"
RT_VISIBLE_VAR = "ASCEND_RT_VISIBLE_DEVICES"
# Ascend Docker Runtime's device names: "Ascend910-3", "npu-3" (Ascend/mind-cluster
# component/ascend-docker-runtime/runtime/process/process.go @ 22bb3d9, deviceRegx)
_DEVICE_NAME = lazy_re(r"^(?:Ascend(?:910|310B|310P|310)|npu)-(\d+)$")


def physical_ids(chips: Sequence[NpuChip], container_visible: Optional[str]) -> Tuple[int, ...]:
    """The physical id (/dev/davinci<N>, the rank table's device_id) of each chip npu-smi lists.

    Inside a container started by Ascend Docker Runtime, ASCEND_VISIBLE_DEVICES lists the physical
    ids mounted; the chips are taken to be those in ascending order (the runtime numbers the
    mounted devices 0..k-1; that it does so in ascending physical order is an assumption no source
    confirms, so the plan shows the mapping). Otherwise npu-smi's Phy-ID column (Atlas A3), else the
    listing order (outside a container logical and physical ids coincide)."""
    mounted = parse_container_visible_devices(container_visible) if container_visible else None
    if mounted and len(mounted) == len(chips):
        return mounted
    if chips and all(c.phy_id is not None for c in chips):
        return tuple(int(c.phy_id or 0) for c in chips)
    return tuple(c.logical_id for c in chips)


def parse_container_visible_devices(text: str) -> Optional[Tuple[int, ...]]:
    """The physical ids Ascend Docker Runtime mounts for ``ASCEND_VISIBLE_DEVICES`` (ascending, each
    once), or None when the value is not in its format: ids and ranges ("0-2,5"), or names
    ("Ascend910-0,Ascend910-1"); "void" mounts none (process.go @ 22bb3d9: checkVisibleDevice,
    parseDevices, getDeviceListFromVisibleValue, parseAscendDevices). The runtime mounts each
    /dev/davinci<N> at the same path inside the container (getMountPath)."""
    text = text.strip()
    if text in ("", "void"):
        return ()
    ids: List[int] = []
    named = "Ascend" in text or "npu" in text
    for item in text.split(","):
        item = item.strip()
        if named:
            match = _DEVICE_NAME.match(item)
            if match is None:
                return None
            ids.append(int(match.group(1)))
            continue
        low, _, high = item.partition("-")
        if not low.strip().isdigit() or (high and not high.strip().isdigit()):
            return None
        first, last = int(low), int(high or low)
        if first > last:
            return None
        ids.extend(range(first, last + 1))
    return tuple(sorted(set(ids)))


_RT_ACCEPTED = lazy_re(r"^(\d+(?:,\d+)*),?")


def parse_rt_visible_devices(text: str) -> Tuple[Tuple[int, ...], str]:
    """``(ids, problem)`` for ``ASCEND_RT_VISIBLE_DEVICES``: the logical ids the CANN runtime makes
    visible, in order (a process then addresses them as 0..k-1), and, when the runtime would not
    take the value as written, why ("" otherwise).

    The runtime's own reading (hicann/runtime src/runtime/core/src/runtime.cc @ 681ef76,
    SplitString and Runtime::GetVisibleDevices): ids separated by single commas; it stops at the
    first other character (" " in "1, 2,3": only 1); a value not starting with a digit, or ids out
    of ascending order, or a duplicate make no device visible at all (aclrtGetDeviceCount fails
    with EE2002). Ids beyond the machine's device count also stop it; that count is not known here.
    docs/zh/env_vars/ASCEND_RT_VISIBLE_DEVICES.md: logical ids, ascending, a trial variable."""
    match = _RT_ACCEPTED.match(text)
    if match is None:
        return (), (
            f"{text!r} does not start with a digit: the CANN runtime then makes no device visible "
            "(aclrtGetDeviceCount fails with EE2002)"
        )
    ids = tuple(int(token) for token in match.group(1).split(","))
    for index in range(1, len(ids)):
        if ids[index] == ids[index - 1] or ids[index] in ids[:index]:
            return (
                (),
                f"{text!r} lists device {ids[index]} twice: the CANN runtime then makes no device visible (EE2002)",
            )
        if ids[index] < ids[index - 1]:
            return (), (
                f"{text!r} is not in ascending order: the CANN runtime then makes no device visible "
                "(EE2002, 'configured in ascending order')"
            )
    rest = text[match.end() :]
    if rest:
        shown = ",".join(str(i) for i in ids)
        return ids, (
            f"the CANN runtime reads only {shown} of {text!r}: it stops at {rest[0]!r} "
            "(only digits and single commas are read)"
        )
    return ids, ""


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
    """``count`` distinct TCP ports free on this host right now, below the kernel's ephemeral range: a rank
    binds its port seconds later, and a port from that range may meanwhile be taken by any outgoing
    connection (the ranks' own among them); the kernel's pick (port 0) when too few are free below it."""
    import random
    import socket

    low = _ephemeral_low()
    candidates = list(range(max(1024, low - 12000), low))
    random.shuffle(candidates)
    found: List[int] = []
    for port in candidates:
        if len(found) == count:
            break
        with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as sock:
            try:
                sock.bind(("0.0.0.0", port))
            except OSError:
                continue
        found.append(port)
    if len(found) == count:
        return tuple(found)
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


def _ephemeral_low() -> int:
    """The first port of the kernel's ephemeral range (ip_local_port_range; Linux's default 32768)."""
    try:
        with open("/proc/sys/net/ipv4/ip_local_port_range") as f:
            return max(2048, int(f.read().split()[0]))
    except (OSError, ValueError, IndexError):
        return 32768
