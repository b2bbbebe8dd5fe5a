"""The root cause as failure.json (and summary.json's ``root_cause``) says it: ``FailureReport``, the
cause and how its rank ended, with the log that shows it. Built by diagnose/report.py; one ``to_json``
and one ``from_json``, which refuses a document of another shape naming the file and the field. No
file IO.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any, Dict, Optional, Tuple

from npulaunch.diagnose.cause import RankGroup, RootCause
from npulaunch.diagnose.jsonfields import Fields
from npulaunch.host.cann.codes import CAUSE


@dataclass(frozen=True)
class FailureReport:
    """The root cause as failure.json and summary.json's ``root_cause`` say it: the cause, and how
    its rank ended (``reason``), with the log that shows it and that log's last lines."""

    cause: RootCause
    pid: Optional[int]
    exit_code: Optional[int]
    signal: Optional[str]
    end_time: Optional[float]
    reason: str  # "rank 3 exited with code 1", "rank 5 reported EZ9999 (device_kernel_fault)", ...
    log: str
    last_lines: Tuple[str, ...]

    @property
    def label(self) -> str:
        return self.cause.label

    def to_json(self) -> Dict[str, Any]:
        c = self.cause
        return {
            "rank": c.rank,
            "host": c.host,
            "device_id": c.device_id,
            "cls": c.cls,
            "code": c.code,
            "kind": c.kind,
            "codes": list(c.codes),
            "detail": c.detail,
            "time": c.time,
            "time_source": c.time_source,
            "first_line": c.first_line,
            "excerpt": list(c.excerpt),
            "hint": c.hint,
            "retryable": c.retryable,
            "retryable_why": c.retryable_why,
            "code_info": c.code_info,
            **({"raised": c.raised} if c.raised else {}),  # only when the rank's error file said (torch's @record)
            "why": c.why,
            "others": [{"ranks": list(g.ranks), "what": g.what} for g in c.others],
            "pid": self.pid,
            "exit_code": self.exit_code,
            "signal": self.signal,
            "end_time": self.end_time,
            "reason": self.reason,
            "log": self.log,
            "last_lines": list(self.last_lines),
        }

    @classmethod
    def from_json(cls, data: Any, source: str = "failure.json") -> "FailureReport":
        return cls.from_fields(Fields(data, source, ""))

    @classmethod
    def from_fields(cls, f: Fields) -> "FailureReport":
        # read in the file's order, so that the first wrong field is the one named; the fields the diagnosis
        # of CANN's codes added (kind ... code_info) are read when there: a job of an earlier version lacks them
        rank, host, device_id, klass, code = (
            f.integer("rank"),
            f.text("host"),
            f.integer("device_id"),
            f.text("cls"),
            f.text("code"),
        )
        kind = f.text("kind") if f.has("kind") else CAUSE
        codes = f.texts("codes") if f.has("codes") else ()
        detail = f.text("detail") if f.has("detail") else ""
        when, time_source, first_line, excerpt, hint, retryable = (
            f.opt_number("time"),
            f.text("time_source"),
            f.text("first_line"),
            f.texts("excerpt"),
            f.text("hint"),
            f.flag("retryable"),
        )
        retryable_why = f.text("retryable_why") if f.has("retryable_why") else ""
        info = f.opt_object("code_info") if f.has("code_info") else None
        raised = f.opt_object("raised") if f.has("raised") else None  # the rank's error file: later still
        cause = RootCause(
            rank,
            host,
            device_id,
            klass,
            code,
            when,
            time_source,
            first_line,
            excerpt,
            hint,
            retryable,
            f.text("why"),
            tuple(RankGroup(g.ints("ranks"), g.text("what")) for g in f.objects("others")),
            kind=kind,
            codes=codes,
            detail=detail,
            retryable_why=retryable_why,
            code_info=info.data if info is not None else None,
            raised=raised.data if raised is not None else None,
        )
        return cls(
            cause,
            f.opt_int("pid"),
            f.opt_int("exit_code"),
            f.opt_text("signal"),
            f.opt_number("end_time"),
            f.text("reason"),
            f.text("log"),
            f.texts("last_lines"),
        )
