"""The seams of the launch stage: ``RankRunner``, what runs a plan's ranks (this host's agent
in-process, or every host's agent over SSH), and ``Console``, where the supervisor shows what
happens. The supervisor's loop pulls items from a runner; nothing calls back into it.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, List, NamedTuple, Protocol, Sequence, Union

from npulaunch.host.events import Event
from npulaunch.host.records import AgentOutcome
from npulaunch.host.spec import RankSpec

if TYPE_CHECKING:
    from npulaunch.diagnose.summary import JobSummary


class RankOutput(NamedTuple):
    """A block of whole lines one rank printed on one stream (``stdout`` or ``stderr``), as bytes
    (host/tail.py)."""

    spec: RankSpec
    stream: str
    block: bytes


Item = Union[Event, RankOutput]


class RankRunner(Protocol):
    """Runs the ranks of one attempt. The supervisor calls ``start``, then ``items`` until
    ``done``, acting on what it gets (``stop``, ``kill``, ``dump_stacks``) between calls, and
    finally ``result``; ``close`` is always called and kills whatever is still running."""

    def start(self) -> None: ...

    def items(self, timeout_s: float) -> List[Item]:
        """What happened since the last call, waiting up to ``timeout_s`` for something."""
        ...

    @property
    def done(self) -> bool:
        """Every rank has ended and every item has been handed out."""
        ...

    def stop(self, reason: str) -> None:
        """SIGTERM every rank now, SIGKILL after the grace period."""
        ...

    def kill(self, reason: str) -> None: ...

    def dump_stacks(self, ranks: Sequence[int]) -> int:
        """Ask these ranks for their Python stacks, off the loop: a STACKS_DUMPED event follows from
        each host asked (its files are on that host); returns how many hosts were asked."""
        ...

    def result(self) -> AgentOutcome: ...

    def close(self) -> None: ...


class Console(Protocol):
    """Where the supervisor shows the job (views/console.py's plain console or the live view)."""

    def event(self, event: Event) -> None: ...

    def rank_output(self, spec: RankSpec, stream: str, block: bytes) -> None: ...

    def message(self, text: str) -> None: ...

    def report(self, summary: "JobSummary") -> None: ...
