"""Reading schedulers' environments: Slurm's hostlist and tasks-per-node texts, which scheduler runs
this process and what it says (mpirun inside Slurm included), and waiting for the HCCL rank table
MindX mounts, with a fake clock."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any, Dict, List, Optional, Sequence, Union

import pytest

from npulaunch.host.errors import NpulaunchError, SchedulerError
from npulaunch.plan.schedulers.detect import detect
from npulaunch.plan.schedulers.slurm import expand_hostlist, parse_tasks_per_node
from npulaunch.plan.schedulers.view import SchedulerKind, SchedulerView
from npulaunch.plan.schedulers.volcano import POLL_INTERVAL_S, wait_for_rank_table

SLURM, MPI, VOLCANO, K8S, NONE = (
    SchedulerKind.SLURM,
    SchedulerKind.MPI,
    SchedulerKind.VOLCANO,
    SchedulerKind.K8S,
    SchedulerKind.NONE,
)
FIELDS = (
    "hosts",
    "node_index",
    "node_count",
    "rank",
    "world_size",
    "local_rank",
    "local_size",
    "tasks_per_node",
    "job_id",
)
HOSTLIST_ALLOWED = (
    "allowed: comma-separated host names, with ranges in brackets: node01, node[01-04,07], rack[1-2]-n[1-3]"
)


def view(kind: SchedulerKind, sources: Dict[str, str], **fields: Any) -> SchedulerView:
    values: Dict[str, Any] = {name: None for name in FIELDS}
    values.update(fields)
    return SchedulerView(kind, sources=sources, **values)


def test_scheduler_error_is_a_usage_level_npulaunch_error() -> None:
    assert issubclass(SchedulerError, NpulaunchError) and SchedulerError.exit_code == 2


# --- Slurm's hostlist


@pytest.mark.parametrize(
    "text, hosts",
    [
        ("node01", ["node01"]),
        ("node[01-04,07]", ["node01", "node02", "node03", "node04", "node07"]),
        ("n[8-11]", ["n8", "n9", "n10", "n11"]),
        ("n[098-101]", ["n098", "n099", "n100", "n101"]),
        ("n[7]", ["n7"]),
        ("n[1,3-4,10]", ["n1", "n3", "n4", "n10"]),
        (
            "rack[1-2]-node[1-3]",
            ["rack1-node1", "rack1-node2", "rack1-node3", "rack2-node1", "rack2-node2", "rack2-node3"],
        ),
        ("gpu2n[1-3]", ["gpu2n1", "gpu2n2", "gpu2n3"]),
        ("a[1-2],b3,c[05-06]", ["a1", "a2", "b3", "c05", "c06"]),
        ("n[1-2]-ib", ["n1-ib", "n2-ib"]),
        ("cn[09-10].cluster_a", ["cn09.cluster_a", "cn10.cluster_a"]),
        ("  node[1-2]\n", ["node1", "node2"]),
    ],
    ids=[
        "single",
        "padded-ranges",
        "width-from-start",
        "padded-width-grows",
        "one-number",
        "mixed-group",
        "two-groups-product",
        "digits-in-prefix",
        "top-level-commas",
        "suffix",
        "dots-underscores",
        "outer-space",
    ],
)
def test_expand_hostlist(text: str, hosts: List[str]) -> None:
    assert expand_hostlist(text) == hosts


@pytest.mark.parametrize(
    "text, found",
    [
        ("node[1-3", "'node[1-3' ('[' without ']')"),
        ("node1-3]", "'node1-3]' (']' without '[' at position 7)"),
        ("n[[1]]", "'n[[1]]' ('[' inside brackets at position 2)"),
        ("n[5-3]", "'n[5-3]' ([5-3]: the range 5-3 runs backwards)"),
        ("a,,b", "'a,,b' (an empty name)"),
        (",a", "',a' (an empty name)"),
        ("", "'' (an empty name)"),
        ("n[1,,2]", "'n[1,,2]' ([1,,2]: '' is not a number or a range such as 01-04)"),
        ("n[]", "'n[]' ([]: '' is not a number or a range such as 01-04)"),
        ("n[a-b]", "'n[a-b]' ([a-b]: 'a-b' is not a number or a range such as 01-04)"),
        ("n[1-9:2]", "'n[1-9:2]' ([1-9:2]: '1-9:2' is not a number or a range such as 01-04)"),
        ("node 1", "'node 1' (' ' in 'node 1': host names hold letters, digits, '.', '-' and '_')"),
        ("n[1-99999999]", "'n[1-99999999]' (more than 65536 hosts)"),
        ("r[1-300]n[1-300]", "'r[1-300]n[1-300]' (more than 65536 hosts)"),
    ],
    ids=[
        "unclosed",
        "unopened",
        "nested",
        "reversed",
        "empty-item",
        "leading-comma",
        "empty-text",
        "empty-in-group",
        "empty-group",
        "letters-in-group",
        "step-syntax",
        "space-in-name",
        "huge-range",
        "huge-product",
    ],
)
def test_expand_hostlist_rejects(text: str, found: str) -> None:
    with pytest.raises(SchedulerError) as error:
        expand_hostlist(text)
    assert str(error.value) == f"hostlist: found {found}; {HOSTLIST_ALLOWED}"


# --- SLURM_TASKS_PER_NODE


@pytest.mark.parametrize(
    "text, counts",
    [
        ("4(x2),2", [4, 4, 2]),
        ("8", [8]),
        ("2(x3)", [2, 2, 2]),
        ("1(x2),3(x1),2", [1, 1, 3, 2]),
        (" 16 ", [16]),
    ],
    ids=["repeat-then-single", "single", "repeat-only", "several-repeats", "outer-space"],
)
def test_parse_tasks_per_node(text: str, counts: List[int]) -> None:
    assert parse_tasks_per_node(text) == counts


@pytest.mark.parametrize(
    "text, at",
    [
        ("", "''"),
        ("4(x0)", "'4(x0)'"),
        ("0", "'0'"),
        ("4(x)", "'4(x)'"),
        ("4x2", "'4x2'"),
        ("4,,2", "''"),
        ("-1", "'-1'"),
        ("4(x2)2", "'4(x2)2'"),
    ],
    ids=[
        "empty",
        "zero-repeat",
        "zero-tasks",
        "no-repeat-count",
        "no-parentheses",
        "empty-item",
        "negative",
        "no-comma",
    ],
)
def test_parse_tasks_per_node_rejects(text: str, at: str) -> None:
    with pytest.raises(SchedulerError) as error:
        parse_tasks_per_node(text)
    assert str(error.value) == (
        f"tasks per node: found {text!r} (at {at}); allowed: comma-separated task counts "
        ">= 1, each optionally repeated: 8, 4(x2),2"
    )


# --- detection

SRUN = {  # srun -N3 -n10 inside a 3-node allocation: the task with rank 9, on the third node
    "SLURM_JOB_ID": "4242",
    "SLURM_JOBID": "4242",
    "SLURM_JOB_NODELIST": "node[01-03]",
    "SLURM_NODELIST": "node[01-03]",
    "SLURM_STEP_NODELIST": "node[01-03]",
    "SLURM_NNODES": "3",
    "SLURM_NODEID": "2",
    "SLURM_TASKS_PER_NODE": "4(x2),2",
    "SLURM_PROCID": "9",
    "SLURM_LOCALID": "1",
    "SLURM_NTASKS": "10",
    "SLURM_STEP_ID": "0",
}
SRUN_VIEW = view(
    SLURM,
    {
        "kind": "SLURM_JOB_ID=4242",
        "job_id": "SLURM_JOB_ID=4242",
        "hosts": "SLURM_STEP_NODELIST=node[01-03]",
        "node_index": "SLURM_NODEID=2",
        "node_count": "SLURM_NNODES=3",
        "tasks_per_node": "SLURM_TASKS_PER_NODE=4(x2),2",
        "local_size": "SLURM_TASKS_PER_NODE=4(x2),2 (node 2)",
        "rank": "SLURM_PROCID=9",
        "local_rank": "SLURM_LOCALID=1",
        "world_size": "SLURM_NTASKS=10",
    },
    hosts=("node01", "node02", "node03"),
    node_index=2,
    node_count=3,
    rank=9,
    world_size=10,
    local_rank=1,
    local_size=2,
    tasks_per_node=(4, 4, 2),
    job_id="4242",
)
BATCH = {  # the batch script of sbatch -N2: no task variables
    "SLURM_JOB_ID": "77",
    "SLURM_JOB_NODELIST": "n[1-2]",
    "SLURM_NODELIST": "n[1-2]",
    "SLURM_NNODES": "2",
    "SLURM_NODEID": "0",
    "SLURM_TASKS_PER_NODE": "1(x2)",
}
# What a rank started by `mpirun --map-by ppr:1:node` on the second node of that job sees: Slurm's
# variables of mpirun's daemon step (one daemon, on n2 only) and Open MPI's own.
MPIRUN_IN_SLURM = {
    "SLURM_JOB_ID": "77",
    "SLURM_JOB_NODELIST": "n[1-2]",
    "SLURM_NODELIST": "n2",
    "SLURM_STEP_NODELIST": "n2",
    "SLURM_NNODES": "1",
    "SLURM_NODEID": "0",
    "SLURM_TASKS_PER_NODE": "1",
    "SLURM_PROCID": "0",
    "SLURM_NTASKS": "1",
    "OMPI_COMM_WORLD_RANK": "1",
    "OMPI_COMM_WORLD_SIZE": "2",
    "OMPI_COMM_WORLD_LOCAL_RANK": "0",
    "OMPI_COMM_WORLD_LOCAL_SIZE": "1",
    "PMIX_NAMESPACE": "prterun-n1-1234@1",
}
OMPI_RANKS = {
    "OMPI_COMM_WORLD_RANK": "5",
    "OMPI_COMM_WORLD_SIZE": "16",
    "OMPI_COMM_WORLD_LOCAL_RANK": "5",
    "OMPI_COMM_WORLD_LOCAL_SIZE": "8",
}
MPIRUN_KIND = (
    "OMPI_COMM_WORLD_RANK inside Slurm job 77: mpirun started this process, so rank, world_size, "
    "local_rank and local_size are MPI's"
)
OMPI_SOURCES = {
    "rank": "OMPI_COMM_WORLD_RANK=5",
    "world_size": "OMPI_COMM_WORLD_SIZE=16",
    "local_rank": "OMPI_COMM_WORLD_LOCAL_RANK=5",
    "local_size": "OMPI_COMM_WORLD_LOCAL_SIZE=8",
}
PMI_SOURCES = {"rank": "PMI_RANK=3", "world_size": "PMI_SIZE=4"}
KUBE = {"KUBERNETES_SERVICE_HOST": "10.96.0.1"}
VC_TWO_TASKS = {
    "VC_TASK_INDEX": "1",
    "VC_MASTER_HOSTS": "pt-master-0.pt",
    "VC_MASTER_NUM": "1",
    "VC_WORKER_HOSTS": "pt-worker-0.pt,pt-worker-1.pt,pt-worker-2.pt",
    "VC_WORKER_NUM": "3",
}
VC_WORKER_VIEW = view(
    VOLCANO,
    {
        "kind": "VC_TASK_INDEX=1",
        "node_index": "VC_TASK_INDEX=1",
        "hosts": "VC_WORKER_HOSTS=pt-worker-0.pt,pt-worker-1.pt,pt-worker-2.pt",
        "node_count": "VC_WORKER_NUM=3",
        "job_id": "VC_JOB_NAME=pt",
    },
    hosts=("pt-worker-0.pt", "pt-worker-1.pt", "pt-worker-2.pt"),
    node_index=1,
    node_count=3,
    job_id="pt",
)


@pytest.mark.parametrize(
    "env, hostname, forced, expected",
    [
        pytest.param(SRUN, "node03", None, SRUN_VIEW, id="slurm-srun"),
        pytest.param(
            BATCH,
            "n1",
            None,
            view(
                SLURM,
                {
                    "kind": "SLURM_JOB_ID=77",
                    "job_id": "SLURM_JOB_ID=77",
                    "hosts": "SLURM_JOB_NODELIST=n[1-2]",
                    "node_index": "SLURM_NODEID=0",
                    "node_count": "SLURM_NNODES=2",
                    "tasks_per_node": "SLURM_TASKS_PER_NODE=1(x2)",
                    "local_size": "SLURM_TASKS_PER_NODE=1(x2) (node 0)",
                },
                hosts=("n1", "n2"),
                node_index=0,
                node_count=2,
                local_size=1,
                tasks_per_node=(1, 1),
                job_id="77",
            ),
            id="slurm-batch-script",
        ),
        pytest.param(
            {"SLURM_JOBID": "17", "SLURM_NODELIST": "gpu2n[1-2]", "SLURM_NODEID": "1"},
            "",
            None,
            view(
                SLURM,
                {
                    "kind": "SLURM_JOBID=17",
                    "job_id": "SLURM_JOBID=17",
                    "hosts": "SLURM_NODELIST=gpu2n[1-2]",
                    "node_index": "SLURM_NODEID=1",
                    "node_count": "SLURM_NODELIST=gpu2n[1-2] (2 hosts)",
                },
                hosts=("gpu2n1", "gpu2n2"),
                node_index=1,
                node_count=2,
                job_id="17",
            ),
            id="slurm-old-names-count-from-list",
        ),
        pytest.param(
            {
                **SRUN,
                "SLURM_JOB_NODELIST": "node[01-04]",
                "SLURM_STEP_NODELIST": "node[03-04]",
                "SLURM_NODELIST": "node[03-04]",
                "SLURM_NNODES": "2",
                "SLURM_NODEID": "1",
                "SLURM_TASKS_PER_NODE": "1(x2)",
                "SLURM_PROCID": "1",
                "SLURM_LOCALID": "0",
                "SLURM_NTASKS": "2",
            },
            "node04",
            None,
            view(
                SLURM,
                {
                    "kind": "SLURM_JOB_ID=4242",
                    "job_id": "SLURM_JOB_ID=4242",
                    "hosts": "SLURM_STEP_NODELIST=node[03-04]",
                    "node_index": "SLURM_NODEID=1",
                    "node_count": "SLURM_NNODES=2",
                    "tasks_per_node": "SLURM_TASKS_PER_NODE=1(x2)",
                    "local_size": "SLURM_TASKS_PER_NODE=1(x2) (node 1)",
                    "rank": "SLURM_PROCID=1",
                    "local_rank": "SLURM_LOCALID=0",
                    "world_size": "SLURM_NTASKS=2",
                },
                hosts=("node03", "node04"),
                node_index=1,
                node_count=2,
                rank=1,
                world_size=2,
                local_rank=0,
                local_size=1,
                tasks_per_node=(1, 1),
                job_id="4242",
            ),
            id="slurm-step-on-part-of-the-job",
        ),
        pytest.param(
            {**SRUN, "PMI_RANK": "9", "PMI_SIZE": "10", "PMI_FD": "5"},
            "node03",
            None,
            SRUN_VIEW,
            id="srun-mpi-pmi2-stays-slurm",
        ),
        pytest.param(
            MPIRUN_IN_SLURM,
            "n2",
            None,
            view(
                MPI,
                {
                    "kind": MPIRUN_KIND,
                    "rank": "OMPI_COMM_WORLD_RANK=1",
                    "world_size": "OMPI_COMM_WORLD_SIZE=2",
                    "local_rank": "OMPI_COMM_WORLD_LOCAL_RANK=0",
                    "local_size": "OMPI_COMM_WORLD_LOCAL_SIZE=1",
                    "node_index": "OMPI_COMM_WORLD_RANK=1 (one process per node)",
                    "node_count": "OMPI_COMM_WORLD_SIZE=2 (one process per node)",
                    "job_id": "SLURM_JOB_ID=77",
                    "hosts": "SLURM_JOB_NODELIST=n[1-2]",
                },
                hosts=("n1", "n2"),
                node_index=1,
                node_count=2,
                rank=1,
                world_size=2,
                local_rank=0,
                local_size=1,
                job_id="77",
            ),
            id="mpirun-in-slurm-node-mode",
        ),
        pytest.param(
            {**MPIRUN_IN_SLURM, **OMPI_RANKS},
            "n1",
            None,
            view(
                MPI,
                {
                    "kind": MPIRUN_KIND,
                    **OMPI_SOURCES,
                    "job_id": "SLURM_JOB_ID=77",
                    "hosts": "SLURM_JOB_NODELIST=n[1-2]",
                    "node_count": "SLURM_JOB_NODELIST=n[1-2] (2 hosts)",
                },
                hosts=("n1", "n2"),
                node_count=2,
                rank=5,
                world_size=16,
                local_rank=5,
                local_size=8,
                job_id="77",
            ),
            id="mpirun-in-slurm-rank-mode",
        ),
        pytest.param(
            {**BATCH, "PMI_RANK": "3", "PMI_SIZE": "4", "MPI_LOCALRANKID": "1", "MPI_LOCALNRANKS": "2"},
            "n2",
            None,
            view(
                MPI,
                {
                    "kind": "PMI_RANK inside Slurm job 77: mpirun started this process, so rank, world_size, "
                    "local_rank and local_size are MPI's",
                    **PMI_SOURCES,
                    "local_rank": "MPI_LOCALRANKID=1",
                    "local_size": "MPI_LOCALNRANKS=2",
                    "job_id": "SLURM_JOB_ID=77",
                    "hosts": "SLURM_JOB_NODELIST=n[1-2]",
                    "node_count": "SLURM_JOB_NODELIST=n[1-2] (2 hosts)",
                },
                hosts=("n1", "n2"),
                node_count=2,
                rank=3,
                world_size=4,
                local_rank=1,
                local_size=2,
                job_id="77",
            ),
            id="intel-mpirun-in-slurm",
        ),
        pytest.param(
            {
                "OMPI_COMM_WORLD_RANK": "2",
                "OMPI_COMM_WORLD_SIZE": "4",
                "OMPI_COMM_WORLD_LOCAL_RANK": "0",
                "OMPI_COMM_WORLD_LOCAL_SIZE": "1",
                "PMIX_NAMESPACE": "prterun-host-99@1",
            },
            "h3",
            None,
            view(
                MPI,
                {
                    "kind": "OMPI_COMM_WORLD_RANK=2",
                    "rank": "OMPI_COMM_WORLD_RANK=2",
                    "world_size": "OMPI_COMM_WORLD_SIZE=4",
                    "local_rank": "OMPI_COMM_WORLD_LOCAL_RANK=0",
                    "local_size": "OMPI_COMM_WORLD_LOCAL_SIZE=1",
                    "node_index": "OMPI_COMM_WORLD_RANK=2 (one process per node)",
                    "node_count": "OMPI_COMM_WORLD_SIZE=4 (one process per node)",
                    "job_id": "PMIX_NAMESPACE=prterun-host-99@1",
                },
                node_index=2,
                node_count=4,
                rank=2,
                world_size=4,
                local_rank=0,
                local_size=1,
                job_id="prterun-host-99@1",
            ),
            id="open-mpi-node-mode",
        ),
        pytest.param(
            OMPI_RANKS,
            "h1",
            None,
            view(
                MPI,
                {"kind": "OMPI_COMM_WORLD_RANK=5", **OMPI_SOURCES},
                rank=5,
                world_size=16,
                local_rank=5,
                local_size=8,
            ),
            id="open-mpi-rank-mode",
        ),
        pytest.param(
            {"PMI_RANK": "3", "PMI_SIZE": "4", "MPI_LOCALRANKID": "1", "MPI_LOCALNRANKS": "2"},
            "h2",
            None,
            view(
                MPI,
                {
                    "kind": "PMI_RANK=3",
                    **PMI_SOURCES,
                    "local_rank": "MPI_LOCALRANKID=1",
                    "local_size": "MPI_LOCALNRANKS=2",
                },
                rank=3,
                world_size=4,
                local_rank=1,
                local_size=2,
            ),
            id="intel-mpi-rank-mode",
        ),
        pytest.param(
            {"PMI_RANK": "3", "PMI_SIZE": "4", "SLURM_JOB_ID": " "},
            "h4",
            None,
            view(
                MPI,
                {
                    "kind": "PMI_RANK=3",
                    **PMI_SOURCES,
                    "node_index": "PMI_RANK=3 (one process per node)",
                    "node_count": "PMI_SIZE=4 (one process per node)",
                },
                node_index=3,
                node_count=4,
                rank=3,
                world_size=4,
            ),
            id="mpich-no-local-size-and-empty-slurm-var",
        ),
        pytest.param(
            {"VC_TASK_INDEX": "1", "VC_WORKER_HOSTS": "pt-worker-0.pt,pt-worker-1.pt", "VC_WORKER_NUM": "2", **KUBE},
            "pt-worker-1",
            None,
            view(
                VOLCANO,
                {
                    "kind": "VC_TASK_INDEX=1",
                    "node_index": "VC_TASK_INDEX=1",
                    "hosts": "VC_WORKER_HOSTS=pt-worker-0.pt,pt-worker-1.pt",
                    "node_count": "VC_WORKER_NUM=2",
                },
                hosts=("pt-worker-0.pt", "pt-worker-1.pt"),
                node_index=1,
                node_count=2,
            ),
            id="volcano-one-task",
        ),
        pytest.param(
            {**VC_TWO_TASKS, "VC_JOB_NAME": "pt"},
            "pt-worker-1",
            None,
            VC_WORKER_VIEW,
            id="volcano-two-tasks-by-first-label",
        ),
        pytest.param(
            {**VC_TWO_TASKS, "VC_JOB_NAME": "pt"},
            "PT-WORKER-1.pt",
            None,
            VC_WORKER_VIEW,
            id="volcano-two-tasks-by-full-name",
        ),
        pytest.param(
            {"VC_TASK_INDEX": "0"},
            "pt-worker-0",
            None,
            view(VOLCANO, {"kind": "VC_TASK_INDEX=0", "node_index": "VC_TASK_INDEX=0"}, node_index=0),
            id="volcano-without-svc-plugin",
        ),
        pytest.param(
            {**KUBE, "NPULAUNCH_NNODES": "4"},
            "train-3.train-svc.default.svc",
            None,
            view(
                K8S,
                {
                    "kind": "KUBERNETES_SERVICE_HOST=10.96.0.1",
                    "node_index": "hostname train-3.train-svc.default.svc",
                    "node_count": "NPULAUNCH_NNODES=4",
                    "hosts": "pods train-<0..3>.train-svc.default.svc (NPULAUNCH_NNODES=4)",
                },
                hosts=(
                    "train-0.train-svc.default.svc",
                    "train-1.train-svc.default.svc",
                    "train-2.train-svc.default.svc",
                    "train-3.train-svc.default.svc",
                ),
                node_index=3,
                node_count=4,
            ),
            id="k8s-statefulset",
        ),
        pytest.param(
            KUBE,
            "npu-train-10",
            None,
            view(
                K8S, {"kind": "KUBERNETES_SERVICE_HOST=10.96.0.1", "node_index": "hostname npu-train-10"}, node_index=10
            ),
            id="k8s-statefulset-without-count",
        ),
        pytest.param(
            {**KUBE, "JOB_COMPLETION_INDEX": "2", "NPULAUNCH_NNODES": "3"},
            "train-2",
            None,
            view(
                K8S,
                {
                    "kind": "KUBERNETES_SERVICE_HOST=10.96.0.1",
                    "node_index": "JOB_COMPLETION_INDEX=2",
                    "node_count": "NPULAUNCH_NNODES=3",
                    "hosts": "pods train-<0..2> (NPULAUNCH_NNODES=3)",
                },
                hosts=("train-0", "train-1", "train-2"),
                node_index=2,
                node_count=3,
            ),
            id="k8s-indexed-job",
        ),
        pytest.param(
            {**KUBE, "JOB_COMPLETION_INDEX": "0", "NPULAUNCH_NNODES": "2"},
            "train-7xk2p",
            None,
            view(
                K8S,
                {
                    "kind": "KUBERNETES_SERVICE_HOST=10.96.0.1",
                    "node_index": "JOB_COMPLETION_INDEX=0",
                    "node_count": "NPULAUNCH_NNODES=2",
                },
                node_index=0,
                node_count=2,
            ),
            id="k8s-indexed-job-other-hostname",
        ),
        pytest.param(KUBE, "train-7d4b9c-xk2pq", None, view(NONE, {}), id="k8s-pod-without-index"),
        pytest.param(KUBE, "train-03", None, view(NONE, {}), id="k8s-leading-zero-is-no-ordinal"),
        pytest.param({"HOME": "/root", "PATH": "/usr/bin"}, "laptop", None, view(NONE, {}), id="no-scheduler"),
        pytest.param(SRUN, "node03", "none", view(NONE, {}), id="forced-none"),
        pytest.param(
            MPIRUN_IN_SLURM,
            "n2",
            "mpi",
            view(
                MPI,
                {
                    "kind": "forced: mpi",
                    "rank": "OMPI_COMM_WORLD_RANK=1",
                    "world_size": "OMPI_COMM_WORLD_SIZE=2",
                    "local_rank": "OMPI_COMM_WORLD_LOCAL_RANK=0",
                    "local_size": "OMPI_COMM_WORLD_LOCAL_SIZE=1",
                    "node_index": "OMPI_COMM_WORLD_RANK=1 (one process per node)",
                    "node_count": "OMPI_COMM_WORLD_SIZE=2 (one process per node)",
                    "job_id": "PMIX_NAMESPACE=prterun-n1-1234@1",
                },
                node_index=1,
                node_count=2,
                rank=1,
                world_size=2,
                local_rank=0,
                local_size=1,
                job_id="prterun-n1-1234@1",
            ),
            id="forced-mpi-inside-slurm",
        ),
        pytest.param(
            {**SRUN, **OMPI_RANKS},
            "node03",
            "slurm",
            view(
                SLURM,
                {**SRUN_VIEW.sources, "kind": "forced: slurm"},
                **{name: getattr(SRUN_VIEW, name) for name in FIELDS},
            ),
            id="forced-slurm-ignores-mpi",
        ),
        pytest.param(
            {},
            "train-1",
            "k8s",
            view(K8S, {"kind": "forced: k8s", "node_index": "hostname train-1"}, node_index=1),
            id="forced-k8s-without-service-host",
        ),
    ],
)
def test_detect(env: Dict[str, str], hostname: str, forced: Optional[str], expected: SchedulerView) -> None:
    assert detect(env, hostname, forced) == expected


@pytest.mark.parametrize(
    "env, hostname, forced, message",
    [
        pytest.param(
            OMPI_RANKS,
            "h1",
            "slurm",
            "scheduler slurm (forced): found none of its variables, for hostname "
            "'h1'; allowed: a slurm environment with SLURM_JOB_ID or SLURM_JOBID",
            id="forced-slurm-missing",
        ),
        pytest.param(
            SRUN,
            "node03",
            "mpi",
            "scheduler mpi (forced): found none of its variables, for hostname 'node03'; "
            "allowed: a mpi environment with OMPI_COMM_WORLD_RANK (Open MPI) or PMI_RANK (MPICH, Intel MPI)",
            id="forced-mpi-missing",
        ),
        pytest.param(
            KUBE,
            "train-0",
            "volcano",
            "scheduler volcano (forced): found none of its variables, for hostname "
            "'train-0'; allowed: a volcano environment with VC_TASK_INDEX",
            id="forced-volcano-missing",
        ),
        pytest.param(
            KUBE,
            "login01",
            "k8s",
            "scheduler k8s (forced): found none of its variables, for hostname "
            "'login01'; allowed: a k8s environment with JOB_COMPLETION_INDEX (Indexed Job) or a hostname ending "
            "in -<ordinal> (StatefulSet)",
            id="forced-k8s-no-index",
        ),
        pytest.param(
            {},
            "",
            "slrum",
            "scheduler: found 'slrum'; allowed: slurm, mpi, volcano, k8s, none (did you mean slurm?)",
            id="forced-unknown",
        ),
        pytest.param(
            {**SRUN, "SLURM_NNODES": "4"},
            "",
            None,
            "SLURM_NNODES=4: found 4 nodes; allowed: 3, as many as SLURM_STEP_NODELIST=node[01-03] lists",
            id="slurm-count-disagrees-with-list",
        ),
        pytest.param(
            {**SRUN, "SLURM_NODEID": "3"},
            "",
            None,
            "SLURM_NODEID=3: found node_index 3; allowed: 0 to 2, since SLURM_NNODES=3",
            id="slurm-node-id-out-of-range",
        ),
        pytest.param(
            {**SRUN, "SLURM_NODEID": "two"},
            "",
            None,
            "SLURM_NODEID: found 'two'; allowed: a whole number >= 0",
            id="slurm-node-id-not-a-number",
        ),
        pytest.param(
            {**SRUN, "SLURM_NTASKS": "0"},
            "",
            None,
            "SLURM_NTASKS: found '0'; allowed: a whole number >= 1",
            id="slurm-zero-tasks",
        ),
        pytest.param(
            {**SRUN, "SLURM_STEP_NODELIST": "node[01-03"},
            "",
            None,
            f"SLURM_STEP_NODELIST: found 'node[01-03' ('[' without ']'); {HOSTLIST_ALLOWED}",
            id="slurm-bad-hostlist",
        ),
        pytest.param(
            {**SRUN, "SLURM_TASKS_PER_NODE": "4(x2)"},
            "",
            None,
            "SLURM_TASKS_PER_NODE: found '4(x2)' (2 nodes); allowed: one entry per node: 3, since SLURM_NNODES=3",
            id="slurm-tasks-per-node-too-short",
        ),
        pytest.param(
            {"SLURM_JOB_ID": "1", "SLURM_NODEID": "1", "SLURM_TASKS_PER_NODE": "4"},
            "",
            None,
            "SLURM_TASKS_PER_NODE: found '4' (1 nodes); allowed: an entry for node 1, since SLURM_NODEID=1",
            id="slurm-tasks-per-node-without-count",
        ),
        pytest.param(
            {**SRUN, "SLURM_TASKS_PER_NODE": "4(x)"},
            "",
            None,
            "SLURM_TASKS_PER_NODE: found '4(x)' (at "
            "'4(x)'); allowed: comma-separated task counts >= 1, each optionally repeated: 8, 4(x2),2",
            id="slurm-bad-tasks-per-node",
        ),
        pytest.param(
            {**SRUN, "SLURM_PROCID": "10"},
            "",
            None,
            "SLURM_PROCID=10: found rank 10; allowed: 0 to 9, since SLURM_NTASKS=10",
            id="slurm-rank-beyond-tasks",
        ),
        pytest.param(
            {**OMPI_RANKS, "OMPI_COMM_WORLD_LOCAL_RANK": "-1"},
            "",
            None,
            "OMPI_COMM_WORLD_LOCAL_RANK: found '-1'; allowed: a whole number >= 0",
            id="mpi-negative-local-rank",
        ),
        pytest.param(
            {**MPIRUN_IN_SLURM, "SLURM_JOB_NODELIST": "n[1-4]"},
            "n2",
            None,
            "OMPI_COMM_WORLD_SIZE=2 (one "
            "process per node): found 2 nodes; allowed: 4, as many as SLURM_JOB_NODELIST=n[1-4] lists",
            id="mpirun-on-part-of-the-allocation",
        ),
        pytest.param(
            VC_TWO_TASKS,
            "gpu-node-7",
            None,
            "VC_<TASK>_HOSTS: found 2 tasks (VC_MASTER_HOSTS=pt-master-0.pt, "
            "VC_WORKER_HOSTS=pt-worker-0.pt,pt-worker-1.pt,pt-worker-2.pt), 0 of them listing hostname "
            "'gpu-node-7'; allowed: exactly one task listing this pod's hostname (a pod with hostNetwork: true "
            "reports its node's hostname, which no task lists)",
            id="volcano-two-tasks-no-match",
        ),
        pytest.param(
            {**VC_TWO_TASKS, "VC_WORKER_NUM": "4"},
            "pt-worker-1",
            None,
            "VC_WORKER_NUM=4: found 4 nodes; "
            "allowed: 3, as many as VC_WORKER_HOSTS=pt-worker-0.pt,pt-worker-1.pt,pt-worker-2.pt lists",
            id="volcano-num-disagrees",
        ),
        pytest.param(
            {"VC_TASK_INDEX": "0", "VC_W_HOSTS": "a,,b"},
            "a",
            None,
            "VC_W_HOSTS: found 'a,,b'; allowed: comma-separated pod host names, none empty",
            id="volcano-empty-host",
        ),
        pytest.param(
            {"VC_TASK_INDEX": "2", "VC_W_HOSTS": "a,b"},
            "b",
            None,
            "VC_TASK_INDEX=2: found node_index 2; allowed: 0 to 1, since VC_W_HOSTS=a,b (2 hosts)",
            id="volcano-index-beyond-hosts",
        ),
        pytest.param(
            {**KUBE, "NPULAUNCH_NNODES": "4"},
            "train-5",
            None,
            "hostname train-5: found node_index 5; allowed: 0 to 3, since NPULAUNCH_NNODES=4",
            id="k8s-ordinal-beyond-count",
        ),
    ],
)
def test_detect_rejects(env: Dict[str, str], hostname: str, forced: Optional[str], message: str) -> None:
    with pytest.raises(SchedulerError) as error:
        detect(env, hostname, forced)
    assert str(error.value) == message


# --- waiting for MindX's rank table

PATH = "/user/serverid/devindex/config/hccl.json"
COMPLETED = {"status": "completed", "server_count": "1", "server_list": [{"server_id": "10.0.0.1", "device": []}]}
INITIALIZING = json.dumps({"status": "initializing"})
MISSING = FileNotFoundError(2, "No such file or directory")
Reply = Union[str, Exception]


class FakeTime:
    """A clock that moves only when slept on, and a file that gives one reply per read."""

    def __init__(self, replies: Sequence[Reply]) -> None:
        self.now = 100.0
        self.replies = list(replies)
        self.reads: List[str] = []
        self.sleeps: List[float] = []

    def clock(self) -> float:
        return self.now

    def sleep(self, seconds: float) -> None:
        assert len(self.sleeps) < 1000, "still polling: the deadline was never reached"
        self.sleeps.append(seconds)
        self.now += seconds

    def read(self, path: str) -> str:
        self.reads.append(path)
        reply = self.replies[min(len(self.reads), len(self.replies)) - 1]
        if isinstance(reply, Exception):
            raise reply
        return reply


@pytest.mark.parametrize(
    "replies, reads",
    [
        ([json.dumps(COMPLETED)], 1),
        ([INITIALIZING] * 3 + [json.dumps(COMPLETED)], 4),
        ([MISSING, MISSING, INITIALIZING, json.dumps(COMPLETED)], 4),
        (['{"status": "initiali', json.dumps(COMPLETED)], 2),
        ([UnicodeDecodeError("utf-8", b"\xff", 0, 1, "invalid start byte"), json.dumps(COMPLETED)], 2),
    ],
    ids=[
        "completed-at-once",
        "completed-after-3-polls",
        "missing-then-completed",
        "invalid-json-then-valid",
        "not-utf8-then-valid",
    ],
)
def test_wait_for_rank_table_returns_the_completed_table(replies: List[Reply], reads: int) -> None:
    fake = FakeTime(replies)
    assert wait_for_rank_table(PATH, 30, fake.clock, fake.sleep, fake.read) == COMPLETED
    assert fake.reads == [PATH] * reads
    assert fake.sleeps == [POLL_INTERVAL_S] * (reads - 1) == [0.5] * (reads - 1)


@pytest.mark.parametrize(
    "reply, timeout_s, sleeps, seen",
    [
        (INITIALIZING, 2.0, [0.5] * 4, "status 'initializing'"),
        (MISSING, 1.2, [0.5, 0.5, pytest.approx(0.2)], "missing"),
        ("{not json", 0.5, [0.5], "not valid JSON"),
        (INITIALIZING, 0, [], "status 'initializing'"),
    ],
    ids=["initializing", "missing-last-look-at-deadline", "invalid-json", "zero-timeout-looks-once"],
)
def test_wait_for_rank_table_times_out(reply: Reply, timeout_s: float, sleeps: List[float], seen: str) -> None:
    fake = FakeTime([reply])
    with pytest.raises(SchedulerError) as error:
        wait_for_rank_table(PATH, timeout_s, fake.clock, fake.sleep, fake.read)
    assert fake.sleeps == sleeps and len(fake.reads) == len(sleeps) + 1
    assert str(error.value) == (
        f"HCCL rank table {PATH}: not ready after {timeout_s:g} s, last seen: {seen}; ready "
        'means valid JSON with "status": "completed", which the MindX operator writes once '
        "every pod of the job has its NPUs"
    )


@pytest.mark.parametrize(
    "reply, message",
    [
        (json.dumps({"status": "failed"}), "found status 'failed'; allowed: 'initializing' or 'completed'"),
        (json.dumps({"server_count": "1"}), "found status None; allowed: 'initializing' or 'completed'"),
        (json.dumps(["completed"]), 'found a JSON list; allowed: a JSON object with a "status"'),
        (
            PermissionError(13, "Permission denied"),
            "found a file that cannot be read (Permission denied); allowed: a readable file",
        ),
    ],
    ids=["unknown-status", "no-status", "not-an-object", "unreadable"],
)
def test_wait_for_rank_table_fails_at_once(reply: Reply, message: str) -> None:
    fake = FakeTime([INITIALIZING, reply])
    with pytest.raises(SchedulerError) as error:
        wait_for_rank_table(PATH, 30, fake.clock, fake.sleep, fake.read)
    assert str(error.value) == f"HCCL rank table {PATH}: {message}"
    assert fake.sleeps == [0.5] and len(fake.reads) == 2


def test_wait_for_rank_table_reads_a_real_file(tmp_path: Path) -> None:
    path = tmp_path / "hccl dir" / "hccl.json"
    path.parent.mkdir()
    path.write_text(json.dumps(COMPLETED), encoding="utf-8")
    assert wait_for_rank_table(str(path), 0) == COMPLETED
    path.write_bytes(b'{"status": "completed", "server_id": "\xff"}')
    with pytest.raises(SchedulerError, match="last seen: not valid JSON;"):
        wait_for_rank_table(str(path), 0)
