"""ModelZoo-style ranks on several hosts: tests/ranks/modelzoo.py reads its environment as ModelZoo's TF1
models do (import-time int(os.getenv('RANK_SIZE')), int(os.getenv('DEVICE_INDEX')), RANK_INDEX * 8 +
DEVICE_ID) and reports its data shard. Real SSH test hosts (network namespaces with their own sshd,
tests/netns_hosts.py), 2 hosts x 4 and 2 hosts x 8 ranks: every shard is read exactly once under
DEVICE_INDEX; the plan says where RANK_INDEX * 8 + DEVICE_ID does not hold."""

from __future__ import annotations

import json
import re
import sys
from collections import Counter
from pathlib import Path

import pytest
from helpers import RANKS, marked_pids, run_cli

FORMULA = "ModelZoo's RANK_INDEX * 8 + DEVICE_ID"


def write_job(tmp_path: Path, netns_hosts, marker: str, per_host: int) -> Path:
    config = tmp_path / "job.yaml"
    config.write_text(f"""job:
  name: mz
  command: [{sys.executable}, {RANKS / "modelzoo.py"}, --model_dir, "out/{{host}}/{{device_id}}/ckpt"]
  workdir: {tmp_path}
  make_dirs: ["out/{{host}}/{{device_id}}/ckpt"]  # the test hosts share one file system: {{host}} keeps them apart
  log_dir: {tmp_path / "logs"}
  grace_period_s: 1
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


@pytest.mark.parametrize("per_host", [4, 8])
def test_every_shard_is_read_once_on_two_hosts(netns_hosts, tmp_path: Path, marker: str, per_host: int) -> None:
    config = write_job(tmp_path, netns_hosts, marker, per_host)
    result = run_cli("run", str(config), "--job-id", "mz", "--no-live", env={"NPLTEST_MARKER": marker}, timeout=120)
    assert result.returncode == 0, result.stderr
    world = 2 * per_host
    reports = {}
    for prefix, text in re.findall(r"^\[(h\d r\d+ d\d)\] SHARD (.*)$", result.stdout, re.MULTILINE):
        report = json.loads(text)
        reports[report["device_index"]] = (prefix, report)
    assert sorted(reports) == list(range(world))
    read = Counter(name for _, report in reports.values() for name in report["shard"])
    assert read == Counter(f"part-{i:05d}" for i in range(2 * world))  # every shard exactly once
    for rank, (prefix, report) in reports.items():
        host, device = f"h{rank // per_host + 1}", rank % per_host
        assert prefix == f"{host} r{rank} d{device}"
        assert (report["rank_size"], report["rank_index"], report["device_id"]) == (world, rank // per_host, device)
        assert report["rank_id"] == str(rank)
        written = json.loads((tmp_path / "out" / host / str(device) / "ckpt" / "shard.json").read_text())
        assert written["device_index"] == rank  # its make_dirs were made on its host before it started
    bert = sorted(report["bert_index"] for _, report in reports.values())
    notes = json.loads((tmp_path / "logs" / "mz" / "plan.json").read_text())["notes"]
    formula = [n for n in notes if FORMULA in n]
    if per_host == 8:
        assert bert == list(range(world)) and not formula  # servers of 8: BERT's formula holds
    else:
        assert bert == [0, 1, 2, 3, 8, 9, 10, 11] and len(formula) == 1  # and the plan said so
        assert "rank 4: 8" in formula[0]
    assert not marked_pids(marker)
