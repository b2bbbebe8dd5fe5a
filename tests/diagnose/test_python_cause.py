"""A Python failure's root cause is its exception line and innermost frame, printed once (issue 17)."""

from __future__ import annotations

import sys
from pathlib import Path

import pytest
from helpers import run_cli

from npulaunch.diagnose.report import python_exception

TRACEBACK = [
    "step 3",
    "Traceback (most recent call last):",
    '  File "train.py", line 40, in <module>',
    "    main()",
    '  File "/site/data.py", line 7, in load',
    "    return int(x)",
    "ValueError: invalid literal for int() with base 10: 'abc'",
]


@pytest.mark.parametrize(
    "lines, expected",
    [
        (
            TRACEBACK,
            ("ValueError: invalid literal for int() with base 10: 'abc'", 'File "/site/data.py", line 7, in load'),
        ),
        (
            ["Traceback (most recent call last):", '  File "a.py", line 1, in <module>', "KeyboardInterrupt"],
            ("KeyboardInterrupt", 'File "a.py", line 1, in <module>'),
        ),
        (["Traceback (most recent call last):", '  File "a.py", line 2, in f'], None),  # not finished yet
        (["numpy.linalg.LinAlgError: Singular matrix"], None),  # no traceback
        (
            TRACEBACK
            + [
                "",
                "During handling of the above exception, another exception occurred:",
                "",
                *TRACEBACK[1:6],
                "RuntimeError: second",
            ],
            ("RuntimeError: second", 'File "/site/data.py", line 7, in load'),
        ),
    ],
)
def test_the_exception_line_and_innermost_frame(lines, expected) -> None:
    assert python_exception(lines) == expected


CODE = (
    "import os, time\ndef load(x):\n    return int(x)\n"
    "if os.environ['RANK_ID'] == '1':\n    load('abc')\ntime.sleep(10)"
)


def test_the_report_names_the_exception_once(tmp_path: Path) -> None:
    path = tmp_path / "job.yaml"
    path.write_text(
        f"version: 1\njob:\n  command: [{sys.executable}, -c, {CODE!r}]\n  log_dir: {tmp_path / 'logs'}\n"
        "hosts: [{host: localhost, devices: 2}]\nrank_table: none\n"
    )
    result = run_cli("run", str(path), "--job-id", "py", "--no-live")
    assert result.returncode == 1
    error = "ValueError: invalid literal for int() with base 10: 'abc'"
    assert f'error: python-traceback (python_exception): {error} (at File "<string>", line 3, in load)' in result.stderr
    assert f"reported python-traceback (python_exception, a cause): {error}" in result.stderr
    report = result.stderr[result.stderr.index("root cause:") :]
    assert report.count("Traceback (most recent call last):") == 1  # the traceback once, in the last lines
