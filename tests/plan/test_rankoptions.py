"""Session options through the whole plan: typed JSON per rank, paths expanded per rank, and the
warnings and notes the plan carries."""

from __future__ import annotations

import json
from pathlib import Path

from helpers import ROOT, full_plan, run_cli

HEAD = """version: 1
job:
  command: [python3, examples/train.py]
  workdir: {root}
  log_dir: {logs}
hosts:
  - host: localhost
    devices: 4
"""


def plan(tmp_path: Path, body: str) -> dict:
    path = tmp_path / "job.yaml"
    path.write_text(HEAD.format(root=ROOT, logs=tmp_path / "logs") + body)
    result = run_cli("plan", str(path), "--json")
    assert result.returncode == 0, result.stderr
    return full_plan(json.loads(result.stdout))


def test_options_reach_every_rank_typed_and_expanded(tmp_path: Path) -> None:
    data = plan(
        tmp_path,
        """session_options:
  hcom_parallel: true
  iterations_per_loop: 10
  enable_data_pre_proc: true
  precision_mode: allow_mix_precision
  enable_dump: true
  dump_path: /dumps/{job_id}/{host}/rank-{rank}-dev-{device_id}-local-{local_rank}
  dump_step: [0, "3-5"]
""",
    )
    for rank in data["ranks"]:
        options = json.loads(rank["env"]["NPULAUNCH_SESSION_OPTIONS"])
        assert options == rank["session_options"]
        assert options["hcom_parallel"] is True and options["iterations_per_loop"] == 10
        assert options["precision_mode"] == "allow_mix_precision" and options["dump_step"] == "0|3-5"
        r = rank["rank"]
        assert options["dump_path"] == f"/dumps/{data['job_id']}/localhost/rank-{r}-dev-{r}-local-{r}"
    assert data["warnings"] == []


def test_ranks_sharing_a_dump_directory_are_warned_about(tmp_path: Path) -> None:
    data = plan(tmp_path, "session_options:\n  enable_dump: true\n  dump_path: /dumps/shared\n")
    assert any(
        "4 ranks on localhost write dump_path to the same directory /dumps/shared" in w for w in data["warnings"]
    )


def test_session_device_id_is_noted_and_warned(tmp_path: Path) -> None:
    data = plan(tmp_path, "session_options:\n  session_device_id: 0\n")
    assert any("session_device_id 0 overrides ASCEND_DEVICE_ID" in n for n in data["notes"])
    assert any("same device" in w for w in data["warnings"])


def test_unknown_ascend_variable_is_a_warning_with_a_suggestion(tmp_path: Path) -> None:
    data = plan(tmp_path, "env:\n  ASCEND_GLOBAL_LOG_LEVL: 3\n")
    (warning,) = data["warnings"]
    assert ":10: env.ASCEND_GLOBAL_LOG_LEVL: found unknown variable" in warning
    assert "did you mean 'ASCEND_GLOBAL_LOG_LEVEL'?" in warning


def test_hccl_timeout_without_product_is_warned_with_rounding(tmp_path: Path) -> None:
    data = plan(tmp_path, "session_options:\n  hccl_timeout: 600\n")
    assert any("name the product line" in w for w in data["warnings"])
    assert any("round it to 544 s" in w for w in data["warnings"])
    quiet = plan(tmp_path, "product: atlas-a3\nsession_options:\n  hccl_timeout: 600\n")
    assert quiet["warnings"] == []


def test_data_preprocessing_mode_on_a_two_host_plan(tmp_path: Path) -> None:
    path = tmp_path / "two.yaml"
    path.write_text("""version: 1
job: {command: [python3, train.py], workdir: /remote/models}
hosts:
  - {host: 10.0.0.1, devices: [0, 1, 2, 3]}
  - {host: 10.0.0.2, devices: [4, 5]}
rank_table: none
data_preprocess: host_main
session_options: {hcom_parallel: true}
""")
    result = run_cli("plan", str(path), "--json")
    assert result.returncode == 0, result.stderr
    got = [
        (r["host"], r["session_options"]["local_rank_id"], r["session_options"]["local_device_list"])
        for r in json.loads(result.stdout)["ranks"]
    ]
    assert got == [
        ("10.0.0.1", 0, "0,1,2,3"),
        ("10.0.0.1", 1, "0,1,2,3"),
        ("10.0.0.1", 2, "0,1,2,3"),
        ("10.0.0.1", 3, "0,1,2,3"),
        ("10.0.0.2", 0, "4,5"),
        ("10.0.0.2", 1, "4,5"),
    ]
    table = run_cli("plan", str(path))
    assert "data_preprocess: host_main" in table.stdout


def test_data_preprocessing_mode_refuses_the_options_set_by_hand(tmp_path: Path) -> None:
    path = tmp_path / "bad.yaml"
    path.write_text(
        "job: {command: [python3, train.py]}\nhosts: [{host: localhost, devices: 2}]\n"
        "data_preprocess: host_main\nsession_options: {local_rank_id: 0}\n"
    )
    result = run_cli("check", str(path))
    assert result.returncode == 2
    assert ":4: session_options.local_rank_id: found local_rank_id with data_preprocess: host_main" in result.stderr


def test_each_ranks_merged_options_are_checked_again(tmp_path: Path) -> None:
    # data_preprocess gives every rank local_rank_id; the TF Adapter refuses one above 7, which only
    # the merged options show (the YAML never names it)
    path = tmp_path / "job.yaml"
    path.write_text(
        HEAD.format(root=ROOT, logs=tmp_path / "logs").replace("devices: 4", "devices: 10")
        + "rank_table: none\ndata_preprocess: host_main\nsession_options:\n  hcom_parallel: true\n"
    )
    result = run_cli("plan", str(path))
    assert result.returncode == 2
    assert "session_options.local_rank_id: found 8 (an integer); allowed: an integer from 0 to 7" in result.stderr
    assert "rank 8's options as merged; npulaunch sets it for data_preprocess: host_main" in result.stderr
    assert "found 9" not in result.stderr  # one error per option
    assert "Traceback" not in result.stderr


def test_a_rule_broken_only_by_a_ranks_merged_options_is_an_error(tmp_path: Path) -> None:
    from npulaunch.config.load import load_config
    from npulaunch.plan.rankoptions import check_rank_options

    path = tmp_path / "job.yaml"
    path.write_text(HEAD.format(root=ROOT, logs=tmp_path / "logs") + "session_options:\n  precision_mode_v2: fp16\n")
    config = load_config(str(path))
    job = dict(config.session_options)
    # rank 1 ends up with both precision modes (what a per-rank addition could do): the pair the
    # TF Adapter refuses is found on the merged set, and named for that rank
    errors = check_rank_options(config, 2, [(0, job), (1, {**job, "precision_mode": "force_fp32"})])
    assert [(e.path, e.found) for e in errors] == [
        ("session_options.precision_mode", "both precision_mode and precision_mode_v2")
    ]
    assert "rank 1's options as merged" in errors[0].hint
    assert check_rank_options(config, 2, [(0, job), (1, job)]) == []
