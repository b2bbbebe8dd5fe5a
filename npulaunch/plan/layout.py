"""Where every file of a job directory lives: ``JobLayout``, the one place that names them. The plan
builds rank paths from it, launch/jobdir.py writes through it, and the readers (status, report,
stop) open a user's job directory with ``JobLayout.open``. Paths only: nothing here writes a file;
remote agents get absolute paths inside their RankSpec and HostPlan, never this module.
"""

from __future__ import annotations

import functools
import os
import re
from dataclasses import dataclass, replace
from typing import List, Optional

from npulaunch.host.errors import UsageError
from npulaunch.host.lazyre import lazy_re

PLAN_FILENAME = "plan.json"
EVENTS_FILENAME = "events.jsonl"
SUMMARY_FILENAME = "summary.json"
FAILURE_FILENAME = "failure.json"
LAUNCHER_FILENAME = "launcher.json"  # who is running the job: for npulaunch stop
LAUNCHER_LOG_FILENAME = "launcher.log"  # the launcher's own debug log
RANK_TABLE_FILENAME = "rank_table.json"
RENDEZVOUS_DIRNAME = "rendezvous"  # under a scheduler: the nodes' device-IP records
HOSTS_DIRNAME = "hosts"  # a remote host's own copy of its ranks' directories
HELPER_DIRNAME = "scheduler"  # the framework's extra process (host/spec.py HELPER_RANK): MindSpore's scheduler
PLOG_DIRNAME = "ascend"  # a rank's ASCEND_PROCESS_LOG_PATH
STDOUT_FILENAME = "stdout.log"
STDERR_FILENAME = "stderr.log"

_NODE_DIR = lazy_re(r"node-(\d+)")
_ATTEMPT_DIR = lazy_re(r"attempt-(\d+)")
_OWN_FILES = (PLAN_FILENAME, EVENTS_FILENAME, LAUNCHER_FILENAME, SUMMARY_FILENAME)  # in a launcher's own directory


@dataclass(frozen=True)
class RankPaths:
    """One rank's directory and what is in it."""

    dir: str
    stdout: str
    stderr: str
    plog_dir: str


@dataclass(frozen=True)
class JobLayout:
    """The paths of one job directory, as one launcher sees it: ``node`` is this node's index under
    a scheduler (each node writes only in ``node-<n>/``), ``attempt`` the attempt being run or read
    (0: the job is not restarted, its attempt's files are in the node's own directory)."""

    job_dir: str
    node: Optional[int] = None
    attempt: int = 0

    @classmethod
    def under(cls, log_dir: str, job_id: str, node: Optional[int] = None, attempt: int = 0) -> "JobLayout":
        """The layout of job ``job_id`` in ``log_dir`` (``<log_dir>/<job_id>/``)."""
        return cls(os.path.join(log_dir, job_id), node, attempt)

    @classmethod
    def open(cls, path: str) -> "JobLayout":
        """The layout of a job directory a user named (``npulaunch status / report / stop``), at
        its latest attempt. ``path`` is a job's directory or, under a scheduler, one node's
        directory in it. Raises UsageError for the top of a scheduler's job (which node's?)."""
        own = os.path.normpath(path)
        if not any(os.path.exists(os.path.join(own, name)) for name in _OWN_FILES):
            nodes = [os.path.join(own, f"node-{n}") for n in _numbered(own, _NODE_DIR)]
            if nodes:
                raise UsageError(
                    f"{path} holds a job run under a scheduler, one directory per node: name one of "
                    f"them ({', '.join(nodes[:3])}{', ...' if len(nodes) > 3 else ''})"
                )
        layout = cls(own)
        named, parent = _NODE_DIR.fullmatch(os.path.basename(own)), os.path.dirname(own)
        # a node's directory is in a job directory without a plan.json of its own (a job run without
        # a scheduler always has one; a log_dir has none, and then both readings name the same files)
        if named and not os.path.exists(os.path.join(parent or os.curdir, PLAN_FILENAME)):
            layout = cls(parent, int(named.group(1)))
        attempts = layout.attempts_found()
        return layout.for_attempt(attempts[-1]) if attempts else layout

    def for_attempt(self, attempt: int) -> "JobLayout":
        return replace(self, attempt=attempt)

    def attempts_found(self) -> List[int]:
        """The attempt directories that exist in this node's own directory, in order (reads it)."""
        return _numbered(self.own_dir, _ATTEMPT_DIR)

    # -- the job's and this node's files ------------------------------------------------------------

    @property
    def own_dir(self) -> str:
        """This launcher's part of the job directory: all of it, or this node's directory in it."""
        return self.job_dir if self.node is None else os.path.join(self.job_dir, f"node-{self.node}")

    @property
    def attempt_dir(self) -> str:
        """Where this attempt's ranks, events and summary go: the own directory without restarts."""
        return self.own_dir if self.attempt == 0 else os.path.join(self.own_dir, f"attempt-{self.attempt}")

    @property
    def plan_path(self) -> str:
        """The first plan of the job (written when the job directory is created)."""
        return os.path.join(self.own_dir, PLAN_FILENAME)

    @property
    def attempt_plan_path(self) -> str:
        """This attempt's plan (its own ports, directories and uuid); plan_path without restarts."""
        return os.path.join(self.attempt_dir, PLAN_FILENAME)

    @property
    def events_path(self) -> str:
        return os.path.join(self.attempt_dir, EVENTS_FILENAME)

    @property
    def summary_path(self) -> str:
        """The job's summary (with restarts: the last attempt's, listing every attempt)."""
        return os.path.join(self.own_dir, SUMMARY_FILENAME)

    @property
    def failure_path(self) -> str:
        return os.path.join(self.own_dir, FAILURE_FILENAME)

    @property
    def attempt_summary_path(self) -> str:
        """This attempt's own summary; summary_path without restarts."""
        return os.path.join(self.attempt_dir, SUMMARY_FILENAME)

    @property
    def attempt_failure_path(self) -> str:
        return os.path.join(self.attempt_dir, FAILURE_FILENAME)

    @property
    def launcher_path(self) -> str:
        return os.path.join(self.own_dir, LAUNCHER_FILENAME)

    @property
    def launcher_log_path(self) -> str:
        return os.path.join(self.own_dir, LAUNCHER_LOG_FILENAME)

    # -- shared by every node -----------------------------------------------------------------------

    @property
    def rank_table_path(self) -> str:
        """The HCCL rank table: one for the job, written once, whole, by whichever node is first; from the
        second attempt of a job npulaunch places itself, each attempt's own (a recovery moves ranks)."""
        if self.node is None and self.attempt > 1:
            return os.path.join(self.attempt_dir, RANK_TABLE_FILENAME)
        return os.path.join(self.job_dir, RANK_TABLE_FILENAME)

    @property
    def rendezvous_dir(self) -> str:
        return os.path.join(self.job_dir, RENDEZVOUS_DIRNAME)

    def rendezvous_record(self, node: int) -> str:
        """Node ``node``'s record of what only it knows (its NPUs' addresses)."""
        return os.path.join(self.rendezvous_dir, f"node-{node}.json")

    # -- per rank -----------------------------------------------------------------------------------

    def rank_paths(self, rank: int, host: Optional[str] = None) -> RankPaths:
        """Rank ``rank``'s directory in this attempt: ``rank-<N>/``, where a local rank writes and
        where the launcher gathers a remote rank's output; with ``host``, that remote host's own
        copy (``hosts/<host>/rank-<N>/``: its logs as written there, and its plogs)."""
        start = _ranks_in(self.attempt_dir, host)  # never ends with "/"
        directory = start + str(rank) if rank >= 0 else start[: -len("rank-")] + HELPER_DIRNAME
        return RankPaths(
            directory,
            f"{directory}/{STDOUT_FILENAME}",
            f"{directory}/{STDERR_FILENAME}",
            f"{directory}/{PLOG_DIRNAME}",
        )


@functools.lru_cache(maxsize=1024)  # one per host of the job: 32,768 ranks join 2,048 times, not 32,768
def _ranks_in(attempt_dir: str, host: Optional[str]) -> str:
    """The start of the directory of each rank: ``<attempt>/rank-`` or ``<attempt>/hosts/<host>/rank-``."""
    where = (HOSTS_DIRNAME, host) if host is not None else ()
    return os.path.join(attempt_dir, *where, "rank-")


def _numbered(directory: str, pattern: "re.Pattern[str]") -> List[int]:
    """The numbers of the subdirectories of ``directory`` named by ``pattern``, sorted."""
    try:
        names = os.listdir(directory)
    except OSError:
        return []
    found = (pattern.fullmatch(name) for name in names)
    return sorted(int(m.group(1)) for m in found if m and os.path.isdir(os.path.join(directory, m.group(0))))
