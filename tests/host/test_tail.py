"""LineSplitter and FileTail: blocks of whole lines cut at \\n, \\r\\n and \\r, never inside a UTF-8
character; split_lines, count_lines and tail_lines read them."""

from __future__ import annotations

from pathlib import Path

import pytest

from npulaunch.host.tail import (
    MAX_LINE_BYTES,
    FileTail,
    LineSplitter,
    count_lines,
    last_lines,
    split_lines,
    tail_lines,
)


def feed_all(chunks):
    splitter = LineSplitter()
    blocks = [splitter.feed(chunk) for chunk in chunks] + [splitter.flush()]
    return [line for block in blocks for line in split_lines(block)], blocks


@pytest.mark.parametrize(
    "chunks, expected",
    [
        ([b"a\nb\n"], ["a", "b"]),
        ([b"a", b"b\n", b"c"], ["ab", "c"]),
        ([b"a\r\nb\r\n"], ["a", "b"]),
        ([b"a\r", b"\nb\n"], ["a", "b"]),  # \r\n split across reads
        ([b"10%\r50%\r100%\n"], ["10%\r", "50%\r", "100%"]),
        ([b"10%\r", b"50%\r", b"done\n"], ["10%\r", "50%\r", "done"]),
        ([b"\n\n"], ["", ""]),
        ([b"no newline at end"], ["no newline at end"]),
    ],
)
def test_lines(chunks, expected) -> None:
    lines, blocks = feed_all(chunks)
    assert lines == expected
    assert sum(count_lines(block) for block in blocks) == len(expected)
    assert all(block.endswith((b"\n", b"\r")) for block in blocks if block)  # whole lines only


def test_a_block_is_the_bytes_as_written_cut_after_the_last_whole_line() -> None:
    splitter = LineSplitter()
    data = b"one\r\ntwo \xff\nthr"
    block = splitter.feed(data)
    assert block == b"one\r\ntwo \xff\n"  # as written: no decoding, no copy of the line ends
    assert splitter.feed(b"ee\n") == b"three\n"
    assert splitter.feed(b"x" * 10 + b"\r") == b""  # a bare \r at the end may be half a \r\n: held
    assert splitter.feed(b"y\n") == b"x" * 10 + b"\ry\n"


def test_a_utf8_character_split_across_reads_is_kept_whole() -> None:
    data = "héllo ✓ 中文\n".encode()
    assert feed_all([data[i : i + 1] for i in range(len(data))])[0] == ["héllo ✓ 中文"]


def test_an_overlong_line_is_cut_on_a_character_boundary() -> None:
    text = "✓" * (MAX_LINE_BYTES // 3 + 10)  # 3 bytes each, longer than the limit
    data = text.encode()
    lines, _ = feed_all([data[:40000], data[40000:], b"\n"])  # no newline yet when the limit is passed
    assert len(lines) == 2
    assert "".join(lines) == text
    assert "\ufffd" not in lines[0]


def test_invalid_utf8_is_replaced_not_fatal() -> None:
    assert feed_all([b"bad \xff\xfe byte\n"])[0] == ["bad \ufffd\ufffd byte"]


def test_count_and_tail_lines_read_a_block_without_splitting_it() -> None:
    block = b"".join(b"line %d\n" % i for i in range(1000)) + b"10%\r50%\r\n"
    assert count_lines(block) == len(split_lines(block)) == 1002
    assert tail_lines(block, 3) == ["line 999", "10%\r", "50%"]
    assert tail_lines(b"only\n", 5) == ["only"]
    assert tail_lines(b"", 5) == [] and count_lines(b"") == 0
    assert count_lines(b"no end") == 1


def test_file_tail_follows_appends(tmp_path: Path) -> None:
    path = tmp_path / "log"
    tail = FileTail(str(path))
    with open(path, "ab", buffering=0) as out:
        out.write(b"one\ntw")
        assert tail.read() == b"one\n"
        out.write(b"o\nthree")
        assert tail.read() == b"two\n"
    assert tail.close() == b"three\n"


def test_last_lines(tmp_path: Path) -> None:
    path = tmp_path / "log"
    path.write_bytes(b"".join(b"line %d\n" % i for i in range(100)) + b"50%\r100%\n")
    assert last_lines(str(path), 3) == ["line 98", "line 99", "100%"]
    assert last_lines(str(tmp_path / "missing"), 3) == []


def test_drain_gives_whole_lines_in_bounded_blocks_and_the_unfinished_last(tmp_path: Path) -> None:
    path = tmp_path / "log"
    path.write_bytes(b"first\nsecond\n" + b"x" * 100 + b"\nlast without newline")
    tail = FileTail(str(path))
    assert tail.read(3) == b""  # "fir" is pending in the splitter: the blocks carry on from it
    assert tail.unread_bytes() == path.stat().st_size - 3
    blocks = list(tail.drain(limit_bytes=8))
    assert b"".join(blocks) == path.read_bytes() + b"\n"  # the last line ended for the readers
    assert all(block.endswith(b"\n") for block in blocks) and blocks[-1] == b"last without newline\n"
    assert max(len(block) for block in blocks) <= 101 + 8  # a line is whole, reads stay small
    assert tail.unread_bytes() == 0
