"""npulaunch sbatch: the rendered batch script against golden files, flags over the YAML's slurm
section, and bad values refused with their key."""

from __future__ import annotations

import os
from pathlib import Path

import pytest
from helpers import GOLDEN, ROOT, run_cli

from npulaunch.config.load import load_config
from npulaunch.host.errors import UsageError
from npulaunch.plan.schedulers.slurm import BatchOptions, render_sbatch

CONFIG = ROOT / "cluster_configs" / "slurm-4x8.yaml"
RECOVERY = ROOT / "cluster_configs" / "slurm-recovery.yaml"


def rendered(options: BatchOptions, config: Path = CONFIG) -> str:
    text = render_sbatch(load_config(str(config)), str(config), options, "/opt/venv/bin/python3")
    return text.replace(str(ROOT), "<repo>")


@pytest.mark.parametrize(
    "name, config, options",
    [
        ("slurm-4x8.node.sbatch", CONFIG, BatchOptions(mode="node")),
        (
            "slurm-4x8.rank.sbatch",
            CONFIG,
            BatchOptions(mode="rank", nodes=2, time="30", partition="debug", job_id="r1"),
        ),
        ("slurm-4x8.steps.sbatch", CONFIG, BatchOptions()),
        ("slurm-recovery.steps.sbatch", RECOVERY, BatchOptions(exclude=("n7", "n12"))),
    ],
)
def test_batch_script_matches_golden(name: str, config: Path, options: BatchOptions) -> None:
    golden = GOLDEN / name
    if os.environ.get("NPULAUNCH_UPDATE_GOLDEN"):
        golden.write_text(rendered(options, config))
    assert rendered(options, config) == golden.read_text()


def test_spare_nodes_need_the_steps_mode_and_a_checkpoint_dir() -> None:
    with pytest.raises(UsageError, match="spare nodes need the steps mode"):
        rendered(BatchOptions(mode="node"), RECOVERY)
    with pytest.raises(UsageError, match="recovery.checkpoint_dir"):
        rendered(BatchOptions(spare_nodes=2), CONFIG)
    assert "#SBATCH --nodes=6\n" in rendered(BatchOptions(spare_nodes=2, nodes=4), RECOVERY)


def test_flags_win_over_the_yaml() -> None:
    text = run_cli("sbatch", str(CONFIG), "--nodes", "16", "--time", "1-00:00:00", "--partition", "big").stdout
    assert "#SBATCH --nodes=16\n" in text and "#SBATCH --time=1-00:00:00\n" in text
    assert "#SBATCH --partition=big\n" in text and "ascend" not in text


@pytest.mark.parametrize(
    "section, key, allowed",
    [
        ("slurm: {nodes: 0}", "slurm.nodes", "an integer from 1 to 100000"),
        ("slurm: {time: 2:00:00}", "slurm.time", "a Slurm time limit"),
        ('slurm: {time: "two hours"}', "slurm.time", "minutes, MM:SS"),
        ('slurm: {partition: "a b"}', "slurm.partition", "letters, digits"),
        ("slurm: {sbatch_options: [exclusive]}", "slurm.sbatch_options", "a list of sbatch options"),
        ("slurm: {nodez: 2}", "slurm.nodez", "nodes"),
    ],
)
def test_bad_slurm_section_is_refused(tmp_path: Path, section: str, key: str, allowed: str) -> None:
    config = tmp_path / "job.yaml"
    config.write_text(f"job:\n  command: [python3, train.py]\n{section}\n")
    result = run_cli("sbatch", str(config))
    assert result.returncode == 2 and "Traceback" not in result.stderr
    assert f"{config}:3: {key}" in result.stderr and allowed in result.stderr


def test_bad_time_flag_is_refused() -> None:
    result = run_cli("sbatch", str(CONFIG), "--time", "soon")
    assert result.returncode == 2 and "--time 'soon'" in result.stderr
