"""Nodes of a scheduler's job exchanging what only each node knows (its NPUs' addresses, from its
own hccn_tool) through the job directory, which they share. Every node writes its record whole
(written aside, then renamed into place), then waits for every other node's; all nodes read the
same records, so all build the same rank table.
"""

from __future__ import annotations

import json
import os
import time
from typing import Any, Callable, Dict, List

from npulaunch.host.errors import NpulaunchError
from npulaunch.plan.layout import JobLayout

POLL_S = 0.2


class RendezvousError(NpulaunchError):
    exit_code = 2


def exchange(
    layout: JobLayout,
    node: int,
    nodes: int,
    record: Dict[str, Any],
    timeout_s: float,
    epoch: str = "",
    clock: Callable[[], float] = time.monotonic,
    sleep: Callable[[float], None] = time.sleep,
) -> List[Dict[str, Any]]:
    """Publish this node's ``record`` and return every node's, in node order. ``epoch`` names this
    run of the job (the scheduler's job and step): records of an earlier run are not read."""
    directory = layout.rendezvous_dir
    os.makedirs(directory, 0o700, exist_ok=True)
    mine = layout.rendezvous_record(node)
    aside = f"{mine}.{os.getpid()}.tmp"
    with open(aside, "w", encoding="utf-8") as handle:
        json.dump(dict(record, epoch=epoch), handle)
    os.replace(aside, mine)
    deadline = clock() + timeout_s
    while True:
        found = {}
        for index in range(nodes):
            try:
                with open(layout.rendezvous_record(index), encoding="utf-8") as handle:
                    record = json.load(handle)
            except (OSError, ValueError):
                continue
            if record.get("epoch") == epoch:
                found[index] = record
        if len(found) == nodes:
            return [found[i] for i in range(nodes)]
        if clock() >= deadline:
            missing = [str(i) for i in range(nodes) if i not in found]
            raise RendezvousError(
                f"nodes {', '.join(missing)} did not publish their device IPs in {directory} within "
                f"{timeout_s:g} s: job.log_dir must be on a file system every node shares (or list "
                "device_ips for every node in the YAML, or rank_table: none)"
            )
        sleep(POLL_S)
