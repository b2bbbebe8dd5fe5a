"""The agent as a program of its own, for hosts the launcher reaches over a channel (SSH, or any
pipe): ``python3 agent.pyz`` reads its HostPlan and commands as JSON lines on stdin and streams
events and output lines as JSON lines on stdout.

It is responsible for its ranks whatever happens to the controller: when stdin closes, when the
controller stops sending heartbeats (a vanished network leaves an SSH session open), or when
stdout breaks, it stops every rank (SIGTERM, grace, SIGKILL) and exits. Standard library only,
Python 3.7+.

The messages are host/wire.py's: a probe first (the preflight: the agent answers and waits for
its plan; end of input instead means the job will not start), then Start, then Commands; out go
events, output batches and, last, Done.
"""

from __future__ import annotations

import json
import os
import select
import signal
import sys
import time
from typing import Any, BinaryIO, Dict, List, Optional

from npulaunch.host import timing
from npulaunch.host.agent.agent import Agent
from npulaunch.host.events import Event
from npulaunch.host.spec import FORWARDABLE_SIGNALS, RankSpec
from npulaunch.host.wire import (
    Beat,
    Command,
    Done,
    Output,
    ProbeAnswer,
    Start,
    encode,
    event_to_json,
)

FIRST_LINE_TIMEOUT_S = 60.0
DEFAULT_HEARTBEAT_TIMEOUT_S = 15.0


class LineReader:
    """JSON lines from a non-blocking fd; ``eof`` once the other side closed it."""

    def __init__(self, fd: int) -> None:
        self.fd = fd
        self.eof = False
        self._buffer = b""

    def read(self) -> List[Dict[str, Any]]:
        messages = []
        while True:
            try:
                data = os.read(self.fd, 65536)
            except BlockingIOError:
                break
            if not data:
                self.eof = True
                break
            self._buffer += data
        *lines, self._buffer = self._buffer.split(b"\n")
        for line in lines:
            if line.strip():
                try:
                    messages.append(json.loads(line.decode("utf-8")))
                except ValueError:
                    pass  # a garbled line is dropped; heartbeats keep the channel honest
        return messages


class Sender:
    """JSON lines to the controller; remembers when the channel broke."""

    def __init__(self, stream: BinaryIO) -> None:
        self._stream = stream
        self.broken = False

    def send(self, message: Dict[str, Any]) -> None:
        if self.broken:
            return
        try:
            self._stream.write(encode(message))
            self._stream.flush()
        except (BrokenPipeError, OSError, ValueError):
            self.broken = True


def read_first(reader: LineReader, timeout_s: float) -> Optional[Dict[str, Any]]:
    deadline = time.monotonic() + timeout_s
    while time.monotonic() < deadline and not reader.eof:
        select.select([reader.fd], [], [], max(0.0, deadline - time.monotonic()))
        messages = reader.read()
        if messages:
            return messages[0]
    return None


class Controller:
    """What the agent's controller (the launcher) asks for, and whether it is still there."""

    def __init__(self, agent: Agent, reader: LineReader, sender: Sender, heartbeat_timeout_s: float) -> None:
        self.agent, self.reader, self.sender = agent, reader, sender
        self.timeout_s = heartbeat_timeout_s
        self.last_heard = time.monotonic()
        self.next_beat = time.monotonic()
        self.gone = ""

    def on_readable(self) -> None:
        for message in self.reader.read():
            self.last_heard = time.monotonic()
            self.handle(message)
        if self.reader.eof:
            self.agent.unwatch(self.reader.fd)
            self.lost("the controller's channel closed")

    def handle(self, message: Dict[str, Any]) -> None:
        command = Command.from_json(message)
        if command.cmd == "stop":
            self.agent.stop(command.reason)
        elif command.cmd == "kill":
            self.agent.kill(command.reason)
        elif command.cmd == "signal" and command.signal in FORWARDABLE_SIGNALS:
            self.agent.forward(getattr(signal, command.signal))
        elif command.cmd == "dump_stacks":
            self.agent.dump_stacks(command.ranks)

    def tick(self) -> None:
        if time.monotonic() >= self.next_beat:  # the launcher's sign that this host is still there
            self.next_beat = time.monotonic() + timing.seconds("heartbeat_interval_s")
            self.sender.send(Beat().to_json())
        if self.sender.broken:
            self.lost("the controller's channel broke")
        elif self.timeout_s and time.monotonic() - self.last_heard > self.timeout_s:
            self.lost(f"no heartbeat from the controller for {self.timeout_s:g} s")

    def lost(self, why: str) -> None:
        if not self.gone:
            self.gone = why
            self.agent.stop(why)


def main() -> int:
    stdin_fd = sys.stdin.fileno()
    os.set_blocking(stdin_fd, False)
    reader, sender = LineReader(stdin_fd), Sender(sys.stdout.buffer)
    first = read_first(reader, FIRST_LINE_TIMEOUT_S)
    if first is not None and "probe" in first:  # the preflight: answer, then wait for the plan
        from npulaunch.host.agent.probe import probe

        sender.send(ProbeAnswer(probe(first["probe"])).to_json())
        first = read_first(reader, FIRST_LINE_TIMEOUT_S)
        if first is None and reader.eof:
            return 0  # the launcher decided not to start the job (another host failed its preflight)
    if first is None or "plan" not in first:
        sys.stderr.write("npulaunch agent: no plan received on stdin\n")
        return 2
    start = Start.from_json(first, DEFAULT_HEARTBEAT_TIMEOUT_S)

    def output(spec: RankSpec, stream: str, block: bytes) -> None:
        sender.send(Output.of(spec.rank, stream, block).to_json())

    def emit(event: Event) -> None:
        sender.send(event_to_json(event))

    with timing.applied(start.plan.timing):  # the launcher's intervals, in this host's process too
        agent = Agent(start.plan, emit, output)
        controller = Controller(agent, reader, sender, start.heartbeat_timeout_s)
        agent.watch(stdin_fd, controller.on_readable)
        agent.tick = controller.tick
        outcome = agent.run()
    sender.send(Done(outcome.ranks, outcome.stop_signal, outcome.strays_killed, controller.gone).to_json())
    return 0
