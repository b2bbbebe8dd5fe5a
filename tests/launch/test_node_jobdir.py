"""Under a scheduler (node mode) the nodes share one job directory (issue 15): a job directory that is
a symbolic link is refused, and a rank table found there is used only when it is the one this node
plans for this job. Real files; the plan is built as each node builds it."""

from __future__ import annotations

import json
import os
from pathlib import Path

import pytest

from npulaunch.config.load import load_config
from npulaunch.host.errors import PlanError
from npulaunch.launch.jobdir import prepare_job_dir
from npulaunch.plan.build import build_plan
from npulaunch.plan.launchplan import Discovery

TWO_NODES = """\
version: 1
job:
  command: [python3, -c, pass]
  log_dir: {logs}
hosts:
  - host: 10.0.0.11
    devices: [0, 1]
    device_ips: [192.168.100.101, 192.168.101.101]
  - host: 10.0.0.12
    devices: [0, 1]
    device_ips: [192.168.100.102, 192.168.101.102]
"""
NO_TOOLS = Discovery(devices=lambda: [], device_ips=lambda ids: None)


def node_plan(tmp_path: Path, node: int, text: str = TWO_NODES):
    path = tmp_path / "job.yaml"
    path.write_text(text.format(logs=tmp_path / "logs"))
    return build_plan(load_config(str(path)), "sched-1", f"uuid-{node}", NO_TOOLS, node=node)


def test_nodes_share_the_rank_table_they_all_plan(tmp_path: Path) -> None:
    first, second = node_plan(tmp_path, 0), node_plan(tmp_path, 1)
    prepare_job_dir(first, {})
    prepare_job_dir(second, {})  # the table node 0 wrote is the one node 1 plans: used
    table = json.loads(Path(first.rank_table_path or "").read_text())
    assert table == first.rank_table == second.rank_table


def test_a_stale_rank_table_of_another_job_is_not_trusted(tmp_path: Path) -> None:
    plan = node_plan(tmp_path, 1)
    job_dir = Path(plan.job_dir)
    job_dir.mkdir(parents=True)
    stale = dict(plan.rank_table or {}, server_count="7")
    Path(plan.rank_table_path or "").write_text(json.dumps(stale))
    with pytest.raises(PlanError, match="is not the rank table of job sched-1 as this node plans it"):
        prepare_job_dir(plan, {})
    assert not (job_dir / "node-1").exists()  # nothing of this node is left behind


def test_a_job_directory_that_is_a_symlink_is_refused(tmp_path: Path) -> None:
    plan = node_plan(tmp_path, 0)
    elsewhere = tmp_path / "elsewhere"
    elsewhere.mkdir()
    Path(plan.job_dir).parent.mkdir(parents=True)
    os.symlink(elsewhere, plan.job_dir)
    with pytest.raises(PlanError, match="is a symbolic link, which npulaunch did not make"):
        prepare_job_dir(plan, {})
    assert list(elsewhere.iterdir()) == []
