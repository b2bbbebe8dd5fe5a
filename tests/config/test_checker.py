"""The bad-YAML corpus: every broken cluster file goes through the real CLI (``npulaunch check``)
and must exit 2 with file:line, the YAML path, what is allowed, no traceback and no job directory."""

from __future__ import annotations

import json
from pathlib import Path
from typing import NamedTuple, Optional, Tuple

import pytest
from helpers import full_plan, job_dirs, run_cli

# Lines 1-4 of most cases; what a case appends starts on line 5.
HEAD = "version: 1\njob:\n  command: [python3, train.py]\n  log_dir: LOG\n"
JOB = "version: 1\njob:\n  log_dir: LOG\n"  # lines 1-3, for cases about the job section itself
ONE_HOST = "hosts:\n  - host: localhost\n"  # lines 5-6 after HEAD; host keys start on line 7


class Case(NamedTuple):
    text: str
    line: Optional[int]  # None: the problem has no line
    path: str  # the YAML path as rendered in the message
    phrases: Tuple[str, ...]  # what is allowed, hints: each must appear in stderr


CORPUS = [
    # --- YAML itself
    pytest.param(
        Case(
            "version: 1\njob:\n  command: python3 train.py: extra\n",
            3,
            "(YAML syntax)",
            ("well-formed YAML", "mapping values are not allowed"),
        ),
        id="yaml-syntax",
    ),
    pytest.param(
        Case(
            "version: 1\njob:\n\tcommand: [python3]\n",
            3,
            "(YAML syntax)",
            ("well-formed YAML", "cannot start any token"),
        ),
        id="tab-indentation",
    ),
    pytest.param(
        Case(
            HEAD + "  command: [python3, other.py]\n",
            5,
            "job.command",
            ("a second 'command'", "each key once", "first set on line 3"),
        ),
        id="duplicate-key",
    ),
    pytest.param(
        Case(HEAD + ONE_HOST + "    1: x\n", 7, "hosts[0] (key)", ("key 1", "string keys", "quote the key")),
        id="non-string-key",
    ),
    pytest.param(Case(HEAD + "job2: {}\n<<: {a: 1}\n", 6, "<<", ("merge keys are not supported",)), id="merge-key"),
    pytest.param(Case(HEAD + "loop: &a [*a]\n", 5, "loop[0]", ("alias that contains itself",)), id="recursive-alias"),
    # --- unknown keys, with the nearest name suggested
    pytest.param(
        Case(
            HEAD + "hots:\n  - host: localhost\n",
            5,
            "hots",
            ("unknown key 'hots'", "version, job, hosts, env", "did you mean 'hosts'?"),
        ),
        id="unknown-top-key",
    ),
    pytest.param(
        Case(
            JOB + "  comand: [python3, train.py]\n",
            4,
            "job.comand",
            ("unknown key 'comand'", "name, id, command", "did you mean 'command'?"),
        ),
        id="unknown-job-key",
    ),
    pytest.param(
        Case(
            HEAD + ONE_HOST + "    device: [0, 1]\n",
            7,
            "hosts[0].device",
            ("host, devices, device_ips", "did you mean 'devices'?"),
        ),
        id="unknown-host-key",
    ),
    # --- the job section
    pytest.param(
        Case(
            "version: 1\nhosts:\n  - host: localhost\n",
            1,
            "job",
            ("no job section", "a mapping with at least 'command'"),
        ),
        id="missing-job",
    ),
    pytest.param(
        Case(JOB + "  name: demo\n", 2, "job.command", ("None (null)", "a non-empty list of strings")),
        id="missing-command",
    ),
    pytest.param(
        Case(
            JOB + "  command: [python3, train.py, --steps, 20]\n",
            4,
            "job.command[3]",
            ("20 (an integer)", "a string", 'quote it: "20"'),
        ),
        id="command-int-item",
    ),
    pytest.param(
        Case(JOB + "  command: []\n", 4, "job.command", ("a non-empty list of strings",)), id="command-empty-list"
    ),
    pytest.param(
        Case(
            JOB + '  command: "python3 \'train.py"\n',
            4,
            "job.command",
            ("split like a shell would", "shlex could not split it", "No closing quotation"),
        ),
        id="command-unbalanced-quote",
    ),
    pytest.param(
        Case(HEAD + "  name: my job\n", 5, "job.name", ("'my job'", "letters, digits, '-' and '_'")),
        id="name-with-space",
    ),
    pytest.param(
        Case(HEAD + '  id: "0123"\n', 5, "job.id", ("'0123'", "not a number with a leading 0")), id="id-leading-zero"
    ),
    pytest.param(
        Case(HEAD + "  id: 0123\n" + ONE_HOST + "    devices: 1\n", 5, "job.id", ("not a number with a leading 0",)),
        id="id-leading-zero-unquoted",
    ),
    pytest.param(
        Case(HEAD + "  id: team/run1\n", 5, "job.id", ("'team/run1'", "letters, digits, '-' and '_'")),
        id="id-with-slash",
    ),
    pytest.param(
        Case(
            HEAD + "  grace_period_s: -1\n",
            5,
            "job.grace_period_s",
            ("-1 (an integer)", "a number of seconds from 0 to 3600"),
        ),
        id="grace-negative",
    ),
    pytest.param(
        Case(HEAD + "  console: bogus\n", 5, "job.console", ("'bogus'", "one of all, rank0, none")), id="console-bogus"
    ),
    pytest.param(
        Case(
            HEAD + "  forward_signals: [SIGKILL]\n", 5, "job.forward_signals[0]", ("one of SIGUSR1, SIGUSR2, SIGWINCH",)
        ),
        id="forward-signal-kill",
    ),
    pytest.param(Case(HEAD + "  workdir: 5\n", 5, "job.workdir", ("a directory path",)), id="workdir-int"),
    # --- top-level values
    pytest.param(
        Case(HEAD.replace("version: 1", "version: 2"), 1, "version", ("2 (an integer)", "allowed: 1")), id="version-2"
    ),
    pytest.param(
        Case(HEAD + "rank_table: bogus\n", 5, "rank_table", ("one of auto, required, none",)), id="rank-table-bogus"
    ),
    pytest.param(
        Case(
            HEAD + "session_options:\n  Bad-Option: 1\n",
            6,
            "session_options.Bad-Option",
            ("unknown option", "npulaunch options"),
        ),
        id="session-option-name",
    ),
    # --- hosts and devices
    pytest.param(
        Case(HEAD + ONE_HOST + "    devices: some\n", 7, "hosts[0].devices", ("a list of device ids 0-63", 'or "all"')),
        id="devices-not-list",
    ),
    pytest.param(
        Case(
            HEAD + ONE_HOST + "    devices: [0, 64]\n",
            7,
            "hosts[0].devices[1]",
            ("64 (an integer)", "a device id 0-63"),
        ),
        id="device-id-64",
    ),
    pytest.param(
        Case(
            HEAD + ONE_HOST + "    devices: [0]\n  - host: node2\n    devices: [0, 1,\n      1]\n",
            10,
            "hosts[1].devices[2]",
            ("each device once", "also hosts[1].devices[1]"),
        ),
        id="duplicate-device",
    ),
    pytest.param(
        Case(HEAD + ONE_HOST + "    devices: 0\n", 7, "hosts[0].devices", ("a count 1-64",)), id="devices-zero"
    ),
    pytest.param(
        Case(
            HEAD + ONE_HOST + "    devices: [0, 1]\n    device_ips: [192.168.100.101]\n",
            8,
            "hosts[0].device_ips",
            ("1 addresses", "2, one per device in devices"),
        ),
        id="device-ips-count",
    ),
    pytest.param(
        Case(
            HEAD + ONE_HOST + "    devices: [0]\n    device_ips: [192.168.1.300]\n",
            8,
            "hosts[0].device_ips[0]",
            ("an IPv4 address",),
        ),
        id="device-ip-invalid",
    ),
    pytest.param(
        Case(
            HEAD + "hosts:\n  - host: node1\n    devices: 1\n  - host: node1\n    devices: 1\n",
            8,
            "hosts[1].host",
            ("each host once", "also hosts[0]"),
        ),
        id="duplicate-host",
    ),
    pytest.param(Case(HEAD + "hosts: []\n", 5, "hosts", ("a non-empty list",)), id="hosts-empty"),
    pytest.param(Case(HEAD + "hosts:\n  - {}\n", 6, "hosts[0]", ("host",)), id="host-entry-empty"),
    pytest.param(
        Case(
            HEAD + ONE_HOST + "    devices: all\n",
            7,
            "hosts[0].devices",
            ("npu-smi is not on PATH", "--nproc-per-node"),
        ),
        id="devices-all-without-npu-smi",
    ),
    # --- env
    pytest.param(
        Case(
            HEAD + "env:\n  USE_FAST: yes\n",
            6,
            "env.USE_FAST",
            ("True (a boolean)", "a string or a number", "quote the value"),
        ),
        id="env-boolean",
    ),
    pytest.param(
        Case(
            HEAD + "env:\n  BAD-NAME: x\n", 6, "env.BAD-NAME", ("letters, digits and '_', not starting with a digit",)
        ),
        id="env-name-invalid",
    ),
    pytest.param(
        Case(HEAD + "env:\n  OPTS: [a, b]\n", 6, "env.OPTS", ("a string, a number, or null",)), id="env-value-list"
    ),
    pytest.param(
        Case(
            HEAD + 'env:\n  RANK_ID: "3"\n',
            6,
            "env.RANK_ID",
            ("variables other than RANK_ID", "npulaunch sets it for every rank"),
        ),
        id="env-rank-id",
    ),
    pytest.param(
        Case(HEAD + "env:\n  NPULAUNCH_HOST: x\n", 6, "env.NPULAUNCH_HOST", ("NPULAUNCH_*",)), id="env-npulaunch-prefix"
    ),
    pytest.param(Case(HEAD + "env:\n  JOB_ID: abc\n", 6, "env.JOB_ID", ("use job.id (or --job-id)",)), id="env-job-id"),
    pytest.param(
        Case(
            HEAD + "env:\n  HCCL_CONNECT_TIMEOUT: 60\n",
            6,
            "env.HCCL_CONNECT_TIMEOUT",
            ("'60'", "an integer number of seconds from 120 to 7200"),
        ),
        id="hccl-connect-timeout",
    ),
    pytest.param(
        Case(HEAD + 'env:\n  HCCL_EXEC_TIMEOUT: "-5"\n', 6, "env.HCCL_EXEC_TIMEOUT", ("from 0 to 2147483647",)),
        id="hccl-exec-timeout",
    ),
]


def write_yaml(directory: Path, text: str, log_root: Path) -> Path:
    path = directory / "bad config.yaml"
    path.write_text(text.replace("LOG", json.dumps(str(log_root))), encoding="utf-8")
    return path


def assert_rejected(result, path: Path, log_root: Path) -> None:
    assert result.returncode == 2, f"exit {result.returncode}\nstdout:\n{result.stdout}\nstderr:\n{result.stderr}"
    assert "Traceback" not in result.stderr, result.stderr
    assert job_dirs(log_root) == [], "a job directory was created"


@pytest.mark.parametrize("case", CORPUS)
def test_bad_yaml_is_rejected_with_location(case: Case, tmp_path: Path, log_dir: Path) -> None:
    path = write_yaml(tmp_path, case.text, log_dir)
    result = run_cli("check", str(path))
    assert_rejected(result, path, log_dir)
    where = f"{path}:{case.line}" if case.line is not None else str(path)
    assert f"{where}: {case.path}: found " in result.stderr, result.stderr
    for phrase in case.phrases:
        assert phrase in result.stderr, f"{phrase!r} missing from:\n{result.stderr}"


def test_every_problem_of_a_file_is_reported_together(tmp_path: Path, log_dir: Path) -> None:
    text = (
        HEAD
        + "  console: loud\n"  # 5
        + "hots: []\n"  # 6
        + "hosts:\n  - host: localhost\n"  # 7-8
        + "    devices: [0, 64, 0]\n"  # 9
        + "env:\n  DEBUG: on\n"
    )  # 10-11
    path = write_yaml(tmp_path, text, log_dir)
    result = run_cli("check", str(path))
    assert_rejected(result, path, log_dir)
    expected = [
        f"{path}:5: job.console: found 'loud'",
        f"{path}:6: hots: found unknown key 'hots'",
        f"{path}:9: hosts[0].devices[1]: found 64",
        f"{path}:9: hosts[0].devices[2]: found 0",
        f"{path}:11: env.DEBUG: found True (a boolean)",
    ]
    missing = [line for line in expected if line not in result.stderr]
    assert not missing, f"missing {missing} from:\n{result.stderr}"
    assert "invalid configuration (5 problems)" in result.stderr


GOOD = HEAD + ONE_HOST + "    devices: [0, 1]\n"


@pytest.mark.parametrize(
    "flags, expected",
    [
        (("--devices", "1,1"), ("command line: --devices: found '1,1'", "distinct device ids 0-63")),
        (("--devices", "0,x"), ("command line: --devices: found '0,x'", "distinct device ids 0-63")),
        (("--nproc-per-node", "0"), ("command line: --nproc-per-node: found 0", "an integer from 1 to 64")),
        (("--nproc-per-node", "2", "--devices", "0,1"), ("--devices: found both --devices and --nproc-per-node",)),
        (("--grace-period", "-1"), ("--grace-period: found -1.0", "seconds from 0 to 3600")),
        (("--",), ("command line: --: found nothing after '--'", "the command to run")),
    ],
    ids=["devices-repeated", "devices-not-int", "nproc-zero", "devices-and-nproc", "grace-negative", "dashdash-empty"],
)
def test_bad_flags_exit_2_naming_the_flag(
    flags: Tuple[str, ...], expected: Tuple[str, ...], tmp_path: Path, log_dir: Path
) -> None:
    path = write_yaml(tmp_path, GOOD, log_dir)
    result = run_cli("check", str(path), *flags)
    assert_rejected(result, path, log_dir)
    for phrase in expected:
        assert phrase in result.stderr, f"{phrase!r} missing from:\n{result.stderr}"


def test_dashdash_without_command_and_without_yaml(tmp_path: Path) -> None:
    result = run_cli("check", "--", cwd=tmp_path)
    assert result.returncode == 2 and "nothing after '--'" in result.stderr, result.stderr
    assert not (tmp_path / "npulaunch-logs").exists()


def test_missing_file_is_a_config_error(tmp_path: Path) -> None:
    path = tmp_path / "no such file.yaml"
    result = run_cli("check", str(path))
    assert result.returncode == 2 and "Traceback" not in result.stderr
    assert f"{path}: (file): found No such file or directory" in result.stderr, result.stderr


def test_the_good_file_of_the_flag_tests_passes(tmp_path: Path, log_dir: Path) -> None:
    # guards the flag tests above: without a flag the same file is valid
    (tmp_path / "train.py").write_text("print('hi')\n")
    path = write_yaml(tmp_path, GOOD.replace("log_dir:", "workdir: .\n  log_dir:"), log_dir)
    result = run_cli("check", str(path))
    assert result.returncode == 0, result.stderr
    assert "ok: 2 ranks on 1 host" in result.stdout
    assert job_dirs(log_dir) == []


def test_numbers_meant_as_text_keep_their_yaml_spelling(tmp_path: Path, log_dir: Path) -> None:
    # YAML 1.1 reads 010 as octal 8 and 1.50 as 1.5; an environment value is text, as written
    path = write_yaml(tmp_path, HEAD + "env: {FOO: 010, BAR: 1.50, BAZ: 7}\n", log_dir)
    result = run_cli("plan", str(path), "--json", "--nproc-per-node", "1")
    assert result.returncode == 0, result.stderr
    env = full_plan(json.loads(result.stdout))["ranks"][0]["env"]
    assert (env["FOO"], env["BAR"], env["BAZ"]) == ("010", "1.50", "7")


def test_a_tab_in_the_indentation_gets_a_hint(tmp_path: Path, log_dir: Path) -> None:
    path = write_yaml(tmp_path, HEAD + "hosts:\n\t- host: localhost\n", log_dir)
    result = run_cli("check", str(path))
    assert result.returncode == 2
    assert "tabs for indentation" in result.stderr and "Traceback" not in result.stderr


def test_an_alias_bomb_is_refused_not_expanded(tmp_path: Path, log_dir: Path) -> None:
    bomb = "a: &a [x, x, x, x, x, x, x, x, x, x]\n"
    for level in "bcdefg":  # 10**7 values once expanded
        prev = chr(ord(level) - 1)
        bomb += f"{level}: &{level} [" + ", ".join([f"*{prev}"] * 10) + "]\n"
    path = write_yaml(tmp_path, HEAD + bomb, log_dir)
    result = run_cli("check", str(path), timeout=60)
    assert result.returncode == 2
    assert "more than 1000000 values" in result.stderr
