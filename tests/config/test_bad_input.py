"""Input that must be refused before anything starts (issue 15), through the CLI at plan, check and
run: a file too big or nested too deep, a NUL character, non-finite numbers, duplicate keys, invalid
UTF-8, a non-finite --hang-timeout. Each is exit 2 with the file, line and key; never a traceback."""

from __future__ import annotations

import sys
from pathlib import Path

import pytest
from helpers import run_cli

from npulaunch.config.yamlsource import MAX_BYTES, MAX_DEPTH

HEAD = "version: 1\njob:\n  command: [python3, -c, pass]\nhosts: [{host: localhost, devices: 1}]\n"


def refused(path: Path, *needles: str, command: str = "plan") -> str:
    result = run_cli(command, str(path), *(("--job-id", "x") if command == "run" else ()))
    assert result.returncode == 2, result.stderr
    assert "Traceback" not in result.stderr, result.stderr
    for needle in needles:
        assert needle in result.stderr, result.stderr
    return result.stderr


@pytest.mark.parametrize("command", ["plan", "check", "run"])
def test_nul_in_an_env_value_or_argument(tmp_path: Path, command: str) -> None:
    path = tmp_path / "job.yaml"
    path.write_text(
        'version: 1\njob:\n  command: [python3, "-c", "print(1)\\0"]\nhosts: [{host: localhost, devices: 1}]\n'
        'env:\n  SOME_VAR: "a\\0b"\n'
    )
    stderr = refused(path, "job.yaml:3: job.command[2]: found a NUL character", command=command)
    assert "job.yaml:6: env.SOME_VAR: found a NUL character" in stderr


@pytest.mark.parametrize("value", [".nan", ".inf", "-.inf"])
def test_non_finite_numbers(tmp_path: Path, value: str) -> None:
    path = tmp_path / "job.yaml"
    path.write_text(HEAD.replace("command:", f"grace_period_s: {value}\n  command:"))
    refused(path, "job.yaml:3: job.grace_period_s: found", "(not a finite number); allowed: a finite number")


def test_nesting_deeper_than_the_limit(tmp_path: Path) -> None:
    path = tmp_path / "job.yaml"
    path.write_text(HEAD + "env:\n  X: " + "[" * 50000 + "]" * 50000 + "\n")  # crashed the C parser
    refused(path, f"more than {MAX_DEPTH} nested levels")
    path.write_text(HEAD + "".join("  " * i + f"k{i}:\n" for i in range(500)) + "  " * 500 + "1\n")
    refused(path, f"more than {MAX_DEPTH} nested levels")  # was a RecursionError


def test_a_file_over_the_size_limit_is_refused_without_reading_it(tmp_path: Path) -> None:
    path = tmp_path / "job.yaml"
    with open(path, "w") as handle:
        handle.write(HEAD + "# " + "x" * (MAX_BYTES + 10) + "\n")
    refused(path, f"at most {MAX_BYTES:,} bytes")


def test_duplicate_keys_name_both_lines(tmp_path: Path) -> None:
    path = tmp_path / "job.yaml"
    path.write_text(HEAD + "rank_table: none\nrank_table: auto\n")
    refused(path, "job.yaml:6: rank_table: found a second 'rank_table'", "first set on line 5")


def test_invalid_utf8(tmp_path: Path) -> None:
    path = tmp_path / "job.yaml"
    path.write_bytes(HEAD.encode() + b"env:\n  X: \xff\xfe\n")
    refused(path, "bytes that are not UTF-8")


@pytest.mark.parametrize("value", ["nan", "inf", "-1"])
def test_hang_timeout_must_be_finite_and_not_negative(value: str) -> None:
    result = run_cli("plan", "--hang-timeout", value, "--nproc-per-node", "1", "--", sys.executable, "-c", "pass")
    assert result.returncode == 2 and "Traceback" not in result.stderr
    assert "--hang-timeout" in result.stderr and "a finite number of seconds >= 0" in result.stderr


def test_type_range_and_rule_errors_come_in_one_pass(tmp_path: Path) -> None:
    path = tmp_path / "job.yaml"
    path.write_text(
        HEAD
        + "session_options:\n  hcom_parallel: 'yes'\n  precision_mode: allow_mix_precision\n"
        + "  precision_mode_v2: mixed_float16\n  enable_dump: true\n  iterations_per_loop: 0\n"
    )
    stderr = refused(path, "(4 problems)")
    assert "job.yaml:6: session_options.hcom_parallel: found 'yes'" in stderr  # a type
    assert "job.yaml:10: session_options.iterations_per_loop: found 0" in stderr  # a range
    assert "job.yaml:7: session_options.precision_mode: found both precision_mode and precision_mode_v2" in stderr
    assert "job.yaml:9: session_options.enable_dump: found enable_dump: true without dump_path" in stderr  # rules
