"""torchrun's c10d rendezvous as npulaunch runs it (plan/schedulers/c10d.py): nodes that meet at a TCPStore
on the endpoint, served by the npulaunch of the endpoint's host, and leave with their node ranks, node 0's
store address and one job id. Each node here is a thread calling ``meet`` on real sockets of this host;
the two-process runs against torchrun are in tests/launch/test_torchrun_rendezvous.py."""

from __future__ import annotations

import threading
import time
from typing import Dict, List, Union

import pytest
from helpers import free_port_window

from npulaunch.config.cluster import Rendezvous
from npulaunch.plan.schedulers.c10d import Membership, Met, RendezvousError, meet, stop_serving


@pytest.fixture(autouse=True)
def _served_stores_closed():
    yield
    stop_serving()


def nodes_meet(rdzv: Rendezvous, count: int, nproc: Union[int, List[int]] = 2, stagger_s: float = 0.0):
    """``count`` nodes (threads) meeting at ``rdzv``: each one's Met, or the RendezvousError it got."""
    sizes = nproc if isinstance(nproc, list) else [nproc] * count
    results: Dict[int, Union[Met, RendezvousError]] = {}
    lines: List[str] = []

    def node(index: int) -> None:
        try:
            results[index] = meet(rdzv, sizes[index], f"job-of-{index}", say=lines.append)
        except RendezvousError as exc:
            results[index] = exc

    threads = []
    for index in range(count):
        thread = threading.Thread(target=node, args=(index,))
        thread.start()
        threads.append(thread)
        time.sleep(stagger_s)
    for thread in threads:
        thread.join(30)
    return [results[index] for index in range(count)], lines


def rendezvous(port: int, low: int, high: int, join: float = 20.0, last_call: float = 30.0, is_host=None):
    return Rendezvous("127.0.0.1", port, "job7", low, high, join, last_call, is_host)


def test_two_nodes_meet_and_leave_with_one_world() -> None:
    (first, second), _ = nodes_meet(rendezvous(free_port_window(1), 2, 2), 2, stagger_s=0.2)
    assert isinstance(first, Met) and isinstance(second, Met)
    assert {first.node_rank, second.node_rank} == {0, 1} and first.nnodes == second.nnodes == 2
    # the node that serves the store (the first here: it bound the port) is node 0, and its address is the master
    assert first.served and not second.served and first.node_rank == 0
    assert (first.master_addr, first.master_port) == (second.master_addr, second.master_port)
    assert first.master_addr == "127.0.0.1" and 0 < first.master_port < 65536
    assert first.job_id == second.job_id == "job-of-0"  # node 0's
    assert first.nodes == second.nodes and [n["nproc"] for n in first.nodes] == [2, 2]


def test_min_to_max_nodes_start_after_the_last_call_with_those_that_came() -> None:
    started = time.monotonic()
    mets, lines = nodes_meet(rendezvous(free_port_window(1), 1, 3, last_call=1.0), 2, stagger_s=0.2)
    assert all(isinstance(m, Met) and m.nnodes == 2 for m in mets)
    assert sorted(m.node_rank for m in mets if isinstance(m, Met)) == [0, 1]
    assert time.monotonic() - started >= 1.0  # the last call was waited for: a third node could have come
    assert any("1 of 1 to 3 nodes" in line for line in lines)


def test_a_node_after_the_close_waits_for_the_world_to_re_form_and_says_why_it_gave_up() -> None:
    port = free_port_window(1)
    first, _ = nodes_meet(rendezvous(port, 2, 2), 2)
    assert all(isinstance(m, Met) for m in first)  # the served store goes on, as node 0's job runs
    (late,), lines = nodes_meet(rendezvous(port, 2, 2, join=0.6), 1)
    assert isinstance(late, RendezvousError)
    assert "the job runs on 2 nodes without this one, and was not re-formed within 0.6 s" in str(late)
    assert "it has its most nodes (--nnodes 2:2)" in str(late)
    assert any("this node joins when the world is re-formed" in line for line in lines)


def test_a_node_waiting_to_join_makes_the_world_re_form_with_it() -> None:
    rdzv = rendezvous(free_port_window(1), 1, 3, last_call=0.5)
    a, b = Membership(rdzv), Membership(rdzv)
    a_met, b_met = run_both(lambda: a.meet(2, "ja"), lambda: b.meet(2, "jb"), stagger_s=0.2)
    assert (a_met.node_rank, b_met.node_rank, a_met.nnodes) == (0, 1, 2) and a.pending() == b.pending() == ("", False)
    c = Membership(rdzv)
    late: List[Met] = []
    joining = threading.Thread(target=lambda: late.append(c.meet(2, "jc")))
    joining.start()
    assert wait_for(lambda: a.pending() == ("1 node waits to join", False))  # what stops a's and b's ranks
    a.attempt, a.cause, b.cause = 2, "join", "join"
    a_new, b_new = run_both(lambda: a.meet(2, "ja"), lambda: b.meet(2, "jb"))
    joining.join(10)
    assert late and [m.nnodes for m in (a_new, b_new, late[0])] == [3, 3, 3]
    # the nodes that ran keep their places; node 0's job id and attempt number are everyone's
    assert [m.node_rank for m in (a_new, b_new, late[0])] == [0, 1, 2]
    assert {m.job_id for m in (a_new, b_new, late[0])} == {"ja"} and late[0].attempt == 2
    assert a_new.round == late[0].round == 1 and a_new.waited_s < 0.5  # all expected came: no last call


def test_a_restart_elsewhere_is_told_apart_from_a_join() -> None:
    rdzv = rendezvous(free_port_window(1), 2, 2)
    a, b = Membership(rdzv), Membership(rdzv)
    run_both(lambda: a.meet(2, "j"), lambda: b.meet(2, "j"), stagger_s=0.2)
    meeting = threading.Thread(target=b.meet, args=(2, "j"))  # b's ranks failed: it meets again (cause restart)
    meeting.start()
    assert wait_for(lambda: a.pending() == ("another node restarts after a failure", True))
    assert a.pending(joins_only=True) == ("", False)
    a.meet(2, "j")
    meeting.join(10)


def test_a_node_whose_job_ended_is_not_waited_for() -> None:
    rdzv = rendezvous(free_port_window(1), 1, 2, last_call=30.0)
    a, b = Membership(rdzv), Membership(rdzv)
    run_both(lambda: a.meet(2, "j"), lambda: b.meet(2, "j"), stagger_s=0.2)
    b.leave()
    again = a.meet(2, "j")
    assert again.nnodes == 1 and again.waited_s < 5  # not the last call's 30 s


def test_a_world_that_cannot_reach_min_nodes_again_fails_at_once() -> None:
    rdzv = rendezvous(free_port_window(1), 2, 2)
    a, b = Membership(rdzv), Membership(rdzv)
    run_both(lambda: a.meet(2, "j"), lambda: b.meet(2, "j"), stagger_s=0.2)
    b.leave()
    with pytest.raises(RendezvousError, match="the world cannot re-form with 2 nodes or more: 1 came back"):
        a.meet(2, "j")


def run_both(one, other, stagger_s: float = 0.0):
    results: Dict[int, object] = {}
    threads = [
        threading.Thread(target=lambda i=i, f=f: results.__setitem__(i, f())) for i, f in enumerate((one, other))
    ]
    for thread in threads:
        thread.start()
        time.sleep(stagger_s)
    for thread in threads:
        thread.join(30)
    return results[0], results[1]


def wait_for(predicate, timeout_s: float = 10.0) -> bool:
    deadline = time.monotonic() + timeout_s
    while time.monotonic() < deadline:
        if predicate():
            return True
        time.sleep(0.05)
    return False


def test_too_few_nodes_within_the_join_timeout_fail_naming_the_count() -> None:
    (alone,), _ = nodes_meet(rendezvous(free_port_window(1), 2, 2, join=0.6), 1)
    assert isinstance(alone, RendezvousError)
    assert "1 of 2 nodes came within 0.6 s (join_timeout)" in str(alone)


def test_an_endpoint_nobody_serves_fails_after_the_join_timeout() -> None:
    (alone,), _ = nodes_meet(rendezvous(free_port_window(1), 2, 2, join=0.6, is_host=False), 1)
    assert isinstance(alone, RendezvousError)
    assert "nobody served the c10d rendezvous 'job7' at 127.0.0.1:" in str(alone)
    assert "the endpoint must be the address of one of the nodes" in str(alone)


def test_nodes_of_different_sizes_are_refused() -> None:
    mets, _ = nodes_meet(rendezvous(free_port_window(1), 2, 2), 2, nproc=[2, 4])
    assert all(isinstance(m, RendezvousError) for m in mets)
    assert "the nodes run different numbers of ranks" in str(mets[0])


def test_is_host_on_a_taken_port_is_an_error() -> None:
    import socket

    with socket.socket() as taken:
        taken.bind(("", 0))
        taken.listen(1)
        port = taken.getsockname()[1]
        with pytest.raises(RendezvousError, match="is_host=1: port .* is taken on this host"):
            meet(rendezvous(port, 1, 1, is_host=True), 1, "j")
