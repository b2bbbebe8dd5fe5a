"""LineSplitter and FileTail: lines cut at \\n, \\r\\n and \\r, never inside a UTF-8 character."""

from __future__ import annotations

from pathlib import Path

import pytest

from npulaunch.agent.tail import (
    MAX_LINE_BYTES,
    FileTail,
    Line,
    LineSplitter,
    last_lines,
)


def feed_all(chunks):
    splitter = LineSplitter()
    lines = []
    for chunk in chunks:
        lines.extend(splitter.feed(chunk))
    return lines + splitter.flush()


@pytest.mark.parametrize("chunks, expected", [
    ([b"a\nb\n"], [Line("a", False), Line("b", False)]),
    ([b"a", b"b\n", b"c"], [Line("ab", False), Line("c", False)]),
    ([b"a\r\nb\r\n"], [Line("a", False), Line("b", False)]),
    ([b"a\r", b"\nb\n"], [Line("a", False), Line("b", False)]),  # \r\n split across reads
    ([b"10%\r50%\r100%\n"], [Line("10%", True), Line("50%", True), Line("100%", False)]),
    ([b"10%\r", b"50%\r", b"done\n"], [Line("10%", True), Line("50%", True), Line("done", False)]),
    ([b"\n\n"], [Line("", False), Line("", False)]),
    ([b"no newline at end"], [Line("no newline at end", False)]),
])
def test_lines(chunks, expected) -> None:
    assert feed_all(chunks) == expected


def test_a_utf8_character_split_across_reads_is_kept_whole() -> None:
    data = "héllo ✓ 中文\n".encode()
    assert feed_all([data[i:i + 1] for i in range(len(data))]) == [Line("héllo ✓ 中文", False)]


def test_an_overlong_line_is_cut_on_a_character_boundary() -> None:
    text = "✓" * (MAX_LINE_BYTES // 3 + 10)  # 3 bytes each, longer than the limit
    data = text.encode()
    lines = feed_all([data[:40000], data[40000:], b"\n"])  # no newline yet when the limit is passed
    assert len(lines) == 2
    assert "".join(line.text for line in lines) == text
    assert "\ufffd" not in lines[0].text


def test_invalid_utf8_is_replaced_not_fatal() -> None:
    assert feed_all([b"bad \xff\xfe byte\n"]) == [Line("bad \ufffd\ufffd byte", False)]


def test_file_tail_follows_appends(tmp_path: Path) -> None:
    path = tmp_path / "log"
    tail = FileTail(str(path))
    with open(path, "ab", buffering=0) as out:
        out.write(b"one\ntw")
        assert tail.read_lines() == [Line("one", False)]
        out.write(b"o\nthree")
        assert tail.read_lines() == [Line("two", False)]
    assert tail.close() == [Line("three", False)]


def test_last_lines(tmp_path: Path) -> None:
    path = tmp_path / "log"
    path.write_bytes(b"".join(b"line %d\n" % i for i in range(100)) + b"50%\r100%\n")
    assert last_lines(str(path), 3) == ["line 98", "line 99", "100%"]
    assert last_lines(str(tmp_path / "missing"), 3) == []
