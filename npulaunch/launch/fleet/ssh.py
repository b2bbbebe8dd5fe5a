"""The SSH transport: connect to a host (host keys checked against known_hosts unless accepting unknown
hosts was asked for), ship the agent zip application into a private temporary directory (mkdtemp-style,
0700, removed when the agent exits), start it without a pty, and exchange JSON lines with it. Fabric
(paramiko) is imported only here, only when a job has remote hosts.

The remote command is the only shell string npulaunch builds: every piece goes through
shlex.quote. What the ranks run travels inside the JSON plan, never on a command line.
"""

from __future__ import annotations

import logging
import os
import socket
import threading
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any, Callable, Dict, Optional

import paramiko
from fabric import Connection

from npulaunch.host.wire import Closed, FromAgent, ToAgent, encode
from npulaunch.launch.fleet.link import BackendError, Channel, LineReader, Messages, agent_command, wake

if TYPE_CHECKING:
    from npulaunch.config.cluster import ClusterConfig

CONNECT_TIMEOUT_S = 10.0
# paramiko logs a failed handshake with a traceback; with no handler configured, Python's last-resort
# handler would print it. npulaunch reports the failure itself, one line per host.
logging.getLogger("paramiko").addHandler(logging.NullHandler())


@dataclass(frozen=True)
class SshTarget:
    host: str  # a name, an address, or an alias of the user's ~/.ssh/config
    user: Optional[str] = None
    port: Optional[int] = None
    identity_file: Optional[str] = None
    known_hosts: Optional[str] = None  # default: the user's ~/.ssh/known_hosts
    ssh_config: Optional[str] = None  # default: ~/.ssh/config
    accept_unknown_hosts: bool = False
    connect_timeout_s: float = CONNECT_TIMEOUT_S


def connect(target: SshTarget) -> Connection:
    """An authenticated connection, or BackendError saying what failed."""
    from fabric import Config

    overrides: Dict[str, Any] = {"load_ssh_configs": True}
    if target.ssh_config:
        overrides["ssh_config_path"] = target.ssh_config
    config = Config(overrides=overrides)
    kwargs: Dict[str, Any] = {"look_for_keys": target.identity_file is None, "allow_agent": True}
    if target.identity_file:
        kwargs["key_filename"] = target.identity_file
    connection = Connection(
        target.host,
        user=target.user,
        port=target.port,
        config=config,
        connect_timeout=target.connect_timeout_s,
        connect_kwargs=kwargs,
    )
    client = connection.client
    client.load_system_host_keys()
    if target.known_hosts:
        client.load_host_keys(target.known_hosts)
    client.set_missing_host_key_policy(
        paramiko.AutoAddPolicy() if target.accept_unknown_hosts else paramiko.RejectPolicy()
    )
    try:
        connection.open()
    except paramiko.SSHException as exc:
        if "not found in known_hosts" in str(exc) or "Server" in str(exc) and "not found" in str(exc):
            raise BackendError(
                f"{target.host}: host key not known ({exc}); add it to known_hosts, or set "
                "ssh.accept_unknown_hosts: true to trust it"
            ) from None
        raise BackendError(f"{target.host}: SSH failed: {exc}") from None
    except OSError as exc:
        raise BackendError(f"{target.host}: cannot connect: {exc.strerror or exc}") from None
    transport = client.get_transport()
    if transport is not None and isinstance(transport.sock, socket.socket):  # not a ProxyCommand
        # Every exchange is one small message waiting for an answer: Nagle's algorithm against the
        # server's delayed ACK would add ~40 ms to each of them.
        transport.sock.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
    return connection


class AgentChannel:
    """The launcher's end of one remote agent: messages in a queue, commands out."""

    def __init__(
        self,
        connection: Connection,
        host: str,
        messages: Messages,
        wake_fd: Optional[int] = None,
    ) -> None:
        self.connection, self.host, self._messages = connection, host, messages
        self._wake_fd = wake_fd  # written to after each message, so a select() loop wakes up
        self._channel: Optional[paramiko.Channel] = None
        self._reader: Optional[threading.Thread] = None
        self.remote_dir = ""

    def start(self, agent_zip: bytes, first: ToAgent, python: str = "python3") -> None:
        """Ship the agent and start it with its first message: one remote command (each costs a login
        shell, whose rc files can take ~0.1 s on a real host), fleet/link.py's ``agent_command``."""
        transport = self.connection.client.get_transport()
        assert transport is not None
        channel = transport.open_session()
        channel.exec_command(agent_command(len(agent_zip), python))  # no pty: the agent itself watches its stdin
        self._channel = channel
        self._reader = threading.Thread(target=self._read, name=f"agent-{self.host}", daemon=True)
        self._reader.start()
        try:
            channel.sendall(agent_zip)
        except (OSError, paramiko.SSHException):
            return  # the command failed early; the reader reports how
        self.send(first)

    def send(self, message: ToAgent) -> bool:
        """Send one message; False when the channel is gone."""
        if self._channel is None or self._channel.closed:
            return False
        try:
            self._channel.sendall(encode(message.to_json()))
            return True
        except (OSError, paramiko.SSHException):
            return False

    def _read(self) -> None:
        assert self._channel is not None
        lines = LineReader(self._put)
        while True:
            data = self._channel.recv(65536)
            if not data:
                break
            lines.feed(data)
            self.remote_dir = lines.remote_dir or self.remote_dir
        status = self._channel.recv_exit_status()
        errors = b""
        while self._channel.recv_stderr_ready() and len(errors) < 65536:
            errors += self._channel.recv_stderr(65536)
        self._put(Closed(status, errors.decode("utf-8", "replace").strip().splitlines()[-5:]))

    def _put(self, message: FromAgent) -> None:
        self._messages.put((self.host, message))
        wake(self._wake_fd)

    def attach(self, messages: Messages, wake_fd: Optional[int] = None) -> None:
        """Deliver the messages from now on to another queue (a new attempt's loop)."""
        self._messages, self._wake_fd = messages, wake_fd

    def close_channel(self) -> None:
        """Close this agent's channel (its stdin ends: it stops its ranks); keep the connection."""
        if self._channel is not None:
            self._channel.close()

    def close(self) -> None:
        self.close_channel()
        self.connection.close()


class SshLink:
    """One host over SSH (fleet/link.py's Link): an open connection; each agent a session on it."""

    def __init__(self, connection: Connection, host: str) -> None:
        self.connection, self.host = connection, host

    def start_agent(self, code: bytes, first: ToAgent, messages: Messages, wake_fd: Optional[int]) -> Channel:
        channel = AgentChannel(self.connection, self.host, messages, wake_fd)
        channel.start(code, first)
        return channel

    def address(self) -> Optional[str]:
        """The address this launcher reached the host at (a rank-table-free job's CM_WORKER_IP)."""
        transport = self.connection.client.get_transport()
        try:
            return str(transport.getpeername()[0]) if transport is not None else None
        except OSError:
            return None

    def own_address(self) -> Optional[str]:
        """This launcher's address toward the host (its end of the SSH connection): where the host reaches a
        meeting point on the launcher's machine (MASTER_ADDR, MS_SCHED_HOST) and the launcher's HCCL_IF_IP."""
        transport = self.connection.client.get_transport()
        try:
            return str(transport.sock.getsockname()[0]) if transport is not None else None
        except (OSError, AttributeError):
            return None

    def close(self) -> None:
        self.connection.close()


def ssh_targets(config: "ClusterConfig") -> Dict[str, SshTarget]:
    """Every host of the job (spares included) as the YAML's ssh section and its host entries say to reach it."""
    targets = {}
    for host in config.hosts + config.spares:
        login = dict(config.ssh, **host.ssh)
        paths = {
            key: os.path.expanduser(login[key]) if login.get(key) else None
            for key in ("identity_file", "known_hosts", "config")
        }
        targets[host.host] = SshTarget(
            host.host,
            user=login.get("user"),
            port=login.get("port"),
            identity_file=paths["identity_file"],
            known_hosts=paths["known_hosts"],
            ssh_config=paths["config"],
            accept_unknown_hosts=bool(login.get("accept_unknown_hosts", False)),
            connect_timeout_s=float(login.get("connect_timeout_s", 10.0)),
        )
    return targets


def ssh_connect(config: "ClusterConfig") -> Callable[[str], SshLink]:
    """How the fleet reaches each host of ``config`` over SSH."""
    targets = ssh_targets(config)
    return lambda host: SshLink(connect(targets[host]), host)
