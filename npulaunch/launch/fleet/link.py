"""What the fleet needs of a transport, whatever it is (SSH: fleet/ssh.py; Slurm's job steps: fleet/srun.py):
a ``Link`` to one host, which starts agents there and says the addresses on both ends, and the ``Channel``
of one agent, which carries JSON lines both ways. The lines an agent writes are read here, the same for
every transport. Imports no transport: Fabric and srun stay with their own modules.
"""

from __future__ import annotations

import json
import os
import queue
import shlex
import threading
from typing import Callable, Optional, Protocol, Set, Tuple

from npulaunch.host.errors import NpulaunchError
from npulaunch.host.wire import FromAgent, ToAgent, from_agent

Messages = queue.Queue[Tuple[str, FromAgent]]  # what the agents sent, by host

# Runs on the host, in a new private directory: copies the agent zip (argv[1] bytes) from stdin,
# unbuffered, so the JSON lines that follow stay in the pipe for the agent, then runs it in the
# same interpreter (one interpreter start per host). Any python3: the zip checks the version. With
# argv[2], the zip's SHA-256: a zip that arrived otherwise ends it with DAMAGED_STATUS.
DAMAGED_STATUS = 75  # EX_TEMPFAIL: the code did not arrive whole; starting again may work
BOOTSTRAP = """import json, os, sys
hashlib = __import__("hashlib") if sys.argv[2:] else None
left, digest = int(sys.argv[1]), hashlib and hashlib.sha256()
with open("agent.pyz", "wb") as out:
    while left:
        data = os.read(0, min(left, 1 << 16))
        if not data:
            sys.exit("npulaunch: the agent's code was cut short in transit")
        out.write(data)
        if digest:
            digest.update(data)
        left -= len(data)
if digest and digest.hexdigest() != sys.argv[2]:
    sys.stderr.write("npulaunch: the agent's code arrived damaged\\n")
    sys.exit(DAMAGED_STATUS)
sys.stdout.write(json.dumps({"type": "shipped", "dir": os.getcwd()}) + "\\n")
sys.stdout.flush()
sys.argv = [os.path.abspath("agent.pyz")]
import runpy
runpy.run_path(sys.argv[0], run_name="__main__")
""".replace("DAMAGED_STATUS", str(DAMAGED_STATUS))


class BackendError(NpulaunchError):
    """A host could not be reached, authenticated or prepared; nothing was started."""

    exit_code = 2


def agent_command(code_size: int, python: str = "python3", digest: str = "") -> str:
    """The one shell command that starts an agent on a host: make a private directory, copy the zip from
    stdin into it, run it, and remove the directory whatever way the agent ended. The zip travels on the
    agent's own stdin ahead of the JSON lines (no file transfer of its own); ``digest`` (its SHA-256, hex):
    checked on arrival."""
    py = shlex.quote(python)
    return (
        'umask 077 && d=$(mktemp -d /tmp/npulaunch-agent.XXXXXXXX) && cd "$d" && '
        f"{py} -I -S -c {shlex.quote(BOOTSTRAP)} {code_size}{' ' + digest if digest else ''}; "
        's=$?; cd / && rm -rf "$d"; exit $s'
    )


class Channel(Protocol):
    """The launcher's end of one agent: messages arrive in a queue, commands go out."""

    host: str
    remote_dir: str

    def send(self, message: ToAgent) -> bool: ...

    def attach(self, messages: Messages, wake_fd: Optional[int] = None) -> None: ...

    def close_channel(self) -> None: ...


class Link(Protocol):
    """One host, reached: agents start there; its address as the launcher reached it, and the launcher's
    address toward it."""

    def start_agent(self, code: bytes, first: ToAgent, messages: Messages, wake_fd: Optional[int]) -> Channel: ...

    def address(self) -> Optional[str]: ...

    def own_address(self) -> Optional[str]: ...

    def close(self) -> None: ...


Connect = Callable[[str], Link]  # a host's name -> its Link; raises BackendError


class LineReader:
    """An agent's output as it arrives in chunks: each whole JSON line decoded and handed on; its
    ``shipped`` line (where the agent's directory is) and a transport's ``reached`` line (the host's
    SSH_CONNECTION, as a shell there saw it: fleet/mpirun.py) kept apart."""

    def __init__(self, put: Callable[[FromAgent], None]) -> None:
        self._put = put
        self._buffer = b""
        self.remote_dir = ""
        self.connection = ""

    def feed(self, data: bytes) -> None:
        *lines, self._buffer = (self._buffer + data).split(b"\n")
        for line in lines:
            if not line.strip():
                continue
            try:
                message = json.loads(line)
            except ValueError:
                continue
            if message.get("type") == "shipped":
                self.remote_dir = message["dir"]
                continue
            if message.get("type") == "reached":
                self.connection = str(message.get("ssh") or "")
                continue
            decoded = from_agent(message)
            if decoded is not None:
                self._put(decoded)


# The write ends of the wake pipes open now. A channel's reader thread may outlive its attempt (a lost host's
# srun or mpirun ends late) and wake a pipe the attempt has closed; its number may by then be the stdin of the
# next attempt's agent, whose code a stray byte would damage. So a write end is written only while it is open,
# and closed under the same lock.
_OPEN_WAKES: Set[int] = set()
_WAKES_LOCK = threading.Lock()


def open_wake() -> Tuple[int, int]:
    """A wake pipe (read end, write end), both non-blocking: a select() loop waits on the read end."""
    read, write = os.pipe()
    os.set_blocking(read, False)
    os.set_blocking(write, False)
    with _WAKES_LOCK:
        _OPEN_WAKES.add(write)
    return read, write


def close_wake(pipe: Tuple[int, int]) -> None:
    with _WAKES_LOCK:
        _OPEN_WAKES.discard(pipe[1])
        os.close(pipe[0])
        os.close(pipe[1])


def wake(fd: Optional[int]) -> None:
    """Wake a select() loop waiting on the read end of ``fd``'s pipe (open_wake's), if it is still open."""
    if fd is None:
        return
    with _WAKES_LOCK:
        if fd not in _OPEN_WAKES:
            return
        try:
            os.write(fd, b"m")
        except OSError:  # the pipe is full: the loop is awake anyway
            pass
