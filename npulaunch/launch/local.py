"""The RankRunner for ranks on this host: the agent, in-process, driven one loop turn at a time.
Its events and output batches go into a queue the supervisor drains between turns, so the
supervisor's decisions (stop, kill, dump stacks) never run inside the agent's own calls.
"""

from __future__ import annotations

from collections import deque
from typing import Deque, Dict, List, Mapping, Optional, Sequence, Tuple

from npulaunch.host.agent.agent import Agent
from npulaunch.host.records import AgentOutcome
from npulaunch.host.spec import HostPlan, RankSpec
from npulaunch.host.tail import count_lines
from npulaunch.launch.runner import Item, RankOutput

MAX_PENDING_BYTES = 4 << 20  # rank output waiting for the supervisor; beyond, it is counted, not kept


class LocalRunner:
    """This host's ranks (the whole job, or this node's share under a scheduler)."""

    def __init__(self, plan: HostPlan, base_env: Mapping[str, str]) -> None:
        self._queue: Deque[Item] = deque()
        self.agent = Agent(plan, self._queue.append, self._output, base_env=base_env)
        self._outcome: Optional[AgentOutcome] = None
        self._pending = 0  # bytes of rank output in the queue
        self._dropped: Dict[Tuple[int, str], Tuple[RankSpec, int]] = {}

    def _output(self, spec: RankSpec, stream: str, block: bytes) -> None:
        """Queue a block for the console. The logs have every line, and the agent has scanned them
        for signatures already; when the console falls this far behind (a rank that exits with
        200 MB unread, a flood), the lines are counted and a note takes their place, so memory stays
        bounded whatever the ranks print."""
        if self._pending + len(block) > MAX_PENDING_BYTES:
            key = (spec.rank, stream)
            self._dropped[key] = (spec, self._dropped.get(key, (spec, 0))[1] + count_lines(block))
            return
        self._pending += len(block)
        self._queue.append(RankOutput(spec, stream, block))

    def start(self) -> None:
        self.agent.start()

    def items(self, timeout_s: float) -> List[Item]:
        if not self._queue and self._outcome is None and not self.agent.step(timeout_s):
            self._outcome = self.agent.finish()
        taken = list(self._queue)
        self._queue.clear()
        self._pending = 0
        for (_, stream), (spec, count) in sorted(self._dropped.items(), key=lambda item: item[0]):
            note = f"[npulaunch: {count:,} lines not shown here (the console fell behind); all are in the rank's log]\n"
            taken.append(RankOutput(spec, stream, note.encode()))
        self._dropped.clear()
        return taken

    @property
    def done(self) -> bool:
        return self._outcome is not None and not self._queue

    def stop(self, reason: str) -> None:
        self.agent.stop(reason)

    def kill(self, reason: str) -> None:
        self.agent.kill(reason)

    def dump_stacks(self, ranks: Sequence[int]) -> int:
        self.agent.dump_stacks(ranks)
        return 1

    def result(self) -> AgentOutcome:
        assert self._outcome is not None, "result() before the runner is done"
        return self._outcome

    def close(self) -> None:
        self.agent.close()
