"""torch's TCPStore, served by npulaunch: the store ``init_process_group("env://")`` meets at, up before any
rank starts, as torchrun's agent hosts it (``TORCHELASTIC_USE_AGENT_STORE=True``: every rank is then a
client, torch/distributed/rendezvous.py ``_create_c10d_store``). Without it rank 0 hosts the store, and a
rank that asks before rank 0 listens retries after a backoff: about 0.5 s of a 4-rank start on this
project's machine (bench/torch_start.py).

The wire protocol is TCPStore's (pytorch/pytorch torch/csrc/distributed/c10d/TCPStoreBackend.hpp, the
query types, and TCPStoreLibUvBackend.cpp, the server torch uses by default, @ 01afc5c9): a client first
sends VALIDATE and the magic number 0x3C85F7CE, then queries of one byte (the type) and their arguments;
strings and values as a 64-bit length and the bytes, integers little-endian as the machine's. torch 2.13's
client also PINGs a nonce back on connecting. Keys, waits (one STOP_WAITING byte when every key waited for
exists), counters (ADD keeps the number as its decimal text), compare-and-set (and its answer when the key
is missing), appends and queues behave as torch's own server's.

Standard library only, Python 3.7: it runs in the agent.
"""

import collections
import selectors
import socket
import struct
import threading

(
    VALIDATE,
    SET,
    COMPARE_SET,
    GET,
    ADD,
    CHECK,
    WAIT,
    GETNUMKEYS,
    DELETE_KEY,
    APPEND,
    MULTI_GET,
    MULTI_SET,
    CANCEL_WAIT,
    PING,
    QUEUE_PUSH,
    QUEUE_POP,
    QUEUE_LEN,
) = range(17)
MAGIC = 0x3C85F7CE
READY, NOT_READY = b"\x00", b"\x01"
STOP_WAITING, WAIT_CANCELED = b"\x00", b"\x01"
MAX_KEYS = 1 << 20  # more keys in one query than this is not a client of torch's
MAX_PAYLOAD = 1 << 31

_U32 = struct.Struct("<I")
_U64 = struct.Struct("<Q")
_I64 = struct.Struct("<q")


class Incomplete(Exception):
    """The query has not all arrived yet."""


class BadQuery(Exception):
    """Not torch's protocol: the connection is closed, as torch's server closes it."""


class _Reader(object):
    def __init__(self, data):
        self.data = data
        self.at = 0

    def take(self, size):
        if self.at + size > len(self.data):
            raise Incomplete()
        out = bytes(self.data[self.at : self.at + size])
        self.at += size
        return out

    def u64(self):
        return _U64.unpack(self.take(8))[0]

    def blob(self):
        size = self.u64()
        if size > MAX_PAYLOAD:
            raise BadQuery("a value of %d bytes" % size)
        return self.take(size)

    def count(self):
        size = self.u64()
        if size > MAX_KEYS:
            raise BadQuery("%d keys in one query" % size)
        return size


def _vector(value):
    return _U64.pack(len(value)) + value


class _Client(object):
    def __init__(self, sock):
        self.sock = sock
        self.buffer = bytearray()
        self.validated = False
        self.awaited = 0  # keys this client still waits for


class StoreServer(object):
    """A TCPStore server on ``port`` (0: a free one) of every address of this host; ``start()`` serves it
    from a thread of its own until ``close()``."""

    def __init__(self, port=0, host=""):
        self._listener = _listen(host, port)
        self.port = self._listener.getsockname()[1]
        self._selector = selectors.DefaultSelector()
        self._selector.register(self._listener, selectors.EVENT_READ, None)
        self._wake_r, self._wake_w = socket.socketpair()
        self._selector.register(self._wake_r, selectors.EVENT_READ, "wake")
        self._values = {}
        self._queues = collections.defaultdict(collections.deque)
        self._waiting = collections.defaultdict(list)  # key -> clients waiting for it
        self._clients = set()
        self._closed = False
        self._thread = threading.Thread(target=self._serve, name="npulaunch-tcpstore", daemon=True)

    def start(self):
        self._thread.start()
        return self

    def close(self):
        if self._closed:
            return
        self._closed = True
        try:
            self._wake_w.send(b"x")
        except OSError:
            pass
        if self._thread.is_alive():
            self._thread.join(5)
        for sock in [self._listener, self._wake_r, self._wake_w] + [c.sock for c in self._clients]:
            try:
                sock.close()
            except OSError:
                pass
        self._selector.close()

    # -- the loop ------------------------------------------------------------------------------------

    def _serve(self):
        while not self._closed:
            for key, _ in self._selector.select():
                if key.data == "wake":
                    return
                if key.data is None:
                    self._accept()
                else:
                    self._read(key.data)

    def _accept(self):
        try:
            sock, _ = self._listener.accept()
        except OSError:
            return
        sock.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
        client = _Client(sock)
        self._clients.add(client)
        self._selector.register(sock, selectors.EVENT_READ, client)

    def _read(self, client):
        try:
            data = client.sock.recv(65536)
        except OSError:
            data = b""
        if not data:
            self._drop(client)
            return
        client.buffer += data
        try:
            while client.buffer:
                reader = _Reader(client.buffer)
                try:
                    answer = self._query(client, reader)
                except Incomplete:
                    return
                del client.buffer[: reader.at]
                if answer:
                    client.sock.sendall(answer)
        except (BadQuery, OSError, ValueError):
            self._drop(client)

    def _drop(self, client):
        self._clients.discard(client)
        self._forget_waits(client)
        try:
            self._selector.unregister(client.sock)
        except (KeyError, ValueError):
            pass
        client.sock.close()

    # -- the queries ---------------------------------------------------------------------------------

    def _query(self, client, r):
        kind = r.take(1)[0]
        if not client.validated:  # torch's server reads nothing else from a new client
            if kind != VALIDATE or _U32.unpack(r.take(4))[0] != MAGIC:
                raise BadQuery("not validated")
            client.validated = True
            return b""
        if kind == PING:
            return r.take(4)
        if kind in (SET, APPEND, QUEUE_PUSH):
            key, value = r.blob(), r.blob()
            if kind == QUEUE_PUSH:
                self._queues[key].append(value)
                self._wake(key, one=True)
            else:
                self._values[key] = (self._values.get(key, b"") + value) if kind == APPEND else value
                self._wake(key)
            return b""
        if kind == COMPARE_SET:
            key, expected, new = r.blob(), r.blob(), r.blob()
            if key not in self._values:
                answer = expected
                if not expected:
                    self._values[key] = answer = new
            else:
                if self._values[key] == expected:
                    self._values[key] = new
                answer = self._values[key]
            self._wake(key)
            return _vector(answer)
        if kind == GET:
            return _vector(self._values.get(r.blob(), b""))
        if kind == ADD:
            key, amount = r.blob(), _I64.unpack(r.take(8))[0]
            total = amount + (int(self._values[key]) if key in self._values else 0)
            self._values[key] = str(total).encode()
            self._wake(key)
            return _I64.pack(total)
        if kind in (CHECK, WAIT, MULTI_GET):
            keys = [r.blob() for _ in range(r.count())]
            if kind == MULTI_GET:
                return b"".join(_vector(self._values.get(key, b"")) for key in keys)
            if kind == CHECK:
                return READY if self._have(keys) else NOT_READY
            if self._have(keys):
                return STOP_WAITING
            missing = [key for key in keys if key not in self._values]
            for key in missing:
                self._waiting[key].append(client)
            client.awaited = len(missing)
            return b""
        if kind == MULTI_SET:
            pairs = [(r.blob(), r.blob()) for _ in range(r.count())]
            for key, value in pairs:
                self._values[key] = value
                self._wake(key)
            return b""
        if kind == GETNUMKEYS:
            return _I64.pack(len(self._values))
        if kind == DELETE_KEY:
            return _I64.pack(1 if self._values.pop(r.blob(), None) is not None else 0)
        if kind == CANCEL_WAIT:
            self._forget_waits(client)
            return WAIT_CANCELED
        if kind == QUEUE_POP:
            queue = self._queues[r.blob()]
            answer = _I64.pack(len(queue))
            return answer + _vector(queue.popleft()) if queue else answer
        if kind == QUEUE_LEN:
            return _I64.pack(len(self._queues.get(r.blob(), ())))
        raise BadQuery("query type %d" % kind)

    def _have(self, keys):
        return all(key in self._values or self._queues.get(key) for key in keys)

    def _wake(self, key, one=False):
        """Answer the clients waiting for ``key`` whose every key now exists (a queue push: the first)."""
        waiting = self._waiting.get(key)
        if not waiting:
            return
        for client in list(waiting):
            waiting.remove(client)
            client.awaited -= 1
            if client.awaited == 0:
                try:
                    client.sock.sendall(STOP_WAITING)
                except OSError:
                    pass
                if one:
                    break
        if not waiting:
            self._waiting.pop(key, None)

    def _forget_waits(self, client):
        client.awaited = 0
        for key in list(self._waiting):
            clients = self._waiting[key]
            if client in clients:
                clients.remove(client)
            if not clients:
                del self._waiting[key]


class StoreClient(object):
    """A client of a TCPStore (torch's server or npulaunch's), for the launcher's own keys: the c10d
    rendezvous of launch/ (plan/schedulers/c10d.py). Blocking, one query at a time, each bounded by
    ``timeout_s``; an OSError (the server went away) reaches the caller."""

    def __init__(self, host, port, timeout_s=30.0):
        self.sock = socket.create_connection((host, port), timeout=timeout_s)
        self.sock.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
        self.sock.sendall(bytes([VALIDATE]) + _U32.pack(MAGIC))

    def close(self):
        self.sock.close()

    def set(self, key, value):
        self.sock.sendall(bytes([SET]) + _vector(_b(key)) + _vector(_b(value)))

    def get(self, key):
        """The key's value; b"" when it does not exist (npulaunch's server; torch's waits for it)."""
        self.sock.sendall(bytes([GET]) + _vector(_b(key)))
        return self._blob()

    def add(self, key, amount):
        self.sock.sendall(bytes([ADD]) + _vector(_b(key)) + _I64.pack(amount))
        return _I64.unpack(self._exactly(8))[0]

    def compare_set(self, key, expected, new):
        """The key's value after the swap (``new`` when it held ``expected``, or was missing and
        ``expected`` is empty)."""
        self.sock.sendall(bytes([COMPARE_SET]) + _vector(_b(key)) + _vector(_b(expected)) + _vector(_b(new)))
        return self._blob()

    def check(self, keys):
        self.sock.sendall(bytes([CHECK]) + _U64.pack(len(keys)) + b"".join(_vector(_b(k)) for k in keys))
        return self._exactly(1) == READY

    def _blob(self):
        return self._exactly(_U64.unpack(self._exactly(8))[0])

    def _exactly(self, size):
        data = b""
        while len(data) < size:
            chunk = self.sock.recv(size - len(data))
            if not chunk:
                raise ConnectionError("the store closed the connection")
            data += chunk
        return data


def _b(text):
    return text.encode() if isinstance(text, str) else bytes(text)


def _listen(host, port):
    """A listening socket on every IPv4 and IPv6 address (or ``host``), as torch's server binds."""
    if not host and socket.has_ipv6:
        try:
            sock = socket.socket(socket.AF_INET6, socket.SOCK_STREAM)
            sock.setsockopt(socket.IPPROTO_IPV6, socket.IPV6_V6ONLY, 0)
            sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
            sock.bind(("::", port))
            sock.listen(1024)
            return sock
        except OSError:
            sock.close()
    sock = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
    sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
    sock.bind((host or "0.0.0.0", port))
    sock.listen(1024)
    return sock
