"""job.cpu_binding on remote hosts over real SSH (tests/netns_hosts.py): where the plan has no CPU facts of
a remote host, that host's agent chooses its ranks' CPUs with the plan's rules, and the ranks report
os.sched_getaffinity(0); a binding a host cannot honour is refused, saying why."""

from __future__ import annotations

import json
import os
import re
import sys
from pathlib import Path

from helpers import RANKS, marked_pids, require, run_cli

HERE = sorted(os.sched_getaffinity(0))  # the test hosts are namespaces of this machine: the same CPUs


def write_job(tmp_path: Path, netns_hosts, marker: str, per_host: int, binding: str) -> Path:
    config = tmp_path / "job.yaml"
    config.write_text(f"""job:
  command: [{sys.executable}, {RANKS / "modelzoo.py"}]
  log_dir: {tmp_path / "logs"}
  grace_period_s: 1
  cpu_binding: {binding}
hosts:
  - {{host: h1, devices: {per_host}}}
  - {{host: h2, devices: {per_host}}}
rank_table: none
ssh: {{user: root, identity_file: {netns_hosts.client_key}, known_hosts: {netns_hosts.known_hosts},
       config: {netns_hosts.ssh_config}}}
env:
  NPLTEST_MARKER: {marker}
""")
    return config


def test_each_host_binds_its_ranks_in_blocks(netns_hosts, tmp_path: Path, marker: str) -> None:
    require(len(HERE) >= 2, "at least two CPUs this process may use")
    config = write_job(tmp_path, netns_hosts, marker, 2, "blocks")
    shown = run_cli("plan", str(config)).stdout
    assert "cpu_binding blocks: h1's CPUs are chosen on the host when the job starts" in shown
    result = run_cli("run", str(config), "--job-id", "cb", "--no-live", env={"NPLTEST_MARKER": marker}, timeout=90)
    assert result.returncode == 0, result.stderr
    got = {json.loads(t)["device_index"]: json.loads(t)["cpus"] for t in re.findall(r"SHARD (.*)", result.stdout)}
    half = len(HERE) // 2
    assert got == {0: HERE[:half], 1: HERE[half:], 2: HERE[:half], 3: HERE[half:]}
    events = [json.loads(line) for line in (tmp_path / "logs" / "cb" / "events.jsonl").read_text().splitlines()]
    assert sorted(e["cpus"] for e in events if e["kind"] == "rank_started") == sorted(got.values())


def test_a_binding_a_remote_host_cannot_honour_is_refused_before_start(
    netns_hosts, tmp_path: Path, marker: str
) -> None:
    config = write_job(tmp_path, netns_hosts, marker, len(HERE) + 1, "blocks")
    result = run_cli("run", str(config), "--job-id", "cb", "--no-live", env={"NPLTEST_MARKER": marker}, timeout=90)
    # the probe's cpu_topology reaches the plan, which refuses before anything starts
    assert result.returncode == 2, result.stderr
    assert f"{len(HERE) + 1} ranks on h1, which allows {len(HERE)} CPU(s)" in result.stderr
    assert not marked_pids(marker)
