"""The NPU health check over real SSH: 3 test hosts (network namespaces with their own sshd), the NPU
tool stand-ins on their PATH with per-host faults, and per-host CANN installs (the same path, another
tree bind-mounted over it in one host's mount namespace, as on real machines). Several hosts' faults
are reported together in one run; the NPU-to-NPU pings run between hosts; a hung tool stays bounded."""

from __future__ import annotations

import json
import platform
import subprocess
import sys
import time
from pathlib import Path
from typing import Dict, Iterator, List

import pytest
from helpers import STANDINS, TESTS, marked_pids, run_cli, wait_until

DATA = TESTS / "data" / "tool_outputs"


@pytest.fixture
def npu_tools(netns_hosts) -> Iterator:
    """NPU tool stand-ins on the test hosts' PATH; ``{tool: {host: shell lines}}`` runs those lines on
    that host before the stand-in (the hosts share this machine's filesystem, not their hostname)."""

    def install(tools: Dict[str, Dict[str, str]]) -> None:
        for tool in ("npu-smi", "hccn_tool"):
            per_host = tools.get(tool, {})
            cases = "".join(f"  {host}) {lines};;\n" for host, lines in per_host.items())
            wrapper = netns_hosts.bin_dir / tool
            wrapper.write_text(f'#!/bin/sh\ncase "$(hostname)" in\n{cases}esac\nexec {STANDINS / tool} "$@"\n')
            wrapper.chmod(0o755)

    yield install
    for tool in netns_hosts.bin_dir.iterdir():
        tool.unlink()


@pytest.fixture
def host_mounts(netns_hosts) -> Iterator:
    """``mount(host, source, target)``: ``source`` seen at ``target`` on that test host only (a bind mount
    in its sshd's mount namespace, which ``ip netns exec`` made private); undone after the test."""
    done: List[tuple] = []

    def mount(name: str, source: Path, target: Path) -> None:
        host = next(h for h in netns_hosts.hosts if h.name == name)
        subprocess.run(
            ["nsenter", f"--target={host.pid}", "--mount", "--", "mount", "--bind", str(source), str(target)],
            check=True,
        )
        done.append((host.pid, target))

    yield mount
    for pid, target in reversed(done):
        subprocess.run(["nsenter", f"--target={pid}", "--mount", "--", "umount", str(target)], check=False)


def toolkit(root: Path, version_file: str) -> None:
    info = root / "ascend-toolkit" / "latest" / f"{platform.machine()}-linux" / "ascend_toolkit_install.info"
    info.parent.mkdir(parents=True)
    info.write_text((DATA / version_file).read_text())


def write_job(tmp_path: Path, netns_hosts, marker: str, extra: str = "") -> Path:
    config = tmp_path / "job.yaml"
    config.write_text(f"""job:
  command: [{sys.executable}, -c, pass]
  log_dir: {tmp_path / "logs"}
  grace_period_s: 1
hosts:
  - {{host: h1, devices: 2}}
  - {{host: h2, devices: 2}}
  - {{host: h3, devices: 2}}
ssh: {{user: root, identity_file: {netns_hosts.client_key}, known_hosts: {netns_hosts.known_hosts},
       config: {netns_hosts.ssh_config}}}
env:
  NPLTEST_MARKER: {marker}
{extra}""")
    return config


def test_a_down_link_and_another_cann_version_are_reported_together(
    netns_hosts, npu_tools, host_mounts, tmp_path: Path, marker: str
) -> None:
    toolkit(tmp_path / "ascend", "ascend_toolkit_install_8.3.RC2.info")
    toolkit(tmp_path / "ascend-h3", "ascend_toolkit_install_8.5.0.info")
    host_mounts("h3", tmp_path / "ascend-h3", tmp_path / "ascend")  # h3 sees 8.5.0 at the same path
    npu_tools({"hccn_tool": {"h2": "export NPU_STANDIN_LINK_DOWN=1"}})
    home = tmp_path / "ascend" / "ascend-toolkit" / "latest"
    config = write_job(tmp_path, netns_hosts, marker, f"  ASCEND_HOME_PATH: {home}\n")
    info = home / f"{platform.machine()}-linux" / "ascend_toolkit_install.info"

    result = run_cli("check", str(config), "--job-id", "hc", env={"NPLTEST_MARKER": marker})
    assert result.returncode == 2, result.stdout + result.stderr
    out = result.stdout.splitlines()
    head = next(line for line in out if line.startswith("checked: "))
    assert head.startswith("checked: 3 hosts (over SSH), 6 NPUs, ")
    assert "no NPU-to-NPU pings (the job cannot start anyway: fix the fatal findings first)" in head
    fatal = [line for line in out if line.startswith("fatal: ")]
    assert fatal == [
        "fatal: h2: NPU 1: NIC link DOWN (expected UP); inspect: hccn_tool -i 1 -link -g; cable and switch port: "
        "hccn_tool -i 1 -optical -g, hccn_tool -i 1 -lldp -g",
        f"fatal: h3: CANN toolkit 8.5.0 ({info}) (expected 8.3.RC2 as on h1, h2 (HCCL refuses ranks of different "
        "versions: EI0008)); install the same CANN toolkit version on every host",
    ]
    assert out[-1] == "the job would not start (2 fatal); nothing was started"
    assert "npulaunch: error: cannot start the job; nothing was started (2 fatal, listed above)" in result.stderr

    ran = run_cli("run", str(config), "--job-id", "hr", env={"NPLTEST_MARKER": marker})
    assert ran.returncode == 2
    assert "h2: NPU 1: NIC link DOWN" in ran.stderr and "h3: CANN toolkit 8.5.0" in ran.stderr
    assert not (tmp_path / "logs").exists()
    assert wait_until(lambda: not marked_pids(marker), 5)


def test_pings_between_hosts_find_an_npu_that_gets_no_reply(
    netns_hosts, npu_tools, tmp_path: Path, marker: str
) -> None:
    npu_tools({"hccn_tool": {"h2": "export NPU_STANDIN_PING_FAIL=0"}})
    config = write_job(tmp_path, netns_hosts, marker)
    result = run_cli("check", str(config), "--job-id", "hc", "--json", env={"NPLTEST_MARKER": marker})
    assert result.returncode == 2, result.stdout + result.stderr
    record = json.loads(result.stdout)
    assert record["checked"]["pings"] == 6 and record["checked"]["network"]
    pings = [f for f in record["findings"] if f["check"] == "ping"]
    assert pings == [
        {
            "check": "ping",
            "severity": "fatal",
            "host": "h2",
            "devices": [0],
            "seen": "no reply from h3 NPU 0 (192.168.100.149): recv time out seq=0",
            "expected": "replies",
            "hint": "hccn_tool -i 0 -ping -g address 192.168.100.149; both NICs' links, addresses, gateways and "
            "the switch",
        }
    ]
    skipped = run_cli("check", str(config), "--job-id", "hc", "--no-network", env={"NPLTEST_MARKER": marker})
    assert skipped.returncode == 0, skipped.stdout + skipped.stderr
    assert "NPU-to-NPU pings" not in next(line for line in skipped.stdout.splitlines() if line.startswith("checked: "))


def test_tls_on_one_host_only_and_a_healthy_check(netns_hosts, npu_tools, tmp_path: Path, marker: str) -> None:
    npu_tools({"hccn_tool": {"h3": "export NPU_STANDIN_TLS=all"}})
    config = write_job(tmp_path, netns_hosts, marker)
    result = run_cli("check", str(config), "--job-id", "hc", env={"NPLTEST_MARKER": marker})
    assert result.returncode == 2
    assert (
        "fatal: h3: NPUs 0-1: TLS switch 1 (on) (expected 0 as on 4 other NPUs (h1, h2)); make every NPU of the job "
        "the same: hccn_tool -i <id> -tls -s enable 0"
    ) in result.stdout
    npu_tools({})
    ok = run_cli("check", str(config), "--job-id", "hc", env={"NPLTEST_MARKER": marker})
    assert ok.returncode == 0, ok.stdout + ok.stderr
    head = next(line for line in ok.stdout.splitlines() if line.startswith("checked: "))
    assert "tools: hccn_tool x42, npu-smi x3, 6 NPU-to-NPU pings" in head, head
    assert ok.stdout.splitlines()[-1] == "ok: 6 ranks on 3 hosts, each checked over SSH; nothing was started"


def test_a_hung_tool_on_one_host_is_bounded(netns_hosts, npu_tools, tmp_path: Path, marker: str) -> None:
    npu_tools({"hccn_tool": {"h1": "export NPU_STANDIN_HCCN_HANG=link"}})
    config = write_job(tmp_path, netns_hosts, marker)
    started = time.monotonic()
    # 3 s: every other host's 12 hccn_tool calls answer within it on a busy 2-core machine (1 s did not, in CI)
    result = run_cli("check", str(config), "--job-id", "hc", "--tool-timeout", "3", env={"NPLTEST_MARKER": marker})
    elapsed = time.monotonic() - started
    assert result.returncode == 0, result.stdout + result.stderr
    assert "not checked: h1: NPUs 0-1: NIC link: hccn_tool -i <id> -link -g did not answer within 3 s" in result.stdout
    late = [line for line in result.stdout.splitlines() if "did not answer" in line]
    assert late and all(line.strip().startswith("not checked: h1: ") for line in late), late  # h1's, no other host's
    assert elapsed < 20, elapsed  # SSH, two agent rounds, and 3 s for the hung calls
    assert wait_until(lambda: not hung_standins(), 5), hung_standins()  # killed at their limit


def hung_standins() -> List[int]:
    import psutil

    return [
        p.pid
        for p in psutil.process_iter(["cmdline"])
        if str(STANDINS / "hccn_tool") in " ".join(p.info["cmdline"] or []) and "-link" in (p.info["cmdline"] or [])
    ]


def test_run_shows_a_warning_and_starts(netns_hosts, npu_tools, tmp_path: Path, marker: str) -> None:
    npu_tools({"npu-smi": {"h3": "export NPU_STANDIN_DRIVER=24.1.rc1"}})
    config = write_job(tmp_path, netns_hosts, marker)
    result = run_cli("run", str(config), "--job-id", "hr", env={"NPLTEST_MARKER": marker})
    assert result.returncode == 0, result.stdout + result.stderr
    assert "h3: driver 24.1.rc1 (npu-smi info) (expected 23.0.1 as on h1, h2)" in result.stdout + result.stderr
    summary = json.loads((tmp_path / "logs" / "hr" / "summary.json").read_text())
    assert [r["state"] for r in summary["ranks"]] == ["succeeded"] * 6
