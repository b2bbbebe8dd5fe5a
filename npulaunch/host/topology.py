"""The CPUs near each NPU of a host, and the CPUs each rank is bound to (``job.cpu_binding``).

Facts are read on the host itself (``read_host_cpus``): the CPUs this process may use (its affinity;
under Slurm the job's cpuset), each NUMA node's CPUs, and each NPU's node: its PCIe bus id from
``npu-smi info`` to ``/sys/bus/pci/devices/<bus>/numa_node``, or, where sysfs does not say, the
"CPU Affinity" column of ``npu-smi info -t topo``. The decision (``assign_cpus``) is pure: the plan
makes it with the facts of this host and of probed hosts (their probe sends the allowed CPUs and the
nodes, which is enough for blocks and a mapping), the agent on its own host when the plan had no facts
of it or, for auto, not the NPUs' places (npu-smi runs there only then). Standard library only,
Python 3.7+.

Sources (details in the project's facts notes):
- ``npu-smi info -t topo`` "queries the CPU/NPU affinity and the topology between NPUs" (hiascend npu-smi
  reference, "查询多NPU的拓扑结构", npusmi_069); its "CPU Affinity" is the CPUs of the NUMA node the NPU
  is affine to (hiascend MindX DL toolbox guide, ascend-dmi "设备拓扑检测", toolboxug_0023). Layout as
  captured on an 8 x 910B3 server, npu-smi 24.1.rc1.b030 (modelscope/ms-swift
  docs/source/BestPractices/NPU支持.md @ 15c9248): a header row ``NPU0 ... NPU7 CPU Affinity``, then one
  row per NPU ending in a CPU list (``144-167``), then a legend.
- bus id -> ``/sys/bus/pci/devices/<bus id>/numa_node`` -> the node's CPUs is Huawei's own recipe for
  binding by hand (MindIE-LLM docs/zh/user_guide/user_manual/introduction_to_manual_cpu_binding_for_virtual_machines.md,
  mirror verylucky01/MindIE-LLM @ a588857: 0000:C1:00.0 -> NUMA node 6). sysfs names buses in lower
  case; npu-smi prints them in upper case.
"""

from __future__ import annotations

import os
from dataclasses import dataclass, field
from typing import Any, Callable, Dict, List, Mapping, Optional, Sequence, Tuple

from npulaunch.host.lazyre import lazy_re
from npulaunch.host.ranges import ranges

SYSFS_ROOT_VAR = "NPULAUNCH_SYSFS_ROOT"  # read sysfs below another root (tests' stand-in server)
Cpus = Tuple[int, ...]
Runner = Callable[[Sequence[str]], str]

MODES = ("none", "blocks", "auto")  # and an explicit mapping device -> CPUs
_TOPO_ROW = lazy_re(r"^\s*NPU(\d+)\s+(.*\S)\s*$")


class BindingError(Exception):
    """A binding that cannot be applied as asked: what was found and what is allowed."""

    def __init__(self, found: str, allowed: str, hint: str = "") -> None:
        super().__init__(f"{found}; allowed: {allowed}" + (f" ({hint})" if hint else ""))
        self.found, self.allowed, self.hint = found, allowed, hint


def parse_cpulist(text: str) -> Cpus:
    """``"0-3,8,10-11"`` -> ``(0, 1, 2, 3, 8, 10, 11)`` (the kernel's cpulist format); ValueError
    when it is not one."""
    cpus: set = set()
    for part in text.strip().split(","):
        part = part.strip()
        if not part:
            continue
        low, sep, high = part.partition("-")
        if not low.strip().isdigit() or (sep and not high.strip().isdigit()):
            raise ValueError(f"not a CPU list: {text!r}")
        first, last = int(low), int(high) if sep else int(low)
        if first > last:
            raise ValueError(f"not a CPU list: {text!r} ({part}: descending range)")
        cpus.update(range(first, last + 1))
    return tuple(sorted(cpus))


def format_cpulist(cpus: Sequence[int]) -> str:
    """``(0, 1, 2, 3, 8)`` -> ``"0-3,8"`` (the kernel's cpulist form)."""
    return ranges(cpus, ",")


def parse_npu_topo(text: str) -> Dict[int, Cpus]:
    """NPU id -> its "CPU Affinity" from ``npu-smi info -t topo`` (rows without a CPU list, e.g.
    ``NA``, are left out)."""
    found: Dict[int, Cpus] = {}
    if "CPU Affinity" not in text:
        return found
    for line in text.splitlines():
        match = _TOPO_ROW.match(line)
        if match is None:
            continue
        last = match.group(2).split()[-1]
        try:
            cpus = parse_cpulist(last)
        except ValueError:
            continue
        if cpus:
            found[int(match.group(1))] = cpus
    return found


@dataclass(frozen=True)
class HostCpus:
    """What one host says about its CPUs. ``near``: physical device id -> the CPUs of its NUMA node
    (all of them, allowed or not); ``node_of``: physical device id -> its node (-1: not known)."""

    allowed: Cpus
    nodes: Dict[int, Cpus] = field(default_factory=dict)
    near: Dict[int, Cpus] = field(default_factory=dict)
    node_of: Dict[int, int] = field(default_factory=dict)
    how: str = ""  # where ``near`` came from
    problems: Tuple[str, ...] = ()  # why some devices' CPUs are not known
    places_read: bool = True  # False: the NPUs' places were not asked (read_host_cpus(npus=False))

    @property
    def numa_nodes(self) -> int:
        """Nodes with CPUs (memory-only nodes do not count)."""
        return sum(1 for cpus in self.nodes.values() if cpus)

    def to_dict(self) -> Dict[str, Any]:
        return {
            "allowed": format_cpulist(self.allowed),
            "nodes": {str(n): format_cpulist(c) for n, c in sorted(self.nodes.items())},
            "near": {str(d): format_cpulist(c) for d, c in sorted(self.near.items())},
            "node_of": {str(d): n for d, n in sorted(self.node_of.items())},
            "how": self.how,
            "problems": list(self.problems),
            "places_read": self.places_read,
        }

    @classmethod
    def from_dict(cls, data: Mapping[str, Any]) -> "HostCpus":
        return cls(
            allowed=parse_cpulist(data.get("allowed", "")),
            nodes={int(n): parse_cpulist(c) for n, c in data.get("nodes", {}).items()},
            near={int(d): parse_cpulist(c) for d, c in data.get("near", {}).items()},
            node_of={int(d): int(n) for d, n in data.get("node_of", {}).items()},
            how=str(data.get("how", "")),
            problems=tuple(data.get("problems", ())),
            places_read=bool(data.get("places_read", True)),
        )


def sysfs_root(environ: Optional[Mapping[str, str]] = None) -> str:
    """Where sysfs is read: ``/``, or ``NPULAUNCH_SYSFS_ROOT`` (a stand-in tree, for tests)."""
    return (os.environ if environ is None else environ).get(SYSFS_ROOT_VAR) or "/"


def _read(path: str) -> Optional[str]:
    try:
        with open(path) as handle:
            return handle.read().strip()
    except OSError:
        return None


def read_nodes(root: str) -> Dict[int, Cpus]:
    """NUMA node -> its CPUs (``/sys/devices/system/node/node<N>/cpulist``); {} without NUMA."""
    base = os.path.join(root, "sys", "devices", "system", "node")
    nodes: Dict[int, Cpus] = {}
    try:
        names = os.listdir(base)
    except OSError:
        return nodes
    for name in names:
        if name.startswith("node") and name[4:].isdigit():
            text = _read(os.path.join(base, name, "cpulist"))
            try:
                nodes[int(name[4:])] = parse_cpulist(text or "")
            except ValueError:
                continue
    return nodes


def _tool(argv: Sequence[str]) -> str:
    import subprocess

    done = subprocess.run(
        list(argv), stdout=subprocess.PIPE, stderr=subprocess.STDOUT, universal_newlines=True, timeout=20
    )
    if done.returncode != 0:
        raise OSError("%s exited with %d" % (" ".join(argv), done.returncode))
    return done.stdout


def read_host_cpus(
    npus: bool = True,
    root: Optional[str] = None,
    runner: Optional[Runner] = None,
    allowed: Optional[Sequence[int]] = None,
    environ: Optional[Mapping[str, str]] = None,
) -> HostCpus:
    """This host's facts (``npus``: also each NPU's place, which runs npu-smi). Never raises: what
    cannot be read is said in ``problems``."""
    import shutil
    import subprocess

    from npulaunch.host.discovery import CONTAINER_VISIBLE_VAR, parse_npu_smi_info, physical_ids

    environ = os.environ if environ is None else environ
    root = sysfs_root(environ) if root is None else root
    mine = tuple(sorted(os.sched_getaffinity(0) if allowed is None else allowed))
    nodes = read_nodes(root)
    if not npus:
        return HostCpus(mine, nodes, places_read=False)
    if runner is None:
        if shutil.which("npu-smi", path=environ.get("PATH")) is None:
            return HostCpus(mine, nodes, problems=("npu-smi is not on PATH: the NPUs' places are unknown",))
        runner = _tool
    problems: List[str] = []
    try:
        chips = parse_npu_smi_info(runner(["npu-smi", "info"]))
    except (OSError, subprocess.SubprocessError) as exc:
        return HostCpus(mine, nodes, problems=("npu-smi info: %s" % exc,))
    ids = physical_ids(chips, environ.get(CONTAINER_VISIBLE_VAR))
    near: Dict[int, Cpus] = {}
    node_of: Dict[int, int] = {}
    for device, chip in zip(ids, chips):
        text = _read(os.path.join(root, "sys", "bus", "pci", "devices", chip.bus_id.lower(), "numa_node"))
        node = int(text) if text is not None and text.lstrip("-").isdigit() else -1
        node_of[device] = node
        if node >= 0 and nodes.get(node):
            near[device] = nodes[node]
    how = "sysfs numa_node of each NPU's PCIe bus id" if near else ""
    missing = [device for device in ids if device not in near]
    if missing:
        try:  # topo's rows are cards (NPU<n> as npu-smi info numbers them): chip 0 of each card
            affinity = parse_npu_topo(runner(["npu-smi", "info", "-t", "topo"]))
        except (OSError, subprocess.SubprocessError) as exc:
            affinity = {}
            problems.append("npu-smi info -t topo: %s" % exc)
        by_card = {chip.npu_id: device for device, chip in zip(ids, chips) if chip.chip_id == 0}
        for npu, cpus in affinity.items():
            found = by_card.get(npu)
            if found is not None and found in missing:
                near[found] = cpus
        if any(device in near for device in missing):
            how = (how + "; " if how else "") + "npu-smi info -t topo (CPU Affinity)"
        unknown = [device for device in ids if device not in near]
        if unknown:
            problems.append(
                "no NUMA node in sysfs and no CPU affinity from npu-smi info -t topo for device(s) "
                + ", ".join(map(str, unknown))
            )
    return HostCpus(mine, nodes, near, node_of, how, tuple(problems))


# --- the decision ------------------------------------------------------------------------------


@dataclass(frozen=True)
class Binding:
    """``job.cpu_binding``: a mode, or (mode "mapping") each device's CPUs as written."""

    mode: str = "none"
    mapping: Dict[int, Cpus] = field(default_factory=dict)

    def to_dict(self) -> Dict[str, Any]:
        return {"mode": self.mode, "mapping": {str(d): list(c) for d, c in sorted(self.mapping.items())}}

    @classmethod
    def from_dict(cls, data: Mapping[str, Any]) -> "Binding":
        mapping = {int(d): tuple(int(c) for c in cpus) for d, cpus in data.get("mapping", {}).items()}
        return cls(str(data["mode"]), mapping)

    def describe(self) -> str:
        if self.mode != "mapping":
            return self.mode
        return ", ".join("%d: %s" % (d, format_cpulist(c)) for d, c in sorted(self.mapping.items()))


def split_blocks(cpus: Sequence[int], count: int) -> List[Cpus]:
    """``cpus`` in ``count`` contiguous blocks of (nearly) equal size, in order, covering all."""
    ordered = sorted(cpus)
    size = len(ordered)
    return [tuple(ordered[i * size // count : (i + 1) * size // count]) for i in range(count)]


def assign_cpus(binding: Binding, devices: Sequence[int], facts: HostCpus, host: str) -> Tuple[List[Cpus], List[str]]:
    """Each rank's CPUs (ranks given by their physical devices, in local-rank order) and notes; an
    empty tuple for a rank left unbound. Raises BindingError when the binding cannot be applied."""
    count = len(devices)
    if binding.mode == "none" or not count:
        return [() for _ in devices], []
    allowed = facts.allowed
    shown = format_cpulist(allowed)
    if binding.mode == "mapping":
        result = []
        for device in devices:
            cpus = binding.mapping.get(device)
            if cpus is None:
                raise BindingError(
                    "no CPUs for device %d of %s" % (device, host),
                    "a CPU list for every device of the job (%s)" % ", ".join(map(str, sorted(set(devices)))),
                )
            outside = sorted(set(cpus) - set(allowed))
            if outside:
                raise BindingError(
                    "CPUs %s of device %d, not allowed on %s" % (format_cpulist(outside), device, host),
                    "CPUs among %s (the CPUs npulaunch may use there)" % shown,
                )
            result.append(tuple(cpus))
        return result, []
    if count > len(allowed):
        raise BindingError(
            "%d ranks on %s, which allows %d CPU(s): %s" % (count, host, len(allowed), shown),
            "at most one rank per allowed CPU",
            "give the job more CPUs, or set job.cpu_binding: none",
        )
    order = sorted(range(count), key=lambda i: (devices[i], i))  # "in device order"
    if binding.mode == "blocks":
        return _by_order(order, split_blocks(allowed, count)), []
    if binding.mode != "auto":
        raise BindingError("cpu_binding mode %r" % binding.mode, "none, blocks, auto or a mapping")
    return _auto(devices, order, facts, host)


def _by_order(order: Sequence[int], blocks: Sequence[Cpus]) -> List[Cpus]:
    result: List[Cpus] = [() for _ in order]
    for block, index in zip(blocks, order):
        result[index] = block
    return result


def _auto(devices: Sequence[int], order: Sequence[int], facts: HostCpus, host: str) -> Tuple[List[Cpus], List[str]]:
    """Each device's node CPUs (those allowed), split among the job's devices on that node."""
    allowed = set(facts.allowed)
    groups: Dict[Cpus, List[int]] = {}
    unknown = []
    for index in order:
        near = tuple(sorted(allowed & set(facts.near.get(devices[index], ()))))
        if not near:
            unknown.append(devices[index])
        groups.setdefault(near, []).append(index)
    if unknown:
        why = "; ".join(facts.problems) or (
            "their NUMA nodes' CPUs are not among the CPUs npulaunch may use there (%s)" % format_cpulist(facts.allowed)
        )
        note = (
            "cpu_binding auto on %s: the CPUs near device(s) %s are not known (%s); "
            % (
                host,
                ", ".join(map(str, unknown)),
                why,
            )
            + "the allowed CPUs are split in blocks instead"
        )
        return _by_order(order, split_blocks(facts.allowed, len(devices))), [note]
    result: List[Cpus] = [() for _ in devices]
    notes = []
    for near, members in groups.items():
        if len(near) >= len(members):
            for index, block in zip(members, split_blocks(near, len(members))):
                result[index] = block
            continue
        for index in members:
            result[index] = near
        notes.append(
            "cpu_binding auto on %s: devices %s share CPUs %s (their node has fewer allowed CPUs than devices)"
            % (host, ", ".join(str(devices[i]) for i in members), format_cpulist(near))
        )
    return result, notes


def plan_cpus(
    binding: Binding, host: str, devices: Sequence[int], facts: Optional[HostCpus]
) -> Tuple[Optional[List[Cpus]], List[str]]:
    """The plan's decision for one host's ranks and what it says about it: each rank's CPUs (() when
    not bound), or None when the host's facts are not known (its agent decides when the job starts).
    Raises BindingError."""
    if binding.mode == "none":
        notes = []
        if facts is not None and facts.numa_nodes > 1:
            notes.append(
                "%s has %d NUMA nodes and the ranks are not bound to CPUs: job.cpu_binding: auto (or "
                "--cpu-binding auto) binds each to CPUs of its NPU's node" % (host, facts.numa_nodes)
            )
        return [() for _ in devices], notes
    if facts is None or (binding.mode == "auto" and not facts.places_read):  # auto: read on the host
        return None, [
            "cpu_binding %s: %s's CPUs are chosen on the host when the job starts" % (binding.describe(), host)
        ]
    cpus, notes = assign_cpus(binding, devices, facts, host)
    if binding.mode == "auto" and facts.how and not notes:
        notes.insert(0, "cpu_binding auto on %s: the CPUs near each NPU from %s" % (host, facts.how))
    return cpus, notes


def decide_on_host(
    requests: Sequence[Tuple[int, int, Mapping[str, Any]]], host: str, facts: Optional[HostCpus] = None
) -> Dict[int, Cpus]:
    """The agent's decision for ranks the plan could not bind (no facts of this host at planning):
    ``requests`` are ``(rank, physical device, binding as a dict)``, all of one host in local-rank
    order. Returns rank -> CPUs; raises BindingError."""
    if not requests:
        return {}
    binding = Binding.from_dict(requests[0][2])
    facts = read_host_cpus() if facts is None else facts
    cpus, _ = assign_cpus(binding, [device for _, device, _ in requests], facts, host)
    return {rank: chosen for (rank, _, _), chosen in zip(requests, cpus)}
