"""torchrun's command line on npulaunch (npulaunch/dropin.py): the flags are torchrun's own, read from the
installed torch's parser (torch.distributed.run.get_args_parser), with their spellings and PET_ variables;
each one is accepted, and those with a meaning here do what torchrun's do, checked in the plan npulaunch
makes of the same command line."""

from __future__ import annotations

import importlib.util
import json
import os
import sys
from pathlib import Path
from typing import Dict, List, Optional

import pytest
from helpers import require, run_cli

from npulaunch.cliargs import build_parser
from npulaunch.dropin import FLAGS

SCRIPT = "import torch\nimport torch.distributed as dist\ndist.init_process_group('gloo')\n"


def torchrun_actions() -> List:
    require(importlib.util.find_spec("torch") is not None, "torch (pip install -e '.[torch]')")
    from torch.distributed.run import get_args_parser

    return [a for a in get_args_parser()._actions if a.option_strings and "--help" not in a.option_strings]


def plan_of(tmp_path: Path, *flags: str, env: Optional[Dict[str, str]] = None, standins: bool = False) -> Dict:
    """``npulaunch plan --json FLAGS train.py`` in tmp_path (the script imports torch, uses gloo)."""
    (tmp_path / "train.py").write_text(SCRIPT)
    result = run_cli("plan", "--json", *flags, "train.py", "--lr", "1", cwd=tmp_path, env=env, standins=standins)
    assert result.returncode == 0, result.stderr
    return json.loads(result.stdout)


def rank0_env(tmp_path: Path, *flags: str, env: Optional[Dict[str, str]] = None) -> Dict[str, str]:
    """Rank 0's whole environment in ``npulaunch plan --rank 0 --json FLAGS train.py``."""
    (tmp_path / "train.py").write_text(SCRIPT)
    result = run_cli("plan", "--rank", "0", "--json", *flags, "train.py", cwd=tmp_path, env=env)
    assert result.returncode == 0, result.stderr
    return json.loads(result.stdout)["env"]


def refused(tmp_path: Path, *flags: str) -> str:
    (tmp_path / "train.py").write_text(SCRIPT)
    result = run_cli("plan", *flags, "train.py", cwd=tmp_path)
    assert result.returncode == 2, result.stdout
    assert "Traceback" not in result.stderr
    return result.stderr


def test_every_flag_of_the_installed_torchrun_is_listed_with_its_spellings_and_variable() -> None:
    ours = {flag.dest: flag for flag in FLAGS}
    for action in torchrun_actions():
        assert action.dest in ours, f"torchrun's {action.option_strings} is missing from npulaunch/dropin.py"
        flag = ours.pop(action.dest)
        assert set(flag.names) == set(action.option_strings), action.dest
        uses_pet = type(action).__name__ in ("env", "check_env")
        assert flag.pet == uses_pet, action.dest
        assert flag.switch == (action.nargs == 0), action.dest
    assert not ours, f"flags torchrun does not have: {sorted(ours)}"


def test_npulaunch_accepts_every_spelling_of_every_flag() -> None:
    parser = build_parser()
    run = next(a for a in parser._actions if hasattr(a, "choices") and isinstance(a.choices, dict)).choices["run"]
    spelled = {name for action in run._actions for name in action.option_strings}
    for action in torchrun_actions():
        missing = set(action.option_strings) - spelled
        assert not missing, f"npulaunch run does not accept {missing}"


# every flag with a value a user might paste: each is accepted (exit 0), those without use named in the notes
ACCEPTED = [
    ("--monitor-interval", "5", "--monitor-interval 5 is accepted and has no use here"),
    ("--monitor_interval", "5", "--monitor-interval 5 is accepted and has no use here"),
    ("--start-method", "fork", "--start-method fork is accepted and has no use here"),
    ("--event-log-handler", "console", "--event-log-handler console is accepted"),
    ("--tee", "3", "--tee 3 is accepted and has no use here"),
    ("-t", "1", "--tee 1 is accepted"),
    ("--duplicate-stdout-filters", "loss", "--duplicate-stdout-filters loss is accepted"),
    ("--duplicate_stderr_filters", "warn", "--duplicate-stderr-filters warn is accepted"),
    ("--local-addr", "10.0.0.1", "--local-addr 10.0.0.1 is accepted"),
    ("--logs-specs", "mine", "--logs-specs mine is accepted"),
    ("--signals-to-handle", "SIGTERM,SIGUSR1", "--signals-to-handle SIGTERM,SIGUSR1 is accepted"),
    ("--virtual-local-rank", None, "--virtual-local-rank is accepted"),
    ("--numa-binding", "node", "--numa-binding node: each rank is bound to the CPUs near its NPU"),
]


@pytest.mark.parametrize("flag,value,note", ACCEPTED, ids=[a[0] for a in ACCEPTED])
def test_a_flag_with_no_use_here_is_accepted_and_named_in_the_plan(
    tmp_path: Path, flag: str, value: Optional[str], note: str
) -> None:
    plan = plan_of(tmp_path, "--nproc-per-node", "1", flag, *([value] if value else []))
    assert any(note in n for n in plan["notes"]), plan["notes"]
    assert plan["ranks"][0]["argv"][-3:] == ["train.py", "--lr", "1"]  # the value was not taken as the script


def test_the_recipes_single_node_lines(tmp_path: Path) -> None:
    """torchrun --standalone --nnodes=1 --nproc-per-node=2 train.py, and --nnodes 1:1, --nnodes 1
    --node-rank 0 and underscores: one node, two ranks, meeting on a free local port."""
    for flags in (
        ("--standalone", "--nnodes=1", "--nproc-per-node=2"),
        ("--nnodes", "1:1", "--nproc_per_node", "2"),
        ("--nnodes=1", "--node_rank=0", "--nproc_per_node=2", "--master_addr=127.0.0.1"),
        ("--standalone", "--nproc-per-node", "2", "--rdzv-endpoint", "elsewhere:1234"),
    ):
        plan = plan_of(tmp_path, *flags)
        assert plan["world_size"] == 2 and len(plan["hosts"]) == 1, flags
        assert plan["meeting"]["address"] == "127.0.0.1", flags


def test_the_rendezvous_endpoint_and_id_are_where_the_ranks_meet_and_the_jobs_name(tmp_path: Path) -> None:
    plan = plan_of(
        tmp_path,
        "--rdzv-backend",
        "c10d",
        "--rdzv-endpoint",
        "127.0.0.1:29411",
        "--rdzv-id",
        "run7",
        "--nproc-per-node",
        "2",
    )
    assert plan["meeting"] == {"address": "127.0.0.1", "port": 29411}
    assert plan["job_id"] == "run7"
    rank = rank0_env(tmp_path, "--rdzv-endpoint", "127.0.0.1:29411", "--rdzv-id", "run7", "--nproc-per-node", "2")
    assert (rank["MASTER_PORT"], rank["TORCHELASTIC_RUN_ID"]) == ("29411", "run7")
    # c10d's default port, as torchrun's parse_rendezvous_endpoint gives it
    assert (
        plan_of(tmp_path, "--rdzv_backend=c10d", "--rdzv_endpoint=127.0.0.1", "--nproc-per-node=1")["meeting"]["port"]
        == 29400
    )


def test_the_nodes_count_of_several_nodes_keeps_the_static_rules(tmp_path: Path) -> None:
    plan = plan_of(
        tmp_path,
        "--nnodes",
        "2",
        "--node-rank",
        "1",
        "--master-addr",
        "127.0.0.1",
        "--nproc-per-node",
        "2",
        "--job-id",
        "j",
    )
    assert plan["world_size"] == 4 and [r["rank"] for r in plan["ranks"] if r["node_rank"] == 1] == [2, 3]
    said = refused(tmp_path, "--nnodes", "2:0")
    assert "--nnodes: found 2:0; allowed: N or MIN:MAX, 0 < MIN <= MAX" in said
    said = refused(tmp_path, "--nnodes", "1:4", "--master-addr", "h0", "--node-rank", "0")
    assert "--nnodes: found 1:4; allowed: N (a fixed number of nodes) with --rdzv-backend static" in said
    assert "--standalone runs one node" in refused(tmp_path, "--standalone", "--nnodes", "2")


def test_nproc_per_node_auto_gpu_cpu_count_as_torchrun_does_with_npus_in_place_of_gpus(tmp_path: Path) -> None:
    cpus = min(os.cpu_count() or 1, 64)
    assert plan_of(tmp_path, "--nproc-per-node", "cpu")["world_size"] == cpus
    assert plan_of(tmp_path, "--nproc-per-node", "auto")["world_size"] == cpus  # no npu-smi: the CPUs
    eight = {"NPU_STANDIN_COUNT": "8"}
    for word in ("auto", "gpu"):  # npu-smi lists 8 NPUs: one rank each
        plan = plan_of(tmp_path, "--nproc-per-node", word, env=eight, standins=True)
        assert plan["world_size"] == 8 and [r["device_id"] for r in plan["ranks"]] == list(range(8)), word
    said = refused(tmp_path, "--nproc-per-node", "gpu")
    assert "--nproc-per-node: found gpu; allowed: auto or cpu on a host without NPUs" in said
    assert "allowed: an integer from 1 to 64, or auto, gpu, cpu" in refused(tmp_path, "--nproc-per-node", "many")


def test_pet_variables_stand_for_flags_not_given_in_torchruns_form(tmp_path: Path) -> None:
    env = {"PET_NPROC_PER_NODE": "3", "PET_STANDALONE": "1", "PET_MAX_RESTARTS": "2", "PET_ROLE": "worker"}
    plan = plan_of(tmp_path, env=env)
    assert plan["world_size"] == 3
    assert "--nproc-per-node 3 from PET_NPROC_PER_NODE" in plan["notes"]
    assert rank0_env(tmp_path, env=env)["TORCHELASTIC_MAX_RESTARTS"] == "2"
    assert plan_of(tmp_path, "--nproc-per-node", "1", env=env)["world_size"] == 1  # the flag wins, as in torchrun
    (tmp_path / "train.py").write_text(SCRIPT)
    result = run_cli("plan", "--nproc-per-node", "1", "train.py", cwd=tmp_path, env={"PET_STANDALONE": "yes"})
    assert result.returncode == 2 and "PET_STANDALONE: found 'yes'; allowed: 0 or 1" in result.stderr


def test_shutdown_timeout_role_and_numa_binding_map_onto_npulaunchs_settings(tmp_path: Path) -> None:
    plan = plan_of(tmp_path, "--nproc-per-node", "2", "--shutdown-timeout", "7", "--role", "trainer")
    assert plan["grace_period_s"] == 7.0
    assert rank0_env(tmp_path, "--nproc-per-node", "2", "--role", "trainer")["ROLE_NAME"] == "trainer"


def test_no_python_runs_the_program_itself_and_module_runs_a_module(tmp_path: Path) -> None:
    plan = plan_of(tmp_path, "--nproc-per-node", "1", "--no-python")
    assert plan["ranks"][0]["argv"] == ["train.py", "--lr", "1"]
    (tmp_path / "train.sh").write_text("#!/bin/sh\necho hi\n")
    result = run_cli("plan", "--json", "--no_python", "--nproc-per-node", "1", "./train.sh", "x", cwd=tmp_path)
    assert result.returncode == 0, result.stderr
    assert json.loads(result.stdout)["ranks"][0]["argv"] == ["./train.sh", "x"]
    result = run_cli("plan", "--json", "--nproc-per-node", "1", "-m", "mypkg.train", "--lr", "1", cwd=tmp_path)
    assert json.loads(result.stdout)["ranks"][0]["argv"] == [sys.executable, "-m", "mypkg.train", "--lr", "1"]
    assert "one of them" in refused(tmp_path, "--no-python", "-m")


def test_bad_values_name_the_flag_and_what_is_allowed(tmp_path: Path) -> None:
    said = refused(
        tmp_path, "--rdzv-backend", "etcd-v2", "--redirects", "0:9", "--rdzv-conf", "join_timeout=5,colour=red"
    )
    assert "--rdzv-backend: found etcd-v2; allowed: static or c10d" in said
    assert "-r/--redirects: found 0:9" in said
    assert "--rdzv-conf: found colour=red; allowed: KEY=VALUE pairs of torchrun's keys" in said
    assert "--rdzv-endpoint: found :5; allowed: HOST or HOST:PORT" in refused(tmp_path, "--rdzv-endpoint", ":5")
    assert "--shutdown-timeout: found soon" in refused(tmp_path, "--shutdown-timeout", "soon")


def test_a_script_that_uses_gloo_gets_no_notes_of_hccl(tmp_path: Path) -> None:
    plan = plan_of(tmp_path, "--nproc-per-node", "2")
    assert plan["sources"]["framework.backend"] == "train.py uses gloo"
    assert not [n for n in plan["notes"] if "HCCL" in n or "rank table" in n], plan["notes"]
    (tmp_path / "hccl.py").write_text(
        "import torch\nimport torch.distributed as dist\ndist.init_process_group('hccl')\n"
    )
    result = run_cli("plan", "--json", "--nproc-per-node", "2", "hccl.py", cwd=tmp_path)
    assert any("rank table" in n for n in json.loads(result.stdout)["notes"])


def test_imports_on_one_line_are_read(tmp_path: Path) -> None:
    (tmp_path / "train.py").write_text("import os, sys, torch\n")
    result = run_cli("plan", "--json", "--nproc-per-node", "1", "train.py", cwd=tmp_path)
    assert json.loads(result.stdout)["sources"]["framework"] == "train.py imports pytorch"
    result = run_cli("plan", "--nproc-per-node", "1", "train.py", cwd=tmp_path)
    assert result.stdout.startswith("job ") and "(1 rank on 1 host)" in result.stdout.splitlines()[0]
