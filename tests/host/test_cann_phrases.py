"""The log path's pre-filter and the failure phrases (host/cann/prefilter.py, host/cann/phrases.py), and the
real failure lines collected in tests/data/ascend_error_lines.jsonl read the way the agent reads them
(host/cann/scan.py): which lines are a cause, which a symptom of waiting, and what each is."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any, Dict, List

import pytest

from npulaunch.host.cann.findings import Finding
from npulaunch.host.cann.prefilter import CAUSE, SIGNATURES, SYMPTOM, Matcher, _Gate
from npulaunch.host.cann.scan import Scanner

DATA = Path(__file__).resolve().parent.parent / "data" / "ascend_error_lines.jsonl"
ROWS: List[Dict[str, Any]] = [json.loads(line) for line in DATA.read_text(encoding="utf-8").splitlines()]
ORDINARY = [
    "step 507035 loss 0.2513 lr 0.0001 global_step/sec: 12.3",  # an ACL code's digits, but no error around them
    "I0102 03:04:05.123 12345 basic_session_run_hooks.py:260] loss = 0.25, step = 100 (0.3 sec)",
    "[INFO] GE(1234,python3):2024-01-02-03:04:05.678.901 [graph_manager.cc:100] Run graph 1 success",
    "Epoch 1/10: 100/200 [==============>...............] - ETA: 3s - loss: 0.2500",
    "W1102 03:04:05.123456 140123 session.py:12] The name tf.Session is deprecated. E2E 1234.5",
    "eval result = 507035 samples, processed 507011 images",  # the words of a shape, with nothing failing
]


def scan(lines: List[str], plog: bool = False) -> List[Finding]:
    """The findings of a stream that printed these lines and ended."""
    scanner = Scanner()
    found = scanner.block("stream", "".join(line + "\n" for line in lines).encode(), plog)
    return found + [finding for _, finding in scanner.flush_all()]


def row_id(row: Dict[str, Any]) -> str:
    return f"{row['code'] or row['cls']}:{row['line'][:40]}"


@pytest.mark.parametrize(
    "line, name, kind",
    [
        (
            "[ERROR] HCCL(1,python3):2024-01-02-03:04:05.678.901 [x.cc:1] [1][Wait][LinkEstablish]wait socket "
            "establish timeout, role[1] rank[1] timeout[120 s]",
            "hccl-socket-timeout",
            SYMPTOM,
        ),
        ("Traceback (most recent call last):", "python-traceback", CAUSE),
        ("bash: line 1: 123 Segmentation fault (core dumped) python3 train.py", "segfault", CAUSE),
        ("RuntimeError: CUDA out of memory", "out-of-memory", CAUSE),
    ],
)
def test_phrases(line: str, name: str, kind: str) -> None:
    signature = Matcher().match(line)
    assert signature is not None and signature.name == name and signature.kind == kind


def test_ordinary_lines_give_nothing() -> None:
    assert scan(ORDINARY * 3) == []
    matcher = Matcher()
    assert all(matcher.match(line) is None for line in ORDINARY + ["  Traceback is not at the start"])


def test_the_collection_holds_forty_real_lines_each_with_its_source() -> None:
    assert len(ROWS) >= 40
    assert len({row["line"] for row in ROWS}) == len(ROWS)
    for row in ROWS:
        assert row["source"].startswith(("https://", "github:")), row
        assert row["format"] in ("stdout", "plog") and row["kind"] in (CAUSE, SYMPTOM)
        assert isinstance(row["retryable"], bool) and row["line"].strip() == row["line"]
    assert len({row["source"] for row in ROWS}) >= 20
    assert {"EE9999", "EH9999", "EI9999", "EI0009", "507035", "507048", "507034"} <= {row["code"] for row in ROWS}


@pytest.mark.parametrize("row", ROWS, ids=row_id)
def test_a_real_line_is_recognised_as_what_it_is(row: Dict[str, Any]) -> None:
    found = scan([row["line"]], plog=row["format"] == "plog")
    assert found, row["line"]
    first = found[0]
    assert (first.code, first.cls, first.kind) == (row["code"], row["cls"], row["kind"]), first
    if not row.get("context"):  # with context the decision is the root cause's (tests/diagnose/test_rootcause.py)
        assert first.retryable is row["retryable"]
    # found the same way among ordinary lines, which is how the agent reads output and plogs
    among = scan(ORDINARY + [row["line"]] + ORDINARY, plog=row["format"] == "plog")
    assert [(f.code, f.cls, f.line) for f in among] == [(first.code, first.cls, first.line)]


@pytest.mark.parametrize("row", ROWS, ids=row_id)
def test_every_signature_that_matches_a_real_line_has_a_needle_in_it(row: Dict[str, Any]) -> None:
    """The pre-filter is exact: it never rejects a line a signature's pattern would match."""
    for signature, pattern in Matcher()._each:
        if pattern.search(row["line"]):
            assert any(needle_in(needle, row["line"]) for needle in signature.needles), signature.name


def needle_in(needle: str, line: str) -> bool:
    return needle in (line.lower() if needle == needle.lower() and needle.upper() != needle else line)


def test_every_signature_has_literal_needles() -> None:
    """Needles keep matching cheap (every batch is first searched for them as plain text); a signature
    without one would be run as a regular expression over every batch of every rank."""
    assert all(signature.needles and all(signature.needles) for signature in SIGNATURES)
    assert Matcher()._unfiltered is None


class CountingPattern:
    def __init__(self, pattern: Any, calls: List[str]) -> None:
        self.pattern, self.calls = pattern, calls

    def search(self, text: str) -> Any:
        self.calls.append(text)
        return self.pattern.search(text)


def test_a_line_without_a_needle_costs_no_regular_expression() -> None:
    matcher = Matcher()
    calls: List[str] = []
    matcher._each = [(signature, CountingPattern(pattern, calls)) for signature, pattern in matcher._each]
    batch = ORDINARY * 100
    assert matcher.scan(batch) == [] and all(matcher.match(line) is None for line in batch)
    assert calls == []
    error = "bash: line 1: 7 Segmentation fault (core dumped) python3 train.py"
    found = matcher.scan(batch + [error])
    assert [(index, signature.name) for index, signature in found] == [(len(batch), "segfault")]
    assert set(calls) == {error}  # only the line with a needle met a pattern


def block_of(lines: List[str]) -> bytes:
    return "".join(line + "\n" for line in lines).encode()


@pytest.mark.parametrize("row", ROWS, ids=row_id)
def test_the_pre_filter_passes_every_real_line(row: Dict[str, Any]) -> None:
    """The block path (gates, then the needles and shapes in bytes) lets every real line through among
    ordinary ones, whatever the gates learnt from the blocks before, and shuts ordinary text out."""
    matcher = Matcher()
    filler = ORDINARY[1:4] * 50  # no word of a shape
    assert not matcher.block_may_match(block_of(filler))  # teaches the gates this text
    assert matcher.block_may_match(block_of(filler + [row["line"]] + filler))
    assert not matcher.block_may_match(block_of(filler))


def test_folded_needles_are_found_in_any_case_and_progress_updates_are_matched_without_their_cr() -> None:
    matcher = Matcher()
    for text in (
        b"x\nbash: line 1: 7 SEGMENTATION FAULT (core dumped) python3 t.py\n",
        b"10%\rTraceback (most recent call last):\r\n",
    ):
        lines, found = matcher.scan_block(text)
        assert [signature.name for _, signature in found] in (["segfault"], ["python-traceback"]), text
        assert not any(line.endswith("\r") for line in lines)


def test_a_block_with_no_needle_character_is_passed_by_the_gates_alone(monkeypatch: pytest.MonkeyPatch) -> None:
    """The gates: a block lacking a rare character of every needle is not searched for the needles
    (no lower-casing, no needle search), nor for a six-character code when it has no "E"."""
    matcher = Matcher()
    searched: List[bytes] = []
    original = _Gate.search
    monkeypatch.setattr(_Gate, "search", lambda gate, block: searched.append(block) or original(gate, block))
    plain = b"".join(b"line %07d rank %02d %s\n" % (i, 3, b"x" * 58) for i in range(1000))
    assert matcher.scan_block(plain) == ([], []) and not matcher.block_may_match(plain)
    assert searched == [] and all(gate.closed(plain) for gate in matcher._gates)
    # a gate opens on a block with its rare characters, and then looks for its needles themselves
    assert matcher.block_may_match(plain + b"ErrCode=507011, desc=[the model stream execute failed]\n") and searched
