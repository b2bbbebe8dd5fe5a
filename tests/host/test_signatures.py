"""Ascend error signatures (host/signatures.py): which lines are a cause, which a symptom of waiting,
the real failure lines collected in tests/data/ascend_error_lines.jsonl, the pre-filter that keeps
matching cheap, and the timestamps of plog lines."""

from __future__ import annotations

import json
import time
from pathlib import Path
from typing import Any, Dict, List

import pytest

from npulaunch.host.signatures import CAUSE, SIGNATURES, SYMPTOM, Matcher, Signature, parse_plog_time

DATA = Path(__file__).resolve().parent.parent / "data" / "ascend_error_lines.jsonl"
ROWS: List[Dict[str, Any]] = [json.loads(line) for line in DATA.read_text(encoding="utf-8").splitlines()]
ORDINARY = [
    "step 507035 loss 0.2513 lr 0.0001 global_step/sec: 12.3",  # an ACL code's digits, but no error around them
    "I0102 03:04:05.123 12345 basic_session_run_hooks.py:260] loss = 0.25, step = 100 (0.3 sec)",
    "[INFO] GE(1234,python3):2024-01-02-03:04:05.678.901 [graph_manager.cc:100] Run graph 1 success",
    "Epoch 1/10: 100/200 [==============>...............] - ETA: 3s - loss: 0.2500",
]


def row_id(row: Dict[str, Any]) -> str:
    return f"{row['code'] or row['cls']}:{row['line'][:40]}"


@pytest.mark.parametrize(
    "line, name, kind",
    [
        (
            "[ERROR] HCCL(1,python3):2024-01-02-03:04:05.678.901 [x.cc:1] EI0006: Getting socket times out.",
            "EI0006",
            SYMPTOM,
        ),
        ("EI0002: The wait operation for the notify timed out", "EI0002", SYMPTOM),
        ("EI0004: The ranktable is invalid", "EI0004", CAUSE),
        ("EZ9999: Inner Error! there is an aivec error exception", "EZ9999-aicore", CAUSE),
        ("rtStreamSynchronizeWithTimeout failed, error code 507046", "507046", SYMPTOM),
        ("EL0004: Failed to allocate memory.", "EL0004", CAUSE),
        ("Traceback (most recent call last):", "python-traceback", CAUSE),
        ("bash: line 1: 123 Segmentation fault (core dumped) python3 train.py", "segfault", CAUSE),
    ],
)
def test_signatures(line: str, name: str, kind: str) -> None:
    signature = Matcher().match(line)
    assert signature is not None and signature.name == name and signature.kind == kind


def test_ordinary_lines_match_nothing() -> None:
    matcher = Matcher()
    for line in ("step 100 loss 0.3", "EZ9999 mentioned without the kernel words", "  Traceback is not at the start"):
        assert matcher.match(line) is None
    for line in ORDINARY:
        assert matcher.match(line) is None


def test_the_collection_holds_forty_real_lines_each_with_its_source() -> None:
    assert len(ROWS) >= 40
    assert len({row["line"] for row in ROWS}) == len(ROWS)
    for row in ROWS:
        assert row["source"].startswith(("https://", "github:")), row
        assert row["format"] in ("stdout", "plog") and row["kind"] in (CAUSE, SYMPTOM)
        assert isinstance(row["retryable"], bool) and row["line"].strip() == row["line"]
    assert len({row["source"] for row in ROWS}) >= 20
    # the codes the review found missing are all there, each from a real line
    assert {"EE9999", "EH9999", "EI9999", "EI0009", "507035", "507048", "507034"} <= {row["code"] for row in ROWS}


@pytest.mark.parametrize("row", ROWS, ids=row_id)
def test_a_real_line_is_recognised_as_what_it_is(row: Dict[str, Any]) -> None:
    matcher = Matcher()
    signature = matcher.match(row["line"])
    assert signature is not None, row["line"]
    assert (signature.code, signature.cls, signature.kind) == (row["code"], row["cls"], row["kind"])
    if not row.get("context"):  # with context the decision is the root cause's (tests/diagnose/test_rootcause.py)
        assert signature.retryable is row["retryable"]
    # found the same way in a batch of ordinary lines, which is how the agent reads output and plogs
    assert matcher.scan(ORDINARY + [row["line"]] + ORDINARY) == [(len(ORDINARY), signature)]


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
    batch = ORDINARY[1:] * 100  # ORDINARY[0] carries an ACL code's digits: a needle
    assert matcher.scan(batch) == [] and all(matcher.match(line) is None for line in batch)
    assert calls == []
    error = "[rank1]: EI0006: [PID: 1292363] 2025-04-08-18:07:20.444.436 Getting socket times out."
    found = matcher.scan(batch + [error])
    assert [(index, signature.name) for index, signature in found] == [(len(batch), "EI0006")]
    assert set(calls) == {error}  # the batch passed the pre-filter, but only the line with a needle met a pattern


@pytest.mark.parametrize(
    "header, code",
    [
        ("[rank1]: EE9999: Inner Error!", "EE9999"),  # vllm-project/vllm-ascend#672
        ("(VllmWorker TP1 pid=961) ERROR 09-07 01:11:09 [multiproc_executor.py:596] EH9999: Inner Error!", "EH9999"),
        ("EI9999: Inner Error!", "EI9999"),  # hiyouga/LlamaFactory#5347
    ],
)
def test_the_bare_inner_error_header_is_left_to_the_line_that_says_what_failed(header: str, code: str) -> None:
    assert Matcher().match(header) is None
    signature = Matcher().match(header + " rtMemcpy execution failed")
    assert signature is not None and signature.code == code


def test_an_acl_code_needs_the_words_around_it() -> None:
    matcher = Matcher()
    assert matcher.match("processed 507035 samples") is None
    for said in (
        "error code is 507035",
        "runtime result = 507035",
        "ErrCode=507035",
        "failed: 507035",
        "error code:507035",
    ):
        signature = matcher.match(said)
        assert isinstance(signature, Signature) and signature.code == "507035", said


def test_the_first_signature_in_catalog_order_wins() -> None:
    # an EH9999 detail line that carries the runtime's code is that code (vllm-project/vllm-ascend#2800)
    line = "EH9999: [PID: 961] 2025-09-07-01:11:09.333.567 synchronize stream failed, runtime result = 507048"
    signature = Matcher().match(line)
    assert signature is not None and signature.code == "507048" and signature.kind == SYMPTOM


def test_plog_timestamps() -> None:
    t = parse_plog_time("[ERROR] HCCL(1,python3):2024-01-02-03:04:05.678.901 [x.cc:1] EI0006")
    assert t is not None and time.localtime(t)[:6] == (2024, 1, 2, 3, 4, 5) and abs(t % 1 - 0.678901) < 1e-5
    assert parse_plog_time("no stamp here") is None


def block_of(lines: List[str]) -> bytes:
    return "".join(line + "\n" for line in lines).encode()


@pytest.mark.parametrize("row", ROWS, ids=row_id)
def test_a_block_finds_what_its_lines_would(row: Dict[str, Any]) -> None:
    """The block path (gates, then the needles in bytes) finds every real line among ordinary ones,
    whatever the gates learnt from the blocks before, and in upper case where the needle is folded."""
    matcher = Matcher()
    filler = ORDINARY[1:] * 50
    assert matcher.scan_block(block_of(filler)) == ([], [])  # teaches the gates this text
    lines, found = matcher.scan_block(block_of(filler + [row["line"]] + filler))
    assert [(lines[index], signature.code) for index, signature in found] == [(row["line"], row["code"])]
    assert matcher.scan_block(block_of(filler)) == ([], [])


def test_folded_needles_are_found_in_any_case_and_progress_updates_are_matched_without_their_cr() -> None:
    matcher = Matcher()
    for text in (
        b"x\nbash: line 1: 7 SEGMENTATION FAULT (core dumped) python3 t.py\n",
        b"10%\rTraceback (most recent call last):\r\n",
    ):
        lines, found = matcher.scan_block(text)
        assert [signature.name for _, signature in found] in (["segfault"], ["python-traceback"]), text
        assert not any(line.endswith("\r") for line in lines)


def test_a_block_with_no_needle_character_is_passed_by_the_gates_alone() -> None:
    """The gates: a block lacking a rare character of every needle is not searched for the needles
    (no lower-casing, no needle search); each gate remembers which character closed it."""
    matcher = Matcher()
    searched: List[bytes] = []
    for gate in matcher._gates:
        original = gate.search
        gate.search = lambda block, original=original: searched.append(block) or original(block)  # type: ignore[misc]
    plain = b"".join(b"line %07d rank %02d %s\n" % (i, 3, b"x" * 58) for i in range(1000))
    assert matcher.scan_block(plain) == ([], [])
    digits_only = [gate for gate in matcher._gates if all(b"".join(forms).isdigit() for forms in gate.chars)]
    assert len(searched) == len(digits_only)  # only the numeric codes' gate cannot close on this text
