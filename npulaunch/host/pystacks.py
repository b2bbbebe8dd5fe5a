"""Python stacks as text, read: a traceback's frames, a ``py-spy dump`` and a faulthandler dump of every
thread; which frames are the user's own; and where a hung rank's main thread stands (host/waits.py says
which places are waits on other ranks). Pure and standard library only, Python 3.7+: the agent reads
its ranks' dumps on their host, and the launcher reads tracebacks from the same rules.
"""

from __future__ import annotations

import os
from dataclasses import dataclass
from typing import List, Optional, Sequence, Tuple

from npulaunch.host.lazyre import lazy_re

# frames outside the user's code: site-packages, the standard library, frozen modules, <string>, and
# npulaunch's own code inside the ranks (its hooks)
_LIBRARY = lazy_re(
    r"[/\\](?:site-packages|dist-packages)[/\\]|[/\\]lib[/\\]python\d+(?:\.\d+)?[/\\]|^<"
    r"|[/\\]npulaunch[/\\]host[/\\](?:pace|configproto|session|inject[/\\]sitecustomize)\.py$"
)
# a traceback's frame:   File "/x/train.py", line 41, in step
TRACEBACK_FRAME = lazy_re(r'^\s*File "(?P<file>[^"]*)", line (?P<line>\d+), in (?P<func>.*)$')
# faulthandler's:        File "/x/train.py", line 41 in step
_FAULTHANDLER_FRAME = lazy_re(r'^\s*File "(?P<file>[^"]*)", line (?P<line>\d+) in (?P<func>.*)$')
_FAULTHANDLER_THREAD = lazy_re(r"^(?P<current>Current thread|Thread) (?P<id>0x[0-9a-fA-F]+)")
# py-spy's (--full-filenames):   Thread 4242 (idle): "MainThread"   /   step (/x/train.py:41)
_PYSPY_THREAD = lazy_re(r'^Thread (?P<id>\d+|0x[0-9a-fA-F]+) \((?P<state>[\w+]+)\)(?:: "(?P<name>.*)")?\s*$')
_PYSPY_FRAME = lazy_re(r"^\s+(?P<func>.+?) \((?P<file>.*):(?P<line>\d+)\)\s*$")


@dataclass(frozen=True)
class Frame:
    func: str
    path: str
    line: int

    @property
    def library(self) -> bool:
        return is_library(self.path)

    def text(self) -> str:
        """``train.py:41, in step``: where a person looks (the file's name, not its directory)."""
        return "%s:%d, in %s" % (os.path.basename(self.path) or self.path, self.line, self.func)


@dataclass(frozen=True)
class ThreadStack:
    name: str  # py-spy's thread name ("MainThread"), or faulthandler's "Current thread 0x..." / "Thread 0x..."
    frames: Tuple[Frame, ...]  # innermost first, as both dumps print them
    active: Optional[bool] = None  # py-spy: running on a CPU (True) or blocked (False); None: not said


def is_library(path: str) -> bool:
    """Whether a frame's file is outside the user's code (site-packages, the standard library, frozen)."""
    return _LIBRARY.search(path) is not None


def user_frame(frames: Sequence[Frame]) -> Optional[Frame]:
    """The innermost frame in the user's own files (``frames`` innermost first), else None."""
    return next((frame for frame in frames if not frame.library), None)


def where_raised(frames: Sequence[Frame]) -> Optional[Frame]:
    """Where a failure is placed: the innermost frame in the user's files, else the innermost of all."""
    return user_frame(frames) or (frames[0] if frames else None)


def traceback_frames(lines: Sequence[str]) -> List[Frame]:
    """The frames of a traceback's lines (``File "...", line N, in f``), innermost first."""
    frames = []
    for line in lines:
        match = TRACEBACK_FRAME.match(line)
        if match is not None:
            frames.append(Frame(match.group("func").strip(), match.group("file"), int(match.group("line"))))
    frames.reverse()
    return frames


def parse_dump(text: str) -> List[ThreadStack]:
    """The threads of a stack dump: ``py-spy dump --full-filenames`` or faulthandler's. Lines of neither
    (py-spy's header, a note) are skipped; an empty list when the text holds no stack."""
    threads: List[ThreadStack] = []
    name: Optional[str] = None
    active: Optional[bool] = None
    frames: List[Frame] = []
    for line in text.splitlines():
        spy, fault = _PYSPY_THREAD.match(line), _FAULTHANDLER_THREAD.match(line)
        if spy is not None or fault is not None:
            if name is not None:
                threads.append(ThreadStack(name, tuple(frames), active))
            if spy is not None:
                name, active = spy.group("name") or "Thread " + spy.group("id"), "active" in spy.group("state")
            else:
                name, active = fault.group("current") + " " + fault.group("id"), None  # type: ignore[union-attr]
            frames = []
            continue
        frame = _PYSPY_FRAME.match(line) or _FAULTHANDLER_FRAME.match(line)
        if frame is not None and name is not None:
            frames.append(Frame(frame.group("func").strip(), frame.group("file"), int(frame.group("line"))))
    if name is not None:
        threads.append(ThreadStack(name, tuple(frames), active))
    return [thread for thread in threads if thread.frames]


def main_thread(threads: Sequence[ThreadStack]) -> Optional[ThreadStack]:
    """The thread that runs the script: py-spy's MainThread; in a faulthandler dump the thread whose
    outermost frame is a module's top level (the others start in threading's bootstrap)."""
    for thread in threads:
        if thread.name == "MainThread":
            return thread
    for thread in threads:
        if thread.frames[-1].func == "<module>":
            return thread
    return threads[0] if threads else None


def render(thread: ThreadStack, limit: int = 12) -> List[str]:
    """A thread's stack as lines for a report, innermost last (as a traceback reads), ``limit`` frames."""
    frames = list(reversed(thread.frames[:limit]))
    lines = ["%s (%s:%d)" % (frame.func, frame.path, frame.line) for frame in frames]
    if len(thread.frames) > limit:
        lines.insert(0, "... (%d outer frames)" % (len(thread.frames) - limit))
    return lines
