"""``npulaunch diagnose``: the same diagnosis for the logs of any job, npulaunch's or another launcher's:
files, job directories, plog directories, several ranks' logs at once. Each file is read as the agent
reads a stream (host/cann/scan.py). An npulaunch job directory is judged from its own records (events,
exits, stacks: diagnose/records.py) by the functions the live job used, so ``diagnose`` names the same root
cause as ``report``; its files' findings are listed beside it. Bare log files: the root cause is the
earliest cause by the lines' own time stamps (without one, by when its file was last written), then the
symptoms it explains. Reads files; decides nothing else.
"""

from __future__ import annotations

import os
import re
from dataclasses import dataclass, replace
from typing import Any, Dict, Iterator, List, Optional, Sequence, Tuple

from npulaunch.diagnose.failure import FailureReport
from npulaunch.diagnose.records import KEPT_FOR_REPORT, hosts_from, load_events, logs_from, results_from
from npulaunch.diagnose.report import LAST_LINES, failure_report, root_cause
from npulaunch.diagnose.rootcause import same_failure
from npulaunch.diagnose.summary import RankSummary
from npulaunch.host.cann.codes import CAUSE, SYMPTOM
from npulaunch.host.cann.findings import GENERIC_PHRASES, Finding
from npulaunch.host.cann.scan import Scanner
from npulaunch.host.errors import UsageError
from npulaunch.host.events import EventKind
from npulaunch.host.records import RankState
from npulaunch.host.tail import last_lines
from npulaunch.plan.layout import JobLayout

BLOCK_BYTES = 1 << 20
LOG_NAMES = re.compile(r"(?:\.(?:log|txt|out|err)$|^(?:stdout|stderr)$|^plog-|^device-)")
PLOG_NAME = re.compile(r"^(?:plog|device)-\d+.*\.log$")
_RANK = re.compile(r"(?:^|[/_.-])(?:rank|RANK)[_-]?(\d+)(?=$|[/_.-])")


@dataclass(frozen=True)
class Located:
    """A finding and where it was: the file, and the rank the file's path names (None when it names none)."""

    finding: Finding
    path: str
    rank: Optional[int]


@dataclass(frozen=True)
class Diagnosis:
    files: Tuple[str, ...]
    root: Optional[Located]
    why: str
    explained: Tuple[Located, ...]  # the symptoms the root cause explains (on other files or ranks)
    others: Tuple[Located, ...]  # every other finding, in time order
    job_dir: str = ""  # an npulaunch job directory, judged from its records
    failure: Optional[FailureReport] = None  # its root cause, as ``report`` says it (None: it succeeded)

    def to_json(self) -> Dict[str, Any]:
        found: Dict[str, Any] = {
            "files": list(self.files),
            "root_cause": _located_json(self.root) if self.root else None,
            "why": self.why,
            "explained": [_located_json(x) for x in self.explained],
            "others": [_located_json(x) for x in self.others],
        }
        if self.job_dir:
            found["job_dir"] = self.job_dir
            found["failure"] = self.failure.to_json() if self.failure is not None else None
        return found


def log_files(paths: Sequence[str]) -> List[str]:
    """The log files under the paths (a file as it is; a directory walked for logs and plogs), sorted."""
    found: List[str] = []
    for path in paths:
        if os.path.isfile(path):
            found.append(path)
        elif os.path.isdir(path):
            for folder, dirs, names in os.walk(path):
                dirs.sort()
                found.extend(os.path.join(folder, n) for n in sorted(names) if LOG_NAMES.search(n))
        else:
            raise UsageError(f"{path}: no such file or directory")
    return list(dict.fromkeys(found))


def diagnose(paths: Sequence[str]) -> Diagnosis:
    """The diagnosis of a job directory (one path that is one: from its records) or of log files."""
    if len(paths) == 1 and is_job_dir(paths[0]):
        return diagnose_job(paths[0])
    return diagnose_files(paths)


def is_job_dir(path: str) -> bool:
    """Whether the path is an npulaunch job's directory (or one node's in it): its records are there."""
    if not os.path.isdir(path):
        return False
    try:
        return os.path.exists(JobLayout.open(path).events_path)
    except UsageError:  # the top of a scheduler's job: one directory per node
        return False


def diagnose_job(job_dir: str) -> Diagnosis:
    """A job directory judged as ``report`` judged it: the latest attempt's events and each rank's end (its
    records), through the same root-cause functions, the failure as ``report`` tells it; the findings of its
    files beside it (what each rank printed)."""
    layout = JobLayout.open(job_dir)
    failure = records_failure(layout, job_dir)
    files = diagnose_files([layout.attempt_dir])
    why = "from the job's records (events.jsonl: how each rank ended, what the agents saw), as report says it"
    if failure is None:
        why = "the job's records show no failure (every rank succeeded)"
    return replace(files, job_dir=job_dir, failure=failure, why=why)


def records_failure(layout: JobLayout, job_dir: str) -> Optional[FailureReport]:
    """The root cause of a job directory's latest attempt from its records, or None when it succeeded."""
    events = load_events(layout, job_dir)
    results = results_from(events)
    finished = next((e for e in reversed(events) if e.kind is EventKind.JOB_FINISHED), None)
    stopped = finished is not None and finished.data.get("status") == "stopped"
    if results and all(r.state is RankState.SUCCEEDED for r in results) and not stopped:
        return None
    cause = root_cause(results, [e for e in events if e.kind in KEPT_FOR_REPORT], hosts_from(events, layout))
    if cause is None:
        return None
    logs = logs_from(events, layout)
    ranks = []
    for result in results:
        out, err = logs.get(result.rank, ("", ""))
        ranks.append(
            RankSummary(result, out, err, tuple(last_lines(out, LAST_LINES)), tuple(last_lines(err, LAST_LINES)))
        )
    return failure_report(cause, ranks)


def diagnose_files(paths: Sequence[str]) -> Diagnosis:
    files = log_files(paths)
    scanner = Scanner()
    located: List[Located] = []
    for path in files:
        plog = PLOG_NAME.match(os.path.basename(path)) is not None
        rank = _rank_of(path)
        for block in _blocks(path):
            located.extend(Located(f, path, rank) for f in scanner.block(path, block, plog))
        located.extend(Located(f, path, rank) for f in scanner.flush(path))
    return _judge(tuple(files), located)


def _rank_of(path: str) -> Optional[int]:
    """The rank the path names (the last ``rank-N``, ``rank_N``, ``rankN`` in it), or None."""
    found = _RANK.findall(path)
    return int(found[-1]) if found else None


def _blocks(path: str) -> Iterator[bytes]:
    """The file in blocks of whole lines (the last one ended by the file's end)."""
    try:
        with open(path, "rb") as f:
            rest = b""
            while True:
                chunk = f.read(BLOCK_BYTES)
                if not chunk:
                    break
                data = rest + chunk
                cut = data.rfind(b"\n") + 1
                if cut:
                    yield data[:cut]
                rest = data[cut:]
            if rest:
                yield rest + b"\n"
    except OSError as error:
        raise UsageError(f"{path}: {error.strerror}") from None


def _order(x: Located, position: int, written: Dict[str, float]) -> Tuple[int, float, int]:
    """Stamped findings by their time, then those without a stamp by when their file was last written (a rank
    that failed stopped writing first; the ranks that waited for it wrote on: their timeouts, their ends),
    then in the order they were read."""
    stamp = x.finding.time
    return (0, stamp, position) if stamp is not None else (1, written.get(x.path, 0.0), position)


def _written(files: Sequence[str]) -> Dict[str, float]:
    found = {}
    for path in files:
        try:
            found[path] = os.path.getmtime(path)
        except OSError:
            pass
    return found


def _judge(files: Tuple[str, ...], located: List[Located]) -> Diagnosis:
    written = _written(files)
    ordered = [x for _, x in sorted(enumerate(located), key=lambda p: _order(p[1], p[0], written))]
    causes = [x for x in ordered if x.finding.kind == CAUSE]
    if causes:
        root: Optional[Located] = causes[0]
        why = "the earliest cause" + (
            " by the lines' own time stamps"
            if root and root.finding.time is not None
            else " (its lines carry no time stamp: by when each file was last written)"
        )
    elif ordered:
        root = ordered[0]
        why = "no cause found; this is the earliest symptom"
    else:
        return Diagnosis(files, None, "no code or failure phrase in these files", (), ())
    assert root is not None
    better = _same_failure(root, ordered)
    if better is not root:
        why += f"; {_name(root)} came first, and {_name(better)} in the same failure says more"
        root = better
    explained = tuple(
        x for x in ordered if x is not root and x.finding.kind == SYMPTOM and (x.path, x.rank) != (root.path, root.rank)
    )
    if explained:
        why += f"; {len(explained)} symptom(s) on other files or ranks are what waiting on it looks like"
    others = tuple(x for x in ordered if x is not root and x not in explained)
    if not root.finding.code:  # a phrase: the code its rank printed for it, where it printed one
        coded = next((x for x in ordered if _same_rank(x, root) and x.finding.code and _names(x, root)), None)
        if coded is not None:
            root = Located(
                replace(root.finding, code=coded.finding.code, info=coded.finding.info), root.path, root.rank
            )
            why += f"; {coded.path} printed {coded.finding.code} with it"
    return Diagnosis(files, root, why, explained, others)


def _same_failure(first: Located, ordered: Sequence[Located]) -> Located:
    """The finding that says most of the failure ``first`` begins, by rootcause.same_failure's rule, among
    the same rank's (or file's) findings after it."""
    later = [x for x in ordered[ordered.index(first) :] if _same_rank(x, first)]
    return same_failure(first, later, lambda x: (x.finding.code, x.finding.kind, x.finding.time))


def _name(x: Located) -> str:
    return x.finding.code or x.finding.name


def _same_rank(x: Located, root: Located) -> bool:
    return x.rank == root.rank if root.rank is not None else x.path == root.path


def _names(x: Located, root: Located) -> bool:
    return x.finding.kind == CAUSE or root.finding.name in GENERIC_PHRASES


def _located_json(x: Located) -> Dict[str, Any]:
    f = x.finding
    return {
        "path": x.path,
        "rank": x.rank,
        "line_no": f.line_no,
        "code": f.code,
        "codes": list(f.codes),
        "name": f.name,
        "cls": f.cls,
        "kind": f.kind,
        "retryable": f.retryable,
        "retryable_why": f.retryable_why,
        "hint": f.hint,
        "detail": f.detail,
        "time": f.time,
        "line": f.line,
        "excerpt": list(f.before[-5:]) + [f.line] + list(f.after),
        "code_info": f.info.summary() if f.info is not None else None,
    }
