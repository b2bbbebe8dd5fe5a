"""Who a waiting rank waited for, from the peer its lines name (diagnose/peers.py), and the root cause a node
of a multi-node job gives when its own ranks only waited: the host their peers name."""

from __future__ import annotations

from npulaunch.diagnose.peers import elsewhere, named_peers
from npulaunch.diagnose.rootcause import pick
from npulaunch.host.events import Event, EventKind
from npulaunch.host.records import RankResult, RankState

GLOO = (
    "RuntimeError: [/pytorch/third_party/gloo/gloo/transport/tcp/pair.cc:553] Connection closed by peer "
    "[10.0.0.12]:22210. This is typically caused by a remote worker crashing."
)
STORE = "torch.distributed.DistNetworkError: The client socket has failed to connect to (10.0.0.11, 29500)"


def symptom(rank: int, line: str, when: float) -> Event:
    data = {
        "signature": "peer-gone",
        "code": "",
        "cls": "peer_gone",
        "signature_kind": "symptom",
        "line": line,
        "line_time": when,
        "line_time_source": "read time",
        "hint": "",
        "source": "stderr",
    }
    return Event(EventKind.SIGNATURE_MATCHED, "j", "10.0.0.11", rank, data, time=when)


def test_the_peers_a_line_names() -> None:
    assert named_peers([GLOO, STORE, "[pair.cc:553] nothing", "loss 0.5 at 12:30"]) == [
        "10.0.0.12:22210",
        "10.0.0.11:29500",
    ]


def test_a_node_whose_ranks_only_waited_names_the_host_of_their_peers() -> None:
    hosts = {"n1": [0, 1], "10.0.0.11": [0, 1], "n2": [2, 3], "10.0.0.12": [2, 3]}
    said = elsewhere([symptom(0, GLOO, 5.0)], hosts, [0, 1])
    assert said == "; the peers they name are on 10.0.0.12 (ranks 2-3): the cause is in that host's logs"
    assert elsewhere([symptom(0, GLOO, 5.0)], hosts, [2, 3]) == ""  # the peer is this node's own


def test_the_node_s_report_says_the_cause_is_on_the_other_node() -> None:
    results = [RankResult(r, "n1", r, 10 + r, RankState.FAILED, 1.0, 6.0, 1, None) for r in (0, 1)]
    hosts = {"n1": [0, 1], "10.0.0.11": [0, 1], "n2": [2, 3], "10.0.0.12": [2, 3]}
    root = pick(results, [symptom(0, GLOO, 5.0), symptom(1, GLOO, 5.1)], hosts)
    assert root is not None and root.kind == "symptom" and root.rank == 0
    assert "ranks 0-1 reported peer-gone (symptoms of waiting on a peer)" in root.why
    assert "on 10.0.0.12 (ranks 2-3): the cause is in that host's logs" in root.why


def test_a_rank_that_ended_before_the_others_lost_it_is_the_cause() -> None:
    results = [RankResult(r, "n1", r, 10 + r, RankState.FAILED, 1.0, 6.0, 1, None) for r in (0, 1)]
    results.append(RankResult(2, "n1", 2, 12, RankState.SUCCEEDED, 1.0, 4.8, 0, None))
    root = pick(results, [symptom(0, GLOO, 5.0), symptom(1, GLOO, 5.1)], {"n1": [0, 1, 2]})
    assert root is not None and (root.rank, root.cls, root.code) == (2, "exit", "exit 0")
    assert "after rank 2 ended on its own" in root.why
