"""job.cpu_binding / --cpu-binding with real ranks that report os.sched_getaffinity(0): blocks, a mapping
as written, auto on a stand-in of a real 8-NPU server (tests/data/topology: its sysfs tree with the CPU
numbers scaled to this machine, its npu-smi captures); what is refused before anything starts; what
plan shows and suggests; the agent's own decision on a host the plan had no facts of."""

from __future__ import annotations

import json
import os
import shutil
import sys
from dataclasses import replace
from pathlib import Path
from typing import Dict, List

import pytest
from helpers import RANKS, TESTS, host_plan, require, run_cli

from npulaunch.host.agent.agent import Agent
from npulaunch.host.events import EventKind
from npulaunch.host.tail import split_lines
from npulaunch.host.topology import Binding, format_cpulist

SERVER = TESTS / "data" / "topology" / "atlas800t-a2"
HERE = sorted(os.sched_getaffinity(0))


def needs_two_cpus() -> None:
    require(len(HERE) >= 2, "at least two CPUs this process may use")


def write_job(tmp_path: Path, marker: str, devices: str, binding: str = "none") -> Path:
    config = tmp_path / "job.yaml"
    config.write_text(f"""job:
  name: cpu
  command: [{sys.executable}, {RANKS / "modelzoo.py"}]
  log_dir: {tmp_path / "logs"}
  cpu_binding: {binding}
hosts:
  - {{host: localhost, devices: {devices}}}
env:
  NPLTEST_MARKER: {marker}
rank_table: none
""")
    return config


def reports(result, count: int) -> Dict[int, dict]:
    """rank -> what it reported (its SHARD line, prefixed on the console)."""
    found = {}
    for line in result.stdout.splitlines():
        if "SHARD " in line:
            report = json.loads(line.split("SHARD ", 1)[1])
            found[report["device_index"]] = report
    assert sorted(found) == list(range(count)), result.stdout + result.stderr
    return found


def run(config: Path, marker: str, *flags: str, env: Dict[str, str] = None):
    return run_cli(
        "run", str(config), "--job-id", "b", "--no-live", *flags, env={"NPLTEST_MARKER": marker, **(env or {})}
    )


def scaled_server(tmp_path: Path, cpus: Dict[int, str]) -> Path:
    """The stand-in server's sysfs tree with each NUMA node's CPUs replaced (this machine has fewer)."""
    root = tmp_path / "server"
    shutil.copytree(SERVER / "sys", root / "sys")
    for node in range(8):
        (root / "sys" / "devices" / "system" / "node" / f"node{node}" / "cpulist").write_text(cpus.get(node, "") + "\n")
    return root


def standin_env(root: Path) -> Dict[str, str]:
    return {"NPULAUNCH_SYSFS_ROOT": str(root), "PATH": str(SERVER / "bin") + os.pathsep + os.environ["PATH"]}


def test_blocks_give_each_rank_its_own_block_of_the_allowed_cpus(tmp_path: Path, marker: str) -> None:
    needs_two_cpus()
    config = write_job(tmp_path, marker, "2", "blocks")
    result = run(config, marker)
    assert result.returncode == 0, result.stderr
    got = reports(result, 2)
    blocks = [HERE[: len(HERE) // 2], HERE[len(HERE) // 2 :]]
    assert [got[0]["cpus"], got[1]["cpus"]] == blocks  # disjoint, covering the allowed CPUs
    plan = json.loads((tmp_path / "logs" / "b" / "plan.json").read_text())
    assert [r["cpus"] for r in plan["ranks"]] == blocks


def test_a_mapping_is_applied_as_written_and_the_flag_wins_over_the_yaml(tmp_path: Path, marker: str) -> None:
    needs_two_cpus()
    first, second = HERE[0], HERE[1]
    config = write_job(tmp_path, marker, "2", f'{{"0": "{second}", "1": "{first}"}}')
    got = reports(run(config, marker), 2)
    assert (got[0]["cpus"], got[1]["cpus"]) == ([second], [first])
    flagged = run_cli(
        "run",
        str(config),
        "--job-id",
        "c",
        "--no-live",
        "--cpu-binding",
        f"0={first},{second};1={second}",
        env={"NPLTEST_MARKER": marker},
    )
    got = reports(flagged, 2)
    assert (got[0]["cpus"], got[1]["cpus"]) == ([first, second], [second])


def test_auto_binds_each_rank_to_cpus_of_its_npu_s_numa_node(tmp_path: Path, marker: str) -> None:
    needs_two_cpus()
    # the server's NPUs 4, 5 sit on node 0 (bus 01, 02), NPUs 6, 7 on node 2 (bus 41, 42); here node 0 has
    # this machine's second CPU and node 2 its first, so auto differs from blocks in device order
    root = scaled_server(tmp_path, {0: str(HERE[1]), 2: str(HERE[0])})
    config = write_job(tmp_path, marker, "[4, 6]", "auto")
    result = run(config, marker, env=standin_env(root))
    assert result.returncode == 0, result.stderr
    got = reports(result, 2)
    assert (got[0]["device_id"], got[0]["cpus"]) == (4, [HERE[1]])
    assert (got[1]["device_id"], got[1]["cpus"]) == (6, [HERE[0]])
    shown = run_cli("plan", str(config), env=standin_env(root)).stdout
    assert (
        "cpu_binding auto on localhost: the CPUs near each NPU from sysfs numa_node of each NPU's PCIe bus id" in shown
    )
    rows = [line.split() for line in shown.splitlines() if line.startswith(("0 ", "1 "))]
    assert [row[6] for row in rows] == [str(HERE[1]), str(HERE[0])]  # the cpus column


def test_refused_before_anything_starts(tmp_path: Path, marker: str) -> None:
    outside = run(write_job(tmp_path, marker, "1", '{"0": "4096"}'), marker)
    assert outside.returncode == 2
    assert "job.cpu_binding: found CPUs 4096 of device 0, not allowed on localhost" in outside.stderr
    assert f"allowed: CPUs among {format_cpulist(HERE)} (the CPUs npulaunch may use there)" in outside.stderr
    too_many = run(write_job(tmp_path, marker, str(len(HERE) + 1)), marker, "--cpu-binding", "blocks")
    assert too_many.returncode == 2
    assert f"command line: --cpu-binding: found {len(HERE) + 1} ranks on localhost" in too_many.stderr
    typo = run(write_job(tmp_path, marker, "1", "auot"), marker)
    assert typo.returncode == 2 and "did you mean 'auto'?" in typo.stderr
    assert not (tmp_path / "logs").exists()  # nothing was started, not even the job directory


def test_plan_suggests_auto_on_a_numa_server_left_unbound(tmp_path: Path) -> None:
    config = write_job(tmp_path, "m", "2")
    shown = run_cli("plan", str(config), env=standin_env(SERVER))
    assert shown.returncode == 0, shown.stderr
    assert "note: localhost has 8 NUMA nodes and the ranks are not bound to CPUs: job.cpu_binding: auto" in shown.stdout
    assert " cpus " not in shown.stdout.splitlines()[6]  # no cpus column when nothing is bound


def agent_plan(tmp_path: Path, marker: str, ranks: int, binding: Binding):
    """Ranks whose binding the plan left to their host (no facts of it), printing their affinity."""
    plan = host_plan(tmp_path, marker, ranks=ranks)
    code = "import os; print('cpus', sorted(os.sched_getaffinity(0)))"
    specs = [replace(s, argv=(sys.executable, "-c", code), cpu_request=binding.to_dict()) for s in plan.ranks]
    return replace(plan, ranks=tuple(specs))


def test_the_agent_binds_ranks_the_plan_left_to_their_host(tmp_path: Path, marker: str) -> None:
    needs_two_cpus()
    lines: List[str] = []
    events = []
    outcome = Agent(
        agent_plan(tmp_path, marker, 2, Binding("blocks")),
        events.append,
        lambda spec, stream, got: lines.extend(f"{spec.rank} {line}" for line in split_lines(got)),
    ).run()
    assert [r.exit_code for r in outcome.ranks] == [0, 0]
    half = len(HERE) // 2
    assert sorted(lines) == [f"0 cpus {HERE[:half]}", f"1 cpus {HERE[half:]}"]
    started = [e.data["cpus"] for e in events if e.kind is EventKind.RANK_STARTED]
    assert started == [HERE[:half], HERE[half:]]


def test_the_agent_refuses_every_rank_of_its_host_when_the_binding_cannot_be_applied(
    tmp_path: Path, marker: str
) -> None:
    events = []
    outcome = Agent(
        agent_plan(tmp_path, marker, len(HERE) + 1, Binding("blocks")), events.append, lambda *a: None
    ).run()
    assert {r.state.value for r in outcome.ranks} == {"spawn_failed"}
    errors = {e.data["error"] for e in events if e.kind is EventKind.RANK_SPAWN_FAILED}
    assert len(errors) == 1 and errors.pop().startswith(f"job.cpu_binding: {len(HERE) + 1} ranks on localhost")


def test_the_plan_binds_a_remote_host_from_what_its_probe_sent() -> None:
    """The probe sends the host's allowed CPUs and NUMA nodes (read_host_cpus(npus=False): no npu-smi):
    enough for the plan to decide, or refuse, blocks and a mapping; auto needs the NPUs' places, which
    that host's agent reads when the job starts."""
    from npulaunch.config.load import parse_config
    from npulaunch.config.yamlsource import parse_yaml
    from npulaunch.host.errors import ConfigError
    from npulaunch.host.topology import read_host_cpus
    from npulaunch.plan.build import build_plan
    from npulaunch.plan.launchplan import Discovery

    probed = read_host_cpus(npus=False, root=str(SERVER), allowed=range(192), environ={}).to_dict()
    remote = {"h2": {"npus": None, "device_ips": None, "visible": {}, "cpu_topology": probed}}
    discovery = Discovery(devices=lambda: [], device_ips=lambda ids: None, remote=remote)

    def plan(binding: str, devices: str = "[0, 4]"):
        text = f"job: {{command: [python3, t.py], cpu_binding: {binding}}}\nhosts: [{{host: h2, devices: {devices}}}]\n"
        return build_plan(parse_config(parse_yaml(text + "rank_table: none\n", "r.yaml"), "/srv"), "r", "u", discovery)

    assert [spec.cpus for spec in plan("blocks").ranks] == [tuple(range(96)), tuple(range(96, 192))]
    auto = plan("auto")
    assert [spec.cpus for spec in auto.ranks] == [None, None]
    assert [spec.cpu_request for spec in auto.ranks] == [{"mode": "auto", "mapping": {}}] * 2
    assert "cpu_binding auto: h2's CPUs are chosen on the host when the job starts" in auto.notes
    with pytest.raises(ConfigError, match="r.yaml:1: job.cpu_binding: found CPUs 200 of device 0, not allowed on h2"):
        plan('{"0": "200"}', "[0]")
    assert any("h2 has 8 NUMA nodes" in note for note in plan("none").notes)


def test_rank_mode_binds_the_rank_it_becomes(tmp_path: Path, marker: str) -> None:
    # npulaunch exec under mpirun: no agent between the scheduler and the rank, so the process binds
    # itself before it becomes the rank
    import subprocess

    from helpers import ROOT, base_env, mpirun_argv, npulaunch_argv

    needs_two_cpus()
    require(shutil.which("mpirun") is not None, "mpirun (openmpi-bin)")
    config = write_job(tmp_path, marker, "2", "blocks")
    done = subprocess.run(
        mpirun_argv(2) + npulaunch_argv("exec", str(config), "--job-id", "mpi-bind"),
        env=base_env({"NPLTEST_MARKER": marker}),
        cwd=str(ROOT),
        capture_output=True,
        text=True,
        timeout=90,
    )
    assert done.returncode == 0, done.stdout + done.stderr
    got = {}  # rank mode: the ranks' output is the scheduler's, and mpirun may join two ranks' lines in one
    decoder = json.JSONDecoder()
    for part in done.stdout.split("SHARD ")[1:]:
        report, _ = decoder.raw_decode(part)
        got[report["device_index"]] = report["cpus"]
    half = len(HERE) // 2
    assert got == {0: HERE[:half], 1: HERE[half : 2 * half]}
