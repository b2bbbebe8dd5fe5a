"""host/topology.py: the CPUs near each NPU, read from a stand-in of a real 8-NPU server (sysfs tree and
npu-smi captures in tests/data/topology), and the CPUs each rank gets for blocks / auto / a mapping."""

from __future__ import annotations

import shutil
from pathlib import Path
from typing import Sequence

import pytest
from helpers import TESTS

from npulaunch.host.discovery import parse_npu_smi_info
from npulaunch.host.topology import (
    Binding,
    BindingError,
    HostCpus,
    assign_cpus,
    decide_on_host,
    format_cpulist,
    parse_cpulist,
    parse_npu_topo,
    plan_cpus,
    read_host_cpus,
)

SERVER = TESTS / "data" / "topology" / "atlas800t-a2"
ALL_CPUS = tuple(range(192))


def server_tool(argv: Sequence[str]) -> str:
    """The server's npu-smi, from its captures."""
    name = {("npu-smi", "info"): "npu-smi-info.txt", ("npu-smi", "info", "-t", "topo"): "npu-smi-topo.txt"}
    return (SERVER / name[tuple(argv)]).read_text()


def server(root: Path = SERVER, allowed: Sequence[int] = ALL_CPUS) -> HostCpus:
    return read_host_cpus(root=str(root), runner=server_tool, allowed=allowed, environ={})


@pytest.mark.parametrize(
    "text, cpus",
    [("0-3,8,10-11", (0, 1, 2, 3, 8, 10, 11)), ("144-167\n", tuple(range(144, 168))), ("", ()), ("5", (5,))],
)
def test_cpu_lists_read_and_written_in_the_kernel_format(text: str, cpus: tuple) -> None:
    assert parse_cpulist(text) == cpus
    assert parse_cpulist(format_cpulist(cpus)) == cpus


@pytest.mark.parametrize("text", ["a-b", "3-1", "0-"])
def test_a_bad_cpu_list_is_refused(text: str) -> None:
    with pytest.raises(ValueError):
        parse_cpulist(text)


def test_npu_smi_topo_cpu_affinity_per_npu() -> None:
    affinity = parse_npu_topo((SERVER / "npu-smi-topo.txt").read_text())
    assert {npu: format_cpulist(cpus) for npu, cpus in affinity.items()} == {
        0: "144-167",
        1: "144-167",
        2: "96-119",
        3: "96-119",
        4: "0-23",
        5: "0-23",
        6: "48-71",
        7: "48-71",
    }
    assert parse_npu_topo("This device does not support querying topo.\n") == {}


def test_each_npu_s_node_from_its_bus_id_in_sysfs_agrees_with_npu_smi_s_cpu_affinity() -> None:
    chips = parse_npu_smi_info((SERVER / "npu-smi-info.txt").read_text())
    assert [c.bus_id for c in chips][:2] == ["0000:C1:00.0", "0000:C2:00.0"]  # upper case; sysfs is lower
    facts = server()
    assert facts.numa_nodes == 8 and facts.how == "sysfs numa_node of each NPU's PCIe bus id"
    assert facts.node_of == {0: 6, 1: 6, 2: 4, 3: 4, 4: 0, 5: 0, 6: 2, 7: 2}
    assert facts.near == parse_npu_topo((SERVER / "npu-smi-topo.txt").read_text())
    assert HostCpus.from_dict(facts.to_dict()) == facts  # what the probe sends


def test_without_numa_node_in_sysfs_the_topo_cpu_affinity_is_used(tmp_path: Path) -> None:
    shutil.copytree(SERVER / "sys" / "devices", tmp_path / "sys" / "devices")  # nodes, but no PCI devices
    facts = server(tmp_path)
    assert facts.how == "npu-smi info -t topo (CPU Affinity)"
    assert format_cpulist(facts.near[0]) == "144-167" and facts.node_of[0] == -1


def test_no_npu_smi_no_places_and_says_why(tmp_path: Path) -> None:
    facts = read_host_cpus(root=str(SERVER), allowed=ALL_CPUS, environ={"PATH": str(tmp_path)})
    assert facts.near == {} and facts.numa_nodes == 8
    assert "npu-smi is not on PATH" in facts.problems[0]


def test_blocks_split_the_allowed_cpus_evenly_in_device_order() -> None:
    facts = HostCpus(allowed=tuple(range(10)))
    cpus, notes = assign_cpus(Binding("blocks"), [3, 1, 2, 0], facts, "h")
    assert cpus == [(7, 8, 9), (2, 3, 4), (5, 6), (0, 1)] and notes == []  # device 0 first, ..., device 3 last
    assert sorted(c for block in cpus for c in block) == list(range(10))  # disjoint, covering every CPU


def test_auto_gives_each_rank_cpus_of_its_npu_s_node_split_among_the_job_s_npus_there() -> None:
    cpus, notes = assign_cpus(Binding("auto"), list(range(8)), server(), "h")
    assert [format_cpulist(c) for c in cpus] == [
        "144-155",
        "156-167",
        "96-107",
        "108-119",
        "0-11",
        "12-23",
        "48-59",
        "60-71",
    ]
    alone, _ = assign_cpus(Binding("auto"), [0, 2], server(), "h")  # one job NPU per node: the whole node
    assert [format_cpulist(c) for c in alone] == ["144-167", "96-119"]


def test_auto_keeps_to_the_allowed_cpus_and_shares_a_node_with_too_few() -> None:
    facts = server(allowed=(0, 48, 49, 50))  # a cpuset with one CPU of node 0 and three of node 2
    cpus, notes = assign_cpus(Binding("auto"), [4, 5, 6, 7], facts, "h")
    assert cpus == [(0,), (0,), (48,), (49, 50)]
    assert notes == [
        "cpu_binding auto on h: devices 4, 5 share CPUs 0 (their node has fewer allowed CPUs than devices)"
    ]


def test_auto_falls_back_to_blocks_when_the_places_are_unknown(tmp_path: Path) -> None:
    facts = HostCpus(allowed=(0, 1), problems=("npu-smi is not on PATH: the NPUs' places are unknown",))
    cpus, notes = assign_cpus(Binding("auto"), [0, 1], facts, "h")
    assert cpus == [(0,), (1,)]
    assert "not known (npu-smi is not on PATH" in notes[0] and "split in blocks instead" in notes[0]


def test_a_mapping_is_applied_as_written_within_the_allowed_cpus() -> None:
    facts = HostCpus(allowed=tuple(range(8)))
    binding = Binding("mapping", {0: (4, 5), 1: (0, 1, 2)})
    assert assign_cpus(binding, [1, 0], facts, "h")[0] == [(0, 1, 2), (4, 5)]
    with pytest.raises(BindingError) as outside:
        assign_cpus(Binding("mapping", {0: (7, 8, 9)}), [0], facts, "h")
    assert outside.value.found == "CPUs 8-9 of device 0, not allowed on h"
    assert outside.value.allowed == "CPUs among 0-7 (the CPUs npulaunch may use there)"
    with pytest.raises(BindingError, match="no CPUs for device 1 of h"):
        assign_cpus(Binding("mapping", {0: (1,)}), [0, 1], facts, "h")


def test_more_ranks_than_cpus_is_refused() -> None:
    with pytest.raises(BindingError) as refused:
        assign_cpus(Binding("blocks"), [0, 1, 2], HostCpus(allowed=(0, 1)), "h1")
    assert refused.value.found == "3 ranks on h1, which allows 2 CPU(s): 0-1"
    with pytest.raises(BindingError):
        assign_cpus(Binding("auto"), [0, 1, 2], HostCpus(allowed=(0, 1)), "h1")


def test_the_plan_suggests_auto_on_a_numa_host_and_defers_an_unknown_host() -> None:
    cpus, notes = plan_cpus(Binding("none"), "h", [0, 1], server())
    assert cpus == [(), ()] and "h has 8 NUMA nodes" in notes[0] and "cpu_binding: auto" in notes[0]
    assert plan_cpus(Binding("none"), "h", [0], HostCpus(allowed=(0, 1), nodes={0: (0, 1)})) == ([()], [])
    deferred, said = plan_cpus(Binding("blocks"), "h2", [0, 1], None)
    assert deferred is None and said == ["cpu_binding blocks: h2's CPUs are chosen on the host when the job starts"]
    bound, said = plan_cpus(Binding("auto"), "h", [0], server())
    assert said == ["cpu_binding auto on h: the CPUs near each NPU from sysfs numa_node of each NPU's PCIe bus id"]


def test_the_agent_decides_with_the_same_rules_on_its_host() -> None:
    request = Binding("blocks").to_dict()
    decided = decide_on_host([(4, 0, request), (5, 1, request)], "h2", HostCpus(allowed=(0, 1, 2, 3)))
    assert decided == {4: (0, 1), 5: (2, 3)}
    mapping = Binding("mapping", {0: (3,), 1: (2,)})
    assert Binding.from_dict(mapping.to_dict()) == mapping
