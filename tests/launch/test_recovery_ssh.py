"""Recovery over real SSH (network-namespace hosts, their own sshd): mid-run one host's network goes away
(its link goes down: no FIN, no RST, as when a switch port or the host dies); the launcher stops hearing its
agent, stops every rank, excludes the host, puts its ranks on the spare host, gives their empty checkpoint
directories (keyed by host and device) the newest complete checkpoint, and the job ends with every rank at
the final step. Nothing of the job is left on any host."""

from __future__ import annotations

import json
import sys
import threading
import time
from pathlib import Path

from helpers import RANKS, STANDINS, marked_pids, run_cli, wait_until

FINAL = 200  # 10 s: the host is lost (3 s to notice) long before the job could end


def write_job(tmp_path: Path, netns_hosts, marker: str, h1: str = "", extra: str = "") -> Path:
    """h1 and h2 with 2 training ranks each (``h1``: more of h1's entry), h3 held back; checkpoints keyed by
    host and device, on the file system every test host shares."""
    config = tmp_path / "job.yaml"
    config.write_text(f"""job:
  command: [{sys.executable}, {RANKS / "rank.py"}, "*=train:{FINAL}"]
  log_dir: {tmp_path / "logs"}
  grace_period_s: 1
hosts:
  - {{host: h1, devices: 2{h1}}}
  - {{host: h2, devices: 2}}
spares:
  - {{host: h3, devices: 2}}
rank_table: none
ssh: {{user: root, identity_file: {netns_hosts.client_key}, known_hosts: {netns_hosts.known_hosts},
       config: {netns_hosts.ssh_config}}}
env:
  NPLTEST_MARKER: {marker}
  CKPT_DIR: out/{{host}}/{{device_id}}
  CKPT_EVERY: "5"
  TRAIN_STEP_S: "0.05"
{extra}recovery:
  checkpoint_dir: out/{{host}}/{{device_id}}
""")
    return config


def test_a_host_that_goes_away_is_replaced_by_the_spare_host(netns_hosts, tmp_path: Path, marker: str) -> None:
    config = write_job(tmp_path, netns_hosts, marker)
    h2 = next(host for host in netns_hosts.hosts if host.name == "h2")
    log = tmp_path / "logs" / "lost" / "attempt-1" / "hosts" / "h1" / "rank-0" / "stdout.log"  # as written
    cut = threading.Event()
    errors: list = []

    def cut_h2() -> None:
        deadline = time.monotonic() + 60
        while time.monotonic() < deadline:
            if log.exists() and "step 20\n" in log.read_text():
                try:
                    netns_hosts.set_link(h2, up=False)
                except Exception as exc:  # noqa: BLE001
                    errors.append(repr(exc))
                cut.set()
                return
            time.sleep(0.05)

    threading.Thread(target=cut_h2, daemon=True).start()
    try:
        result = run_cli(
            "run",
            str(config),
            "--job-id",
            "lost",
            env={"NPLTEST_MARKER": marker, "NPULAUNCH_HEARTBEAT_TIMEOUT_S": "3"},
            timeout=120,
        )
    finally:
        netns_hosts.set_link(h2, up=True)
    assert cut.is_set() and not errors, f"the test never cut h2's network {errors}"
    assert result.returncode == 0, result.stdout + result.stderr
    job = tmp_path / "logs" / "lost"
    summary = json.loads((job / "summary.json").read_text())
    first, second = summary["attempts"]
    assert first["root_cause"]["cls"] == "host_lost"
    assert [(e["host"], e["device"]) for e in first["excluded"]] == [("h2", None)]
    assert first["devices"] == {"h1": [0, 1], "h2": [0, 1]}
    assert second["devices"] == {"h1": [0, 1], "h3": [0, 1]}  # ranks 2, 3 on the spare host, 0, 1 where they were
    step = second["resumed"]["step"]
    assert step is not None and 20 <= step < FINAL and step % 5 == 0 and first["last_step"] < FINAL
    weights = set()
    for rank in range(4):
        text = (job / "attempt-2" / f"rank-{rank}" / "stdout.log").read_text()
        final = next(line for line in text.splitlines() if line.startswith("final step "))
        assert final.startswith(f"final step {FINAL} ")
        weights.add(final.split(" w ", 1)[1])
        assert f"at step {step}" in text
    assert len(weights) == 1
    assert (tmp_path / "out" / "h3" / "0" / "checkpoint").exists()  # given the checkpoint before it started
    # h2's agent stops its ranks when it stops hearing the launcher; nothing of the job is left anywhere
    assert wait_until(lambda: not marked_pids(marker), 15), marked_pids(marker)


def test_an_npu_fault_over_ssh_whose_spare_fails_the_new_check_moves_the_host(
    netns_hosts, tmp_path: Path, marker: str
) -> None:
    """h1's NPU 0 reports a fault mid-run (its agent's health watch, the npu-smi stand-in on the hosts); its
    spare NPU 2 fails the health check of the new placement (asked of h1 again over SSH), so the whole of
    h1's share moves to the spare host h3, and the job ends there."""
    faults = tmp_path / "faults"
    faults.write_text("")
    wrapper = netns_hosts.bin_dir / "npu-smi"
    wrapper.write_text(
        f'#!/bin/sh\ncase "$(hostname)" in\n  h1) export NPU_STANDIN_FAULTS={faults};;\nesac\n'
        f'exec {STANDINS / "npu-smi"} "$@"\n'
    )
    wrapper.chmod(0o755)
    config = write_job(tmp_path, netns_hosts, marker, ", spare_devices: [2]", "monitor: {health_interval_s: 0.3}\n")
    log = tmp_path / "logs" / "npu" / "attempt-1" / "hosts" / "h1" / "rank-0" / "stdout.log"

    def fault() -> None:
        deadline = time.monotonic() + 60
        while time.monotonic() < deadline:
            if log.exists() and "step 20\n" in log.read_text():
                faults.write_text("0 Alarm 80E01801\n2 Critical 80E01801\n")
                return
            time.sleep(0.05)

    threading.Thread(target=fault, daemon=True).start()
    try:
        result = run_cli("run", str(config), "--job-id", "npu", env={"NPLTEST_MARKER": marker}, timeout=120)
    finally:
        wrapper.unlink()
    assert result.returncode == 0, result.stdout + result.stderr
    first, second = json.loads((tmp_path / "logs" / "npu" / "summary.json").read_text())["attempts"]
    assert first["root_cause"]["cls"] == "npu_fault" and first["root_cause"]["code"] == "80E01801"
    assert [(e["host"], e["device"]) for e in first["excluded"]] == [("h1", 0), ("h1", 2)]
    assert first["excluded"][1]["reason"].startswith("health check: chip health Critical")
    assert "the health check of the new placement excludes h1 NPU 2" in result.stderr
    assert second["changes"] == ["h1 (its spare NPUs (2) are all used or excluded) -> spare host h3 NPUs 0-1"]
    assert second["devices"] == {"h3": [0, 1], "h2": [0, 1]}
    assert second["resumed"]["step"] >= 20
    assert wait_until(lambda: not marked_pids(marker), 15), marked_pids(marker)
