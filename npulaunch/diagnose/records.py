"""A job directory's own records read back: the latest attempt's events (events.jsonl), and from them how each
rank ended, where its logs are, and which host ran which ranks: what ``npulaunch diagnose JOB_DIR`` judges
with the same functions the live job used (so it names the same root cause as ``report``), and what
``status`` shows. Reads files only.
"""

from __future__ import annotations

import json
import os
from typing import Dict, List, Optional, Tuple

from npulaunch.host.errors import UsageError
from npulaunch.host.events import Event, EventKind
from npulaunch.host.files import read_json
from npulaunch.host.records import RankResult, RankState
from npulaunch.plan.layout import JobLayout

# what the root cause is decided from (diagnose/rootcause.py), and recovery's exclusions (launch/recovery.py)
KEPT_FOR_REPORT = (
    EventKind.SIGNATURE_MATCHED,
    EventKind.HANG_DETECTED,
    EventKind.STACKS_DUMPED,
    EventKind.NPU_HEALTH,
    EventKind.AGENT_LOST,
    EventKind.RANK_SLOW,
)


def load_events(layout: JobLayout, job_dir: str, damage: Optional[List[str]] = None) -> List[Event]:
    """The latest attempt's events (``job_dir``: the directory as the user named it). Damaged
    lines (invalid UTF-8, not JSON, not an event) are skipped and counted in ``damage``; a last line
    without its newline is one being written, not damage."""
    path = layout.events_path
    if not os.path.exists(path):
        raise UsageError(f"{job_dir} is not an npulaunch job directory (no events.jsonl)")
    try:
        with open(path, "rb") as handle:
            data = handle.read()
    except OSError as exc:
        raise UsageError(f"cannot read {path}: {exc.strerror}") from None
    events: List[Event] = []
    bad = 0
    lines = data.split(b"\n")
    for number, raw in enumerate(lines):
        if not raw.strip():
            continue
        try:
            events.append(Event.from_record(json.loads(raw.decode("utf-8"))))
        except UnicodeDecodeError:
            bad += 1
        except ValueError:  # not JSON, or not an event
            if number < len(lines) - 1:  # a last line without its newline is still being written
                bad += 1
        except (KeyError, TypeError, AttributeError):  # not an event this npulaunch knows (another version's?)
            bad += 1
    if bad and damage is not None:
        damage.append(f"{path}: {bad} damaged line(s) skipped")
    return events


def results_from(events: List[Event]) -> List[RankResult]:
    """Each process's end as the agents reported it (a rank whose end was never recorded, because its
    launcher was killed, is still RUNNING), in rank order."""
    started: Dict[int, Event] = {}
    ended: Dict[int, Event] = {}
    raised: Dict[int, Dict] = {}
    for event in events:
        if event.rank is None:
            continue
        if event.kind is EventKind.RANK_STARTED:
            started[event.rank] = event
        elif event.kind in (EventKind.RANK_EXITED, EventKind.RANK_SPAWN_FAILED):
            ended[event.rank] = event
        elif event.kind is EventKind.RANK_ERROR_FILE:
            raised[event.rank] = dict(event.data)
    results = []
    for rank in sorted(set(started) | set(ended)):
        begin, end = started.get(rank), ended.get(rank)
        data = end.data if end is not None else {}
        if end is None:
            state = RankState.RUNNING
        elif end.kind is EventKind.RANK_SPAWN_FAILED:
            state = RankState.SPAWN_FAILED
        else:
            state = RankState(data.get("state", RankState.FAILED.value))
        some = begin or end
        assert some is not None
        results.append(
            RankResult(
                rank,
                some.host,
                int((begin.data if begin else {}).get("device_id", -1)),
                data.get("pid") or (begin.data.get("pid") if begin else None),
                state,
                begin.time if begin else None,
                (data.get("end_time") or end.time) if end is not None else None,
                data.get("exit_code"),
                data.get("signal"),
                data.get("error"),
                raised.get(rank),
            )
        )
    return results


def logs_from(events: List[Event], layout: JobLayout) -> Dict[int, Tuple[str, str]]:
    """Each process's ``(stdout, stderr)`` log, as its start recorded them (else where the layout puts them)."""
    logs: Dict[int, Tuple[str, str]] = {}
    for event in events:
        if event.kind is EventKind.RANK_STARTED and event.rank is not None:
            logs[event.rank] = (str(event.data.get("stdout") or ""), str(event.data.get("stderr") or ""))
    for rank, (out, _) in list(logs.items()):
        if not out or not os.path.exists(out):
            folder = os.path.join(layout.attempt_dir, f"rank-{rank}")
            logs[rank] = (os.path.join(folder, "stdout.log"), os.path.join(folder, "stderr.log"))
    return logs


def hosts_from(events: List[Event], layout: JobLayout) -> Dict[str, List[int]]:
    """Every host of the job and its ranks, from the plan the job recorded (a node of a scheduler's job ran
    only its own), else from its ranks' starts."""
    hosts: Dict[str, List[int]] = {}
    plan = _plan(layout.attempt_plan_path) or _plan(layout.plan_path)
    ranks = plan.get("ranks") if isinstance(plan, dict) else None
    for spec in ranks if isinstance(ranks, list) else ():
        if isinstance(spec, dict) and isinstance(spec.get("rank"), int) and isinstance(spec.get("host"), str):
            env = spec.get("env")
            env = env if isinstance(env, dict) else {}
            for name in dict.fromkeys((spec["host"], str(env.get("HCCL_IF_IP") or spec["host"]))):
                hosts.setdefault(name, []).append(spec["rank"])
    if hosts:
        return hosts
    for event in events:
        if event.kind is EventKind.RANK_STARTED and event.rank is not None and event.rank >= 0:
            hosts.setdefault(event.host, []).append(event.rank)
    return hosts


def _plan(path: str) -> Optional[Dict]:
    try:
        found = read_json(path)
    except UsageError:  # a damaged plan.json: the ranks' starts say enough
        return None
    return found if isinstance(found, dict) else None
