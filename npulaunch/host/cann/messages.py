"""Lines into messages: a line that carries a code (or a known failure phrase) opens a message, and
the lines that continue it (indented, TraceBack / Possible Cause / Solution, torch_npu's ``[Error]:``,
the frames MindSpore and the TF Adapter put around CANN's text, a Python traceback's parts, further
code lines right after) join it. The few lines before it that carry a code join it too (a rank's last coded
warning, "ret 107000" printed before the failure's own line), and so do they when the rank dies after them
with nothing more (``flush(died=True)``). One message becomes one finding (host/cann/findings.py). Plog
records join while they follow each other within a second. Standard library only, Python 3.7+.
"""

from __future__ import annotations

import collections
from typing import Callable, Deque, List, Optional, Sequence, Tuple

from npulaunch.host.cann.shapes import (
    Hit,
    banner,
    continues,
    find_codes,
    find_reason,
    is_info,
    is_warning,
    line_time,
    record_level,
    split_escaped,
    split_prefix,
)

CONTEXT_LINES = 5  # ordinary lines kept before a message, for the report's excerpt
KEPT_LINES = 40  # a message's lines kept for the report (its codes are read in all of them)
MAX_LINES = 2000  # a message this long is closed: the rest of the output is not one message
PLOG_GAP_S = 1.0  # plog records this close in time belong to one message
MAX_BLANKS = 1  # blank lines a message may hold in a row (CANN's blocks have the odd one)
QUIET_LEVELS = ("WARNING", "WARN", "INFO", "DEBUG", "EVENT", "TRACE")  # a plog record's or a logger's: no failure
INFO_LEVELS = ("INFO", "DEBUG", "EVENT", "TRACE")  # of those, the ones that never report one, not even as a warning


def _reason_in(text: str) -> bool:
    """Whether the line gives one of the runtime's reasons (``reason=[aicore exception]``): a failure with the
    code it implies, where the line prints no code."""
    if "reason" not in text:
        return False
    from npulaunch.host.cann.lookup import lookup_reason

    found = find_reason(text)
    return found is not None and lookup_reason(found) is not None


def _coded(line: str) -> List[Hit]:
    """The error-level codes of a line of the context (none when it was logged at an information level)."""
    text, said = split_prefix(line)
    if said in INFO_LEVELS or record_level(text) in INFO_LEVELS or is_info(text):
        return []
    return [hit for hit in find_codes(text) if hit.code[0] != "W" or hit.family != "cann"]


class Message:
    """The lines of one error message, the codes in them (line index, hit) and the phrases."""

    __slots__ = ("lines", "hits", "phrases", "before", "plog", "count", "last_time", "blanks", "line_no", "section")

    def __init__(self, before: Sequence[str], plog: bool, line_no: int = 0) -> None:
        self.line_no = line_no  # the stream's line (1-based) the message starts on
        self.lines: List[str] = []
        self.hits: List[Tuple[int, Hit]] = []
        self.phrases: List[Tuple[int, object]] = []  # (line index, Signature)
        self.before = tuple(before)
        self.plog = plog
        self.count = 0  # lines in all, kept or not
        self.last_time: Optional[float] = None
        self.blanks = 0
        self.section = False  # in a part of MindSpore's exception frame (its lines go on the message)

    def add(self, line: str, hits: Sequence[Hit], phrase: object) -> None:
        index = self.count
        self.count += 1
        if index < KEPT_LINES:
            self.lines.append(line)
        self.hits.extend((index, hit) for hit in hits)
        if phrase is not None:
            self.phrases.append((index, phrase))


PhraseOf = Callable[[str], Optional[object]]


class Reader:
    """Assembles one stream's messages (a rank's stdout, stderr or one plog file). ``feed`` takes whole
    lines and returns the messages they closed; ``flush`` closes the open one."""

    def __init__(self, phrase_of: PhraseOf, plog: bool = False) -> None:
        self._phrase_of = phrase_of
        self._plog = plog
        self._context: Deque[str] = collections.deque(maxlen=CONTEXT_LINES)
        self.current: Optional[Message] = None
        self.lines_seen = 0  # the stream's lines so far (a message's line number is counted from them)

    @property
    def open(self) -> bool:
        return self.current is not None

    def remember(self, lines: Sequence[str], count: int) -> None:
        """``count`` ordinary lines the reader was not given (a block without codes), ``lines`` the last
        few of them: context for the next message."""
        self.lines_seen += count
        if self.current is None:
            self._context.extend(line[:500] for line in lines[-CONTEXT_LINES:])

    def feed(self, lines: Sequence[str], candidates: Optional[Sequence[int]] = None) -> List[Message]:
        """``candidates``: the lines that may carry a code or a phrase (the pre-filter's); the others are
        read only while a message is open (a CANN block's lines under its code carry shapes no needle
        finds: "runtime result = 507011")."""
        done: List[Message] = []
        marked = set(range(len(lines)) if candidates is None else candidates)
        for index, raw in enumerate(lines):
            self.lines_seen += 1
            if index not in marked and self.current is None:
                self._context.append(raw[:500])
                continue
            for line in split_escaped(raw) if "\\n" in raw else (raw,):
                closed = self._line(line.rstrip("\r"), self.current is not None or index in marked)
                if closed is not None:
                    done.append(closed)
        return done

    def flush(self, died: bool = False) -> Optional[Message]:
        """The open message, complete. ``died``: the stream's process died (a failed rank); when no message is
        open, the lines it printed last that carry a code (a coded warning, "ret 107000") are its message."""
        message, self.current = self.current, None
        if message is None and died and not self._plog:
            before, lead = self._lead()
            if lead:
                message = Message(before, plog=False, line_no=self.lines_seen - len(lead) + 1)
                for line, hits in lead:
                    message.add(line, hits, None)
                self._context.clear()
        return message

    def _lead(self) -> Tuple[List[str], List[Tuple[str, List[Hit]]]]:
        """The context split where its first line that carries an error-level code starts (a line logged at an
        information level is passed over): the lines before it, and it and the lines after it with their codes.
        Those are the failure's own lines, printed before the line that says it failed, or last before the rank
        died: a warning with the code that names the failure ("NPU warning, error code is 507035"), a program's
        "ret 107000". They are read only when a message opens or the rank died: ordinary lines cost nothing."""
        lines = list(self._context)
        coded = [_coded(line) for line in lines]
        first = next((i for i, hits in enumerate(coded) if hits), None)
        if first is None:
            return lines, []
        return lines[:first], list(zip(lines[first:], coded[first:]))

    def _line(self, line: str, candidate: bool = True) -> Optional[Message]:
        text, said = split_prefix(line)  # said: the level a logger's prefix gave the line
        level = record_level(text)
        hits = find_codes(text) if candidate else []
        phrase = self._phrase_of(text) if candidate else None
        quiet = level in QUIET_LEVELS or said in QUIET_LEVELS or is_warning(text) or is_info(text)
        opens = not quiet and (any(hit.code[0] != "W" for hit in hits) or phrase is not None or _reason_in(text))
        closed: Optional[Message] = None
        message = self.current
        if message is not None and message.plog and level is not None and level != "ERROR":
            return None  # a record of another level neither joins a plog message nor ends it
        if message is not None:
            if self._joins(message, text, level, opens):
                message.add(line, () if quiet else hits, None if quiet else phrase)
                if message.count >= MAX_LINES:
                    closed = self.flush()
                return closed
            closed = self.flush()
        if opens:
            plog = self._plog or level is not None
            before, lead = self._lead() if not plog else (list(self._context), [])
            message = Message(before, plog=plog, line_no=self.lines_seen - len(lead))
            message.last_time = line_time(text) if message.plog else None
            message.section = banner(text)
            for earlier, earlier_hits in lead:
                message.add(earlier, earlier_hits, None)
            message.add(line, hits, phrase)
            self.current = message
            self._context.clear()
        else:
            self._context.append(line[:500])
        return closed

    def _joins(self, message: Message, text: str, level: Optional[str], opens: bool) -> bool:
        """Whether the line goes on the open message (the message is closed when it does not)."""
        if message.plog and level is not None:
            stamp = line_time(text)
            near = stamp is None or message.last_time is None or abs(stamp - message.last_time) <= PLOG_GAP_S
            if near and stamp is not None:
                message.last_time = stamp
            return near
        if not text.strip():
            message.blanks += 1
            return message.blanks <= MAX_BLANKS
        after_blank, message.blanks = message.blanks > 0, 0
        if level is not None:  # a plog record printed to stdout: it joins when it carries a code or phrase
            return opens and not message.plog
        if message.plog:  # a plog record stands alone: only an indented line goes on it
            return text[:1].isspace()
        if banner(text):  # a part of MindSpore's frame: its lines follow, up to a blank line
            message.section = True
            return True
        return opens or continues(text) or (message.section and not after_blank)
