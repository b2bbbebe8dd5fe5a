"""The mpirun transport with real Open MPI (mpirun, orted) on network-namespace hosts with their own sshd
(mpirun's rsh agent is ssh, with the test hosts' ssh_config): each host's agent is an ``mpirun --host
HOST:1 -np 1`` of its own; no variable of Open MPI or PMIx reaches a rank; a host lost mid-run (its link
down, every process on it killed, as a machine dies) is replaced by the spare host with a new mpirun, every
rank resuming from the newest checkpoint. Nothing of the job is left on any host, nor on this one."""

from __future__ import annotations

import json
import os
import shutil
import signal
import subprocess
import sys
import threading
import time
from pathlib import Path
from typing import List

import pytest
from helpers import RANKS, ROOT, base_env, marked_pids, npulaunch_argv, require, run_cli, wait_until

FINAL = 200  # 10 s of steps: the host is lost (5 s to notice) long before the job could end


@pytest.fixture(scope="module")
def mpi_hosts(tmp_path_factory):
    """Three hosts h1-h3 on a subnet of their own (10.76.<slot>.0/24: never that of the other tests' hosts)."""
    from netns_hosts import NetnsHosts, available, network

    missing = available() or ("" if shutil.which("mpirun") else "mpirun (openmpi-bin)")
    require(not missing, f"what the mpirun transport's test hosts need: {missing}")
    said = subprocess.run(["mpirun", "--version"], capture_output=True, text=True).stdout
    require("Open MPI" in said, f"Open MPI's mpirun (openmpi-bin), not {said.strip()[:60]!r}")
    hosts = NetnsHosts(tmp_path_factory.mktemp("mpi") / "hosts", 3, network("10.76", "mpi", "m"))
    try:
        yield hosts.up()
    finally:
        hosts.down()


def on_host(hosts, name: str) -> List[int]:
    """The processes on host ``name`` but its sshd (the agent, its ranks, orted, ssh sessions)."""
    host = next(h for h in hosts.hosts if h.name == name)
    found = subprocess.run(["ip", "netns", "pids", host.netns], capture_output=True, text=True).stdout.split()
    return [int(pid) for pid in found if int(pid) != host.pid]


def kill_host(hosts, name: str) -> int:
    """Host ``name`` dies as a machine does: its link goes down, every process on it is killed at once."""
    host = next(h for h in hosts.hosts if h.name == name)
    hosts.set_link(host, up=False)
    victims = on_host(hosts, name)
    directories = set()  # the agent's private directory: on a real host it goes with the host's disk
    for pid in victims:
        try:
            directories.add(os.readlink(f"/proc/{pid}/cwd"))
        except OSError:
            pass
    for pid in victims:
        try:
            os.kill(pid, signal.SIGKILL)
        except OSError:
            pass
    for directory in directories:
        if directory.startswith("/tmp/npulaunch-agent."):
            shutil.rmtree(directory, ignore_errors=True)
    return len(victims)


def nothing_left(hosts, marker: str) -> bool:
    return not marked_pids(marker) and not any(on_host(hosts, h.name) for h in hosts.hosts)


def write_job(tmp_path: Path, hosts, marker: str, action: str, spare: bool = False, head: str = "") -> Path:
    """h1 and h2 with 2 ranks each over mpirun (h3 held back with ``spare``); ssh options through mpirun's
    own rsh agent, the test subnet alone for Open MPI's own connections."""
    config, mpirun = tmp_path / "job.yaml", tmp_path / "mpirun"
    mpirun.write_text(f'#!/bin/sh\necho "$*" >> {tmp_path / "mpiruns"}\nexec {shutil.which("mpirun")} "$@"\n')
    mpirun.chmod(0o755)  # Open MPI's mpirun, each start written down
    spares = "spares:\n  - {host: h3, devices: 2}\n" if spare else ""
    config.write_text(f"""{head}job:
  command: [{sys.executable}, {RANKS / "rank.py"}, "*={action}"]
  log_dir: {tmp_path / "logs"}
  grace_period_s: 1
hosts:
  - {{host: h1, devices: 2}}
  - {{host: h2, devices: 2}}
{spares}rank_table: none
transport: mpirun
mpi:
  mpirun: {mpirun}
  mpirun_options: [--allow-run-as-root, --mca, plm_rsh_agent, "ssh -F {hosts.ssh_config}",
                   --mca, oob_tcp_if_include, {hosts.net.subnet}.0/24]
env:
  NPLTEST_MARKER: {marker}
  PYTHONPATH: {ROOT}
  CKPT_DIR: out/{{host}}/{{device_id}}
  CKPT_EVERY: "5"
  TRAIN_STEP_S: "0.05"
recovery:
  checkpoint_dir: out/{{host}}/{{device_id}}
""")
    return config


def test_a_job_over_mpirun_gets_each_rank_its_environment_and_no_mpi_variable(
    mpi_hosts, tmp_path: Path, marker: str
) -> None:
    config = write_job(tmp_path, mpi_hosts, marker, "env")
    mca = {"OMPI_MCA_mpi_yield_when_idle": "1"}  # mpirun hands its environment's MCA parameters on
    result = run_cli(
        "run", str(config), "--job-id", "env", "--no-live", env={"NPLTEST_MARKER": marker, **mca}, timeout=90
    )
    assert result.returncode == 0, result.stdout + result.stderr
    started = (tmp_path / "mpiruns").read_text().splitlines()
    hosts = [line.split()[:4] for line in started if line.startswith("--host ")]  # the agent that probed runs
    assert sorted(hosts) == [["--host", "h1:1", "-np", "1"], ["--host", "h2:1", "-np", "1"]], started
    job = tmp_path / "logs" / "env"
    for rank, (host, device) in enumerate([("h1", 0), ("h1", 1), ("h2", 0), ("h2", 1)]):
        text = (job / "hosts" / host / f"rank-{rank}" / "stdout.log").read_text()
        env = json.loads(next(line for line in text.splitlines() if line.startswith("{")))
        assert (env["RANK_ID"], env["RANK_SIZE"], env["DEVICE_ID"]) == (str(rank), "4", str(device))
        assert (env["JOB_ID"], env["NPULAUNCH_HOST"], env["NPULAUNCH_LOCAL_RANK"]) == ("env", host, str(device))
        assert env["NPLTEST_MARKER"] == marker
        leaked = sorted(name for name in env if name.startswith(("OMPI_", "PMIX_", "PMI_", "HFI_", "IPATH_")))
        assert not leaked, f"rank {rank} on {host} got Open MPI's variables: {leaked}"
    assert wait_until(lambda: nothing_left(mpi_hosts, marker), 15), (marked_pids(marker), on_host(mpi_hosts, "h1"))


def test_hosts_known_only_to_ssh_config_get_their_addresses_from_the_connection(
    mpi_hosts, tmp_path: Path, marker: str
) -> None:
    """h1 and h2 resolve nowhere on this machine (only the rsh agent's ssh_config names them): a PyTorch job's
    ranks meet at h1's address and each host's HCCL_IF_IP is its own, from SSH_CONNECTION on each host."""
    config = write_job(tmp_path, mpi_hosts, marker, "env", head="framework: pytorch\n")
    result = run_cli("run", str(config), "--job-id", "torch", "--no-live", env={"NPLTEST_MARKER": marker}, timeout=90)
    assert result.returncode == 0, result.stdout + result.stderr
    address = {host.name: host.address for host in mpi_hosts.hosts}
    for rank, host in enumerate(["h1", "h1", "h2", "h2"]):
        text = (tmp_path / "logs" / "torch" / "hosts" / host / f"rank-{rank}" / "stdout.log").read_text()
        env = json.loads(next(line for line in text.splitlines() if line.startswith("{")))
        assert (env["MASTER_ADDR"], env["HCCL_IF_IP"], env["RANK"]) == (address["h1"], address[host], str(rank))
    assert wait_until(lambda: nothing_left(mpi_hosts, marker), 15), marked_pids(marker)


@pytest.mark.parametrize("signum", [signal.SIGTERM, signal.SIGKILL])
def test_a_launcher_stopped_or_killed_leaves_nothing_on_any_host(
    mpi_hosts, tmp_path: Path, marker: str, signum: int
) -> None:
    """SIGTERM: the launcher stops every rank and ends every mpirun. SIGKILL: nothing of the launcher acts, but
    each mpirun's stdin closes with it, Open MPI forwards the end of it, and each agent stops its ranks."""
    config = write_job(tmp_path, mpi_hosts, marker, "hang")
    proc = subprocess.Popen(
        npulaunch_argv("run", str(config), "--job-id", "sig", "--no-live"),
        env=base_env({"NPLTEST_MARKER": marker}),
        stdout=subprocess.DEVNULL,
        stderr=subprocess.PIPE,
        text=True,
    )
    events = tmp_path / "logs" / "sig" / "events.jsonl"
    started = wait_until(lambda: events.exists() and events.read_text().count('"rank_started"') == 4, 30)
    proc.send_signal(signum)
    _, err = proc.communicate(timeout=30)
    assert started, err
    assert proc.returncode == (128 + signum if signum == signal.SIGTERM else -signum), err
    assert wait_until(lambda: nothing_left(mpi_hosts, marker), 20), (
        marked_pids(marker),
        {h.name: on_host(mpi_hosts, h.name) for h in mpi_hosts.hosts},
    )


def test_a_host_lost_under_mpirun_is_replaced_by_the_spare_host(mpi_hosts, tmp_path: Path, marker: str) -> None:
    config = write_job(tmp_path, mpi_hosts, marker, f"train:{FINAL}", spare=True)
    log = tmp_path / "logs" / "lost" / "attempt-1" / "hosts" / "h1" / "rank-0" / "stdout.log"  # as written
    killed: list = []

    def kill_h2() -> None:
        deadline = time.monotonic() + 60
        while time.monotonic() < deadline:
            if log.exists() and "step 20\n" in log.read_text():
                killed.append(kill_host(mpi_hosts, "h2"))
                return
            time.sleep(0.05)

    threading.Thread(target=kill_h2, daemon=True).start()
    started = time.monotonic()
    try:
        result = run_cli(
            "run", str(config), "--job-id", "lost", "--no-live", env={"NPLTEST_MARKER": marker}, timeout=120
        )
    finally:
        mpi_hosts.set_link(next(h for h in mpi_hosts.hosts if h.name == "h2"), up=True)
    took = time.monotonic() - started
    assert killed and killed[0] >= 3, f"the test never killed h2's processes: {killed}"  # agent, 2 ranks, orted
    assert result.returncode == 0, result.stdout + result.stderr
    job = tmp_path / "logs" / "lost"
    summary = json.loads((job / "summary.json").read_text())
    first, second = summary["attempts"]
    assert first["root_cause"]["cls"] == "host_lost"
    assert [(e["host"], e["device"]) for e in first["excluded"]] == [("h2", None)]
    assert first["devices"] == {"h1": [0, 1], "h2": [0, 1]}
    assert second["devices"] == {"h1": [0, 1], "h3": [0, 1]}  # ranks 2, 3 on the spare host
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
    assert took < 60, f"the job took {took:.1f} s"
    # h2's mpirun is stopped, h1's and h3's end with their agents: nothing of the job is left anywhere
    assert wait_until(lambda: nothing_left(mpi_hosts, marker), 20), (
        marked_pids(marker),
        {h.name: on_host(mpi_hosts, h.name) for h in mpi_hosts.hosts},
    )


FLIP_FIRST = """import os, subprocess, sys, threading
if os.path.exists(sys.argv[1]):
    os.execvp(sys.argv[2], sys.argv[2:])
open(sys.argv[1], "w").close()
child = subprocess.Popen(sys.argv[2:], stdin=subprocess.PIPE)


def copy():
    first = True
    while True:
        data = os.read(0, 65536)
        if not data:
            break
        if first:
            data, first = bytes([data[0] ^ 1]) + data[1:], False
        try:
            child.stdin.write(data)
            child.stdin.flush()
        except BrokenPipeError:
            break


threading.Thread(target=copy, daemon=True).start()
os._exit(child.wait())  # as mpirun: it ends when its one process does
"""


def test_an_agent_whose_code_arrives_damaged_is_started_again(tmp_path: Path) -> None:
    """What the bootstrap received is checked against the code's digest; the first start here gets its first
    byte flipped on the way (a stand-in for mpirun, without any host), so the agent is started a second time,
    which gets the code whole."""
    import hashlib
    import queue
    import zipfile

    from npulaunch.host.wire import Closed, Probe
    from npulaunch.launch.fleet.link import agent_command
    from npulaunch.launch.fleet.mpirun import MpirunChannel

    archive = tmp_path / "code.pyz"
    with zipfile.ZipFile(archive, "w") as bundle:
        bundle.writestr("__main__.py", "import sys; sys.stdin.read()\n")
    code = archive.read_bytes()
    command = agent_command(len(code), sys.executable, hashlib.sha256(code).hexdigest())
    messages: queue.Queue = queue.Queue()
    channel = MpirunChannel("h9", messages, None)
    channel.start(
        [sys.executable, "-c", FLIP_FIRST, str(tmp_path / "flipped"), "/bin/sh", "-c", command], code, Probe({})
    )
    assert wait_until(lambda: channel.remote_dir != "", 20), "the second start never shipped the code"
    assert (tmp_path / "flipped").exists() and channel._restarts == 1
    channel.close_channel()
    host, closed = messages.get(timeout=20)
    assert host == "h9" and isinstance(closed, Closed) and closed.exit_status == 0, closed
