"""The agent as a program of its own, for hosts the launcher reaches over a channel (SSH, or any
pipe): ``python3 agent.pyz`` reads its HostPlan and commands as JSON lines on stdin and streams
events and output lines as JSON lines on stdout.

It is responsible for its ranks whatever happens to the controller: when stdin closes, when the
controller stops sending heartbeats (a vanished network leaves an SSH session open), or when
stdout breaks, it stops every rank (SIGTERM, grace, SIGKILL) and exits. Standard library only,
Python 3.7+.

Protocol. In: optionally ``{"probe": {...}}`` first (the preflight: the agent answers ``{"type":
"probe", ...}`` and waits for the plan; end of input instead means the job will not start), then
``{"plan": {...}, "heartbeat_timeout_s": 15}``, then ``{"cmd": "heartbeat"}``,
``{"cmd": "stop", "reason": ...}``, ``{"cmd": "kill", "reason": ...}``, ``{"cmd": "signal",
"signal": "SIGUSR1"}``, ``{"cmd": "dump_stacks", "ranks": [...]}``. Out: ``{"type": "event", ...}``
(an Event), ``{"type": "output", "rank", "stream", "lines"}``, and last ``{"type": "done", ...}``.
"""

from __future__ import annotations

import json
import os
import select
import signal
import sys
import time
from typing import Any, BinaryIO, Dict, List, Optional

from npulaunch.host.events import Event
from npulaunch.host.spec import HostPlan, RankSpec
from npulaunch.host.agent.agent import Agent

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
            self._stream.write(json.dumps(message, separators=(",", ":")).encode("utf-8") + b"\n")
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
        self.gone = ""

    def on_readable(self) -> None:
        for message in self.reader.read():
            self.last_heard = time.monotonic()
            self.handle(message)
        if self.reader.eof:
            self.agent.unwatch(self.reader.fd)
            self.lost("the controller's channel closed")

    def handle(self, message: Dict[str, Any]) -> None:
        command = message.get("cmd")
        if command == "stop":
            self.agent.stop(str(message.get("reason", "the launcher asked")))
        elif command == "kill":
            self.agent.kill(str(message.get("reason", "the launcher asked")))
        elif command == "signal" and message.get("signal") in ("SIGUSR1", "SIGUSR2", "SIGWINCH"):
            self.agent.forward(getattr(signal, message["signal"]))
        elif command == "dump_stacks":
            self.agent.dump_stacks([int(r) for r in message.get("ranks", [])])

    def tick(self) -> None:
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

        sender.send(dict(probe(first["probe"]), type="probe"))
        first = read_first(reader, FIRST_LINE_TIMEOUT_S)
        if first is None and reader.eof:
            return 0  # the launcher decided not to start the job (another host failed its preflight)
    if first is None or "plan" not in first:
        sys.stderr.write("npulaunch agent: no plan received on stdin\n")
        return 2
    plan = HostPlan.from_dict(first["plan"])

    def output(spec: RankSpec, stream: str, lines: List[str]) -> None:
        sender.send({"type": "output", "rank": spec.rank, "stream": stream, "lines": lines})

    def emit(event: Event) -> None:
        record = json.loads(event.to_json())
        record["type"] = "event"
        sender.send(record)

    agent = Agent(plan, emit, output)
    controller = Controller(agent, reader, sender,
                            float(first.get("heartbeat_timeout_s", DEFAULT_HEARTBEAT_TIMEOUT_S)))
    agent.watch(stdin_fd, controller.on_readable)
    agent.tick = controller.tick
    outcome = agent.run()
    sender.send({"type": "done", "stop_signal": outcome.stop_signal, "strays_killed": outcome.strays_killed,
                 "controller_lost": controller.gone,
                 "ranks": [dict(r.__dict__, state=r.state.value) for r in outcome.ranks]})
    return 0
