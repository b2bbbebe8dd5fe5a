"""Ascend error signatures (host/signatures.py): which lines are a cause, which a symptom of waiting,
and the timestamps of plog lines."""

from __future__ import annotations

import time

import pytest

from npulaunch.host.signatures import CAUSE, SYMPTOM, Matcher, parse_plog_time


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


def test_plog_timestamps() -> None:
    t = parse_plog_time("[ERROR] HCCL(1,python3):2024-01-02-03:04:05.678.901 [x.cc:1] EI0006")
    assert t is not None and time.localtime(t)[:6] == (2024, 1, 2, 3, 4, 5) and abs(t % 1 - 0.678901) < 1e-5
    assert parse_plog_time("no stamp here") is None
