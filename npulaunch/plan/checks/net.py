"""Can each NPU reach its peers on the other hosts? From the NICs' addresses, netmasks, gateways and
detect addresses (``hccn_tool -ip/-gateway/-netdetect -g``, gathered by the probe), and from NPU-to-NPU
pings (``hccn_tool -i <id> -ping -g address <peer>``) in a second round.

HCCL connects an NPU with the NPU of the same place on the other servers (device k with device k: the
rank table lists them in that order), so a NIC's peers are those at its index on every other host.
The ping is a ring, not N²: each NPU of host i pings its peer on host i+1 (the last host's on the
first), so every NIC sends once and answers once and the number of pings is the number of NPUs. Pure.
"""

from __future__ import annotations

import ipaddress
from typing import Any, Dict, List, Mapping, Optional, Sequence, Tuple

from npulaunch.plan.checks.findings import Finding, Severity

Nic = Tuple[int, Optional[str], Optional[str], Optional[str], Optional[str]]  # device, ip, mask, gateway, detect


def host_nics(health: Mapping[str, Any]) -> List[Nic]:
    """One host's NICs in the job's device order."""
    nics = health.get("nics") or {}
    return [
        (
            int(d),
            (nics.get(str(d)) or {}).get("ip"),
            (nics.get(str(d)) or {}).get("netmask"),
            (nics.get(str(d)) or {}).get("gateway"),
            (nics.get(str(d)) or {}).get("netdetect"),
        )
        for d in health.get("devices") or []
        if str(d) in nics
    ]


def _network(ip: Optional[str], mask: Optional[str]) -> Optional[ipaddress.IPv4Network]:
    if not ip or not mask:
        return None
    try:
        return ipaddress.IPv4Network(f"{ip}/{mask}", strict=False)
    except ValueError:
        return None


def subnet_findings(nics_by_host: Mapping[str, Sequence[Nic]], multi: bool) -> List[Finding]:
    """A NIC whose peer on another host is in another subnet, with no gateway to get there; a detect
    address the NIC cannot reach (outside its subnet, no gateway: net health then reports Unreachable)."""
    found: List[Finding] = []
    hosts = list(nics_by_host)
    for host in hosts:
        for index, (device, ip, mask, gateway, detect) in enumerate(nics_by_host[host]):
            network = _network(ip, mask)
            if network is None:
                continue
            if multi and gateway is None:
                for peer_host in hosts:
                    peers = nics_by_host[peer_host]
                    if peer_host == host or not peers:
                        continue
                    peer = peers[index % len(peers)]
                    if peer[1] and ipaddress.ip_address(peer[1]) not in network:
                        found.append(
                            Finding(
                                "subnet",
                                Severity.FATAL,
                                host,
                                f"NIC {ip}/{network.prefixlen} has no gateway, and its peer {peer_host} NPU "
                                f"{peer[0]} ({peer[1]}) is in another subnet",
                                "the same subnet, or a gateway",
                                "set: hccn_tool -i <id> -gateway -s address <gateway>; inspect: -gateway -g",
                                (device,),
                            )
                        )
                        break
            if detect and gateway is None and ipaddress.ip_address(detect) not in network:
                found.append(
                    Finding(
                        "netdetect",
                        Severity.WARNING,
                        host,
                        f"detect address {detect} is outside the NIC's subnet {network} and there is no gateway",
                        "an address the NIC reaches",
                        "hccn_tool -i <id> -netdetect -s address <address in the subnet>",
                        (device,),
                    )
                )
    return found


def ping_pairs(nics_by_host: Mapping[str, Sequence[Tuple[int, Optional[str]]]]) -> Dict[str, List[List[Any]]]:
    """host -> [[device, peer address, peer host, peer device], ...]: the ring (host i's NPU k pings host
    i+1's NPU k, wrapping around the peer's NPUs when it has fewer). NPUs without an address are left out
    (their missing address is a finding of its own)."""
    hosts = [h for h in nics_by_host if any(ip for _, ip in nics_by_host[h])]
    pairs: Dict[str, List[List[Any]]] = {}
    if len(hosts) < 2:
        return pairs
    for i, host in enumerate(hosts):
        peer_host = hosts[(i + 1) % len(hosts)]
        peers = [(d, ip) for d, ip in nics_by_host[peer_host] if ip]
        pairs[host] = [
            [device, peers[k % len(peers)][1], peer_host, peers[k % len(peers)][0]]
            for k, (device, ip) in enumerate(nics_by_host[host])
            if ip
        ]
    return pairs


def ping_findings(
    pairs: Mapping[str, Sequence[Sequence[Any]]], answers: Mapping[str, Optional[Mapping[str, Any]]]
) -> List[Finding]:
    """Each ping's verdict: no reply is fatal (HCCL's links between the two NPUs would time out, EI0006),
    a lost packet a warning, a ping that could not be run "not checked"."""
    found: List[Finding] = []
    hint = "hccn_tool -i <id> -ping -g address {peer}; both NICs' links, addresses, gateways and the switch"
    for host, wanted in pairs.items():
        answer = answers.get(host)
        peer_of = {(int(p[0]), str(p[1])): (p[2], p[3]) for p in wanted}
        if answer is None or answer.get("skipped"):
            why = (answer or {}).get("skipped") or "the host did not answer the ping round"
            found.append(Finding("ping", Severity.NOT_CHECKED, host, f"NPU-to-NPU ping: {why}"))
            continue
        for device, peer, sent, received, failure in answer.get("results") or []:
            peer_host, peer_device = peer_of.get((int(device), str(peer)), ("?", "?"))
            target = f"{peer_host} NPU {peer_device} ({peer})"
            if sent is None:
                found.append(
                    Finding("ping", Severity.NOT_CHECKED, host, f"ping to {target}: {failure}", devices=(device,))
                )
            elif sent == 0 and not failure:
                found.append(
                    Finding("ping", Severity.NOT_CHECKED, host, f"ping to {target}: no summary line", devices=(device,))
                )
            elif received == 0:
                seen = f"no reply from {target}" + (f": {failure}" if failure else "")
                found.append(Finding("ping", Severity.FATAL, host, seen, "replies", hint.format(peer=peer), (device,)))
            elif received < sent:
                found.append(
                    Finding(
                        "ping",
                        Severity.WARNING,
                        host,
                        f"{sent - received} of {sent} packets to {target} lost",
                        "no loss",
                        hint.format(peer=peer),
                        (device,),
                    )
                )
    return found
