"""The YAML of recovery: hosts[].spare_devices, device_ips that go on with the spares' addresses, the
spares list, the recovery section and monitor.health_interval_s. Each file is written to tmp_path and
loaded with load_config; bad input is a ConfigError whose problems say file, line, YAML path, what was
found and what is allowed."""

from __future__ import annotations

from pathlib import Path
from typing import List

import pytest

from npulaunch.config.cluster import ClusterConfig, RecoveryConfig
from npulaunch.config.load import load_config
from npulaunch.host.errors import ConfigError, ConfigProblem
from npulaunch.plan.build import build_plan
from npulaunch.plan.launchplan import Discovery

HEAD = "version: 1\njob:\n  command: [python3, train.py]\n"  # lines 1-3; what a test adds starts on line 4


def load(tmp_path: Path, text: str) -> ClusterConfig:
    path = tmp_path / "job.yaml"
    path.write_text(HEAD + text)
    return load_config(str(path))


def refused(tmp_path: Path, text: str) -> List[ConfigProblem]:
    with pytest.raises(ConfigError) as caught:
        load(tmp_path, text)
    problems = list(caught.value.problems)
    assert all(p.source == str(tmp_path / "job.yaml") for p in problems), problems
    return problems


def only(problems: List[ConfigProblem]) -> ConfigProblem:
    assert len(problems) == 1, [p.render() for p in problems]
    return problems[0]


# --- accepted ------------------------------------------------------------------------------------


def test_spare_devices_and_the_spares_list_are_read(tmp_path: Path) -> None:
    config = load(
        tmp_path,
        "hosts:\n"
        "  - host: a\n"
        "    devices: [0, 1, 2, 3]\n"
        "    spare_devices: [6, 7]\n"
        "spares:\n"
        "  - host: s1\n"
        "    devices: [0, 1, 2, 3]\n"
        "    device_ips: [10.9.0.1, 10.9.0.2, 10.9.0.3, 10.9.0.4]\n"
        "  - s2\n",
    )
    host = config.hosts[0]
    assert (host.host, host.devices, host.spare_devices, host.device_ips, host.spare_device_ips) == (
        "a",
        (0, 1, 2, 3),
        (6, 7),
        None,
        None,
    )
    assert [(s.host, s.devices, s.device_ips, s.path) for s in config.spares] == [
        ("s1", (0, 1, 2, 3), ("10.9.0.1", "10.9.0.2", "10.9.0.3", "10.9.0.4"), ("spares", 0)),
        ("s2", "all", None, ("spares", 1)),
    ]


def test_without_spares_or_recovery_the_defaults(tmp_path: Path) -> None:
    config = load(tmp_path, "hosts: [{host: a, devices: 2}]\n")
    assert config.spares == ()
    assert config.hosts[0].spare_devices == () and config.hosts[0].spare_device_ips is None
    assert config.recovery == RecoveryConfig(max_recoveries=3, checkpoint_dir=None, shrink_min_ranks=None)
    assert load(tmp_path, "hosts: [{host: a, devices: 2}]\nspares: []\n").spares == ()


def test_spare_devices_may_be_empty_and_may_go_with_devices_all(tmp_path: Path) -> None:
    config = load(
        tmp_path, "hosts:\n  - {host: a, devices: [0, 1], spare_devices: []}\n  - {host: b, spare_devices: [7]}\n"
    )
    assert [(h.devices, h.spare_devices) for h in config.hosts] == [((0, 1), ()), ("all", (7,))]


def test_device_ips_for_devices_and_spares_are_split(tmp_path: Path) -> None:
    config = load(
        tmp_path,
        "hosts:\n"
        "  - host: a\n"
        "    devices: [0, 1]\n"
        "    spare_devices: [3, 2]\n"
        "    device_ips: [10.0.0.1, 10.0.0.2, 10.0.0.4, 10.0.0.3]\n",
    )
    host = config.hosts[0]
    assert host.device_ips == ("10.0.0.1", "10.0.0.2")
    assert host.spare_device_ips == ("10.0.0.4", "10.0.0.3")  # in spare_devices' order: 3, then 2


def test_device_ips_for_the_devices_only_are_still_accepted(tmp_path: Path) -> None:
    config = load(
        tmp_path, "hosts:\n  - {host: a, devices: [0, 1], spare_devices: [2], device_ips: [10.0.0.1, 10.0.0.2]}\n"
    )
    assert (config.hosts[0].device_ips, config.hosts[0].spare_device_ips) == (("10.0.0.1", "10.0.0.2"), None)


def test_the_recovery_section(tmp_path: Path) -> None:
    config = load(
        tmp_path,
        "hosts: [{host: a, devices: 8}]\n"
        "recovery:\n"
        "  max_recoveries: 0\n"
        "  checkpoint_dir: output/{device_id}/ckpt-{rank}\n"
        "  shrink: {min_ranks: 4}\n",
    )
    assert config.recovery == RecoveryConfig(
        max_recoveries=0, checkpoint_dir="output/{device_id}/ckpt-{rank}", shrink_min_ranks=4
    )
    config = load(tmp_path, "hosts: [{host: a, devices: 8}]\nrecovery:\n  max_recoveries: 100\n")
    assert config.recovery == RecoveryConfig(max_recoveries=100)


NO_NPU_TOOLS = Discovery(devices=lambda: [], device_ips=lambda ids: None)


@pytest.mark.parametrize(
    "monitor, interval",
    [("", 30.0), ("monitor: {health_interval_s: 0}\n", 0.0), ("monitor: {health_interval_s: 2.5}\n", 2.5)],
)
def test_health_interval_default_and_off(tmp_path: Path, monitor: str, interval: float) -> None:
    config = load(tmp_path, "hosts: [{host: localhost, devices: 2}]\n" + monitor)
    plan = build_plan(config, "job-1", "uuid-1", NO_NPU_TOOLS)
    assert plan.health_interval_s == interval
    watch = plan.health_watch(0)
    if interval == 0:
        assert watch is None
    else:
        assert watch is not None and watch["interval_s"] == interval and watch["devices"] == [0, 1]


# --- refused -------------------------------------------------------------------------------------


def test_a_spare_device_that_is_also_in_devices(tmp_path: Path) -> None:
    problem = only(refused(tmp_path, "hosts:\n  - host: a\n    devices: [0, 1, 2]\n    spare_devices: [3, 1]\n"))
    assert (problem.line, problem.path) == (7, "hosts[0].spare_devices[1]")
    assert problem.found == "1 (an integer)"
    assert problem.allowed == "an NPU that is not in devices"
    assert "hosts[0].devices[1]" in problem.hint


def test_a_spare_host_that_is_also_in_hosts(tmp_path: Path) -> None:
    problem = only(refused(tmp_path, "hosts:\n  - host: a\n  - host: b\nspares:\n  - host: s\n  - host: b\n"))
    assert (problem.line, problem.path) == (9, "spares[1].host")
    assert problem.found == "'b' (a string)" and problem.allowed == "a host that is not in hosts"
    assert problem.hint == "also hosts[1]"


def test_a_spare_host_listed_twice(tmp_path: Path) -> None:
    problem = only(refused(tmp_path, "hosts: [{host: a}]\nspares:\n  - host: s\n  - host: t\n  - host: s\n"))
    assert (problem.line, problem.path) == (8, "spares[2].host")
    assert problem.allowed == "each host once" and problem.hint == "also spares[0]"


@pytest.mark.parametrize(
    "value, path, found, allowed",
    [
        ("2", "hosts[0].spare_devices", "2 (an integer)", "a list of device ids 0-63 (may be empty)"),
        ("all", "hosts[0].spare_devices", "'all' (a string)", "a list of device ids 0-63 (may be empty)"),
        ("[4, x]", "hosts[0].spare_devices[1]", "'x' (a string)", "a device id 0-63"),
        ("[64]", "hosts[0].spare_devices[0]", "64 (an integer)", "a device id 0-63"),
        ("[true]", "hosts[0].spare_devices[0]", "True (a boolean)", "a device id 0-63"),
        ("[4, 4]", "hosts[0].spare_devices[1]", "4 (an integer)", "each device once"),
    ],
)
def test_spare_devices_of_the_wrong_type(tmp_path: Path, value: str, path: str, found: str, allowed: str) -> None:
    problem = only(refused(tmp_path, f"hosts:\n  - host: a\n    devices: [0, 1]\n    spare_devices: {value}\n"))
    assert (problem.line, problem.path, problem.found, problem.allowed) == (7, path, found, allowed)


@pytest.mark.parametrize(
    "value, path, found",
    [
        ("{host: s}", "spares", "a mapping"),
        ("[{host: 'bad host'}]", "spares[0].host", "'bad host' (a string)"),
        ("[{host: s, devices: 0}]", "spares[0].devices", "0 (an integer)"),
        ("[{host: s, colour: red}]", "spares[0].colour", "unknown key 'colour'"),
    ],
)
def test_spares_entries_of_the_wrong_type(tmp_path: Path, value: str, path: str, found: str) -> None:
    problem = only(refused(tmp_path, f"hosts: [{{host: a}}]\nspares: {value}\n"))
    assert (problem.line, problem.path, problem.found) == (5, path, found)


def test_device_ips_of_the_wrong_count_name_both_counts(tmp_path: Path) -> None:
    problem = only(
        refused(
            tmp_path,
            "hosts:\n"
            "  - host: a\n"
            "    devices: [0, 1]\n"
            "    spare_devices: [2, 3]\n"
            "    device_ips: [10.0.0.1, 10.0.0.2, 10.0.0.3]\n",
        )
    )
    assert (problem.line, problem.path, problem.found) == (8, "hosts[0].device_ips", "3 addresses")
    assert "2, one per device in devices" in problem.allowed
    assert "or 4: then spare_devices' addresses follow" in problem.allowed


def test_device_ips_of_the_wrong_count_without_spares_do_not_mention_them(tmp_path: Path) -> None:
    problem = only(refused(tmp_path, "hosts:\n  - {host: a, devices: [0, 1], device_ips: [10.0.0.1]}\n"))
    assert (problem.line, problem.path, problem.found) == (5, "hosts[0].device_ips", "1 addresses")
    assert problem.allowed == "2, one per device in devices"


def test_spare_devices_with_super_device_ids(tmp_path: Path) -> None:
    problem = only(
        refused(
            tmp_path,
            "product: atlas-a3\n"
            "hosts:\n"
            "  - host: a\n"
            "    devices: [0, 1]\n"
            "    spare_devices: [2]\n"
            "    super_pod_id: 1\n"
            "    super_device_ids: [10, 11]\n",
        )
    )
    assert (problem.line, problem.path) == (8, "hosts[0].spare_devices")
    assert problem.found == "spare_devices with super_device_ids" and problem.allowed == "one of them"
    assert "super pods is not supported" in problem.hint


def test_a_recovery_key_misspelt_gets_a_did_you_mean(tmp_path: Path) -> None:
    problem = only(refused(tmp_path, "hosts: [{host: a}]\nrecovery:\n  max_recovery: 2\n"))
    assert (problem.line, problem.path, problem.found) == (6, "recovery.max_recovery", "unknown key 'max_recovery'")
    assert problem.allowed == "max_recoveries, checkpoint_dir, shrink, ledger, ledger_window_h"
    assert problem.hint == "did you mean 'max_recoveries'?"


@pytest.mark.parametrize("shrink", ["{}", "{min_rank: 2}"])
def test_shrink_without_min_ranks(tmp_path: Path, shrink: str) -> None:
    problems = refused(tmp_path, f"hosts: [{{host: a}}]\nrecovery:\n  shrink: {shrink}\n")
    missing = [p for p in problems if p.path == "recovery.shrink"]
    assert len(missing) == 1 and missing[0].line == 6 and missing[0].found == "no min_ranks"
    assert "{min_ranks: N}" in missing[0].allowed
    if shrink != "{}":
        typo = only([p for p in problems if p.path == "recovery.shrink.min_rank"])
        assert typo.hint == "did you mean 'min_ranks'?"


@pytest.mark.parametrize("value", ["0", "-3", "2.5", "'4'", "true"])
def test_shrink_min_ranks_must_be_a_positive_integer(tmp_path: Path, value: str) -> None:
    problem = only(refused(tmp_path, f"hosts: [{{host: a}}]\nrecovery:\n  shrink:\n    min_ranks: {value}\n"))
    assert (problem.line, problem.path) == (7, "recovery.shrink.min_ranks")
    assert problem.allowed.startswith("an integer from 1 to ")


@pytest.mark.parametrize(
    "value, found",
    [("-1", "-1 (an integer)"), ("101", "101 (an integer)"), ("1.5", "1.5 (a number)"), ("many", "'many' (a string)")],
)
def test_max_recoveries_out_of_range(tmp_path: Path, value: str, found: str) -> None:
    problem = only(refused(tmp_path, f"hosts: [{{host: a}}]\nrecovery:\n  max_recoveries: {value}\n"))
    assert (problem.line, problem.path, problem.found) == (6, "recovery.max_recoveries", found)
    assert problem.allowed == "an integer from 0 to 100"


@pytest.mark.parametrize("value", ["3", "[a]"])
def test_recovery_sections_of_the_wrong_type(tmp_path: Path, value: str) -> None:
    problem = only(refused(tmp_path, f"hosts: [{{host: a}}]\nrecovery: {value}\n"))
    assert (problem.line, problem.path) == (5, "recovery")
    assert problem.allowed == "a mapping with keys max_recoveries, checkpoint_dir, shrink, ledger, ledger_window_h"


def test_a_negative_health_interval(tmp_path: Path) -> None:
    problem = only(refused(tmp_path, "hosts: [{host: a}]\nmonitor:\n  health_interval_s: -1\n"))
    assert (problem.line, problem.path, problem.found) == (6, "monitor.health_interval_s", "-1 (an integer)")
    assert problem.allowed.startswith("a number of seconds from 0 to ")


def test_checkpoint_dir_with_an_unknown_placeholder(tmp_path: Path) -> None:
    problem = only(refused(tmp_path, "hosts: [{host: a}]\nrecovery:\n  checkpoint_dir: out/{rnk}/ckpt\n"))
    assert (problem.line, problem.path) == (6, "recovery.checkpoint_dir")
    assert "{rnk}" in problem.found and "{rank}" in problem.allowed and "{device_id}" in problem.allowed
    assert "did you mean {rank}?" in problem.hint


@pytest.mark.parametrize("value", ["''", "7", "[a, b]"])
def test_checkpoint_dir_must_be_a_string(tmp_path: Path, value: str) -> None:
    problem = only(refused(tmp_path, f"hosts: [{{host: a}}]\nrecovery:\n  checkpoint_dir: {value}\n"))
    assert (problem.line, problem.path) == (6, "recovery.checkpoint_dir")
    assert problem.allowed.startswith("a directory per rank")


def test_every_recovery_problem_shows_at_once(tmp_path: Path) -> None:
    problems = refused(
        tmp_path,
        "hosts:\n"
        "  - {host: a, devices: [0, 1], spare_devices: [1]}\n"
        "spares: [{host: a}]\n"
        "recovery: {max_recoveries: 1000, checkpoint_dir: '{nope}'}\n"
        "monitor: {health_interval_s: -5}\n",
    )
    assert sorted((p.line, p.path) for p in problems) == [
        (5, "hosts[0].spare_devices[0]"),
        (6, "spares[0].host"),
        (7, "recovery.checkpoint_dir"),
        (7, "recovery.max_recoveries"),
        (8, "monitor.health_interval_s"),
    ]


def test_spares_of_the_wrong_type_do_not_ask_for_a_non_empty_list(tmp_path: Path) -> None:
    problem = only(refused(tmp_path, "hosts: [{host: a}]\nspares: {host: s}\n"))
    assert problem.path == "spares" and "non-empty" not in problem.allowed


# --- the fault history and the crash-loop breaker -----------------------------------------------------


def test_the_ledger_and_its_window(tmp_path: Path) -> None:
    config = load(tmp_path, "hosts: [{host: a}]\nrecovery:\n  ledger: ../shared/faults.jsonl\n  ledger_window_h: 1.5\n")
    assert config.recovery.ledger == str(tmp_path.parent / "shared" / "faults.jsonl")  # from the YAML's directory
    assert config.recovery.ledger_window_h == 1.5
    defaults = load(tmp_path, "hosts: [{host: a}]\n")
    assert (defaults.recovery.ledger, defaults.recovery.ledger_window_h, defaults.job.crash_loop_limit) == (None, 24, 3)
    assert load(tmp_path, "hosts: [{host: a}]\nrecovery: {ledger_window_h: 0}\n").recovery.ledger_window_h == 0


@pytest.mark.parametrize(
    "text, path, allowed",
    [
        ("recovery: {ledger: 5}", "recovery.ledger", "a file path (relative paths start at the YAML file's directory)"),
        ("recovery: {ledger: 'logs/{job_id}.jsonl'}", "recovery.ledger", "a file path"),
        ("recovery: {ledger: 'logs/'}", "recovery.ledger", "a file path"),
        ("recovery: {ledger_window_h: -1}", "recovery.ledger_window_h", "a number of hours from 0 to 720"),
        ("recovery: {ledger_window_h: 721}", "recovery.ledger_window_h", "a number of hours from 0 to 720"),
        ("recovery: {ledger_window_h: a day}", "recovery.ledger_window_h", "a number of hours from 0 to 720"),
        ("recovery: {ledgr: x}", "recovery.ledgr", ""),
    ],
)
def test_the_ledger_keys_refused(tmp_path: Path, text: str, path: str, allowed: str) -> None:
    problem = only(refused(tmp_path, f"hosts: [{{host: a}}]\n{text}\n"))
    assert (problem.line, problem.path) == (5, path)
    assert problem.allowed.startswith(allowed)


@pytest.mark.parametrize("value, ok", [(0, True), (2, True), (101, True), (1, False), (-1, False), (102, False)])
def test_the_crash_loop_limit(tmp_path: Path, value: int, ok: bool) -> None:
    path = tmp_path / "job.yaml"
    path.write_text(f"version: 1\njob:\n  command: [python3, train.py]\n  crash_loop_limit: {value}\n")
    if ok:
        assert load_config(str(path)).job.crash_loop_limit == value
        return
    with pytest.raises(ConfigError) as caught:
        load_config(str(path))
    (problem,) = caught.value.problems
    assert (problem.line, problem.path) == (4, "job.crash_loop_limit")
    assert problem.allowed == "0 (never stop a crash loop) or 2 to 101 attempts"
