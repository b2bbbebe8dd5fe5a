"""Who a waiting rank waited for, from its own words: the peer a symptom names (gloo's "Connection closed by
peer [10.0.0.2]:22210", a store's "(10.0.0.1, 29500)", HCCL's and MindSpore's rank or node ids are named by
their own lines), matched against the job's hosts. A node of a multi-node job sees only its own ranks: when
they all only waited, the cause is on the host their peers name. Pure.
"""

from __future__ import annotations

from typing import Dict, List, Mapping, Optional, Sequence, Tuple

from npulaunch.diagnose.cause import ranks_word
from npulaunch.host.events import Event
from npulaunch.host.lazyre import lazy_re

# "[10.0.0.2]:22210", "10.0.0.2:22210", "(10.0.0.1, 29500)", "[node-3]:29400", "[::1]:5000"
_PEER = lazy_re(
    r"\[(?P<bracketed>[\w.:-]+)\]:(?P<port1>\d{2,5})\b"
    r"|\((?P<tupled>[\w.:-]+), (?P<port2>\d{2,5})\)"
    r"|(?<![\w.])(?P<plain>\d{1,3}(?:\.\d{1,3}){3}):(?P<port3>\d{2,5})\b"
)
LOOPBACK = ("127.0.0.1", "localhost", "::1")


def named_peers(lines: Sequence[str]) -> List[str]:
    """The peer addresses (``host:port``) the lines name, in order, each once."""
    found: Dict[str, None] = {}
    for line in lines:
        for match in _PEER.finditer(line):
            address = match.group("bracketed") or match.group("tupled") or match.group("plain")
            port = match.group("port1") or match.group("port2") or match.group("port3")
            if address:
                found.setdefault(f"{address}:{port}")
    return list(found)


def peer_hosts(symptoms: Sequence[Event], hosts: Mapping[str, Sequence[int]]) -> Tuple[List[str], List[str]]:
    """``(peers, hosts)``: the addresses the symptoms name, and the job's hosts among them (a host is known by
    the name or address the job was given; loopback is the one host of a single-host job)."""
    lines = [str(e.data.get("line") or "") for e in symptoms]
    for event in symptoms:
        lines.extend(str(text) for text in event.data.get("after") or ())
    peers = named_peers(lines)
    matched: Dict[str, None] = {}
    for peer in peers:
        host = _host_of(peer.rsplit(":", 1)[0], hosts)
        if host is not None:
            matched.setdefault(host)
    return peers, list(matched)


def _host_of(address: str, hosts: Mapping[str, Sequence[int]]) -> Optional[str]:
    if address in hosts:
        return address
    if address in LOOPBACK and len(hosts) == 1:
        return next(iter(hosts))
    short = address.split(".")[0]
    return next((host for host in hosts if not address[0].isdigit() and host.split(".")[0] == short), None)


def elsewhere(symptoms: Sequence[Event], hosts: Mapping[str, Sequence[int]], here: Sequence[int]) -> str:
    """Words for a node whose ranks (``here``) only waited: which host their peers name, where it is another
    node's. ``hosts``: every host of the job by each name it is known by (its name, its address)."""
    peers, named = peer_hosts(symptoms, hosts)
    mine = set(here)
    away = [host for host in named if not mine.intersection(hosts[host])]
    if away:
        ranks = sorted(rank for host in away for rank in hosts[host])
        return f"; the peers they name are on {', '.join(away)} ({ranks_word(ranks)}): the cause is in that host's logs"
    if peers and not named:
        return f"; the peer{'s' if len(peers) > 1 else ''} they name: {', '.join(peers[:3])}"
    return ""
