"""The launcher's own intervals, in one table: how often its agents look and send, how long they wait. Each
has a default, a name and a range; a run may set any of them (the launcher's environment:
NPULAUNCH_TIMING=``name=seconds,...``, checked by ``npulaunch run`` before anything starts), and the tests use
short ones instead of waiting on the defaults (one test proves each default). The limits of the job itself
(``monitor.hang_timeout_s``, ``job.grace_period_s``, ``monitor.health_interval_s``, HCCL's timeouts) are the
YAML's, not here.

The launcher applies a job's values for as long as it runs the job (``applied``); it passes them to every
agent in the host's plan (``HostPlan.timing``), and the agent applies them in its own process. Code reads a
value with ``seconds(name)``. Standard library only, Python 3.7+ (agents run on the hosts).
"""

from __future__ import annotations

import contextlib
from typing import Dict, Iterator, Mapping, NamedTuple, Optional, Tuple

VARIABLE = "NPULAUNCH_TIMING"


class Interval(NamedTuple):
    name: str
    default: float
    low: float  # the range a job may set, in seconds
    high: float
    what: str  # what it is, for the reference


INTERVALS: Tuple[Interval, ...] = (
    Interval("agent_poll_s", 0.05, 0.005, 1.0, "How often an agent follows its ranks' logs when nothing wakes it."),
    Interval(
        "pace_window_s",
        5.0,
        0.2,
        600.0,
        "How often each host's agent sends its ranks' step times (one straggler window; times the job's size / "
        "256, so that a big job stays cheap).",
    ),
    Interval(
        "progress_sample_s",
        30.0,
        0.5,
        3600.0,
        "How often each rank's progress (its last step) is recorded (times the job's size / 64).",
    ),
    Interval("plog_scan_s", 1.0, 0.05, 60.0, "How often an agent looks for new CANN plog files of its ranks."),
    Interval(
        "heartbeat_interval_s",
        2.0,
        0.1,
        2.5,
        "How often the launcher and a remote agent (SSH, srun, mpirun) tell each other they are there: at most "
        "half the silence that makes one give the other up (NPULAUNCH_HEARTBEAT_TIMEOUT_S: 15 s over SSH, 5 s "
        "under srun and mpirun), so that one late beat loses nobody.",
    ),
    Interval(
        "stack_dump_limit_s",
        10.0,
        1.0,
        300.0,
        "How long py-spy may take to dump a rank's stack before it is killed (a hang's stacks, Ctrl-C's).",
    ),
    Interval(
        "stack_sample_s",
        0.5,
        0.05,
        10.0,
        "Over how long a hung rank's CPU use is read (is its main thread computing, or waiting).",
    ),
    Interval(
        "supervisor_poll_s",
        0.5,
        0.01,
        10.0,
        "The longest the launcher waits on its ranks' events before it checks its own deadlines.",
    ),
    Interval(
        "store_poll_s",
        0.05,
        0.005,
        5.0,
        "How often a node of torchrun's c10d rendezvous looks at the store for the others (joins, a new round).",
    ),
    Interval(
        "drain_at_exit_s",
        10.0,
        0.0,
        600.0,
        "How long the launcher waits at its exit for a slow reader of its output (a pipe) to take what is left.",
    ),
)
BY_NAME: Dict[str, Interval] = {interval.name: interval for interval in INTERVALS}

_applied: Dict[str, float] = {}  # this process's values that differ from the defaults


def seconds(name: str) -> float:
    """The interval ``name`` in effect in this process."""
    value = _applied.get(name)
    return BY_NAME[name].default if value is None else value


def overrides() -> Dict[str, float]:
    """The values in effect in this process that are not the defaults (what a host's plan carries)."""
    return dict(_applied)


def allowed(name: str) -> str:
    interval = BY_NAME[name]
    return "%g to %g seconds" % (interval.low, interval.high)


def problem(name: str, value: object) -> Optional[str]:
    """What is wrong with setting ``name`` to ``value`` (None: nothing), in words naming what is allowed."""
    if name not in BY_NAME:
        return "one of " + ", ".join(BY_NAME)
    if isinstance(value, bool) or not isinstance(value, (int, float)):
        return "a number of seconds, " + allowed(name)
    interval = BY_NAME[name]
    if not interval.low <= float(value) <= interval.high:
        return allowed(name)
    return None


def parse_variable(text: str) -> Tuple[Dict[str, float], Optional[Tuple[str, str, str]]]:
    """NPULAUNCH_TIMING's ``name=seconds,name=seconds``: the values, or the first problem as (the item as
    written, its name, what is allowed)."""
    values: Dict[str, float] = {}
    for item in (part.strip() for part in text.split(",")):
        if not item:
            continue
        name, _, number = (side.strip() for side in item.partition("="))
        try:
            value: object = float(number)
        except ValueError:
            value = number
        wrong = problem(name, value)
        if wrong is not None:
            return values, (item, name, wrong)
        values[name] = float(value)  # type: ignore[arg-type]  # a float: problem() said so
    return values, None


@contextlib.contextmanager
def applied(values: Mapping[str, float]) -> Iterator[None]:
    """``values`` in effect in this process while the block runs (a job run inside a test process gives them
    back; nested blocks see the outer values under theirs)."""
    saved = dict(_applied)
    _applied.update({name: float(value) for name, value in values.items() if name in BY_NAME})
    try:
        yield
    finally:
        _applied.clear()
        _applied.update(saved)
