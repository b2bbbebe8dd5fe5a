"""Per-rank placeholders ({rank} {local_rank} {device_id} {node_rank} {host} {job_id} {job_dir}) in the
command's arguments, job.workdir, env values and job.make_dirs: expanded for each rank by the plan, an
unknown one refused with file and line, and a real job whose ranks see their own values and find their
make_dirs made (mode 0700) before they start."""

from __future__ import annotations

import json
import stat
import sys
from pathlib import Path

import pytest
from helpers import RANKS, full_plan, run_cli

from npulaunch.config.load import load_config, parse_config
from npulaunch.config.overrides import Overrides, apply_overrides
from npulaunch.config.yamlsource import parse_yaml
from npulaunch.host.errors import ConfigError
from npulaunch.plan.build import build_plan
from npulaunch.plan.launchplan import Discovery

NO_NPU_TOOLS = Discovery(devices=lambda: [], device_ips=lambda ids: None)
HOSTS = "hosts:\n  - {host: 10.0.0.1, devices: [0, 1]}\n  - {host: 10.0.0.2, devices: [4, 5]}\nrank_table: none\n"


def refused(text: str) -> str:
    with pytest.raises(ConfigError) as error:
        parse_config(parse_yaml(text, "job.yaml"), base_dir="/srv")
    return str(error.value)


@pytest.mark.parametrize(
    "text, where",
    [
        ("job:\n  command: [python3, t.py, '--out={rnak}']\n", "job.yaml:2: job.command[2]"),
        ("job:\n  command: 'python3 t.py --out={rnak}'\n", "job.yaml:2: job.command"),
        ("job:\n  command: [python3, t.py]\n  workdir: /w/{rnak}\n", "job.yaml:3: job.workdir"),
        ("job:\n  command: [python3, t.py]\n  make_dirs: [a, 'out/{rnak}']\n", "job.yaml:3: job.make_dirs[1]"),
        ("job:\n  command: [python3, t.py]\nenv:\n  OUT: /o/{rnak}\n", "job.yaml:4: env.OUT"),
    ],
)
def test_an_unknown_placeholder_is_refused_with_file_and_line(text: str, where: str) -> None:
    shown = refused(text)
    assert f"{where}: found unknown placeholder {{rnak}}" in shown
    assert "allowed: placeholders {rank} {local_rank} {device_id} {node_rank} {host} {job_id} {job_dir}" in shown
    assert "did you mean {rank}? write {{rnak}} for a literal {rnak}" in shown


def test_shell_variables_json_and_doubled_braces_are_not_placeholders() -> None:
    text = "job:\n  command: [bash, -c, 'echo ${RANK_ID} {{rank}} {rank}', '{\"lr\": {\"base\": 0.1}}']\n" + HOSTS
    plan = build_plan(parse_config(parse_yaml(text, "j.yaml"), "/srv"), "j", "u", NO_NPU_TOOLS)
    assert plan.ranks[3].argv == ("bash", "-c", "echo ${RANK_ID} {rank} 3", '{"lr": {"base": 0.1}}')


def test_every_place_expands_for_each_rank() -> None:
    text = (
        "job:\n  name: p\n  command: [python3, t.py, '--model_dir=out/{device_id}/ckpt',"
        " '--tag={host}-{node_rank}-{local_rank}', '--job={job_id}']\n  workdir: /work/{host}\n  log_dir: /logs\n"
        "  make_dirs: ['out/{device_id}/ckpt', '{job_dir}/extra/{rank}']\n"
        "env:\n  SUMMARY_DIR: '{job_dir}/summary/{rank}'\n  PLAIN: fixed\n"
        "session_options:\n  dump_path: /dumps/{node_rank}/{rank}\n" + HOSTS
    )
    plan = build_plan(parse_config(parse_yaml(text, "p.yaml"), "/srv"), "p-1", "u", NO_NPU_TOOLS)
    rank = plan.ranks[3]  # host 10.0.0.2, local rank 1, device 5
    assert rank.argv == ("python3", "t.py", "--model_dir=out/5/ckpt", "--tag=10.0.0.2-1-1", "--job=p-1")
    assert rank.cwd == "/work/10.0.0.2"
    assert rank.env["SUMMARY_DIR"] == "/logs/p-1/summary/3" and rank.env["PLAIN"] == "fixed"
    assert [d for option, d in rank.make_dirs if option == "job.make_dirs"] == [
        "/work/10.0.0.2/out/5/ckpt",  # relative to the rank's own working directory
        "/logs/p-1/extra/3",
    ]
    assert rank.session_options["dump_path"] == "/dumps/1/3"
    assert plan.ranks[0].argv[2] == "--model_dir=out/0/ckpt"


def test_a_workdir_from_the_job_directory_stays_absolute(tmp_path: Path) -> None:
    path = tmp_path / "j.yaml"
    path.write_text("job:\n  command: [python3, t.py]\n  workdir: '{job_dir}/w{rank}'\n  log_dir: /logs\n" + HOSTS)
    plan = build_plan(load_config(str(path)), "j-1", "u", NO_NPU_TOOLS)
    assert [r.cwd for r in plan.ranks] == [f"/logs/j-1/w{n}" for n in range(4)]


def test_a_command_line_command_is_checked_too() -> None:
    config = parse_config(parse_yaml("job:\n  command: [python3, t.py]\n", "j.yaml"), "/srv")
    with pytest.raises(ConfigError) as error:
        apply_overrides(config, Overrides(command=("python3", "t.py", "--out={devce_id}")))
    assert "command line: command: found unknown placeholder {devce_id}" in str(error.value)
    assert "did you mean {device_id}?" in str(error.value)
    result = run_cli("plan", "--nproc-per-node", "2", "--", "python3", "t.py", "{bogus}")
    assert result.returncode == 2 and "unknown placeholder {bogus}" in result.stderr
    shown = run_cli("plan", "--nproc-per-node", "2", "--", "python3", "t.py", "--out=o/{local_rank}")
    assert shown.returncode == 0, shown.stderr
    assert "rank 1: python3 t.py --out=o/1" in shown.stdout


def test_ranks_run_with_their_own_arguments_env_and_directories(tmp_path: Path, marker: str) -> None:
    config = tmp_path / "job.yaml"
    config.write_text(f"""job:
  name: ph
  command: [{sys.executable}, {RANKS / "modelzoo.py"}, --model_dir, "out/{{device_id}}/ckpt", --files, "8"]
  workdir: {tmp_path}
  make_dirs: ["out/{{device_id}}/ckpt"]
  log_dir: {tmp_path / "logs"}
hosts:
  - {{host: localhost, devices: [2, 3]}}
env:
  NPLTEST_MARKER: {marker}
  RUN_TAG: "{{job_id}}/{{rank}}"
rank_table: none
""")
    result = run_cli("run", str(config), "--job-id", "ph", env={"NPLTEST_MARKER": marker})
    assert result.returncode == 0, result.stderr
    for rank, device in ((0, 2), (1, 3)):
        made = tmp_path / "out" / str(device) / "ckpt"
        assert stat.S_IMODE(made.stat().st_mode) == 0o700
        report = json.loads((made / "shard.json").read_text())  # the rank wrote into its own directory
        assert report["argv"] == ["--model_dir", f"out/{device}/ckpt", "--files", "8"]
        assert (report["device_index"], report["device_id"], report["shard"]) == (
            rank,
            device,
            [f"part-{rank:05d}", f"part-{rank + 2:05d}", f"part-{rank + 4:05d}", f"part-{rank + 6:05d}"],
        )
        env = full_plan(json.loads((tmp_path / "logs" / "ph" / "plan.json").read_text()))["ranks"][rank]["env"]
        assert env["RUN_TAG"] == f"ph/{rank}"
