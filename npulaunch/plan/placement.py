"""Where a job's ranks go once NPUs or hosts are excluded: a spare NPU of the same host takes an
excluded NPU's place, else a spare host takes the whole host's place, every other rank staying where
it was and the world size kept; with ``recovery.shrink`` and no spare left, the job goes on with fewer
ranks in a shape HCCL accepts. ``arrange`` is the first step of ``build_plan`` (plan/build.py), so a
re-planned attempt is planned by the one planner, with the exclusions as input. Pure.

HCCL's device groups: on Atlas training servers (first-generation Ascend 910) a server runs 1, 2, 4 or
8 NPUs, 2 or 4 of them within 0-3 or 4-7, and every server the same count (CANN TF migration guide,
"Precautions", TensorFlowCommunity 850 tfmigr2_000030; plan/ranktable.py's ``device_group_problem``).
With ``product: atlas-training`` a spare that breaks the rule is never taken; without a product, a spare
in the same group is preferred. Atlas A2 and A3 servers take any count (the same page).
"""

from __future__ import annotations

from dataclasses import dataclass, field, replace
from typing import Any, Callable, Dict, List, Mapping, Optional, Sequence, Set, Tuple

from npulaunch.config.cluster import ClusterConfig, HostConfig
from npulaunch.host.errors import PlanError
from npulaunch.host.ranges import ranges
from npulaunch.plan.ranktable import ATLAS_TRAINING, TRAINING_COUNTS, TRAINING_GROUPS, device_group_problem

Resolve = Callable[[int, HostConfig], Tuple[int, ...]]  # a host entry's devices (discovered for "all")


@dataclass(frozen=True)
class Exclusion:
    """An NPU (``device``) or a whole host (``device`` None) the job no longer uses, and why."""

    host: str
    device: Optional[int]
    reason: str  # "NPU fault 80E01801 (RestartBusiness)", "host lost: the SSH connection closed", ...
    code: Optional[str] = None
    level: Optional[str] = None  # MindCluster's fault level, for an NPU fault
    attempt: int = 0  # the attempt in which it was found

    @property
    def what(self) -> str:
        return f"{self.host} NPU {self.device}" if self.device is not None else f"host {self.host}"

    def to_json(self) -> Dict[str, Any]:
        return {
            "host": self.host,
            "device": self.device,
            "reason": self.reason,
            "code": self.code,
            "level": self.level,
            "attempt": self.attempt,
        }

    @classmethod
    def from_json(cls, data: Mapping[str, Any]) -> "Exclusion":
        device = data.get("device")
        return cls(
            str(data.get("host", "")),
            None if device is None else int(device),
            str(data.get("reason", "")),
            data.get("code"),
            data.get("level"),
            int(data.get("attempt") or 0),
        )


@dataclass(frozen=True)
class Arrangement:
    """The hosts an attempt uses (each with its devices listed, a spare host in its place), what moved,
    and the spares still held back."""

    hosts: Tuple[HostConfig, ...]
    changes: Tuple[str, ...] = ()  # "rank slot h0 NPU 2 -> NPU 4", for the plan's notes and the report
    spare_devices: Dict[str, Tuple[int, ...]] = field(default_factory=dict)  # host -> spares left
    spare_hosts: Tuple[str, ...] = ()  # spare hosts left
    dropped: int = 0  # ranks given up by a shrink

    def to_json(self) -> Dict[str, Any]:
        return {
            "changes": list(self.changes),
            "spare_devices": {host: list(ids) for host, ids in self.spare_devices.items()},
            "spare_hosts": list(self.spare_hosts),
            "dropped": self.dropped,
        }


class NoSpare(PlanError):
    """Nothing fits in place of what was excluded, and the job may not shrink (enough)."""


def needs_arranging(config: ClusterConfig, exclusions: Sequence[Exclusion]) -> bool:
    return bool(exclusions or config.spares or any(h.spare_devices for h in config.hosts))


def arrange(config: ClusterConfig, exclusions: Sequence[Exclusion], resolve: Resolve) -> Arrangement:
    """The hosts of an attempt after ``exclusions`` (raises NoSpare when the job cannot go on)."""
    bad = {(e.host, e.device) for e in exclusions if e.device is not None}
    lost = {e.host for e in exclusions if e.device is None}
    # in the order they were excluded: an earlier exclusion's replacement stays where it is
    order = {(e.host, e.device): i for i, e in reversed(list(enumerate(exclusions)))}
    strict = config.product == ATLAS_TRAINING
    resolved = [_without(resolve(i, h), h.spare_devices) for i, h in enumerate(config.hosts)]
    counts = [len(d) for d in resolved]
    slots: List[Optional[HostConfig]] = []
    changes: List[str] = []
    spare_left: Dict[str, Tuple[int, ...]] = {}
    unfilled: List[Tuple[int, str]] = []  # host index, why its own spares did not do
    for index, (host, devices) in enumerate(zip(config.hosts, resolved)):
        pool = [d for d in host.spare_devices if (host.host, d) not in bad]
        if host.host in lost:
            slots.append(None)
            unfilled.append((index, "the host is excluded"))
            continue
        broken = sorted((d for d in devices if (host.host, d) in bad), key=lambda d: order[(host.host, d)])
        if not broken:
            slots.append(_with_devices(host, devices))
            spare_left[host.host] = tuple(pool)
            continue
        new, why = _replace(devices, broken, pool, counts, strict, host.spare_devices)
        if new is None:
            slots.append(None)
            unfilled.append((index, why))
            spare_left[host.host] = tuple(pool)
            continue
        slots.append(_with_devices(host, new))
        spare_left[host.host] = tuple(d for d in pool if d not in new)
        changes += [f"{host.host}: NPU {old} -> spare NPU {d}" for old, d in zip(devices, new) if old != d]
    spare_hosts = [s for s in config.spares if s.host not in lost]
    first_excluded: Dict[str, int] = {}
    for i, e in enumerate(exclusions):
        first_excluded.setdefault(e.host, i)
    unfilled.sort(key=lambda item: first_excluded.get(config.hosts[item[0]].host, len(exclusions)))
    for index, why in list(unfilled):
        taken = _spare_host(spare_hosts, index, resolved[index], resolve, bad, counts, strict, len(config.hosts))
        if taken is None:
            continue
        spare, chosen = taken
        spare_hosts.remove(spare)
        slots[index] = _with_devices(spare, chosen)
        unfilled.remove((index, why))
        changes.append(f"{config.hosts[index].host} ({why}) -> spare host {spare.host} NPUs {ranges(chosen)}")
    if not unfilled:
        return Arrangement(
            tuple(h for h in slots if h is not None),
            tuple(changes),
            spare_left,
            tuple(s.host for s in spare_hosts),
        )
    return _shrink(config, exclusions, slots, resolved, unfilled, bad, changes, spare_left, spare_hosts, strict)


def _without(devices: Tuple[int, ...], spare: Tuple[int, ...]) -> Tuple[int, ...]:
    return tuple(d for d in devices if d not in spare)


def _with_devices(host: HostConfig, devices: Tuple[int, ...]) -> HostConfig:
    """The host entry using ``devices`` (its spares' addresses following its devices' when the YAML gave them)."""
    ips = None
    if host.device_ips is not None and isinstance(host.devices, tuple):
        known = dict(zip(host.devices, host.device_ips))
        known.update(zip(host.spare_devices, host.spare_device_ips or ()))
        ips = tuple(known[d] for d in devices) if all(d in known for d in devices) else None
    super_ids = host.super_device_ids
    if super_ids is not None and not all(d in super_ids for d in devices):
        super_ids = None
    return replace(host, devices=devices, device_ips=ips, super_device_ids=super_ids)


def _fits(devices: Sequence[int], counts: Sequence[int]) -> bool:
    return not device_group_problem(devices, counts)


def _replace(
    devices: Tuple[int, ...],
    broken: Sequence[int],
    pool: Sequence[int],
    counts: Sequence[int],
    strict: bool,
    configured: Sequence[int],
) -> Tuple[Optional[Tuple[int, ...]], str]:
    """``devices`` with each broken NPU replaced in place by a spare of ``pool`` (the host's spares not
    excluded; ``configured``: all of them), or None and why not."""
    new = list(devices)
    free = list(pool)
    for old in broken:
        position = new.index(old)
        candidates = []
        for spare in free:
            trial = new[:position] + [spare] + new[position + 1 :]
            candidates.append((not _fits(trial, counts), spare))
        if strict:
            candidates = [c for c in candidates if not c[0]]
        if not candidates:
            if not configured:
                return None, "no spare NPU on the host"
            if not free:
                return None, f"its spare NPUs ({ranges(configured)}) are all used or excluded"
            return None, f"no spare NPU ({ranges(free)}) keeps HCCL's device groups (0-3, 4-7)"
        _, chosen = min(candidates)
        free.remove(chosen)
        new[position] = chosen
    return tuple(new), ""


def _spare_host(
    spares: Sequence[HostConfig],
    index: int,
    devices: Tuple[int, ...],
    resolve: Resolve,
    bad: Set[Tuple[str, int]],
    counts: Sequence[int],
    strict: bool,
    host_count: int,
) -> Optional[Tuple[HostConfig, Tuple[int, ...]]]:
    """The first spare host with as many usable NPUs as host ``index`` had (a valid set of them)."""
    for offset, spare in enumerate(spares):
        usable = [d for d in resolve(host_count + offset, spare) if (spare.host, d) not in bad]
        chosen = _subset(usable, len(devices), counts, strict)
        if chosen is not None:
            return spare, chosen
    return None


def _subset(usable: Sequence[int], count: int, counts: Sequence[int], strict: bool) -> Optional[Tuple[int, ...]]:
    """``count`` of ``usable`` NPUs in a set HCCL accepts (the first such, in the listed order)."""
    if len(usable) < count:
        return None
    first = tuple(usable[:count])
    if not strict or _fits(first, counts):
        return first
    for group in TRAINING_GROUPS:
        inside = [d for d in usable if d in group]
        if len(inside) >= count and _fits(inside[:count], counts):
            return tuple(inside[:count])
    return None


def _shrink(
    config: ClusterConfig,
    exclusions: Sequence[Exclusion],
    slots: List[Optional[HostConfig]],
    resolved: List[Tuple[int, ...]],
    unfilled: List[Tuple[int, str]],
    bad: Set[Tuple[str, int]],
    changes: List[str],
    spare_left: Dict[str, Tuple[int, ...]],
    spare_hosts: List[HostConfig],
    strict: bool,
) -> Arrangement:
    """No spare fits: the biggest valid smaller job, when ``recovery.shrink`` allows one that big.
    Either every host keeps the same number of NPUs (the fewest any host has left), or the hosts that
    broke are dropped and the others keep all of theirs; the bigger wins (a tie: dropping the hosts,
    which moves fewer ranks)."""
    lost = {e.host for e in exclusions if e.device is None}
    healthy: List[Tuple[int, ...]] = []
    for index, host in enumerate(config.hosts):
        slot = slots[index]
        if slot is not None:
            healthy.append(tuple(slot.devices))  # type: ignore[arg-type]
        elif host.host in lost:
            healthy.append(())
        else:
            healthy.append(tuple(d for d in resolved[index] if (host.host, d) not in bad))
    equal = _equal_shape(healthy, strict)
    dropped_hosts = [i for i, _ in unfilled]
    kept = [healthy[i] if i not in dropped_hosts else () for i in range(len(healthy))]
    if strict and len({len(k) for k in kept if k}) > 1:
        kept = [()] * len(healthy)
    options = [(sum(map(len, kept)), 1, kept), (sum(map(len, equal)), 0, equal)]
    size, _, shape = max(options, key=lambda option: (option[0], option[1]))
    world = sum(len(d) for d in resolved)
    minimum = config.recovery.shrink_min_ranks
    if minimum is None or size < minimum or size == 0:
        raise NoSpare(_no_spare_text(config, exclusions, unfilled, resolved, size, minimum))
    hosts = tuple(_with_devices(slots[i] or config.hosts[i], devices) for i, devices in enumerate(shape) if devices)
    for index, (before, after) in enumerate(zip(resolved, shape)):
        name = config.hosts[index].host
        if not after:
            changes.append(f"{name}: dropped ({len(before)} ranks; recovery.shrink)")
        elif len(after) < len(before):
            changes.append(f"{name}: NPUs {ranges(after)} only (recovery.shrink)")
    return Arrangement(hosts, tuple(changes), spare_left, tuple(s.host for s in spare_hosts), world - size)


def _equal_shape(healthy: List[Tuple[int, ...]], strict: bool) -> List[Tuple[int, ...]]:
    """Every host that has NPUs left keeps the same number of them."""
    left = [h for h in healthy if h]
    if not left:
        return [() for _ in healthy]
    count = min(len(h) for h in left)
    if strict:
        for size in sorted(TRAINING_COUNTS, reverse=True):
            if size > count:
                continue
            shape = [_subset(h, size, [size] * len(left), True) if h else () for h in healthy]
            if all(s is not None for s in shape):
                return [tuple(s or ()) for s in shape]
        return [() for _ in healthy]
    return [h[:count] for h in healthy]


def _no_spare_text(
    config: ClusterConfig,
    exclusions: Sequence[Exclusion],
    unfilled: Sequence[Tuple[int, str]],
    resolved: Sequence[Tuple[int, ...]],
    shrink_size: int,
    minimum: Optional[int],
) -> str:
    lines = ["no spare fits in place of what was excluded, so the job cannot go on:"]
    lines += [
        f"  excluded: {e.what}: {e.reason}" + (f" (attempt {e.attempt})" if e.attempt else "") for e in exclusions
    ]
    for index, why in unfilled:
        host = config.hosts[index]
        need = len(resolved[index])
        lines.append(f"  {host.host}: {why}; no spare host with {need} usable NPUs either")
        fit = f"an entry in spares: with {need} healthy NPUs"
        if config.slurm:
            fit = f"a spare node with {need} healthy NPUs (slurm.spare_nodes, npulaunch sbatch --spare-nodes)"
        if host.host not in {e.host for e in exclusions if e.device is None}:
            npu = "a spare NPU in spare_devices of this host"
            if config.product == ATLAS_TRAINING:
                npu += " in the same group as the others (0-3 or 4-7)"
            fit = f"{npu}, or {fit}"
        lines.append(f"  would have fitted: {fit}")
    world = sum(len(d) for d in resolved)
    if minimum is None:
        if shrink_size:
            lines.append(
                f"  with recovery.shrink: {{min_ranks: {shrink_size}}} (or fewer) the job would go on with "
                f"{shrink_size} of its {world} ranks"
            )
    else:
        lines.append(
            f"  recovery.shrink allows no fewer than {minimum} ranks; the biggest valid smaller job has {shrink_size}"
        )
    return "\n".join(lines)
