"""torchrun's c10d rendezvous, npulaunch's way: the same command on every node (``--nnodes 2
--rdzv-backend c10d --rdzv-endpoint HEAD:29400 --rdzv-id JOB``), with no node rank. The nodes meet at a
TCPStore on the endpoint; the npulaunch of the endpoint's own host serves it (host/tcpstore.py), as
torchrun's agent does there (c10d_rendezvous_backend.py ``_create_tcp_store``: is_host when the endpoint
names this machine; a second process of the same host, whose bind fails, is a client).

On the store, under ``npulaunch/rdzv/<run id>/``: each node takes a ticket (ADD ``joined``) and writes its
record (``node/<ticket>``: its address toward the endpoint, pid, rank count, the job id it would use). The
rendezvous closes (COMPARE_SET ``closed``, first writer wins) when MAX nodes have joined, or MIN and the
last call has passed since the MIN-th (torchrun's defaults: join 600 s, last call 30 s,
dynamic_rendezvous.py RendezvousTimeout). The serving node is node 0, the others follow in the order of
their address and pid; node 0 picks the port its agent serves the ranks' store on and publishes it with
the job id. torch orders by host name and pid instead (``_mark_rendezvous_complete``), so its node 0 may
be another node; what a rank sees of the world is the same.

A node that comes after the rendezvous closed is refused with the reason. A node joining a running job
at its next restart, as torchrun re-forms the world, is not built yet.
"""

from __future__ import annotations

import json
import os
import socket
import time
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any, Callable, Dict, List, Tuple

from npulaunch.host.errors import NpulaunchError

if TYPE_CHECKING:
    from npulaunch.config.cluster import Rendezvous
    from npulaunch.host.tcpstore import StoreClient, StoreServer

POLL_S = 0.05


class RendezvousError(NpulaunchError):
    exit_code = 2


@dataclass(frozen=True)
class Met:
    """What the rendezvous gave this node."""

    node_rank: int
    nnodes: int
    master_addr: str  # node 0's address, where its agent serves the ranks' store
    master_port: int
    job_id: str
    nodes: Tuple[Dict[str, Any], ...]  # every node's record, in node-rank order
    served: bool  # this npulaunch serves the rendezvous' store (it keeps serving it until it exits)
    waited_s: float


_SERVERS: List["StoreServer"] = []  # the served stores live as long as the process (late readers, a log)


def meet(
    rdzv: "Rendezvous",
    nproc: int,
    job_id: str,
    say: Callable[[str], object] = lambda line: None,
    clock: Callable[[], float] = time.monotonic,
) -> Met:
    """Join the rendezvous ``rdzv`` with this node's ``nproc`` ranks; ``job_id``: the one this node would use
    (node 0's is everyone's). ``say``: one line for the console when the count of nodes changes. Raises
    RendezvousError naming what went wrong: nobody serves the endpoint, too few nodes in time, a node
    after the close, nodes of different sizes."""
    start = clock()
    deadline = start + rdzv.join_timeout_s
    where = f"the c10d rendezvous {rdzv.run_id!r} at {rdzv.host}:{rdzv.port}"
    served = _serve(rdzv)
    client = _connect(rdzv, deadline, clock, where)
    try:
        key = f"npulaunch/rdzv/{rdzv.run_id}/".__add__
        ticket = client.add(key("joined"), 1)
        record = {
            "addr": _address_toward(rdzv.host),
            "pid": os.getpid(),
            "hostname": socket.gethostname(),
            "nproc": nproc,
            "served": served,
            "job_id": job_id,
        }
        client.set(key(f"node/{ticket}"), json.dumps(record))
        count = _close(client, key, rdzv, deadline, clock, where, say)
        if ticket > count:
            raise RendezvousError(
                f"{where} closed with {count} node{'s' if count > 1 else ''} before this one joined (it was "
                f"number {ticket}): start every node within the last call ({rdzv.last_call_s:g} s after the "
                f"first {rdzv.min_nodes}), or raise the MAX of --nnodes; joining a running job is not built yet"
            )
        tickets = [key(f"node/{n}") for n in range(1, count + 1)]
        _wait(lambda: client.check(tickets), deadline, clock, f"{where}: the records of its {count} nodes")
        records = [json.loads(client.get(name)) for name in tickets]
        order = sorted(
            range(count), key=lambda n: (not records[n]["served"], _ip_key(records[n]["addr"]), records[n]["pid"])
        )
        nodes = tuple(records[n] for n in order)
        node_rank = order.index(ticket - 1)
        sizes = sorted({r["nproc"] for r in nodes})
        if len(sizes) > 1:
            raise RendezvousError(
                f"{where}: the nodes run different numbers of ranks ("
                + ", ".join(f"{r['hostname']} (pid {r['pid']}) {r['nproc']}" for r in nodes)
                + "): give every node the same --nproc-per-node"
            )
        if node_rank == 0:
            client.set(key("master"), json.dumps({"addr": record["addr"], "port": _free_port(), "job_id": job_id}))
        _wait(lambda: client.check([key("master")]), deadline, clock, f"{where}: node 0's store address")
        master = json.loads(client.get(key("master")))
        client.add(key("read"), 1)
        if served:  # the others read what they need from it before this node's job may end and close it
            _wait(lambda: client.add(key("read"), 0) >= count, clock() + 10.0, clock, "", quiet=True)
    except OSError as exc:
        raise RendezvousError(f"{where}: the store stopped answering: {exc}") from None
    finally:
        client.close()
    return Met(node_rank, count, master["addr"], int(master["port"]), master["job_id"], nodes, served, clock() - start)


def stop_serving() -> None:
    """Close the stores this process serves (the process's end closes them too)."""
    while _SERVERS:
        _SERVERS.pop().close()


def _serve(rdzv: "Rendezvous") -> bool:
    """Serve the rendezvous' store when the endpoint is this host's (or is_host says so); False when another
    process here serves it already (its port is taken), or the endpoint is another host."""
    if not (rdzv.is_host if rdzv.is_host is not None else _is_this_host(rdzv.host)):
        return False
    from npulaunch.host.tcpstore import StoreServer

    try:
        _SERVERS.append(StoreServer(rdzv.port).start())
    except OSError:
        if rdzv.is_host:
            raise RendezvousError(
                f"--rdzv-conf is_host=1: port {rdzv.port} is taken on this host, so npulaunch cannot serve the "
                "c10d rendezvous' store there"
            ) from None
        return False
    return True


def _connect(rdzv: "Rendezvous", deadline: float, clock: Callable[[], float], where: str) -> "StoreClient":
    from npulaunch.host.tcpstore import StoreClient

    while True:
        try:
            return StoreClient(rdzv.host, rdzv.port, timeout_s=max(1.0, deadline - clock()))
        except OSError as exc:
            if clock() >= deadline:
                raise RendezvousError(
                    f"nobody served {where} within {rdzv.join_timeout_s:g} s ({exc}): the endpoint must be the "
                    "address of one of the nodes, whose npulaunch serves it, as torchrun's c10d does "
                    "(--rdzv-conf join_timeout=SECONDS waits longer)"
                ) from None
            time.sleep(0.2)


def _close(
    client: "StoreClient",
    key: Callable[[str], str],
    rdzv: "Rendezvous",
    deadline: float,
    clock: Callable[[], float],
    where: str,
    say: Callable[[str], object],
) -> int:
    """The number of nodes the rendezvous closed with: MAX at once, or MIN once the last call has passed."""
    wanted = f"{rdzv.min_nodes}" if rdzv.min_nodes == rdzv.max_nodes else f"{rdzv.min_nodes} to {rdzv.max_nodes}"
    seen, quorum_at = 0, None
    while True:
        closed = client.get(key("closed"))
        if closed:
            return int(closed)
        count = client.add(key("joined"), 0)
        if count != seen and count < rdzv.max_nodes:
            seen = count
            say(f"waiting at {where}: {count} of {wanted} nodes")
        if count >= rdzv.min_nodes and quorum_at is None:
            quorum_at = clock()
        due = count >= rdzv.max_nodes or (quorum_at is not None and clock() - quorum_at >= rdzv.last_call_s)
        if due:
            client.compare_set(key("closed"), "", str(min(count, rdzv.max_nodes)))
            continue
        if clock() >= deadline:
            raise RendezvousError(
                f"{where}: {count} of {wanted} nodes came within {rdzv.join_timeout_s:g} s (join_timeout): start "
                "npulaunch on every node with the same --rdzv-endpoint and --rdzv-id"
            )
        time.sleep(POLL_S)


def _wait(
    ready: Callable[[], bool], deadline: float, clock: Callable[[], float], what: str, quiet: bool = False
) -> None:
    while not ready():
        if clock() >= deadline:
            if quiet:
                return
            raise RendezvousError(f"{what} did not come before the join timeout")
        time.sleep(POLL_S)


def _is_this_host(host: str) -> bool:
    """Whether ``host`` names this machine: its address is loopback or one this machine can bind."""
    try:
        address = socket.gethostbyname(host)
    except OSError:
        return False
    if address.startswith("127."):
        return True
    try:
        with socket.socket(socket.AF_INET, socket.SOCK_DGRAM) as sock:
            sock.bind((address, 0))
        return True
    except OSError:
        return False


def _address_toward(host: str) -> str:
    """This node's address on its route to the endpoint: where the other nodes reach it."""
    try:
        target = socket.gethostbyname(host)
        with socket.socket(socket.AF_INET, socket.SOCK_DGRAM) as sock:
            sock.connect((target, 9))  # a UDP socket's connect sends nothing
            return str(sock.getsockname()[0])
    except OSError:
        return socket.gethostname()


def _ip_key(address: str) -> Tuple[int, ...]:
    try:
        return tuple(socket.inet_aton(address))
    except OSError:
        return (256,)


def _free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("", 0))
        return int(sock.getsockname()[1])
