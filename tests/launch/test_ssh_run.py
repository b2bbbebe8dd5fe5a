"""Multi-host jobs over real SSH: 3 test hosts (network namespaces with their own sshd) x 2 ranks."""

from __future__ import annotations

import json
import re
import signal
import subprocess
import sys
import time
from pathlib import Path
from typing import Dict, Set

import psutil
import pytest
from helpers import (
    RANKS,
    STANDINS,
    base_env,
    marked_pids,
    npulaunch_argv,
    run_cli,
    wait_until,
)


def write_job(
    tmp_path: Path,
    netns_hosts,
    marker: str,
    *rank_args: str,
    env: str = "",
    grace: float = 1.0,
    rank_table: str = "none",
) -> Path:
    """A 3-host job; the test's marker goes in the YAML env: remote ranks do not inherit the launcher's."""
    args = ", ".join(json.dumps(a) for a in rank_args)
    config = tmp_path / "job.yaml"
    config.write_text(f"""job:
  command: [{sys.executable}, {RANKS / "rank.py"}, {args}]
  log_dir: {tmp_path / "logs"}
  grace_period_s: {grace}
hosts:
  - {{host: h1, devices: 2}}
  - {{host: h2, devices: 2}}
  - {{host: h3, devices: 2}}
rank_table: {rank_table}
ssh: {{user: root, identity_file: {netns_hosts.client_key}, known_hosts: {netns_hosts.known_hosts},
       config: {netns_hosts.ssh_config}}}
env:
  NPLTEST_MARKER: {marker}
{env}""")
    return config


def test_a_rank_table_free_job_tells_every_rank_the_chief_and_its_own_host_address(
    netns_hosts, tmp_path: Path, marker: str
) -> None:
    config = write_job(tmp_path, netns_hosts, marker, "*=env", env="  CM_CHIEF_PORT: '29610'\n", rank_table="cm")
    result = run_cli("run", str(config), "--job-id", "cm", env={"NPLTEST_MARKER": marker})
    assert result.returncode == 0, result.stderr
    address = {host.name: host.address for host in netns_hosts.hosts}
    for rank in range(6):
        host = f"h{rank // 2 + 1}"
        env = json.loads((tmp_path / "logs" / "cm" / "hosts" / host / f"rank-{rank}" / "env.json").read_text())
        assert (env["CM_CHIEF_IP"], env["CM_CHIEF_PORT"], env["CM_CHIEF_DEVICE"], env["CM_WORKER_SIZE"]) == (
            address["h1"],
            "29610",
            "0",
            "6",
        )
        assert env["CM_WORKER_IP"] == address[host]  # the address npulaunch reached the host at
        assert not {"RANK_ID", "RANK_SIZE", "RANK_TABLE_FILE"} & set(env)


def test_three_hosts_two_ranks_each(netns_hosts, tmp_path: Path, marker: str) -> None:
    config = write_job(tmp_path, netns_hosts, marker, "*=hostname+env")
    result = run_cli("run", str(config), "--job-id", "mh", env={"NPLTEST_MARKER": marker})
    assert result.returncode == 0, result.stderr
    for rank in range(6):
        host = f"h{rank // 2 + 1}"
        assert f"[{host} r{rank} d{rank % 2}] host {host}" in result.stdout
        env_line = next(
            line for line in result.stdout.splitlines() if line.startswith(f"[{host} r{rank} d{rank % 2}] {{")
        )
        env = json.loads(env_line.split("] ", 1)[1])
        assert (env["RANK_ID"], env["RANK_SIZE"], env["DEVICE_ID"]) == (str(rank), "6", str(rank % 2))
        assert env["NPULAUNCH_HOST"] == host and env["NPLTEST_MARKER"] == marker
    job = tmp_path / "logs" / "mh"
    summary = json.loads((job / "summary.json").read_text())
    assert [r["state"] for r in summary["ranks"]] == ["succeeded"] * 6
    assert [r["host"] for r in summary["ranks"]] == ["h1", "h1", "h2", "h2", "h3", "h3"]
    for rank in range(6):  # the launcher's copy (same layout as a local job) and the host's own
        host = f"h{rank // 2 + 1}"
        gathered = (job / f"rank-{rank}" / "stdout.log").read_text()
        assert f"host {host}" in gathered
        assert summary["ranks"][rank]["stdout"] == str(job / f"rank-{rank}" / "stdout.log")
        assert (job / "hosts" / host / f"rank-{rank}" / "stdout.log").read_text() == gathered


@pytest.mark.alone  # every host stopped within seconds
def test_a_failure_on_one_host_stops_every_host(netns_hosts, tmp_path: Path, marker: str) -> None:
    config = write_job(tmp_path, netns_hosts, marker, "3=exit:7@0.5", "*=ignore_term")
    started = time.monotonic()
    result = run_cli("run", str(config), "--job-id", "mh", env={"NPLTEST_MARKER": marker}, timeout=60)
    assert result.returncode == 1
    assert "root cause: rank 3 exited with code 7 (host h2, device 1" in result.stderr
    assert time.monotonic() - started < 0.5 + 1 + 5  # the failure, the grace, connections and start-up
    summary = json.loads((tmp_path / "logs" / "mh" / "summary.json").read_text())
    assert [r["signal"] for r in summary["ranks"] if r["rank"] != 3] == ["SIGKILL"] * 5


def test_hostile_argv_and_env_arrive_verbatim(netns_hosts, tmp_path: Path, marker: str) -> None:
    hostile = "sp ace 'q' \"dq\" $HOME `id` ; rm -rf / && echo pwn\nnewline ünï €"
    config = write_job(tmp_path, netns_hosts, marker, "*=argv", hostile, env=f"  HOSTILE: {json.dumps(hostile)}\n")
    result = run_cli("run", str(config), "--job-id", "mh", env={"NPLTEST_MARKER": marker})
    assert result.returncode == 0, result.stderr
    seen = [json.loads(m) for m in re.findall(r"\] ARGV (.*)", result.stdout)]
    assert len(seen) == 6
    assert all(s == {"argv": ["*=argv", hostile], "hostile": hostile} for s in seen)


def test_sigkill_of_the_launcher_leaves_no_rank_on_any_host(netns_hosts, tmp_path: Path, marker: str) -> None:
    config = write_job(tmp_path, netns_hosts, marker, "0=grandchild:hang", "*=hang")
    proc = subprocess.Popen(
        npulaunch_argv("run", str(config), "--job-id", "mh"),
        env=base_env({"NPLTEST_MARKER": marker}),
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
    )
    events = tmp_path / "logs" / "mh" / "events.jsonl"
    assert wait_until(lambda: events.exists() and events.read_text().count('"rank_started"') == 6, 20)
    proc.kill()
    proc.communicate(timeout=10)
    killed = time.monotonic()
    assert wait_until(lambda: not marked_pids(marker), 10), marked_pids(marker)
    assert time.monotonic() - killed < 1 + 5  # the agents see their channels close, grace 1 s


def test_ctrl_c_stops_every_host(netns_hosts, tmp_path: Path, marker: str) -> None:
    config = write_job(tmp_path, netns_hosts, marker, "*=hang")
    proc = subprocess.Popen(
        npulaunch_argv("run", str(config), "--job-id", "mh"),
        env=base_env({"NPLTEST_MARKER": marker}),
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
    )
    events = tmp_path / "logs" / "mh" / "events.jsonl"
    assert wait_until(lambda: events.exists() and events.read_text().count('"rank_started"') == 6, 20)
    proc.send_signal(signal.SIGINT)
    out, err = proc.communicate(timeout=20)
    assert proc.returncode == 130, err
    summary = json.loads((tmp_path / "logs" / "mh" / "summary.json").read_text())
    assert [r["state"] for r in summary["ranks"]] == ["stopped"] * 6


def test_an_unreachable_host_starts_nothing(netns_hosts, tmp_path: Path, marker: str) -> None:
    nobody = f"{netns_hosts.net.subnet}.99"  # on the test subnet, no host there
    config = write_job(tmp_path, netns_hosts, marker, "*=hang")
    text = config.read_text().replace("{host: h3, devices: 2}", f"{{host: {nobody}, devices: 2}}")
    config.write_text(text.replace("ssh: {user: root,", "ssh: {connect_timeout_s: 2, user: root,"))
    result = run_cli("run", str(config), "--job-id", "mh", env={"NPLTEST_MARKER": marker}, timeout=60)
    assert result.returncode == 2
    assert f"{nobody}: cannot connect" in result.stderr and "nothing was started" in result.stderr


def test_a_failed_ssh_handshake_is_one_line_not_a_traceback(netns_hosts, tmp_path: Path, marker: str) -> None:
    import socket
    import threading

    bridge = f"{netns_hosts.net.subnet}.1"
    server = socket.create_server((bridge, 0))  # on the test bridge: accepts, then hangs up
    port = server.getsockname()[1]

    def hang_up() -> None:
        while True:
            try:
                conn, _ = server.accept()
            except OSError:
                return
            conn.close()

    threading.Thread(target=hang_up, daemon=True).start()
    config = write_job(tmp_path, netns_hosts, marker, "*=hang")
    config.write_text(
        config.read_text().replace("{host: h3, devices: 2}", f"{{host: {bridge}, port: {port}, devices: 2}}")
    )
    try:
        result = run_cli("run", str(config), "--job-id", "mh", env={"NPLTEST_MARKER": marker}, timeout=60)
    finally:
        server.close()
    assert result.returncode == 2
    assert f"{bridge}: SSH failed: Error reading SSH protocol banner" in result.stderr
    assert "Traceback" not in result.stderr and "Exception" not in result.stderr


def test_a_host_failing_preflight_starts_nothing(netns_hosts, tmp_path: Path, marker: str) -> None:
    config = write_job(tmp_path, netns_hosts, marker, "*=hang")
    text = config.read_text().replace(
        f"  log_dir: {tmp_path / 'logs'}", f"  log_dir: {tmp_path / 'logs'}\n  workdir: {tmp_path / 'nowhere'}"
    )
    config.write_text(text)
    before = set(Path("/tmp").glob("npulaunch-agent.*"))
    result = run_cli("run", str(config), "--job-id", "mh", env={"NPLTEST_MARKER": marker}, timeout=60)
    assert result.returncode == 2
    for host in ("h1", "h2", "h3"):  # every host's problem, together
        assert f"{host}: working directory {tmp_path / 'nowhere'} does not exist" in result.stderr
    assert not (tmp_path / "logs" / "mh").exists()  # not even a job directory
    # the agents that answered the probe saw their input close, and removed their directories (a directory
    # that appeared meanwhile and is some live process's working directory is another test's agent's)
    assert wait_until(lambda: not (set(Path("/tmp").glob("npulaunch-agent.*")) - before - agent_dirs_in_use()), 5)
    assert not marked_pids(marker)


def agent_dirs_in_use() -> Set[Path]:
    """The working directories of live processes that are agents' directories (another test's agents)."""
    found = set()
    for proc in psutil.process_iter(["cwd"]):
        cwd = proc.info.get("cwd") or ""
        if cwd.startswith("/tmp/npulaunch-agent."):
            found.add(Path(cwd))
    return found


@pytest.fixture
def host_tools(netns_hosts):
    """Put NPU tool stand-ins on the test hosts' PATH, with behaviour per host: ``{tool: {host:
    shell lines}}`` makes a wrapper that runs those lines on that host, then the stand-in."""

    def install(tools: Dict[str, Dict[str, str]]) -> None:
        for tool, per_host in tools.items():
            cases = "".join(f"  {host}) {lines};;\n" for host, lines in per_host.items())
            wrapper = netns_hosts.bin_dir / tool
            wrapper.write_text(f'#!/bin/sh\ncase "$(hostname)" in\n{cases}esac\nexec {STANDINS / tool} "$@"\n')
            wrapper.chmod(0o755)

    yield install
    for tool in netns_hosts.bin_dir.iterdir():
        tool.unlink()


def test_devices_all_and_device_ips_come_from_each_hosts_npu_tools(
    netns_hosts, host_tools, tmp_path: Path, marker: str
) -> None:
    host_tools(
        {
            "npu-smi": {
                "h1": "export NPU_STANDIN_COUNT=2",
                "h2": "export NPU_STANDIN_COUNT=1",
                "h3": "export NPU_STANDIN_COUNT=3",
            },
            "hccn_tool": {},
        }
    )
    config = write_job(tmp_path, netns_hosts, marker, "*=env")
    config.write_text(config.read_text().replace("devices: 2}", "devices: all}").replace("rank_table: none\n", ""))
    planned = run_cli("plan", str(config))  # the plan alone cannot ask a remote npu-smi
    assert planned.returncode == 2 and '"all" on a remote host' in planned.stderr
    checked = run_cli("check", str(config), "--job-id", "mh")
    assert checked.returncode == 0, checked.stderr
    assert "ok: 6 ranks on 3 hosts, each checked over SSH; nothing was started" in checked.stdout
    result = run_cli("run", str(config), "--job-id", "mh", env={"NPLTEST_MARKER": marker})
    assert result.returncode == 0, result.stderr
    job = tmp_path / "logs" / "mh"
    table = json.loads((job / "rank_table.json").read_text())
    assert [
        (s["server_id"], [(d["device_id"], d["device_ip"], d["rank_id"]) for d in s["device"]])
        for s in table["server_list"]
    ] == [
        ("h1", [("0", "192.168.100.117", "0"), ("1", "192.168.101.117", "1")]),
        ("h2", [("0", "192.168.100.133", "2")]),
        ("h3", [("0", "192.168.100.149", "3"), ("1", "192.168.101.149", "4"), ("2", "192.168.102.149", "5")]),
    ]
    plan = json.loads((job / "plan.json").read_text())
    assert plan["sources"]["hosts[2].devices"] == "discovery on h3 (npu-smi info)"
    assert plan["sources"]["hosts[2].device_ips"] == "discovery on h3 (hccn_tool)"
    for rank, host in enumerate(["h1", "h1", "h2", "h3", "h3", "h3"]):  # each host's agent wrote its copy
        assert (job / "hosts" / host / f"rank-{rank}").is_dir()
    assert result.stdout.count('"RANK_SIZE": "6"') == 6


def test_npu_tool_problems_on_several_hosts_are_reported_together(
    netns_hosts, host_tools, tmp_path: Path, marker: str
) -> None:
    host_tools(
        {"npu-smi": {"h3": "export NPU_STANDIN_COUNT=1"}, "hccn_tool": {"h2": "echo 'netmask:255.255.255.0'; exit 0"}}
    )
    config = write_job(tmp_path, netns_hosts, marker, "*=hang")
    config.write_text(config.read_text().replace("rank_table: none\n", ""))
    result = run_cli("run", str(config), "--job-id", "mh", env={"NPLTEST_MARKER": marker})
    assert result.returncode == 2
    assert "h2: hccn_tool -i <id> -ip -g gave no address for devices 0, 1" in result.stderr
    assert "h3: npu-smi lists devices 0; the plan uses 1, not among them" in result.stderr
    assert "h1:" not in result.stderr and not (tmp_path / "logs" / "mh").exists()


def test_npulaunch_stop_stops_a_multi_host_job_from_another_terminal(netns_hosts, tmp_path: Path, marker: str) -> None:
    config = write_job(tmp_path, netns_hosts, marker, "*=hang")
    proc = subprocess.Popen(
        npulaunch_argv("run", str(config), "--job-id", "mh"),
        env=base_env({"NPLTEST_MARKER": marker}),
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
    )
    job = tmp_path / "logs" / "mh"
    assert wait_until(
        lambda: (job / "events.jsonl").exists() and (job / "events.jsonl").read_text().count('"rank_started"') == 6, 20
    )
    stopped = run_cli("stop", str(job))
    assert stopped.returncode == 0 and "asked launcher" in stopped.stdout
    out, err = proc.communicate(timeout=20)
    assert proc.returncode == 128 + signal.SIGTERM, err
    summary = json.loads((job / "summary.json").read_text())
    assert [r["state"] for r in summary["ranks"]] == ["stopped"] * 6
    assert run_cli("stop", str(job)).stdout.strip() == "the job has already finished"


def test_a_retryable_failure_restarts_every_host(netns_hosts, tmp_path: Path, marker: str) -> None:
    config = write_job(tmp_path, netns_hosts, marker, "3=hccp_fails_until:2", "*=ok@0.2")
    result = run_cli("run", str(config), "--job-id", "mh", "--max-restarts", "2", env={"NPLTEST_MARKER": marker})
    assert result.returncode == 0, result.stderr
    job = tmp_path / "logs" / "mh"
    summary = json.loads((job / "summary.json").read_text())
    assert [(a["attempt"], a["status"]) for a in summary["attempts"]] == [(1, "failed"), (2, "succeeded")]
    assert "connected on attempt 2" in (job / "attempt-2" / "rank-3" / "stdout.log").read_text()
    assert [r["state"] for r in summary["ranks"]] == ["succeeded"] * 6
