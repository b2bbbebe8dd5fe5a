"""LineSplitter and FileTail: lines cut at \\n, \\r\\n and \\r, never inside a UTF-8 character."""

from __future__ import annotations

from pathlib import Path

import pytest

from npulaunch.host.agent.tail import MAX_LINE_BYTES, FileTail, LineSplitter, last_lines


def feed_all(chunks):
    splitter = LineSplitter()
    lines = []
    for chunk in chunks:
        lines.extend(splitter.feed(chunk))
    return lines + splitter.flush()


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
    assert feed_all(chunks) == expected


def test_a_utf8_character_split_across_reads_is_kept_whole() -> None:
    data = "héllo ✓ 中文\n".encode()
    assert feed_all([data[i : i + 1] for i in range(len(data))]) == ["héllo ✓ 中文"]


def test_an_overlong_line_is_cut_on_a_character_boundary() -> None:
    text = "✓" * (MAX_LINE_BYTES // 3 + 10)  # 3 bytes each, longer than the limit
    data = text.encode()
    lines = feed_all([data[:40000], data[40000:], b"\n"])  # no newline yet when the limit is passed
    assert len(lines) == 2
    assert "".join(lines) == text
    assert "\ufffd" not in lines[0]


def test_invalid_utf8_is_replaced_not_fatal() -> None:
    assert feed_all([b"bad \xff\xfe byte\n"]) == ["bad \ufffd\ufffd byte"]


def test_file_tail_follows_appends(tmp_path: Path) -> None:
    path = tmp_path / "log"
    tail = FileTail(str(path))
    with open(path, "ab", buffering=0) as out:
        out.write(b"one\ntw")
        assert tail.read_lines() == ["one"]
        out.write(b"o\nthree")
        assert tail.read_lines() == ["two"]
    assert tail.close() == ["three"]


def test_last_lines(tmp_path: Path) -> None:
    path = tmp_path / "log"
    path.write_bytes(b"".join(b"line %d\n" % i for i in range(100)) + b"50%\r100%\n")
    assert last_lines(str(path), 3) == ["line 98", "line 99", "100%"]
    assert last_lines(str(tmp_path / "missing"), 3) == []


def test_drain_blocks_gives_whole_lines_and_the_unfinished_last(tmp_path: Path) -> None:
    from npulaunch.host.agent.tail import FileTail

    path = tmp_path / "log"
    path.write_bytes(b"first\nsecond\n" + b"x" * 100 + b"\nlast without newline")
    tail = FileTail(str(path))
    assert tail.read_lines(3) == []  # "fir" is pending in the splitter: the blocks carry on from it
    assert tail.unread_bytes() == path.stat().st_size - 3
    blocks = list(tail.drain_blocks(limit_bytes=8))
    assert b"".join(blocks) == path.read_bytes()
    assert all(block.endswith(b"\n") for block in blocks[:-1]) and blocks[-1] == b"last without newline"
    assert tail.unread_bytes() == 0
