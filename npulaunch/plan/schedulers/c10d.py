"""torchrun's c10d rendezvous, npulaunch's way: the same command on every node (``--nnodes 2
--rdzv-backend c10d --rdzv-endpoint HEAD:29400 --rdzv-id JOB``), with no node rank. The nodes meet at a
TCPStore on the endpoint; the npulaunch of the endpoint's own host serves it (host/tcpstore.py), as
torchrun's agent does there (c10d_rendezvous_backend.py ``_create_tcp_store``: is_host when the endpoint
names this machine; a second process of the same host, whose bind fails, is a client).

The nodes meet in rounds, as torchrun's dynamic rendezvous does (dynamic_rendezvous.py): round 0 when
they start, one more each time the world is re-formed (a restart, or a node waiting to join). On the
store, under ``npulaunch/rdzv/<run id>/<round>/``: each node takes a ticket (ADD ``joined``) and writes
its record (``node/<ticket>``: its address toward the endpoint, pid, rank count, node rank in the round
before). The round closes (COMPARE_SET ``closed``, first writer wins) when the nodes it expects have
joined (MAX in round 0; the last round's nodes, less those that left, plus those waiting), or MIN once
the last call has passed since the MIN-th (torchrun's defaults: join 600 s, last call 30 s,
RendezvousTimeout). The serving node is node 0, the nodes of the round before keep their order, and
newcomers follow in the order of their address and pid (torch orders by host name and pid,
``_mark_rendezvous_complete``, so its node 0 may be another node; what a rank sees is the same). Node 0
picks the port its agent serves the ranks' store on, and publishes it with the job id and the attempt
number every node then uses (TORCHELASTIC_RESTART_COUNT must agree: torch prefixes the ranks' keys with
it).

A node that comes after a round closed waits (``waiting``) for the next; the running nodes see it
(``Membership.pending``) and, below MAX nodes, stop their ranks and re-form the world with it, as
torchrun's agents do when ``num_nodes_waiting`` > 0. A node whose job ended says so (``left``), so a round
that can no longer reach MIN nodes fails at once instead of at the join timeout.
"""

from __future__ import annotations

import json
import os
import socket
import time
from dataclasses import dataclass, replace
from typing import TYPE_CHECKING, Any, Callable, Dict, List, Optional, Tuple

from npulaunch.host import timing
from npulaunch.host.errors import PlanError

if TYPE_CHECKING:
    from npulaunch.config.cluster import Rendezvous
    from npulaunch.host.tcpstore import StoreClient, StoreServer


class RendezvousError(PlanError):
    """The nodes could not meet: nothing was started (or, at a later round, the next attempt cannot start)."""


@dataclass(frozen=True)
class Met:
    """What a round of the rendezvous gave this node."""

    node_rank: int
    nnodes: int
    master_addr: str  # node 0's address, where its agent serves the ranks' store
    master_port: int
    job_id: str
    attempt: int  # node 0's attempt number, every node's for this round
    nodes: Tuple[Dict[str, Any], ...]  # every node's record, in node-rank order
    served: bool  # this npulaunch serves the rendezvous' store (it keeps serving it until it exits)
    waited_s: float
    round: int = 0


_SERVERS: List["StoreServer"] = []  # the served stores live as long as the process (late readers, a log)


def meet(
    rdzv: "Rendezvous",
    nproc: int,
    job_id: str,
    say: Callable[[str], object] = lambda line: None,
    clock: Callable[[], float] = time.monotonic,
) -> Met:
    """One node's first meeting (a Membership of its own): see Membership.meet."""
    return Membership(rdzv, clock).meet(nproc, job_id, say=say)


def stop_serving() -> None:
    """Close the stores this process serves (the process's end closes them too)."""
    while _SERVERS:
        _SERVERS.pop().close()


class Membership:
    """This node in the rendezvous ``rdzv``, over its rounds."""

    def __init__(self, rdzv: "Rendezvous", clock: Callable[[], float] = time.monotonic) -> None:
        self.rdzv = rdzv
        self.clock = clock
        self.where = f"the c10d rendezvous {rdzv.run_id!r} at {rdzv.host}:{rdzv.port}"
        self.met: Optional[Met] = None
        self.attempt = 1  # the attempt this node would start next (node 0's is everyone's)
        self.cause = "restart"  # why this node meets again: "restart" (after a failure) or "join" (a newcomer)
        self._served: Optional[bool] = None
        self._watcher: Optional["StoreClient"] = None

    def key(self, round_no: int, name: str) -> str:
        return f"npulaunch/rdzv/{self.rdzv.run_id}/{round_no}/{name}"

    def meet(self, nproc: int, job_id: str, say: Callable[[str], object] = lambda line: None) -> Met:
        """Join the next round with this node's ``nproc`` ranks; ``job_id``: the one this node would use
        (node 0's is everyone's). ``say``: a line for the console when the count of nodes changes. Raises
        RendezvousError naming what went wrong: nobody serves the endpoint, too few nodes in time, nodes of
        different sizes, a world that cannot re-form."""
        rdzv, clock = self.rdzv, self.clock
        start = clock()
        deadline = start + rdzv.join_timeout_s
        if self._served is None:
            self._served = _serve(rdzv)
        client = _connect(rdzv, deadline, clock, self.where)
        try:
            round_no = self._first_round(client) if self.met is None else self.met.round + 1
            if self.met is not None:  # the others see the world re-form (pending), a newcomer may join it
                client.compare_set(self.key(round_no, "opened"), "", self.cause)
                client.set(f"npulaunch/rdzv/{rdzv.run_id}/current", str(round_no))
            while True:
                ticket, count = self._join(client, round_no, nproc, job_id, deadline, say)
                if ticket <= count:
                    break
                self._wait_next(client, round_no, count, deadline, say)
                round_no += 1
            met = self._result(client, round_no, ticket, count, deadline)
        except OSError as exc:
            raise RendezvousError(f"{self.where}: the store stopped answering: {exc}") from None
        finally:
            client.close()
        self.met = replace(met, waited_s=clock() - start)
        self.attempt = met.attempt
        return self.met

    def pending(self, joins_only: bool = False) -> Tuple[str, bool]:
        """(why the running world should re-form now, whether that is a restart after a failure): a node
        waits to join (below MAX nodes), or (unless ``joins_only``) another node has begun the next round,
        after a failure (a restart, counted on every node) or for a joining node. ("", False): it should not."""
        if self.met is None:
            return "", False
        try:
            if self._watcher is None:
                self._watcher = _client(self.rdzv.host, self.rdzv.port, 5.0)
            round_no = self.met.round
            if not joins_only and self._watcher.check([self.key(round_no + 1, "opened")]):
                if self._watcher.get(self.key(round_no + 1, "opened")) == b"restart":
                    return "another node restarts after a failure", True
                return "another node re-forms the world for a node that joins", False
            if self.met.nnodes < self.rdzv.max_nodes:
                waiting = self._watcher.add(self.key(round_no, "waiting"), 0)
                if waiting:
                    return f"{waiting} node{' waits' if waiting == 1 else 's wait'} to join", False
        except OSError:
            self._watcher = None  # the store is gone (node 0 ended): the ranks say the rest
        return "", False

    def leave(self) -> None:
        """This node's job has ended: a round that waits for it stops waiting."""
        if self.met is None:
            return
        try:
            client = _client(self.rdzv.host, self.rdzv.port, 5.0)
            client.add(self.key(self.met.round, "left"), 1)
            client.close()
        except OSError:
            pass
        if self._watcher is not None:
            self._watcher.close()
            self._watcher = None

    # -- the steps ---------------------------------------------------------------------------------

    def _first_round(self, client: "StoreClient") -> int:
        current = client.get(f"npulaunch/rdzv/{self.rdzv.run_id}/current")
        return int(current) if current else 0

    def _join(
        self,
        client: "StoreClient",
        round_no: int,
        nproc: int,
        job_id: str,
        deadline: float,
        say: Callable[[str], object],
    ) -> Tuple[int, int]:
        """(this node's ticket, the count the round closed with); the ticket is above the count when the
        round closed without this node."""
        closed = client.get(self.key(round_no, "closed"))
        if closed:
            return 1 << 30, int(closed)
        from npulaunch.plan.prepare import address_toward

        ticket = client.add(self.key(round_no, "joined"), 1)
        record = {
            "addr": address_toward(self.rdzv.host) or socket.gethostname(),  # where the other nodes reach it
            "pid": os.getpid(),
            "hostname": socket.gethostname(),
            "nproc": nproc,
            "served": bool(self._served),
            "job_id": job_id,
            "attempt": self.attempt,
            "prev": self.met.node_rank if self.met is not None else None,
        }
        client.set(self.key(round_no, f"node/{ticket}"), json.dumps(record))
        return ticket, self._close(client, round_no, deadline, say)

    def _expected(self, client: "StoreClient", round_no: int) -> int:
        """The nodes round ``round_no`` waits for before its last call: MAX in the first; else the round
        before's, less those whose job ended, plus those waiting to join."""
        rdzv = self.rdzv
        before = client.get(self.key(round_no - 1, "closed")) if round_no > 0 else b""
        if not before:
            return rdzv.max_nodes
        left = client.add(self.key(round_no - 1, "left"), 0)
        waiting = client.add(self.key(round_no - 1, "waiting"), 0)
        return min(rdzv.max_nodes, int(before) - left + waiting)

    def _close(self, client: "StoreClient", round_no: int, deadline: float, say: Callable[[str], object]) -> int:
        """The number of nodes round ``round_no`` closed with."""
        rdzv, clock = self.rdzv, self.clock
        low, high = rdzv.min_nodes, rdzv.max_nodes
        wanted = f"{low}" if low == high else f"{low} to {high}"
        seen, quorum_at = 0, None
        while True:
            closed = client.get(self.key(round_no, "closed"))
            if closed:
                return int(closed)
            count = client.add(self.key(round_no, "joined"), 0)
            expected = self._expected(client, round_no)
            if count != seen and count < expected:
                seen = count
                say(f"waiting at {self.where}: {count} of {wanted} nodes")
            if expected < low and count < low:
                raise RendezvousError(
                    f"{self.where}: the world cannot re-form with {low} node{'s' if low > 1 else ''} or more: "
                    f"{count} came back, and the jobs of the others have ended"
                )
            if count >= low and quorum_at is None:
                quorum_at = clock()
            due = count >= expected or (quorum_at is not None and clock() - quorum_at >= rdzv.last_call_s)
            if due:
                client.compare_set(self.key(round_no, "closed"), "", str(min(count, high)))
                continue
            if clock() >= deadline:
                raise RendezvousError(
                    f"{self.where}: {count} of {wanted} nodes came within {rdzv.join_timeout_s:g} s "
                    "(join_timeout): start npulaunch on every node with the same --rdzv-endpoint and --rdzv-id"
                )
            time.sleep(timing.seconds("store_poll_s"))

    def _wait_next(
        self, client: "StoreClient", round_no: int, count: int, deadline: float, say: Callable[[str], object]
    ) -> None:
        """Round ``round_no`` closed without this node: wait until the running nodes open the next one."""
        rdzv = self.rdzv
        client.add(self.key(round_no, "waiting"), 1)
        full = count >= rdzv.max_nodes
        say(
            f"{self.where}: the job runs on {count} node{'s' if count > 1 else ''}"
            + (f", its most (--nnodes {rdzv.min_nodes}:{rdzv.max_nodes}); " if full else "; ")
            + "this node joins when the world is re-formed"
        )
        while not client.check([self.key(round_no + 1, "opened")]):
            if self.clock() >= deadline:
                raise RendezvousError(
                    f"{self.where}: the job runs on {count} node{'s' if count > 1 else ''} without this one, and "
                    f"was not re-formed within {rdzv.join_timeout_s:g} s (join_timeout)"
                    + (f": it has its most nodes (--nnodes {rdzv.min_nodes}:{rdzv.max_nodes})" if full else "")
                )
            time.sleep(timing.seconds("store_poll_s") * 4)

    def _result(self, client: "StoreClient", round_no: int, ticket: int, count: int, deadline: float) -> Met:
        clock, where = self.clock, self.where
        tickets = [self.key(round_no, f"node/{n}") for n in range(1, count + 1)]
        _wait(lambda: client.check(tickets), deadline, clock, f"{where}: the records of its {count} nodes")
        records = [json.loads(client.get(name)) for name in tickets]

        def place(n: int) -> Tuple[Any, ...]:
            prev = records[n]["prev"]
            return (not records[n]["served"], prev is None, prev or 0, _ip_key(records[n]["addr"]), records[n]["pid"])

        order = sorted(range(count), key=place)
        nodes = tuple(records[n] for n in order)
        node_rank = order.index(ticket - 1)
        sizes = sorted({r["nproc"] for r in nodes})
        if len(sizes) > 1:
            raise RendezvousError(
                f"{where}: the nodes run different numbers of ranks ("
                + ", ".join(f"{r['hostname']} (pid {r['pid']}) {r['nproc']}" for r in nodes)
                + "): give every node the same --nproc-per-node"
            )
        master_key = self.key(round_no, "master")
        if node_rank == 0:
            mine = nodes[0]
            master = {"addr": mine["addr"], "port": _free_port(), "job_id": mine["job_id"], "attempt": mine["attempt"]}
            client.set(master_key, json.dumps(master))
        _wait(lambda: client.check([master_key]), deadline, clock, f"{where}: node 0's store address")
        master = json.loads(client.get(master_key))
        client.add(self.key(round_no, "read"), 1)
        if self._served:  # the others read what they need from it before this node's job may end and close it
            _wait(lambda: client.add(self.key(round_no, "read"), 0) >= count, clock() + 10.0, clock, "", quiet=True)
        return Met(
            node_rank,
            count,
            master["addr"],
            int(master["port"]),
            master["job_id"],
            int(master["attempt"]),
            nodes,
            bool(self._served),
            0.0,
            round_no,
        )


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


def _client(host: str, port: int, timeout_s: float) -> "StoreClient":
    from npulaunch.host.tcpstore import StoreClient

    return StoreClient(host, port, timeout_s=timeout_s)


def _connect(rdzv: "Rendezvous", deadline: float, clock: Callable[[], float], where: str) -> "StoreClient":
    while True:
        try:
            return _client(rdzv.host, rdzv.port, max(1.0, deadline - clock()))
        except OSError as exc:
            if clock() >= deadline:
                raise RendezvousError(
                    f"nobody served {where} within {rdzv.join_timeout_s:g} s ({exc}): the endpoint must be the "
                    "address of one of the nodes, whose npulaunch serves it, as torchrun's c10d does "
                    "(--rdzv-conf join_timeout=SECONDS waits longer)"
                ) from None
            time.sleep(0.2)


def _wait(
    ready: Callable[[], bool], deadline: float, clock: Callable[[], float], what: str, quiet: bool = False
) -> None:
    while not ready():
        if clock() >= deadline:
            if quiet:
                return
            raise RendezvousError(f"{what} did not come before the join timeout")
        time.sleep(timing.seconds("store_poll_s"))


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


def _ip_key(address: str) -> Tuple[int, ...]:
    try:
        return tuple(socket.inet_aton(address))
    except OSError:
        return (256,)


def _free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("", 0))
        return int(sock.getsockname()[1])
