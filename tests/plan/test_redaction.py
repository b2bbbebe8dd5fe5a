"""Secrets masked wherever npulaunch shows or stores them (issue 15), while the ranks get the real
values: secret-looking variable names, passwords in URLs, --token-style arguments."""

from __future__ import annotations

import json
import sys
from pathlib import Path

import pytest
from helpers import run_cli

from npulaunch.host.redact import REDACTED, is_secret, redact_argv, redact_env


@pytest.mark.parametrize(
    "name, secret",
    [
        ("HF_TOKEN", True),
        ("DB_PASSWORD", True),
        ("SMTP_PASS", True),
        ("GITHUB_PAT", True),
        ("REGISTRY_AUTH", True),
        ("AWS_SECRET_ACCESS_KEY", True),
        ("GOOGLE_APPLICATION_CREDENTIALS", True),
        ("PATH", False),
        ("PASSTHROUGH_MODE", False),
        ("AUTHOR", False),
        ("RANK_ID", False),
    ],
)
def test_secret_names(name: str, secret: bool) -> None:
    assert is_secret(name) is secret


def test_url_passwords_and_secret_arguments() -> None:
    assert redact_env({"URL": "https://user:pw@host/repo", "PLAIN": "https://host/x"}) == {
        "URL": f"https://user:{REDACTED}@host/repo",
        "PLAIN": "https://host/x",
    }
    argv = ["t.py", "--token", "abc", "--api-key=k", "--max_new_tokens", "5", "--tokenizer", "t", "--password", "p"]
    assert redact_argv(argv) == [
        "t.py",
        "--token",
        REDACTED,
        f"--api-key={REDACTED}",
        "--max_new_tokens",
        "5",
        "--tokenizer",
        "t",
        "--password",
        REDACTED,
    ]


# the rank writes what it got to a file of its own (what it prints is its business: shown as printed)
SCRIPT = (
    "import os, sys; open(os.path.join(os.environ['NPULAUNCH_RANK_DIR'], 'got.txt'), 'w')"
    ".write(repr((sys.argv[1:], os.environ['GITHUB_PAT'], os.environ['MIRROR'])))"
)


def test_masked_in_plan_records_and_events_but_real_in_the_ranks(tmp_path: Path) -> None:
    path = tmp_path / "job.yaml"
    path.write_text(
        f"version: 1\njob:\n  command: [{sys.executable}, -c, {json.dumps(SCRIPT)}, --token, tok-123, "
        f"'--data=s3://me:pw-456@store/b']\n  log_dir: {tmp_path / 'logs'}\nhosts: [{{host: localhost, devices: 1}}]\n"
        "env:\n  GITHUB_PAT: pat-789\n  MIRROR: 'https://me:pw-000@mirror/simple'\n"
    )
    shown = run_cli("plan", str(path)).stdout + run_cli("plan", str(path), "--json").stdout
    result = run_cli("run", str(path), "--job-id", "r", "--no-live")
    assert result.returncode == 0, result.stderr
    job = tmp_path / "logs" / "r"
    stored = "".join((job / name).read_text() for name in ("plan.json", "events.jsonl", "summary.json"))
    for secret in ("tok-123", "pw-456", "pat-789", "pw-000"):
        assert secret not in shown and secret not in stored and secret not in result.stderr
    assert "--token ***" in shown and "s3://me:***@store/b" in stored
    got = (job / "rank-0" / "got.txt").read_text()  # the rank itself got every real value
    assert all(secret in got for secret in ("tok-123", "pw-456", "pat-789", "pw-000"))
