"""Identity variables the launcher inherited (plan/identity.py): replaced, removed or passed on, each
reported; an inherited TF_CONFIG of a parameter server refused. Through the CLI, with the variables
in the launcher's own environment, as a user's shell or a pod spec would leave them."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Dict

from helpers import full_plan, run_cli

from npulaunch.plan.identity import identity_findings


def plan(tmp_path: Path, inherited: Dict[str, str], extra: str = ""):
    path = tmp_path / "job.yaml"
    path.write_text(
        f"version: 1\njob:\n  command: [python3, -c, pass]\n  log_dir: {tmp_path / 'logs'}\n"
        f"hosts: [{{host: localhost, devices: 2}}]\nrank_table: none\n{extra}"
    )
    return run_cli("plan", str(path), "--json", env=inherited)


def test_inherited_identities_are_replaced_or_removed_and_reported(tmp_path: Path) -> None:
    inherited = {"RANK_ID": "3", "DEVICE_ID": "7", "POD_NAME": "trainer-0", "CM_WORKER_SIZE": "16"}
    result = plan(tmp_path, inherited)
    assert result.returncode == 0, result.stderr
    data = full_plan(json.loads(result.stdout))
    warnings = "\n".join(data["warnings"])
    assert "has RANK_ID=3, DEVICE_ID=7: each rank gets npulaunch's own value instead" in warnings
    assert "has POD_NAME, CM_WORKER_SIZE: removed from every rank" in warnings
    for rank in data["ranks"]:
        assert rank["env"]["RANK_ID"] == str(rank["rank"]) and rank["env"]["DEVICE_ID"] == str(rank["rank"])
        assert {"POD_NAME", "CM_WORKER_SIZE"} <= set(rank["env_unset"])


def test_an_inherited_parameter_server_tf_config_is_refused(tmp_path: Path) -> None:
    result = plan(tmp_path, {"TF_CONFIG": json.dumps({"task": {"type": "ps", "index": 0}})})
    assert result.returncode == 2
    assert 'TF_CONFIG with task type "ps": the TF Adapter then never initialises GE' in result.stderr
    # removing it in the YAML is the user's choice: no finding
    result = plan(tmp_path, {"TF_CONFIG": '{"task": {"type": "ps"}}'}, "env:\n  TF_CONFIG: null\n")
    assert result.returncode == 0, result.stderr
    assert not [w for w in json.loads(result.stdout)["warnings"] if "TF_CONFIG" in w]


def test_a_clean_environment_gives_no_finding() -> None:
    assert identity_findings({"PATH": "/bin", "HOME": "/root"}, {}, False, False) == ([], [])


def test_evaluator_and_help_cluster_are_explained() -> None:
    errors, warnings = identity_findings(
        {"TF_CONFIG": '{"task": {"type": "evaluator"}}', "HELP_CLUSTER": "1"}, {}, False, False
    )
    assert errors == []
    assert any("turns HCCL off in every rank" in w for w in warnings)
    assert any("HELP_CLUSTER" in w and "use HCCL" in w for w in warnings)
    # with cpu_fallback npulaunch sets TF_CONFIG itself: nothing to say
    assert identity_findings({"TF_CONFIG": '{"task": {"type": "ps"}}'}, {}, False, True) == ([], [])


def test_in_rank_table_free_mode_cm_variables_are_replaced_not_removed() -> None:
    _, warnings = identity_findings({"CM_CHIEF_IP": "10.0.0.1"}, {}, True, False)
    assert warnings == [
        "warning: the launcher's environment has CM_CHIEF_IP=10.0.0.1: each rank gets npulaunch's own value "
        "instead (an inherited one would be the same for every rank)"
    ]
