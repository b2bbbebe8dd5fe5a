"""The crash-loop breaker: attempts that fail the same way without progress stop the job with an exit
code of its own, ``CRASH_LOOP_EXIT`` (93: do not requeue), so that a scheduler's or a wrapper's requeue
does not spin for ever on a bug in the script. launch/restarts.py asks after each failed attempt. Pure.

- *The same way*: the same root cause class and code (``AttemptCause``: ``hccp_init_failed`` EJ0001, a
  Python exception, an NPU fault code), whatever the rank: which rank of a script every rank runs fails
  first is a race, so the rank would hide a loop.
- *Without progress*: no step beyond the furthest step an earlier attempt printed (for the first attempt,
  beyond step 0; an attempt that printed no step made none).
- *The bound*: ``job.crash_loop_limit`` attempts in a row (default 3, 0 never), counting the first: NVIDIA's
  Resiliency Extension ends a job after 3 consecutive cycles without progress, the first included
  (``max_no_progress_cycles``, default 3: NVIDIA/nvidia-resiliency-ext @ d8686d9c7015c39ce91dd01788c0ab111a24818b
  src/nvidia_resiliency_ext/fault_tolerance/progress_tracker.py, config.py). It counts restarts and
  recoveries alike (three NPUs failing one code before any step is not the hardware); it stops the job even
  when restarts remain, and also when they ran out (the evidence is the same; NVRx exits 1 when restarts
  run out only because it has no such evidence then).
- *93*: NVRx's own "do not requeue" code (``--ft-no-restart-exit-code``, default 93,
  docs/source/fault_tolerance/usage_guide.rst "No restart", same commit), followed so that one rule in a
  wrapper or Slurm's ``RequeueExit`` covers both launchers; 93 is none of npulaunch's other codes (0, 1,
  2, 128+N).
"""

from __future__ import annotations

from dataclasses import dataclass, replace
from typing import Any, Dict, List, Optional, Sequence, Tuple

from npulaunch.diagnose.summary import AttemptRecord, JobStatus, JobSummary

CRASH_LOOP_EXIT = 93


@dataclass(frozen=True)
class CrashLoop:
    """Attempts that failed the same way without progress, as many as ``job.crash_loop_limit``."""

    attempts: Tuple[int, ...]
    cls: str
    code: str
    label: str
    furthest_step: Optional[int]  # the furthest step any attempt printed; None: no attempt printed one
    limit: int

    @property
    def why(self) -> str:
        steps = f"none got past step {self.furthest_step}"
        if self.furthest_step is None:
            steps = "no attempt printed a step"
        return (
            f"a crash loop: attempts {self.attempts[0]}-{self.attempts[-1]} failed the same way ({self.label}) "
            f"and {steps} (job.crash_loop_limit {self.limit})"
        )

    def to_json(self) -> Dict[str, Any]:
        return {
            "attempts": list(self.attempts),
            "cls": self.cls,
            "code": self.code,
            "furthest_step": self.furthest_step,
            "limit": self.limit,
            "exit_code": CRASH_LOOP_EXIT,
            "why": self.why,
        }

    def ended(self, summary: JobSummary) -> JobSummary:
        """The job's summary ending with the loop's exit code, and saying so (summary.json's ``crash_loop``)."""
        return replace(summary, job=replace(summary.job, exit_code=CRASH_LOOP_EXIT), crash_loop=self.to_json())


THEN = f"stopped: a crash loop (exit code {CRASH_LOOP_EXIT}: do not requeue)"


def crash_loop(attempts: Sequence[AttemptRecord], limit: int) -> Optional[CrashLoop]:
    """The loop the last ``limit`` attempts make, or None (``limit`` below 2: never)."""
    if limit < 2 or len(attempts) < limit:
        return None
    progressed = _progress(attempts)
    last = attempts[-1].root_cause
    if last is None:
        return None
    streak: List[AttemptRecord] = []
    for record, advanced in zip(reversed(attempts), reversed(progressed)):
        cause = record.root_cause
        if record.status is not JobStatus.FAILED or cause is None or advanced:
            break
        if (cause.cls, cause.code) != (last.cls, last.code):
            break
        streak.append(record)
    if len(streak) < limit:
        return None
    steps = [a.last_step for a in attempts if a.last_step is not None]
    return CrashLoop(
        tuple(a.attempt for a in reversed(streak[:limit])),
        last.cls,
        last.code,
        last.label,
        max(steps) if steps else None,
        limit,
    )


def _progress(attempts: Sequence[AttemptRecord]) -> List[bool]:
    """Whether each attempt got past the furthest step printed before it (step 0 before the first)."""
    furthest = 0
    found = []
    for record in attempts:
        step = record.last_step
        found.append(step is not None and step > furthest)
        if step is not None:
            furthest = max(furthest, step)
    return found
