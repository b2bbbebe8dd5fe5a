"""The Slurm transport: inside a Slurm allocation the launcher (the batch script's one ``npulaunch run``)
starts each host's agent as a job step of its own, ``srun --nodes=1 --nodelist=NODE`` with the agent's
code and JSON lines on the step's stdin and stdout, as SSH carries them over a session. Each step
overlaps the others (``--overlap``: a node's agent, a probe and a new attempt's agent may share a node)
and binds no CPUs (the ranks bind their own: job.cpu_binding). A node that dies takes only its own step;
the allocation is held with ``--no-kill`` (the batch script's header, plan/schedulers/slurm.py).

Nothing outlives the job: the agent stops its ranks when its stdin closes or the launcher's beats stop,
whatever happened to the step; and when the batch script (the launcher) ends, Slurm ends the job and every
step with it. (The srun clients are started from the fleet's threads, so no PR_SET_PDEATHSIG: it fires when the
thread that started a child ends.) Nothing here imports Fabric.
"""

from __future__ import annotations

import os
import shutil
import signal
import subprocess
import threading
from typing import Callable, Dict, List, Optional

from npulaunch.host.trace import debug
from npulaunch.host.wire import Closed, FromAgent, ToAgent, encode
from npulaunch.launch.fleet.link import BackendError, Channel, LineReader, Messages, agent_command, wake
from npulaunch.plan.schedulers.slurm import step_argv

HEARTBEAT_TIMEOUT_S = 5.0  # a node's agent silent this long is lost: beats come every 2 s over the cluster's network
STOP_AFTER_EOF_S = 10.0  # an srun whose step does not end after its agent's stdin closed is stopped
CLOSE_WAIT_S = 2.0  # when the job ends, how long an srun may take to end before it is killed
STDERR_LINES = 5


class SrunChannel:
    """One agent in its own job step: JSON lines over the srun client's stdin and stdout."""

    def __init__(self, host: str, messages: Messages, wake_fd: Optional[int]) -> None:
        self.host = host
        self.remote_dir = ""
        self._messages, self._wake_fd = messages, wake_fd
        self._process: Optional["subprocess.Popen[bytes]"] = None
        self._lock = threading.Lock()

    def start(self, argv: List[str], code: bytes, first: ToAgent) -> None:
        try:
            self._process = subprocess.Popen(
                argv, stdin=subprocess.PIPE, stdout=subprocess.PIPE, stderr=subprocess.PIPE
            )
        except OSError as exc:
            raise BackendError(f"{self.host}: cannot start srun: {exc.strerror or exc}") from None
        threading.Thread(target=self._read, name=f"agent-{self.host}", daemon=True).start()
        if self._write(code):
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
            except (OSError, ValueError):  # the step ended, or the channel was closed
                return False

    def _read(self) -> None:
        process = self._process
        assert process is not None and process.stdout is not None and process.stderr is not None
        lines = LineReader(self._put)
        fd = process.stdout.fileno()
        for data in iter(lambda: os.read(fd, 65536), b""):
            lines.feed(data)
            self.remote_dir = lines.remote_dir or self.remote_dir
        errors = process.stderr.read(65536).decode("utf-8", "replace").strip().splitlines()
        status = process.wait()
        debug(__name__, "srun on %s ended with status %s", self.host, status)
        self._put(Closed(status, errors[-STDERR_LINES:]))

    def _put(self, message: FromAgent) -> None:
        self._messages.put((self.host, message))
        wake(self._wake_fd)

    def attach(self, messages: Messages, wake_fd: Optional[int] = None) -> None:
        self._messages, self._wake_fd = messages, wake_fd

    def end(self) -> None:
        """The job is over: the srun client ends now (its step with it: a node that is gone keeps it waiting)."""
        process = self._process
        if process is None or process.poll() is not None:
            return
        self.close_channel()
        try:
            process.wait(CLOSE_WAIT_S)
        except subprocess.TimeoutExpired:
            process.kill()
            process.wait()

    def close_channel(self) -> None:
        """Close the agent's stdin (it stops its ranks and ends); the srun client is stopped if its step does
        not end by itself (a node that is gone)."""
        process = self._process
        if process is None:
            return
        with self._lock:
            try:
                if process.stdin is not None:
                    process.stdin.close()
            except OSError:
                pass
        threading.Thread(target=_stop_later, args=(process,), daemon=True).start()


def _stop_later(process: "subprocess.Popen[bytes]") -> None:
    try:
        process.wait(STOP_AFTER_EOF_S)
    except subprocess.TimeoutExpired:
        process.send_signal(signal.SIGINT)  # srun: cancel the step
        try:
            process.wait(STOP_AFTER_EOF_S)
        except subprocess.TimeoutExpired:
            process.kill()
            process.wait()


class SrunLink:
    """One node of the allocation (fleet/link.py's Link): each agent started there is a job step."""

    def __init__(self, host: str, job_id: str, srun: str, address: Optional[str], own: Optional[str]) -> None:
        self.host, self.job_id, self.srun = host, job_id, srun
        self._address, self._own = address, own
        self._channels: List[SrunChannel] = []

    def start_agent(self, code: bytes, first: ToAgent, messages: Messages, wake_fd: Optional[int]) -> Channel:
        channel = SrunChannel(self.host, messages, wake_fd)
        self._channels.append(channel)
        channel.start(step_argv(self.srun, self.job_id, self.host, agent_command(len(code))), code, first)
        return channel

    def address(self) -> Optional[str]:
        return self._address

    def own_address(self) -> Optional[str]:
        return self._own

    def close(self) -> None:
        """The job is over: every srun client started here ends (a node that died leaves its srun waiting)."""
        for channel in self._channels:
            channel.end()
        self._channels.clear()


def srun_connect(
    job_id: str,
    addresses: Dict[str, Optional[str]],
    address_toward: Callable[[str], Optional[str]],
    srun: Optional[str] = None,
) -> Callable[[str], SrunLink]:
    """How the fleet reaches each node of Slurm job ``job_id``; ``addresses``: each node's address as Slurm
    knows it (``NodeAddr``)."""
    found = srun or shutil.which("srun")
    if found is None:
        raise BackendError("srun is not on the PATH: the job's nodes cannot be reached")
    tool: str = found

    def connect(host: str) -> SrunLink:
        address = addresses.get(host)
        return SrunLink(host, job_id, tool, address, address_toward(address) if address else None)

    return connect


def node_addresses(nodes: List[str], scontrol: Optional[str] = None) -> Dict[str, Optional[str]]:
    """Each node's address as Slurm knows it (``scontrol show node -o``: NodeAddr), None where it says none."""
    tool = scontrol or shutil.which("scontrol")
    found: Dict[str, Optional[str]] = {node: None for node in nodes}
    if tool is None:
        return found
    try:
        done = subprocess.run(
            [tool, "show", "node", "-o", ",".join(nodes)], capture_output=True, text=True, timeout=30, check=False
        )
    except (OSError, subprocess.TimeoutExpired):
        return found
    for line in done.stdout.splitlines():
        fields = dict(word.split("=", 1) for word in line.split() if "=" in word)
        name = fields.get("NodeName")
        if name in found:
            found[name] = fields.get("NodeAddr") or None
    return found
