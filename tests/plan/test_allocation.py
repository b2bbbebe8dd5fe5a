"""The config as a scheduler allocated it (pure), and the nodes' device-IP exchange."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any, Dict

import pytest
from helpers import run_cli

from npulaunch.config.cluster import ClusterConfig
from npulaunch.config.load import parse_config
from npulaunch.config.yamlsource import parse_yaml
from npulaunch.host.errors import ConfigError, SchedulerError
from npulaunch.plan.layout import JobLayout
from npulaunch.plan.schedulers.allocation import exchange_needed, rank_mode_view, scheduler_config
from npulaunch.plan.schedulers.detect import detect
from npulaunch.plan.schedulers.rendezvous import RendezvousError, exchange

SLURM = {
    "SLURM_JOB_ID": "9",
    "SLURM_JOB_NODELIST": "n[1-3]",
    "SLURM_NNODES": "3",
    "SLURM_NODEID": "1",
    "SLURM_TASKS_PER_NODE": "1(x3)",
    "SLURM_PROCID": "1",
    "SLURM_LOCALID": "0",
    "SLURM_NTASKS": "3",
    "SLURM_STEP_ID": "0",
}


def config(hosts: str) -> ClusterConfig:
    return parse_config(parse_yaml(f"job:\n  command: [python3, t.py]\nhosts:\n{hosts}", "c.yaml"), base_dir="/srv")


def no_npu_smi() -> list:
    raise AssertionError("npu-smi is not asked when devices are listed")


def test_a_single_entry_is_every_nodes_template() -> None:
    got, node = scheduler_config(
        config("  - {host: x, devices: 2, device_ips: [1.1.1.1, 1.1.1.2]}\n"), detect(SLURM), no_npu_smi
    )
    assert node == 1 and [(h.host, h.devices, h.device_ips) for h in got.hosts] == [
        ("n1", (0, 1), None),
        ("n2", (0, 1), None),
        ("n3", (0, 1), None),
    ]  # IPs belong to one machine only
    assert got.sources["hosts"].startswith("scheduler (SLURM")
    assert exchange_needed(got, node)


def test_entries_named_like_the_nodes_give_their_devices_and_ips() -> None:
    entries = "".join(f"  - {{host: n{i}, devices: [0], device_ips: [10.0.0.{i}]}}\n" for i in (3, 1, 2))
    got, _ = scheduler_config(config(entries), detect(SLURM), no_npu_smi)
    assert [(h.host, h.device_ips) for h in got.hosts] == [
        ("n1", ("10.0.0.1",)),
        ("n2", ("10.0.0.2",)),
        ("n3", ("10.0.0.3",)),
    ]
    assert not exchange_needed(got, 1)


def test_devices_all_is_this_nodes_npus_on_every_node() -> None:
    got, _ = scheduler_config(config("  - {host: x}\n"), detect(SLURM), lambda: [0, 1, 2, 3])
    assert {h.devices for h in got.hosts} == {(0, 1, 2, 3)}


@pytest.mark.parametrize(
    "hosts, error, phrase",
    [
        ("  - {host: a, devices: 1}\n  - {host: b, devices: 1}\n", ConfigError, "no entry for node n1"),
    ],
)
def test_entries_that_match_no_node_are_refused(hosts: str, error: type, phrase: str) -> None:
    with pytest.raises(error) as err:
        scheduler_config(config(hosts), detect(SLURM), no_npu_smi)
    assert phrase in str(err.value)


def test_mpi_without_a_node_list_takes_the_yaml_hosts_in_order() -> None:
    view = detect(
        {
            "OMPI_COMM_WORLD_RANK": "1",
            "OMPI_COMM_WORLD_SIZE": "2",
            "OMPI_COMM_WORLD_LOCAL_RANK": "0",
            "OMPI_COMM_WORLD_LOCAL_SIZE": "1",
        }
    )
    got, node = scheduler_config(config("  - {host: a, devices: 1}\n  - {host: b, devices: 1}\n"), view, no_npu_smi)
    assert node == 1 and [h.host for h in got.hosts] == ["a", "b"]
    with pytest.raises(SchedulerError, match="runs 2 nodes .* the YAML lists 3 hosts"):
        scheduler_config(config("  - {host: a}\n  - {host: b}\n  - {host: c}\n"), view, no_npu_smi)


def test_rank_mode_gives_each_node_one_device_per_task() -> None:
    env = dict(
        SLURM,
        SLURM_TASKS_PER_NODE="2,1",
        SLURM_NNODES="2",
        SLURM_JOB_NODELIST="n[1-2]",
        SLURM_NODEID="0",
        SLURM_NTASKS="3",
        SLURM_PROCID="1",
        SLURM_LOCALID="1",
    )
    view = rank_mode_view(detect(env))
    got, node = scheduler_config(config("  - {host: x, devices: [4, 5, 6]}\n"), view, no_npu_smi, rank_mode=True)
    assert node == 0 and [h.devices for h in got.hosts] == [(4, 5), (4,)]
    with pytest.raises(ConfigError, match="at least 2, one per task"):
        scheduler_config(config("  - {host: x, devices: [4]}\n"), view, no_npu_smi, rank_mode=True)


def test_mpi_rank_mode_places_ranks_by_slot() -> None:
    view = rank_mode_view(
        detect(
            {
                "OMPI_COMM_WORLD_RANK": "5",
                "OMPI_COMM_WORLD_SIZE": "8",
                "OMPI_COMM_WORLD_LOCAL_RANK": "1",
                "OMPI_COMM_WORLD_LOCAL_SIZE": "4",
            }
        )
    )
    assert (view.node_index, view.node_count) == (1, 2)


class FakeClock:
    def __init__(self) -> None:
        self.now = 0.0

    def __call__(self) -> float:
        return self.now

    def sleep(self, seconds: float) -> None:
        self.now += seconds


def test_exchange_returns_every_nodes_record_in_order(tmp_path: Path) -> None:
    layout = JobLayout(str(tmp_path))
    (tmp_path / "rendezvous").mkdir()
    for node in (0, 2):
        Path(layout.rendezvous_record(node)).write_text(json.dumps({"host": f"n{node}", "epoch": "e1"}))
    clock = FakeClock()
    got = exchange(layout, 1, 3, {"host": "n1"}, 10, "e1", clock, clock.sleep)
    assert [r["host"] for r in got] == ["n0", "n1", "n2"] and clock.now == 0


def test_exchange_ignores_an_earlier_run_and_times_out_naming_the_missing_nodes(tmp_path: Path) -> None:
    records = tmp_path / "rendezvous"
    records.mkdir()
    (records / "node-0.json").write_text(json.dumps({"host": "n0", "epoch": "old"}))
    clock = FakeClock()
    with pytest.raises(RendezvousError) as err:
        exchange(JobLayout(str(tmp_path)), 1, 3, {"host": "n1"}, 5, "new", clock, clock.sleep)
    assert "nodes 0, 2 did not publish" in str(err.value) and "shares" in str(err.value)
    assert 5 <= clock.now < 5.5
    record: Dict[str, Any] = json.loads((records / "node-1.json").read_text())
    assert record == {"host": "n1", "epoch": "new"} and not list(records.glob("*.tmp"))


def test_plan_shows_which_scheduler_variables_each_value_came_from(tmp_path: Path) -> None:
    config = tmp_path / "job.yaml"
    config.write_text("job:\n  command: [python3, t.py]\nhosts:\n  - {host: x, devices: 2}\nrank_table: none\n")
    result = run_cli("plan", str(config), "--json", env=SLURM)
    assert result.returncode == 0, result.stderr
    plan = json.loads(result.stdout)
    assert plan["world_size"] == 6 and plan["hosts"] == ["n1", "n2", "n3"]
    assert plan["sources"]["hosts"] == "scheduler (SLURM_JOB_NODELIST=n[1-3])"
    assert plan["sources"]["node"] == "SLURM_NODEID=1" and plan["sources"]["job_id"] == "scheduler (SLURM_JOB_ID=9)"
    assert plan["sources"]["scheduler"] == "slurm (SLURM_JOB_ID=9)"
    table = run_cli("plan", str(config), env=SLURM).stdout
    assert "node from SLURM_NODEID=1" in table


def test_every_variable_that_detection_reacts_to_is_a_marker() -> None:
    """prepare.load imports the scheduler module only when a marker is set: any variable that
    alone makes detect() find a scheduler (or complain) must be one of them."""
    import re

    import npulaunch.plan.schedulers as schedulers
    from npulaunch.plan.prepare import SCHEDULER_MARKERS

    folder = Path(schedulers.__file__).parent
    readers = [folder / f"{name}.py" for name in ("view", "detect", "slurm", "mpi", "volcano", "k8s")]
    names = {name for path in readers for name in re.findall(r'"([A-Z][A-Z0-9_]{3,})"', path.read_text())}
    assert len(names) > 20
    reacting = set()
    for name in names:
        for value in ("1", "0", "n1", "x-1"):
            try:
                found = detect({name: value}, "host-0").kind.value != "none"
            except SchedulerError:
                found = True
            if found:
                reacting.add(name)
    assert reacting and reacting <= set(SCHEDULER_MARKERS), reacting - set(SCHEDULER_MARKERS)
