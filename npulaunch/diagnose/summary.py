"""What a finished job (or attempt) says about itself, as values: ``JobSummary`` is summary.json, and
its ``FailureReport`` (diagnose/failure.py) failure.json. Built by diagnose/report.py, written by launch/jobdir.py, read
back by views/jobview.py. Each type has one ``to_json`` (the files' keys, in their order) and one
``from_json``, which refuses a document of another shape naming the file and the field. No file IO.
"""

from __future__ import annotations

from dataclasses import dataclass, field, replace
from enum import Enum
from typing import Any, Dict, Optional, Sequence, Tuple

from npulaunch.diagnose.cause import failure_label
from npulaunch.diagnose.failure import FailureReport
from npulaunch.diagnose.jsonfields import Fields
from npulaunch.host.records import RankResult, RankState


class JobStatus(str, Enum):
    SUCCEEDED = "succeeded"
    FAILED = "failed"  # a rank failed (exit code 1)
    STOPPED = "stopped"  # a signal to npulaunch stopped the job (exit code 128+N)


@dataclass(frozen=True)
class RankSummary:
    """One rank in summary.json: how it ended, where its logs are, and their last lines."""

    result: RankResult
    stdout: str
    stderr: str
    stdout_tail: Tuple[str, ...]
    stderr_tail: Tuple[str, ...]

    @property
    def duration_s(self) -> Optional[float]:
        if self.result.start_time is None or self.result.end_time is None:
            return None
        return round(self.result.end_time - self.result.start_time, 3)

    def to_json(self) -> Dict[str, Any]:
        r = self.result
        return {
            "rank": r.rank,
            "host": r.host,
            "device_id": r.device_id,
            "pid": r.pid,
            "state": r.state.value,
            "start_time": r.start_time,
            "end_time": r.end_time,
            "duration_s": self.duration_s,
            "exit_code": r.exit_code,
            "signal": r.signal,
            "error": r.error,
            "stdout": self.stdout,
            "stderr": self.stderr,
            "last_lines": {"stdout": list(self.stdout_tail), "stderr": list(self.stderr_tail)},
        }

    @classmethod
    def from_json(cls, data: Any, source: str = "summary.json", where: str = "") -> "RankSummary":
        f = Fields(data, source, where)
        result = RankResult(
            f.integer("rank"),
            f.text("host"),
            f.integer("device_id"),
            f.opt_int("pid"),
            f.choice("state", RankState),
            f.opt_number("start_time"),
            f.opt_number("end_time"),
            f.opt_int("exit_code"),
            f.opt_text("signal"),
            f.opt_text("error"),
        )
        f.opt_number("duration_s")  # derived from the times; checked, not kept
        stdout, stderr, tails = f.text("stdout"), f.text("stderr"), f.object("last_lines")
        return cls(result, stdout, stderr, tails.texts("stdout"), tails.texts("stderr"))


@dataclass(frozen=True)
class JobInfo:
    """summary.json's ``job``: what ran, how it ended, and what watching it cost."""

    job_id: str
    name: str
    status: JobStatus
    exit_code: int  # 0, 1, or 128+N: the launcher's own exit code
    root_cause_rank: Optional[int]
    world_size: int
    hosts: Tuple[str, ...]
    job_dir: str
    start_time: float
    end_time: float
    stop_signal: Optional[str]  # the signal that made npulaunch stop the job, by name
    strays_killed: Tuple[int, ...]
    launcher_cpu_s: Optional[float]  # None in summaries older than the field

    @property
    def duration_s(self) -> float:
        return round(self.end_time - self.start_time, 3)

    def to_json(self) -> Dict[str, Any]:
        return {
            "job_id": self.job_id,
            "name": self.name,
            "status": self.status.value,
            "exit_code": self.exit_code,
            "root_cause_rank": self.root_cause_rank,
            "world_size": self.world_size,
            "hosts": list(self.hosts),
            "job_dir": self.job_dir,
            "start_time": self.start_time,
            "end_time": self.end_time,
            "duration_s": self.duration_s,
            "stop_signal": self.stop_signal,
            "strays_killed": list(self.strays_killed),
            "launcher_cpu_s": self.launcher_cpu_s,
        }

    @classmethod
    def from_json(cls, data: Any, source: str = "summary.json", where: str = "job") -> "JobInfo":
        f = Fields(data, source, where)
        head = (
            f.text("job_id"),
            f.text("name"),
            f.choice("status", JobStatus),
            f.integer("exit_code"),
            f.opt_int("root_cause_rank"),
            f.integer("world_size"),
            f.texts("hosts"),
            f.text("job_dir"),
            f.number("start_time"),
            f.number("end_time"),
        )
        f.number("duration_s")  # derived from the times; checked, not kept
        cpu = f.opt_number("launcher_cpu_s") if "launcher_cpu_s" in f.data else None
        return cls(*head, f.opt_text("stop_signal"), f.ints("strays_killed"), cpu)


@dataclass(frozen=True)
class AttemptCause:
    """An attempt's root cause, as the attempts list keeps it: enough to say why it was restarted."""

    rank: int
    cls: str
    code: str
    retryable: bool

    @property
    def label(self) -> str:
        return failure_label(self.code, self.cls)

    def to_json(self) -> Dict[str, Any]:
        return {"rank": self.rank, "cls": self.cls, "code": self.code, "retryable": self.retryable}


@dataclass(frozen=True)
class AttemptRecord:
    """One attempt of a restarted or recovered job, in summary.json's ``attempts``: how it ended, where
    it ran, what it resumed from, and what was excluded after it (launch/restarts.py)."""

    attempt: int
    dir: str
    status: JobStatus
    exit_code: int
    root_cause: Optional[AttemptCause]
    devices: Dict[str, Tuple[int, ...]] = field(default_factory=dict)  # host -> NPUs (physical ids), in order
    excluded: Tuple[Dict[str, Any], ...] = ()  # what this attempt's failure excluded (plan/placement.Exclusion)
    resumed: Optional[Dict[str, Any]] = None  # the step and checkpoint it resumed from (launch/resume.Resumed)
    last_step: Optional[int] = None  # the furthest step its ranks printed
    steps_lost: Optional[int] = None  # its furthest step minus the step the next attempt resumed from
    then: str = ""  # what followed: "recovered", "restarted", "re-formed" (c10d's nodes changed), "" (the end)
    changes: Tuple[str, ...] = ()  # what its placement changed (a spare in an excluded NPU's place, ...)
    start_time: Optional[float] = None
    end_time: Optional[float] = None

    @property
    def hosts(self) -> Tuple[str, ...]:
        return tuple(self.devices)

    def to_json(self) -> Dict[str, Any]:
        return {
            "attempt": self.attempt,
            "dir": self.dir,
            "status": self.status.value,
            "exit_code": self.exit_code,
            "root_cause": None if self.root_cause is None else self.root_cause.to_json(),
            "hosts": list(self.devices),
            "devices": {host: list(ids) for host, ids in self.devices.items()},
            "changes": list(self.changes),
            "excluded": [dict(e) for e in self.excluded],
            "resumed": self.resumed,
            "last_step": self.last_step,
            "steps_lost": self.steps_lost,
            "then": self.then,
            "start_time": self.start_time,
            "end_time": self.end_time,
        }

    @classmethod
    def from_json(cls, data: Any, source: str = "summary.json", where: str = "") -> "AttemptRecord":
        f = Fields(data, source, where)
        head = (f.integer("attempt"), f.text("dir"), f.choice("status", JobStatus), f.integer("exit_code"))
        root = f.opt_object("root_cause")
        cause = (
            None
            if root is None
            else AttemptCause(root.integer("rank"), root.text("cls"), root.text("code"), root.flag("retryable"))
        )
        if not f.has("devices"):  # written before recovery existed
            return cls(*head, cause)
        devices = {str(host): tuple(f.object("devices").ints(str(host))) for host in f.data["devices"]}
        resumed = f.opt_object("resumed")
        return cls(
            *head,
            cause,
            devices,
            tuple(e.data for e in f.objects("excluded")),
            None if resumed is None else resumed.data,
            f.opt_int("last_step"),
            f.opt_int("steps_lost"),
            f.text("then"),
            f.texts("changes"),
            f.opt_number("start_time"),
            f.opt_number("end_time"),
        )


@dataclass(frozen=True)
class JobSummary:
    """summary.json: the job, its root cause (None when it succeeded or nothing failed on its own),
    every rank, and, in the job's own summary.json (not an attempt's), every attempt."""

    job: JobInfo
    root_cause: Optional[FailureReport]
    ranks: Tuple[RankSummary, ...]
    attempts: Optional[Tuple[AttemptRecord, ...]] = None
    crash_loop: Optional[Dict[str, Any]] = None  # why the job stopped as a crash loop (launch/crashloop.py)
    # the ranks named slower than their peers (diagnose/stragglers.py): rank, host, device, factor, since_step,
    # since, until, evidence, attempt (in the job's summary), state (slow, recovered, excluded)
    stragglers: Tuple[Dict[str, Any], ...] = ()

    @property
    def exit_code(self) -> int:
        return self.job.exit_code

    @property
    def status(self) -> JobStatus:
        return self.job.status

    @property
    def span(self) -> Tuple[float, float]:
        """The whole job's start and end: from its first attempt's start to its last attempt's end.
        ``job`` holds the last attempt's times (its timeline's); a job that ran once has them both."""
        starts = [a.start_time for a in self.attempts or () if a.start_time is not None]
        ends = [a.end_time for a in self.attempts or () if a.end_time is not None]
        return min(starts + [self.job.start_time]), max(ends + [self.job.end_time])

    @property
    def retryable(self) -> bool:
        """Whether running the job again may help: it failed, and its root cause says a restart can."""
        return self.status is JobStatus.FAILED and self.root_cause is not None and self.root_cause.cause.retryable

    def attempt_record(self, attempt: int, directory: str) -> AttemptRecord:
        """This summary as attempt ``attempt`` (run in ``directory``) of the attempts list."""
        root = self.root_cause
        cause = (
            None
            if root is None
            else AttemptCause(root.cause.rank, root.cause.cls, root.cause.code, root.cause.retryable)
        )
        return AttemptRecord(
            attempt,
            directory,
            self.status,
            self.exit_code,
            cause,
            start_time=self.job.start_time,
            end_time=self.job.end_time,
        )

    def with_attempts(self, attempts: Sequence[AttemptRecord]) -> "JobSummary":
        return replace(self, attempts=tuple(attempts))

    def to_json(self) -> Dict[str, Any]:
        data: Dict[str, Any] = {
            "job": self.job.to_json(),
            "root_cause": None if self.root_cause is None else self.root_cause.to_json(),
            "ranks": [rank.to_json() for rank in self.ranks],
        }
        if self.attempts is not None:
            data["attempts"] = [attempt.to_json() for attempt in self.attempts]
        if self.crash_loop is not None:
            data["crash_loop"] = dict(self.crash_loop)
        data["stragglers"] = [dict(record) for record in self.stragglers]
        return data

    @classmethod
    def from_json(cls, data: Any, source: str = "summary.json") -> "JobSummary":
        """The summary in ``data`` (decoded JSON); ``source`` names the file in any SummaryError."""
        f = Fields(data, source, "")
        job = f.object("job")
        info = JobInfo.from_json(job.data, source, job.where)
        root = f.opt_object("root_cause")
        failure = None if root is None else FailureReport.from_fields(root)
        ranks = tuple(RankSummary.from_json(r.data, source, r.where) for r in f.objects("ranks"))
        attempts = None
        if "attempts" in f.data:
            attempts = tuple(AttemptRecord.from_json(a.data, source, a.where) for a in f.objects("attempts"))
        loop = f.opt_object("crash_loop") if "crash_loop" in f.data else None
        stragglers = tuple(s.data for s in f.objects("stragglers")) if "stragglers" in f.data else ()
        return cls(info, failure, ranks, attempts, None if loop is None else loop.data, stragglers)
