"""No false findings: the clean-log corpus (tests/data/clean_logs/: this repository's examples at verbose
logging, scripts/gen_clean_logs.py, and public logs of NPU runs that succeeded, README.md there) goes through
the scanner the agent and ``npulaunch diagnose`` use, file by file as diagnose/offline.py feeds files, and no
line of it may be a finding: not a step counter, a loss, a learning rate, a PID, a port, a shape, a sample
count, a checkpoint's name, nor a success return (``ret=0``, ``errNo[0x0...0]``)."""

from __future__ import annotations

import gzip
import re
from pathlib import Path
from typing import Iterator, List, Tuple

import pytest

from npulaunch.diagnose.offline import BLOCK_BYTES, PLOG_NAME
from npulaunch.host.cann.findings import Finding
from npulaunch.host.cann.scan import Scanner

CORPUS = Path(__file__).resolve().parent.parent / "data" / "clean_logs"
FILES = sorted(CORPUS.glob("*.gz"))
MIN_LINES = 100_000


def name_of(path: Path) -> str:
    """The log's own name (without .gz): a plog is told by it, as offline.py tells one."""
    return path.name[: -len(".gz")]


def blocks(data: bytes) -> Iterator[bytes]:
    """The file in blocks of whole lines of about BLOCK_BYTES, the last one ended by the file's end, as
    offline.py reads a file."""
    start = 0
    while start < len(data):
        cut = data.rfind(b"\n", start, start + BLOCK_BYTES) + 1
        if cut <= start:  # no newline in the block: up to the next one (or the end)
            found = data.find(b"\n", start + BLOCK_BYTES)
            cut = len(data) if found < 0 else found + 1
        block = data[start:cut]
        yield block if block.endswith(b"\n") else block + b"\n"
        start = cut


def findings_of(path: Path) -> List[Finding]:
    name = name_of(path)
    plog = PLOG_NAME.match(name) is not None
    scanner = Scanner()
    found: List[Finding] = []
    for block in blocks(gzip.decompress(path.read_bytes())):
        found.extend(scanner.block(name, block, plog))
    found.extend(scanner.flush(name))
    return found


def describe(name: str, finding: Finding) -> str:
    what = finding.code or finding.name
    return f"{name}:{finding.line_no}: {what} ({finding.cls}, {finding.kind}): {finding.line[:300]}"


@pytest.mark.parametrize("path", FILES, ids=[p.name for p in FILES])
def test_a_clean_log_gives_no_finding(path: Path) -> None:
    found = findings_of(path)
    listed = "\n".join(describe(name_of(path), f) for f in found)
    assert not found, f"{len(found)} false finding(s) in {path.name} (file:line: code or phrase):\n{listed}"


def count_lines(data: bytes) -> int:
    """Lines as the scanner reads them: ended by a newline, the last one perhaps by the file's end."""
    return data.count(b"\n") + (1 if data and not data.endswith(b"\n") else 0)


def line_counts() -> List[Tuple[str, int]]:
    return [(p.name, count_lines(gzip.decompress(p.read_bytes()))) for p in FILES]


def test_the_corpus_is_big_enough() -> None:
    total = sum(lines for _, lines in line_counts())
    assert total >= MIN_LINES, f"the clean-log corpus has {total} lines; at least {MIN_LINES} wanted"


def test_the_readme_names_every_file_and_only_files_that_exist() -> None:
    readme = (CORPUS / "README.md").read_text("utf-8")
    named = set(re.findall(r"`([\w.+-]+\.gz)`", readme))
    present = {p.name for p in FILES}
    assert not present - named, f"files in {CORPUS} the README does not name: {sorted(present - named)}"
    assert not named - present, f"files the README names that are not in {CORPUS}: {sorted(named - present)}"
