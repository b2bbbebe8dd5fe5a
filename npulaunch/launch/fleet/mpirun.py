"""The mpirun transport: the launcher starts each host's agent with Open MPI's mpirun, one process on that host
(``mpirun --host NODE:1 -np 1 ... /bin/sh -c AGENT``: plan/schedulers/mpi.py), the agent's code and JSON lines
on mpirun's stdin and stdout, which Open MPI forwards to that one process and back (mpirun(1), "Standard I/O":
stdin goes to rank 0, the remote output comes back on mpirun's). mpirun reaches the host through its own rsh
agent (ssh, or what ``--mca plm_rsh_agent`` in mpi.mpirun_options says), which starts Open MPI's orted there;
every agent is a new mpirun, so each attempt runs on the hosts it has, spare hosts included.

Nothing outlives the job: the agent stops its ranks when its stdin closes or the launcher's beats stop. An mpirun
that does not end after its agent's stdin closed (its host is gone) gets SIGTERM (Open MPI's way to end its job,
mpirun(1) "Signal Propagation"), then SIGKILL with every process it started here: its rsh agent runs in a
session of its own, holds mpirun's stdout and stderr, and would wait for the lost host for as long as TCP does.
Each mpirun has a session of its own too, so a Ctrl-C on the terminal reaches the launcher alone, which stops
the job through the agents. The agent's code is checked where it arrives (its SHA-256) and the agent started
again when it came damaged. (The damage once seen here was not Open MPI's: a stray wake byte from an earlier
attempt's channel written into a reused file descriptor, which fleet/link.py's wake pipes now prevent.)
Nothing here imports Fabric.
"""

from __future__ import annotations

import atexit
import hashlib
import itertools
import logging
import os
import select
import shutil
import signal
import socket
import subprocess
import threading
import time
from collections import deque
from typing import Any, Callable, Deque, Iterator, List, Mapping, Optional, Sequence, Set, Tuple

from npulaunch.host.procs import descendants, kill_pids, snapshot
from npulaunch.host.trace import debug
from npulaunch.host.wire import Closed, FromAgent, ToAgent, encode
from npulaunch.launch.fleet.link import (
    DAMAGED_STATUS,
    BackendError,
    Channel,
    LineReader,
    Messages,
    agent_command,
    wake,
)
from npulaunch.plan.schedulers.mpi import agent_argv

logger = logging.getLogger(__name__)

HEARTBEAT_TIMEOUT_S = 5.0  # as under srun: a host's agent silent this long is lost (beats come every 2 s)
STOP_AFTER_EOF_S = 10.0  # an mpirun still running this long after its agent's stdin closed gets SIGTERM
KILL_AFTER_TERM_S = 5.0  # and SIGKILL (with what it started here) this long after that
CLOSE_WAIT_S = 2.0  # when the job ends, how long an mpirun may take to end before it is killed
OUTPUT_AFTER_EXIT_S = 2.0  # an ended mpirun's output is read this long at most (its rsh agent may hold the pipes)
VERSION_TIMEOUT_S = 30.0
STDERR_LINES = 5
DAMAGED_RESTARTS = 2  # an agent whose code arrived damaged is started again this many times at most
DAMAGED_WORDS = "the agent's code arrived damaged"  # fleet/link.py's BOOTSTRAP
ROOT_REFUSED = "mpirun has detected an attempt to run as root"  # Open MPI's help text, orterun.c
ROOT_HINT = "mpirun does not run as root without --allow-run-as-root: add it to mpi.mpirun_options"


class MpirunChannel:
    """One agent started by its own mpirun: JSON lines over mpirun's stdin and stdout."""

    def __init__(self, host: str, messages: Messages, wake_fd: Optional[int]) -> None:
        self.host = host
        self.remote_dir = ""
        self.connection = ""  # the host's SSH_CONNECTION, when mpirun's rsh agent is ssh
        self._messages, self._wake_fd = messages, wake_fd
        self._process: Optional["subprocess.Popen[bytes]"] = None
        self._lock = threading.Lock()
        self._errors: Deque[str] = deque(maxlen=STDERR_LINES)
        self._errors_read = threading.Event()
        self._start: Tuple[List[str], bytes, Optional[ToAgent]] = ([], b"", None)
        self._restarts = 0
        self._closed = False

    def start(self, argv: List[str], code: bytes, first: ToAgent) -> None:
        self._start = (argv, code, first)
        self._spawn()

    def _spawn(self) -> None:
        argv, code, first = self._start
        try:
            process = subprocess.Popen(
                argv, stdin=subprocess.PIPE, stdout=subprocess.PIPE, stderr=subprocess.PIPE, start_new_session=True
            )
        except OSError as exc:
            raise BackendError(f"{self.host}: cannot start mpirun: {exc.strerror or exc}") from None
        _STARTED.add(process)
        self._process, self._errors, self._errors_read = process, deque(maxlen=STDERR_LINES), threading.Event()
        errors = (process, self._errors, self._errors_read)
        threading.Thread(target=_read_errors, args=errors, name=f"mpirun-{self.host}", daemon=True).start()
        threading.Thread(target=self._read, args=(process,), name=f"agent-{self.host}", daemon=True).start()
        if self._write(code) and first is not None:
            self.send(first)

    def send(self, message: ToAgent) -> bool:
        return self._write(encode(message.to_json()))

    def _write(self, data: bytes) -> bool:
        process = self._process
        if process is None or process.stdin is None:
            return False
        with self._lock:
            try:
                process.stdin.write(data)
                process.stdin.flush()
                return True
            except (OSError, ValueError):  # mpirun ended, or the channel was closed
                return False

    def _read(self, process: "subprocess.Popen[bytes]") -> None:
        assert process.stdout is not None
        lines = LineReader(self._put)
        for data in _output(process, process.stdout.fileno()):
            lines.feed(data)
            self.remote_dir = lines.remote_dir or self.remote_dir
            self.connection = lines.connection or self.connection
        status = process.wait()
        _STARTED.discard(process)
        self._errors_read.wait(OUTPUT_AFTER_EXIT_S)
        debug(__name__, "mpirun for %s ended with status %s: %s", self.host, status, list(self._errors))
        if self._damaged(status) and self._restarts < DAMAGED_RESTARTS and not self._closed:
            self._restarts += 1
            logger.warning("%s: the agent's code arrived damaged through mpirun; starting it again", self.host)
            try:
                self._spawn()
                return
            except BackendError as exc:
                self._errors.append(str(exc))
        self._put(Closed(status, list(self._errors)))

    def _damaged(self, status: int) -> bool:
        """Whether the agent's code arrived otherwise than it was sent (fleet/link.py's BOOTSTRAP said so): Open
        MPI 4.1's forwarding of stdin has been seen to lose part of it on a loaded machine."""
        return status == DAMAGED_STATUS and any(DAMAGED_WORDS in line for line in self._errors)

    def _put(self, message: FromAgent) -> None:
        self._messages.put((self.host, message))
        wake(self._wake_fd)

    def attach(self, messages: Messages, wake_fd: Optional[int] = None) -> None:
        self._messages, self._wake_fd = messages, wake_fd

    def end(self) -> None:
        """The job is over: this mpirun ends now (a host that is gone would keep it waiting)."""
        self._closed = True
        process = self._process
        if process is None or process.poll() is not None:
            return
        self._close_stdin(process)
        try:
            process.wait(CLOSE_WAIT_S)
        except subprocess.TimeoutExpired:
            _kill(process)

    def close_channel(self) -> None:
        """Close the agent's stdin (it stops its ranks and ends); mpirun is stopped if it does not end by itself
        (a host that is gone)."""
        self._closed = True
        process = self._process
        if process is None:
            return
        self._close_stdin(process)
        threading.Thread(target=_stop_later, args=(process,), daemon=True).start()

    def _close_stdin(self, process: "subprocess.Popen[bytes]") -> None:
        with self._lock:
            try:
                if process.stdin is not None:
                    process.stdin.close()
            except OSError:
                pass


def _read_errors(process: "subprocess.Popen[bytes]", errors: Deque[str], done: threading.Event) -> None:
    """mpirun's stderr (with -q: the rsh agent's and the agent's own words), its last lines kept in ``errors``."""
    assert process.stderr is not None
    refused, rest = False, b""
    for data in itertools.chain(_output(process, process.stderr.fileno()), [b"\n"]):
        *lines, rest = (rest + data).split(b"\n")  # whole lines only: a read may end mid-character
        for line in (raw.decode("utf-8", "replace").rstrip() for raw in lines):
            if line.strip("- \t"):  # Open MPI frames its messages with lines of dashes
                errors.append(line)
            refused = refused or ROOT_REFUSED in line
    if refused:  # said last: a report quotes the last line
        errors.append(ROOT_HINT)
    done.set()


# Every mpirun started here, until it ended: one still running when the launcher exits (a signal that ended it
# before its fleet was closed, or a stop that was still waiting) is killed then, with what it started here. An
# mpirun whose agent runs ends by itself when the launcher dies (the agent's stdin closes), but one that still
# waits for its rsh agent to reach the host would wait for as long as TCP does.
_STARTED: "Set[subprocess.Popen[bytes]]" = set()


@atexit.register
def _kill_the_rest() -> None:
    for process in list(_STARTED):
        if process.poll() is None:
            _kill(process)


def _output(process: "subprocess.Popen[bytes]", fd: int) -> Iterator[bytes]:
    """What mpirun writes on ``fd``, chunk by chunk, until EOF; or, once mpirun has ended, for
    OUTPUT_AFTER_EXIT_S at most (an rsh agent left behind keeps the pipe open)."""
    deadline = None
    while True:
        ready, _, _ = select.select([fd], [], [], 0.5)
        if ready:
            data = os.read(fd, 65536)
            if not data:
                return
            yield data
        elif process.poll() is not None:
            deadline = deadline or time.monotonic() + OUTPUT_AFTER_EXIT_S
            if time.monotonic() >= deadline:
                return


def _stop_later(process: "subprocess.Popen[bytes]") -> None:
    try:
        process.wait(STOP_AFTER_EOF_S)
    except subprocess.TimeoutExpired:
        try:
            process.send_signal(signal.SIGTERM)  # mpirun: end the job (it cannot, when the host is gone)
            process.wait(KILL_AFTER_TERM_S)
        except subprocess.TimeoutExpired:
            _kill(process)


def _kill(process: "subprocess.Popen[bytes]") -> None:
    """SIGKILL for mpirun and every process it started on this host (its rsh agent: a session of its own)."""
    started = descendants(process.pid, snapshot())
    kill_pids([process.pid, *started], signal.SIGKILL)
    process.wait()
    debug(__name__, "killed mpirun %d and what it started here: %s", process.pid, sorted(started))


class MpirunLink:
    """One host reached through mpirun (fleet/link.py's Link): each agent started there is an mpirun of its own."""

    def __init__(
        self, host: str, mpirun: str, options: Sequence[str], address: Optional[str], own: Optional[str]
    ) -> None:
        self.host, self.mpirun, self.options = host, mpirun, tuple(options)
        self._address, self._own = address, own
        self._channels: List[MpirunChannel] = []

    def start_agent(self, code: bytes, first: ToAgent, messages: Messages, wake_fd: Optional[int]) -> Channel:
        channel = MpirunChannel(self.host, messages, wake_fd)
        self._channels.append(channel)
        command = agent_command(len(code), digest=hashlib.sha256(code).hexdigest())  # checked where it arrives
        channel.start(agent_argv(self.mpirun, self.host, self.options, command), code, first)
        return channel

    def address(self) -> Optional[str]:
        """The host's address as mpirun's ssh reached it (its SSH_CONNECTION), else as this machine's name
        service gives it."""
        reached = self._reached()
        return reached[2] if reached else self._address

    def own_address(self) -> Optional[str]:
        """This machine's address toward the host, as ssh's connection there had it, else by the route to the
        host's address."""
        reached = self._reached()
        return reached[0] if reached else self._own

    def _reached(self) -> Optional[List[str]]:
        for channel in reversed(self._channels):
            fields = channel.connection.split()
            if len(fields) == 4:  # CLIENT_IP CLIENT_PORT SERVER_IP SERVER_PORT
                return fields
        return None

    def close(self) -> None:
        """The job is over: every mpirun started for this host ends."""
        for channel in self._channels:
            channel.end()
        self._channels.clear()


def open_mpi(command: str, run: Callable[..., "subprocess.CompletedProcess[str]"] = subprocess.run) -> str:
    """The path of ``command`` when it is Open MPI's mpirun (``mpirun --version``: "mpirun (Open MPI) 4.1.4");
    BackendError otherwise: the transport relies on Open MPI's options and its forwarding of stdin."""
    found = shutil.which(os.path.expanduser(command))
    if found is None:
        raise BackendError(f"{command} is not on the PATH (mpi.mpirun): the job's hosts cannot be reached with mpirun")
    try:
        said = run([found, "--version"], capture_output=True, text=True, timeout=VERSION_TIMEOUT_S, check=False)
    except (OSError, subprocess.TimeoutExpired) as exc:
        raise BackendError(f"{found} --version failed: {exc}") from None
    first = (said.stdout.strip().splitlines() or said.stderr.strip().splitlines() or ["nothing"])[0]
    if "Open MPI" not in first:
        raise BackendError(
            f"{found} is not Open MPI's mpirun (its --version says {first!r}): transport mpirun needs Open MPI's, "
            "set mpi.mpirun to its path"
        )
    return found


def _resolve(host: str) -> Optional[str]:
    try:
        return socket.gethostbyname(host)
    except OSError:
        return None


def mpirun_connect(
    settings: Mapping[str, Any], address_toward: Callable[[str], Optional[str]]
) -> Callable[[str], MpirunLink]:
    """How the fleet reaches each host with mpirun; ``settings``: the YAML's mpi section (mpirun, mpirun_options)."""
    tool = open_mpi(str(settings.get("mpirun") or "mpirun"))
    options = tuple(settings.get("mpirun_options", ()))

    def connect(host: str) -> MpirunLink:
        address = _resolve(host)
        return MpirunLink(host, tool, options, address, address_toward(address) if address else None)

    return connect
