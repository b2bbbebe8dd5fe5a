"""npulaunch's TCPStore server (host/tcpstore.py) against torch's own client: every query a torch
TCPStore client makes, answered as torch's server answers it, and real gloo ranks that meet at it
with TORCHELASTIC_USE_AGENT_STORE=True, as torchrun's ranks meet at its agent's store."""

from __future__ import annotations

import importlib.util
import os
import subprocess
import sys
from datetime import timedelta
from pathlib import Path

import pytest
from helpers import ROOT, require

SERVE = (
    "import sys; from npulaunch.host.tcpstore import StoreServer; s = StoreServer().start(); "
    "print(s.port, flush=True); sys.stdin.read()"
)


class Served:
    """The server in a process of its own, as in the agent: a torch client's call may hold the GIL while
    it waits for the answer (queue_len does), which would stop a server thread of the same process."""

    def __init__(self) -> None:
        env = dict(os.environ, PYTHONPATH=str(ROOT))
        self.proc = subprocess.Popen(
            [sys.executable, "-c", SERVE], stdin=subprocess.PIPE, stdout=subprocess.PIPE, text=True, env=env
        )
        assert self.proc.stdout is not None
        self.port = int(self.proc.stdout.readline())

    def close(self) -> None:
        assert self.proc.stdin is not None
        self.proc.stdin.close()
        self.proc.wait(10)


@pytest.fixture
def server():
    require(importlib.util.find_spec("torch") is not None, "torch (pip install -e '.[torch]')")
    served = Served()
    yield served
    served.close()


def client(port: int, timeout_s: float = 5.0):
    from torch.distributed import TCPStore

    return TCPStore("127.0.0.1", port, 1, False, timeout=timedelta(seconds=timeout_s))


def test_every_query_of_torchs_client(server: Served) -> None:
    store, other = client(server.port), client(server.port)
    store.set("a", "1")
    assert other.get("a") == b"1"
    assert store.add("n", 5) == 5 and other.add("n", -2) == 3 and store.get("n") == b"3"
    assert store.compare_set("a", "1", "2") == b"2"  # expected value: swapped
    assert store.compare_set("a", "9", "3") == b"2"  # not expected: unchanged
    assert store.compare_set("new", "", "x") == b"x"  # missing and nothing expected: set
    assert store.compare_set("absent", "e", "x") == b"e"  # missing: torch's server answers the expected
    assert store.check(["a", "n"]) and not store.check(["a", "nothing"])
    store.append("log", "ab")
    store.append("log", "cd")
    assert other.get("log") == b"abcd"
    store.multi_set(["k1", "k2"], ["v1", "v2"])
    assert other.multi_get(["k1", "k2"]) == [b"v1", b"v2"]
    assert store.num_keys() == 7
    assert store.delete_key("k1") and not store.delete_key("k1")
    store.wait(["a", "k2"])  # present: returns at once
    if hasattr(store, "queue_push"):
        store.queue_push("q", "first")
        store.queue_push("q", "second")
        assert other.queue_len("q") == 2
        assert other.queue_pop("q") == b"first" and other.queue_pop("q") == b"second"
        assert other.queue_len("q") == 0


def test_a_wait_returns_when_the_last_key_is_set_and_times_out_otherwise(server: Served) -> None:
    import threading

    store, setter = client(server.port), client(server.port)
    timer = threading.Timer(0.3, lambda: (setter.set("x", "1"), setter.add("y", 1)))
    timer.start()
    store.wait(["x", "y"], timedelta(seconds=5))
    assert store.get("y") == b"1"
    with pytest.raises(Exception, match="(?i)timeout|wait"):
        store.wait(["never"], timedelta(milliseconds=300))
    store.set("after", "ok")  # the connection is still good after a cancelled wait
    assert store.get("after") == b"ok"


def test_a_client_speaking_another_protocol_is_dropped_and_the_store_goes_on(server: Served) -> None:
    import socket

    with socket.create_connection(("127.0.0.1", server.port)) as rogue:
        rogue.sendall(b"GET / HTTP/1.1\r\n\r\n")
        rogue.settimeout(2)
        assert rogue.recv(10) == b""  # closed
    store = client(server.port)
    store.set("k", "v")
    assert store.get("k") == b"v"


RANK = """
import os, torch, torch.distributed as dist
dist.init_process_group("gloo")
total = torch.tensor([float(dist.get_rank() + 1)])
dist.all_reduce(total)
dist.barrier()
print("sum", total.item())
"""


def test_gloo_ranks_meet_at_it_as_at_torchruns_agent_store(server: Served, tmp_path: Path) -> None:
    script = tmp_path / "rank.py"
    script.write_text(RANK)
    procs = []
    for rank in range(4):
        env = dict(
            os.environ,
            MASTER_ADDR="127.0.0.1",
            MASTER_PORT=str(server.port),
            WORLD_SIZE="4",
            RANK=str(rank),
            LOCAL_RANK=str(rank),
            TORCHELASTIC_USE_AGENT_STORE="True",
            TORCHELASTIC_RESTART_COUNT="0",
            GLOO_SOCKET_IFNAME="lo",
            PYTHONPATH=str(ROOT),
        )
        procs.append(subprocess.Popen([sys.executable, str(script)], env=env, stdout=subprocess.PIPE, text=True))
    outs = [p.communicate(timeout=120)[0] for p in procs]
    assert [p.returncode for p in procs] == [0] * 4, outs
    assert all("sum 10.0" in out for out in outs), outs
