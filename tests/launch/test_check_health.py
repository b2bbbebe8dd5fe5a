"""``npulaunch check`` (and ``run``'s preflight) on this host with the NPU tool stand-ins: each fault the
stand-ins simulate gives its finding and the right exit code, what was checked is listed with its
counts, ``--json`` is the same as data, and a hung tool costs its time limit only."""

from __future__ import annotations

import json
import platform
import sys
import time
from pathlib import Path
from typing import Dict

import pytest
from helpers import TESTS, job_dirs, run_cli

DATA = TESTS / "data" / "tool_outputs"


def job(tmp_path: Path, extra: str = "", host: str = "    devices: [0, 1]\n") -> Path:
    path = tmp_path / "job.yaml"
    path.write_text(
        f"job:\n  command: [{sys.executable}, -c, pass]\n  log_dir: {tmp_path / 'logs'}\n"
        f"hosts:\n  - host: localhost\n{host}{extra}"
    )
    return path


def check(tmp_path: Path, marker: str, *flags: str, yaml: str = "", host: str = "    devices: [0, 1]\n", **env: str):
    return run_cli(
        "check", str(job(tmp_path, yaml, host)), *flags, standins=True, env={"NPLTEST_MARKER": marker, **env}
    )


def test_a_healthy_host_lists_what_was_checked(tmp_path: Path, marker: str) -> None:
    result = check(
        tmp_path, marker, yaml="session_options: {hcom_parallel: true}\nenv: {HCCL_CONNECT_TIMEOUT: '600'}\n"
    )
    assert result.returncode == 0, result.stderr
    out = result.stdout.splitlines()
    checked = next(line for line in out if line.startswith("checked: "))
    assert checked.startswith("checked: 1 host, 2 NPUs, 1 session option, 1 environment variable, ")
    assert "rules between options, tools: hccn_tool x12, npu-smi x1" in checked
    assert "fatal:" not in result.stdout and "warning:" not in result.stdout
    assert out[-1] == "ok: 2 ranks on 1 host; nothing was started"
    assert job_dirs(tmp_path / "logs") == []


FAULTS = {
    "unhealthy chip": (
        {"NPU_STANDIN_UNHEALTHY": "1"},
        2,
        "fatal: localhost: NPU 1: chip health Critical (error code A4025021 8C03A000 8C084E00: ascend_monitor adda "
        "heart beat lost error; node type=process-manager",
    ),
    "busy device": (
        {"NPU_STANDIN_BUSY": "0"},
        2,
        "fatal: localhost: NPU 0: held by another process: pid 1333928 (python) (expected a free device)",
    ),
    "down link": (
        {"NPU_STANDIN_LINK_DOWN": "1"},
        0,
        "warning: localhost: NPU 1: NIC link DOWN (expected UP); inspect: hccn_tool -i 1 -link -g",
    ),
    "net health": (
        {"NPU_STANDIN_NET_HEALTH": "Receive timeout"},
        0,
        "warning: localhost: NPUs 0-1: NIC net health Receive timeout (expected Success)",
    ),
    "tls mismatch": (
        {"NPU_STANDIN_TLS": "0"},
        0,
        "warning: localhost: NPU 1: TLS switch 0 (off) (expected 1 as on 1 other NPUs (localhost)); make every NPU "
        "of the job the same: hccn_tool -i 1 -tls -s enable 1",
    ),
    "no address": (
        {"NPU_STANDIN_NO_IP": "0"},
        0,
        "warning: localhost: NPU 0: the NIC has no address (expected an address)",
    ),
}


@pytest.mark.parametrize("fault", list(FAULTS))
def test_each_fault_gives_its_finding_and_exit_code(fault: str, tmp_path: Path, marker: str) -> None:
    env, code, line = FAULTS[fault]
    result = check(tmp_path, marker, yaml="rank_table: none\n", **env)
    assert result.returncode == code, result.stdout + result.stderr
    assert line in result.stdout, result.stdout
    if code == 2:
        assert "npulaunch: error: the job cannot start on this host; nothing was started (" in result.stderr
        assert "the job would not start" in result.stdout
    else:
        assert result.stdout.splitlines()[-1].startswith("ok: 2 ranks on 1 host")
    assert job_dirs(tmp_path / "logs") == []


def test_an_npu_without_an_address_when_the_rank_table_needs_it(tmp_path: Path, marker: str) -> None:
    result = check(tmp_path, marker, yaml="rank_table: required\n", NPU_STANDIN_NO_IP="0")
    assert result.returncode == 2 and "hosts[0].device_ips" in result.stderr  # the plan itself needs it


def test_a_device_ip_that_is_not_the_nics(tmp_path: Path, marker: str) -> None:
    ips = "    device_ips: [192.168.100.101, 192.168.101.101]\n"
    assert check(tmp_path, marker, host="    devices: [0, 1]\n" + ips).returncode == 0
    result = check(tmp_path, marker, host="    devices: [0, 1]\n" + ips, NPU_STANDIN_WRONG_IP="1")
    assert result.returncode == 2
    assert (
        "fatal: localhost: NPU 1: NIC address 192.168.101.201, but the rank table's device_ip is 192.168.101.101 "
        "(hosts[0].device_ips)" in result.stdout
    )


def toolkit(tmp_path: Path, name: str) -> Path:
    home = tmp_path / name
    (home / f"{platform.machine()}-linux").mkdir(parents=True)
    text = (DATA / "ascend_toolkit_install_8.3.RC2.info").read_text()
    (home / f"{platform.machine()}-linux" / "ascend_toolkit_install.info").write_text(text)
    return home


def test_a_toolkit_other_than_the_yaml_says(tmp_path: Path, marker: str) -> None:
    home = toolkit(tmp_path, "toolkit")
    yaml = f'cann_version: "8.0.RC2"\nenv:\n  ASCEND_HOME_PATH: {home}\n'
    result = check(tmp_path, marker, yaml=yaml)
    assert result.returncode == 0, result.stderr
    info = home / f"{platform.machine()}-linux" / "ascend_toolkit_install.info"
    assert (
        f"warning: localhost: CANN toolkit 8.3.RC2 ({info}), but the YAML says cann_version: 8.0.RC2 (expected 8.0.RC2)"
        in result.stdout
    )
    assert "CANN toolkit version:" not in result.stdout  # it was checked


def test_a_hung_tool_is_not_checked_and_costs_its_limit(tmp_path: Path, marker: str) -> None:
    started = time.monotonic()
    assert check(tmp_path, marker, "--tool-timeout", "0.5").returncode == 0  # the same check, no tool hung
    plain = time.monotonic() - started
    started = time.monotonic()
    result = check(tmp_path, marker, "--tool-timeout", "0.5", NPU_STANDIN_HCCN_HANG="tls")
    elapsed = time.monotonic() - started
    assert result.returncode == 0, result.stderr
    assert (
        "not checked: localhost: NPUs 0-1: TLS switch: hccn_tool -i <id> -tls -g did not answer within 0.5 s"
        in result.stdout
    )
    # 0.5 s for the hung calls (in parallel) over the same check's own time, measured beside it: the bound
    # holds on a machine busy with other tests (a hung call waited for would cost the stand-in's hour)
    assert elapsed - plain < 5, (elapsed, plain)


def test_json_gives_the_same_as_data(tmp_path: Path, marker: str) -> None:
    result = check(tmp_path, marker, "--json", NPU_STANDIN_BUSY="1", NPU_STANDIN_LINK_DOWN="0")
    assert result.returncode == 2 and result.stderr == ""
    record = json.loads(result.stdout)
    assert (record["ok"], record["exit_code"]) == (False, 2)
    assert record["checked"]["hosts"] == 1 and record["checked"]["devices"] == 2
    assert record["checked"]["tool_calls"] == {"hccn_tool": 12, "npu-smi": 1}
    assert record["counts"]["fatal"] == 1 and record["counts"]["warning"] == 1
    busy = record["findings"][0]
    assert busy == {
        "check": "busy",
        "severity": "fatal",
        "host": "localhost",
        "devices": [1],
        "seen": "held by another process: pid 1333929 (python)",
        "expected": "a free device",
        "hint": "npu-smi info lists it: stop that process or choose other devices",
    }
    link = next(f for f in record["findings"] if f["check"] == "link")
    assert (link["severity"], link["devices"], link["hint"].split(";")[0]) == (
        "warning",
        [0],
        "inspect: hccn_tool -i 0 -link -g",
    )
    ok = json.loads(check(tmp_path, marker, "--json").stdout)
    assert ok["ok"] and ok["exit_code"] == 0 and ok["job"]["ranks"] == 2


def test_without_npu_tools_nothing_is_claimed(tmp_path: Path) -> None:
    result = run_cli("check", str(job(tmp_path)))
    assert result.returncode == 0, result.stderr
    assert "not checked: localhost: chip health and processes: no npu-smi" in result.stdout
    assert "not checked: localhost: NPU NICs (link, net health, address, gateway, TLS): no hccn_tool" in result.stdout
    assert "tools: no NPU tool found" in result.stdout


def test_host_side_hccl_variables(tmp_path: Path, marker: str) -> None:
    yaml = "env:\n  HCCL_IF_IP: 192.0.2.77\n  HCCL_SOCKET_IFNAME: '=lo'\n"
    result = check(tmp_path, marker, yaml=yaml)
    assert result.returncode == 0
    assert "warning: localhost: HCCL_IF_IP=192.0.2.77 no interface of this host has it (HCCL reads it" in result.stdout
    assert "HCCL_SOCKET_IFNAME==lo" not in result.stdout  # lo exists and has an address


def test_offline_asks_no_tool(tmp_path: Path, marker: str) -> None:
    result = check(tmp_path, marker, "--offline", NPU_STANDIN_BUSY="0")
    assert result.returncode == 0
    assert "hosts not asked (--offline)" in result.stdout and "busy" not in result.stdout


def test_run_refuses_a_busy_device_and_starts_nothing(tmp_path: Path, marker: str) -> None:
    env: Dict[str, str] = {"NPLTEST_MARKER": marker, "NPU_STANDIN_BUSY": "1"}
    result = run_cli("run", str(job(tmp_path)), standins=True, env=env)
    assert result.returncode == 2
    assert "the job cannot start on this host; nothing was started:" in result.stderr
    assert "localhost: NPU 1: held by another process: pid 1333929 (python)" in result.stderr
    assert job_dirs(tmp_path / "logs") == []


def test_run_shows_a_warning_and_runs(tmp_path: Path, marker: str) -> None:
    home = toolkit(tmp_path, "toolkit")
    yaml = f'cann_version: "8.0.RC2"\nenv:\n  ASCEND_HOME_PATH: {home}\n'
    result = run_cli(
        "run", str(job(tmp_path, yaml)), "--rank-table", "none", standins=True, env={"NPLTEST_MARKER": marker}
    )
    assert result.returncode == 0, result.stderr
    assert "warning: localhost: CANN toolkit 8.3.RC2" in result.stdout + result.stderr


def test_the_report_names_hosts_once_per_finding() -> None:
    from npulaunch.plan.checks.findings import Finding, Severity
    from npulaunch.views.checkview import across_hosts, preflight_findings

    same = [Finding("firmware", Severity.NOT_CHECKED, h, "firmware version: no version.info") for h in ("h1", "h2")]
    assert [f.render() for f in across_hosts(same)] == ["h1, h2: firmware version: no version.info"]
    lines = ["h2: working directory /x does not exist", "warning: job.yaml:11: env.X: found unknown variable X"]
    found = preflight_findings(lines[:1], lines[1:], ["h1", "h2"])
    assert [(f.severity, f.host, f.seen) for f in found] == [
        (Severity.FATAL, "h2", "working directory /x does not exist"),
        (Severity.WARNING, "", "job.yaml:11: env.X: found unknown variable X"),
    ]


def test_ranks_on_cpus_are_not_counted_as_npus() -> None:
    from npulaunch.views.checkview import render_checked

    counts = {"hosts": 1, "over_ssh": False, "devices": 4, "session_options": 0, "env_vars": 1, "rules": 40}
    counts.update({"hosts_checked": False, "cpu_fallback": True})
    assert render_checked(counts).startswith("checked: 1 host, 4 ranks on CPUs (cpu_fallback), 0 session options")
    counts["cpu_fallback"] = False
    assert render_checked(counts).startswith("checked: 1 host, 4 NPUs, ")
    cli = run_cli("check", "cluster_configs/local-4.yaml", "--offline")  # the main job: cpu_fallback
    assert "4 ranks on CPUs (cpu_fallback)" in cli.stdout and "NPUs" not in cli.stdout.splitlines()[0], cli.stdout
