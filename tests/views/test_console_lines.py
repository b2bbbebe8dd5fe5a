"""Every line a rank prints reaches the launcher's terminal whole, once, with exactly one prefix, its
own rank's (issue 34): 4 real ranks interleaving stdout and stderr line by line under a real
pseudo-terminal, with the plain console and with the live view (read through a small model of a
terminal), and with stdout and stderr on two pipes. Also the console's writer on its own: partial
writes finished, one writer for two streams to one place."""

from __future__ import annotations

import os
import re
import subprocess
import sys
import threading
import time
from pathlib import Path
from typing import Dict, List, Tuple

from helpers import base_env, host_plan, npulaunch_argv, run_on_pty

from npulaunch.config.cluster import ConsoleMode
from npulaunch.views.console import Console

RANKS, LINES = 4, 600
# each line one write() on its own stream, unbuffered, the two streams alternating
MIX = (
    "import os, sys\nrank = int(os.environ['RANK_ID'])\nfor i in range({lines}):\n"
    "    fd = 1 if i % 2 == 0 else 2\n"
    "    os.write(fd, b'%s mixline rank %d line %d {tail}\\n' % (b'out' if fd == 1 else b'err', rank, i))\n"
)
LINE = re.compile(r"^\[r(\d+) d(\d+)\] (out|err) mixline rank (\d+) line (\d+)(.*)$")


def mixing_command(lines: int = LINES, tail: str = "") -> List[str]:
    return ["--", sys.executable, "-c", MIX.format(lines=lines, tail=tail)]


def mangled(lines: List[str], streams: Tuple[str, ...] = ("out", "err"), count: int = LINES) -> List[str]:
    """What is wrong with the rank lines among ``lines``: a line with the mark that is not exactly one
    prefix and one line of the rank it names, or a line missing or shown twice."""
    wrong: List[str] = []
    seen: Dict[Tuple[int, int], int] = {}
    for line in lines:
        if "mixline" not in line:
            continue
        found = LINE.match(line)
        if not found or "mixline" in found.group(6) or len({found.group(1), found.group(2), found.group(4)}) != 1:
            wrong.append(f"mangled: {line!r}")
            continue
        key = (int(found.group(4)), int(found.group(5)))
        seen[key] = seen.get(key, 0) + 1
    for rank in range(RANKS):
        for index in range(count):
            if ("out" if index % 2 == 0 else "err") in streams and seen.get((rank, index)) != 1:
                wrong.append(f"rank {rank} line {index}: shown {seen.get((rank, index), 0)} times")
    return wrong


def test_a_terminal_gets_every_line_whole_once_with_its_own_prefix(tmp_path: Path) -> None:
    for run in range(5):
        args = ["run", "--nproc-per-node", str(RANKS), "--log-dir", str(tmp_path), "--job-id", f"mix{run}"]
        text = run_on_pty([*args, "--no-live", *mixing_command()])
        wrong = mangled(text.replace("\r\n", "\n").split("\n"))
        assert not wrong, f"run {run}: {len(wrong)} problems: {wrong[:10]}"


def test_two_pipes_get_each_stream_prefixed(tmp_path: Path) -> None:
    argv = npulaunch_argv("run", "--nproc-per-node", str(RANKS), "--log-dir", str(tmp_path), "--job-id", "pipes")
    done = subprocess.run([*argv, *mixing_command()], capture_output=True, text=True, env=base_env(), timeout=60)
    assert done.returncode == 0, done.stderr
    assert not mangled(done.stdout.splitlines(), ("out",)), mangled(done.stdout.splitlines(), ("out",))[:10]
    assert not mangled(done.stderr.splitlines(), ("err",)), mangled(done.stderr.splitlines(), ("err",))[:10]
    assert " err mixline" not in done.stdout and " out mixline" not in done.stderr
    assert "npulaunch: job pipes succeeded" in done.stderr


class Terminal:
    """Just enough of a terminal to read the live view: text, \\r, \\n, erase the line, cursor up;
    colours and the cursor's visibility ignored. It never scrolls anything away and never wraps, so
    its lines are the whole session as a person scrolling back would read it."""

    TOKEN = re.compile(r"\x1b\[([0-9;?]*)([A-Za-z])|\r|\n|[^\x1b\r\n]+")

    def __init__(self) -> None:
        self.lines = [""]
        self.row = self.col = 0

    def feed(self, text: str) -> "Terminal":
        for token in self.TOKEN.finditer(text):
            piece = token.group(0)
            if token.group(2) == "A":
                self.row = max(0, self.row - int(token.group(1) or 1))
            elif token.group(2) == "K":
                self.lines[self.row] = ""
            elif token.group(2):
                continue  # colours, the cursor shown or hidden
            elif piece == "\r":
                self.col = 0
            elif piece == "\n":
                self.row += 1
                if self.row == len(self.lines):
                    self.lines.append("")
            else:
                line = self.lines[self.row].ljust(self.col)
                self.lines[self.row] = line[: self.col] + piece + line[self.col + len(piece) :]
                self.col += len(piece)
        return self


def test_the_live_view_shows_every_line_whole_once_and_one_table(tmp_path: Path) -> None:
    # 80 columns: the table's headers stay whole; "[/epoch]" in a line is a rank's text, not rich markup
    for run in range(3):
        args = ["run", "--nproc-per-node", str(RANKS), "--log-dir", str(tmp_path), "--job-id", f"live{run}"]
        text = run_on_pty([*args, *mixing_command(tail="[/epoch]")], columns=80)
        lines = Terminal().feed(text).lines
        wrong = mangled([line for line in lines if "mixline" in line and not line.startswith(("0 ", "1 ", "2 ", "3 "))])
        assert not wrong, f"run {run}: {len(wrong)} problems: {wrong[:10]}"
        headers = [line for line in lines if line.startswith("rank ")]
        assert len(headers) == 1, headers  # every frame's table was erased but the last
        assert headers[0].split() == ["rank", "device", "state", "lines/s", "silent", "step", "ETA", "last", "line"]
        rows = lines[lines.index(headers[0]) + 1 :][:RANKS]
        assert [row.split()[:3] for row in rows] == [[str(r), str(r), "succeeded"] for r in range(RANKS)], rows
        assert all(len(line) <= 80 for line in [headers[0], *rows])
        assert not [line for line in lines if re.match(r"\d+\s+\d+\s+(starting|running)", line)]


def test_partial_writes_are_finished_before_anything_else(tmp_path: Path) -> None:
    # a non-blocking pipe (another process may set O_NONBLOCK on a shared terminal) that a slow reader
    # empties: writes come back short or with EAGAIN, and every byte still arrives, in order
    read_fd, write_fd = os.pipe()
    os.set_blocking(write_fd, False)
    spec0, spec1 = host_plan(tmp_path, "partial-marker", "*=exit:0").ranks
    got: List[bytes] = []

    def slow_reader() -> None:
        while True:
            time.sleep(0.002)
            data = os.read(read_fd, 16384)
            if not data:
                return
            got.append(data)

    reader = threading.Thread(target=slow_reader)
    reader.start()
    with open(write_fd, "wb", buffering=0) as out:
        console = Console(ConsoleMode.ALL, out=out, err=out)
        for index in range(40):
            spec = spec0 if index % 2 == 0 else spec1
            block = b"".join(b"block %d line %d %s\n" % (index, n, b"x" * 60) for n in range(1000))
            console.rank_output(spec, "stdout" if index % 2 == 0 else "stderr", block)
        console.message("the end")
        console.drain(30.0)
        assert not console.broken
    reader.join(30)
    lines = b"".join(got).decode().splitlines()
    expected = [
        f"[{(spec0 if i % 2 == 0 else spec1).label}] block {i} line {n} {'x' * 60}"
        for i in range(40)
        for n in range(1000)
    ]
    assert lines == [*expected, "npulaunch: the end"]


def test_stdout_and_stderr_to_one_place_share_one_writer(tmp_path: Path) -> None:
    spec = host_plan(tmp_path, "share-marker", "*=exit:0").ranks[0]
    prefix = f"[{spec.label}] "
    with open(tmp_path / "both", "wb") as out:
        err = open(os.dup(out.fileno()), "wb")  # 2>&1: another descriptor of the same file
        console = Console(ConsoleMode.ALL, out=out, err=err)
        console.rank_output(spec, "stdout", b"one\ntwo")  # not ended by a newline: it gets one
        console.rank_output(spec, "stderr", b"three\n")
        console.message("four")
        console.drain(5.0)
        assert console._writers[id(out)] is console._writers[id(err)]
        err.close()
    assert (tmp_path / "both").read_text() == f"{prefix}one\n{prefix}two\n{prefix}three\nnpulaunch: four\n"


def test_a_narrow_terminal_cuts_the_last_line_then_the_state_never_a_header() -> None:
    from npulaunch.views.columns import GAP, fit_widths
    from npulaunch.views.liveview import COLUMNS

    natural = [4, 6, 30, 7, 6, 7, 3, 60]  # a long state (signatures) and a long last line
    assert fit_widths(COLUMNS, natural, 200) == natural
    narrow = fit_widths(COLUMNS, natural, 80)
    assert sum(narrow) + len(GAP) * (len(COLUMNS) - 1) == 80 and narrow[:2] + narrow[3:7] == [4, 6, 7, 6, 7, 3]
    assert narrow[7] == len("last line") and narrow[2] < 30  # the last line gave way first, then the state
    assert fit_widths(COLUMNS, natural, 20) == [4, 6, 5, 7, 6, 7, 3, 9]  # too narrow even so: headings whole
