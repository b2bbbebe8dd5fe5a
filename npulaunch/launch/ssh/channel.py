"""One host's agent over SSH: connect (host keys checked against known_hosts unless accepting
unknown hosts was asked for), ship the agent zip application into a private temporary directory
(mkdtemp-style, 0700, removed when the agent exits), start it without a pty, and exchange JSON
lines with it. Fabric (paramiko) is imported only here, only when a job has remote hosts.

The remote command is the only shell string npulaunch builds: every piece goes through
shlex.quote. What the ranks run travels inside the JSON plan, never on a command line.
"""

from __future__ import annotations

import json
import logging
import os
import queue
import shlex
import socket
import threading
from dataclasses import dataclass
from typing import Any, Dict, Optional, Tuple

import paramiko
from fabric import Connection

from npulaunch.host.errors import NpulaunchError
from npulaunch.host.wire import Closed, FromAgent, ToAgent, encode, from_agent

CONNECT_TIMEOUT_S = 10.0
# paramiko logs a failed handshake with a traceback; with no handler configured, Python's last-resort
# handler would print it. npulaunch reports the failure itself, one line per host.
logging.getLogger("paramiko").addHandler(logging.NullHandler())
# Runs on the host, in the new private directory: copies the agent zip (argv[1] bytes) from stdin,
# unbuffered, so the JSON lines that follow stay in the pipe for the agent, then runs it in the
# same interpreter (one interpreter start per host). Any python3: the zip checks the version.
BOOTSTRAP = """import json, os, sys
left = int(sys.argv[1])
with open("agent.pyz", "wb") as out:
    while left:
        data = os.read(0, min(left, 1 << 16))
        if not data:
            sys.exit("npulaunch: the agent's code was cut short in transit")
        out.write(data)
        left -= len(data)
sys.stdout.write(json.dumps({"type": "shipped", "dir": os.getcwd()}) + "\\n")
sys.stdout.flush()
sys.argv = [os.path.abspath("agent.pyz")]
import runpy
runpy.run_path(sys.argv[0], run_name="__main__")
"""


class BackendError(NpulaunchError):
    """A host could not be reached, authenticated or prepared; nothing was started."""

    exit_code = 2


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
        messages: "queue.Queue[Tuple[str, FromAgent]]",
        wake_fd: Optional[int] = None,
    ) -> None:
        self.connection, self.host, self._messages = connection, host, messages
        self._wake_fd = wake_fd  # written to after each message, so a select() loop wakes up
        self._channel: Optional[paramiko.Channel] = None
        self._reader: Optional[threading.Thread] = None
        self.remote_dir = ""

    def start(self, agent_zip: bytes, first: ToAgent, python: str = "python3") -> None:
        """Ship the agent into a private temporary directory and start it with its first message.

        One remote command does it all (each command costs a login shell, whose rc files can take
        ~0.1 s on a real host): make the directory, copy the zip from stdin into it, run it, and
        remove the directory whatever way the agent ended. The zip travels on the channel's own
        stdin, ahead of the JSON lines, so there is no SFTP session either."""
        py = shlex.quote(python)
        command = (
            'umask 077 && d=$(mktemp -d /tmp/npulaunch-agent.XXXXXXXX) && cd "$d" && '
            f"{py} -I -S -c {shlex.quote(BOOTSTRAP)} {len(agent_zip)}; "
            's=$?; cd / && rm -rf "$d"; exit $s'
        )
        transport = self.connection.client.get_transport()
        assert transport is not None
        channel = transport.open_session()
        channel.exec_command(command)  # no pty: the agent itself watches its stdin
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
        buffer = b""
        while True:
            data = self._channel.recv(65536)
            if not data:
                break
            *lines, buffer = (buffer + data).split(b"\n")
            for line in lines:
                if line.strip():
                    try:
                        message = json.loads(line)
                    except ValueError:
                        continue
                    if message.get("type") == "shipped":
                        self.remote_dir = message["dir"]
                        continue
                    decoded = from_agent(message)
                    if decoded is not None:
                        self._put(decoded)
        status = self._channel.recv_exit_status()
        errors = b""
        while self._channel.recv_stderr_ready() and len(errors) < 65536:
            errors += self._channel.recv_stderr(65536)
        self._put(Closed(status, errors.decode("utf-8", "replace").strip().splitlines()[-5:]))

    def _put(self, message: FromAgent) -> None:
        self._messages.put((self.host, message))
        if self._wake_fd is not None:
            try:
                os.write(self._wake_fd, b"m")
            except OSError:  # the pipe is full: the loop is awake anyway
                pass

    def attach(self, messages: "queue.Queue[Tuple[str, FromAgent]]", wake_fd: Optional[int] = None) -> None:
        """Deliver the messages from now on to another queue (a new attempt's loop)."""
        self._messages, self._wake_fd = messages, wake_fd

    def close_channel(self) -> None:
        """Close this agent's channel (its stdin ends: it stops its ranks); keep the connection."""
        if self._channel is not None:
            self._channel.close()

    def close(self) -> None:
        self.close_channel()
        self.connection.close()
