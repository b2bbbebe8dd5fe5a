"""Session options (host/session.py, host/inject/) reach real TensorFlow in real rank processes: explicit API
and zero-code injection, typed fields, the script's own settings kept, precedence, the per-rank record.
TensorFlow costs ~3 s per process here, so each test starts as few ranks as it can."""

from __future__ import annotations

import importlib.util
import json
import os
import re
import sys
import time
from pathlib import Path
from typing import Any, Dict, Tuple

import pytest
from helpers import RANKS, ROOT, STANDINS, require, run_cli

from npulaunch import session

OPTIONS = """session_options:
  hcom_parallel: true
  iterations_per_loop: 10
  precision_mode: allow_mix_precision
  enable_dump: true
  dump_path: {dump}/{{rank}}
"""


@pytest.fixture(scope="module", autouse=True)
def tensorflow_present() -> None:
    require(importlib.util.find_spec("tensorflow") is not None, "tensorflow-cpu (pip install -e '.[tf]')")


def job(tmp_path: Path, ranks: int, ways: str, extra: str = "") -> Path:
    path = tmp_path / "job.yaml"
    path.write_text(f"""version: 1
job:
  command: [{sys.executable}, {RANKS / "tf_sessions.py"}, {ways}]
  log_dir: {tmp_path / "logs"}
hosts:
  - {{host: localhost, devices: {ranks}}}
session_injection: auto
{OPTIONS.format(dump=tmp_path / "dump")}{extra}""")
    return path


def results(stdout: str) -> Dict[int, dict]:
    found = {}
    for match in re.finditer(r"^\[r(\d+) d\d+\] RESULT (.*)$", stdout, re.MULTILINE):
        found[int(match.group(1))] = json.loads(match.group(2))
    return found


def test_options_land_in_every_kind_of_session(tmp_path: Path) -> None:
    result = run_cli("run", str(job(tmp_path, 2, "explicit, config, plain, monitored")), "--job-id", "tf", timeout=180)
    assert result.returncode == 0, result.stderr
    got = results(result.stdout)
    assert sorted(got) == [0, 1]
    for rank, ways in got.items():
        assert sorted(ways) == ["config", "explicit", "monitored", "plain"]
        for way, seen in ways.items():
            params = seen["params"]
            assert params["hcom_parallel"] == ["b", True], way
            assert params["precision_mode"] == ["s", "allow_mix_precision"], way
            assert params["enable_dump"] == ["b", True], way
            assert params["dump_path"] == ["s", str(tmp_path / "dump" / str(rank))], way
            assert seen["remapping"] == 2 and seen["memory_optimization"] == 2  # RewriterConfig.OFF, as CANN asks
            if way == "plain":
                assert params["iterations_per_loop"] == ["i", 10]
            else:  # the script set 5 itself: by default the script wins, with a warning
                assert params["iterations_per_loop"] == ["i", 5], way
                assert seen["soft"] is True and seen["inter_op"] == 2, way  # the script's settings survive
        assert ways["config"]["script_config_unchanged"] is True
    assert "the script sets 5, the YAML sets 10; keeping the script's" in result.stderr
    record = json.loads((tmp_path / "logs" / "tf" / "rank-1" / "session_options.json").read_text())
    assert record["options"]["dump_path"] == str(tmp_path / "dump" / "1")
    assert record["conflicts"] == [] or "iterations_per_loop" in record["conflicts"][0]


def test_yaml_precedence_overrides_the_script(tmp_path: Path) -> None:
    result = run_cli(
        "run", str(job(tmp_path, 1, "config", "session_precedence: yaml\n")), "--job-id", "tf", timeout=120
    )
    assert result.returncode == 0, result.stderr
    assert results(result.stdout)[0]["config"]["params"]["iterations_per_loop"] == ["i", 10]
    assert "keeping the YAML's" in result.stderr


def test_the_readme_main_job_trains_4_ranks_to_identical_weights(log_dir: Path, marker: str) -> None:
    result = run_cli(
        "run",
        "cluster_configs/local-4.yaml",
        "--log-dir",
        str(log_dir),
        "--job-id",
        "demo",
        env={"NPLTEST_MARKER": marker},
        timeout=240,
    )
    assert result.returncode == 0, result.stderr
    weights = []
    for rank in range(4):
        assert f"[r{rank} d{rank}] rank {rank}: weights identical on all 4 ranks: yes" in result.stdout
        rank_dir = log_dir / "demo" / f"rank-{rank}"
        weights.append(json.loads((rank_dir / "weights.json").read_text()))
        got = json.loads((rank_dir / "session_options.json").read_text())["options"]
        assert got["iterations_per_loop"] == 50 and got["hcom_parallel"] is True
    assert weights[1:] == weights[:1] * 3
    expected = [(i + 1) / 8 for i in range(8)] + [0.5]  # the synthetic data's true weights and bias
    assert max(abs(a - b) for a, b in zip(weights[0], expected)) < 0.02


def test_two_ranks_train_and_a_peer_that_never_joins_does_not_hang_the_job(tmp_path: Path, marker: str) -> None:
    path = tmp_path / "job.yaml"
    path.write_text(f"""version: 1
job:
  command: [{sys.executable}, examples/tf_train.py, --steps, "50", --fail-rank, "1", --fail-after, "6"]
  workdir: {ROOT}
  log_dir: {tmp_path / "logs"}
  grace_period_s: 2
hosts:
  - {{host: localhost, devices: 2}}
cpu_fallback: true
""")
    started = time.monotonic()
    result = run_cli("run", str(path), "--job-id", "peer", env={"NPLTEST_MARKER": marker}, timeout=120)
    assert result.returncode == 1
    assert "root cause: rank 1 exited with code 3" in result.stderr
    events = [json.loads(line) for line in (tmp_path / "logs" / "peer" / "events.jsonl").read_text().splitlines()]
    failed = next(e["time"] for e in events if e["kind"] == "rank_exited" and e["rank"] == 1)
    # rank 0 waits in its all-reduce for a peer that never comes; the stop (SIGTERM, then SIGKILL
    # after the 2 s grace period if TensorFlow ignores it) ends it
    assert events[-1]["time"] - failed < 2 + 1.5
    assert time.monotonic() - started < 60


def test_data_preprocessing_mode_reaches_the_session(tmp_path: Path) -> None:
    path = job(tmp_path, 2, "plain", "data_preprocess: host_main\n")
    result = run_cli("run", str(path), "--job-id", "pre", timeout=120)
    assert result.returncode == 0, result.stderr
    for rank, ways in results(result.stdout).items():
        params = ways["plain"]["params"]
        assert params["local_rank_id"] == ["i", rank] and params["local_device_list"] == ["s", "0,1"]


def test_the_legacy_example_gets_the_options_without_changes(log_dir: Path) -> None:
    result = run_cli("run", "examples/legacy.yaml", "--log-dir", str(log_dir), "--job-id", "legacy", timeout=120)
    assert result.returncode == 0, result.stderr
    for rank in range(2):
        assert f"[r{rank} d{rank}] done: loss" in result.stdout
        got = json.loads((log_dir / "legacy" / f"rank-{rank}" / "session_options.json").read_text())
        assert got["via"] == "injection"
        assert got["options"] == {
            "dump_path": f"/tmp/npulaunch-dump/legacy/{rank}",
            "iterations_per_loop": 1,
            "precision_mode_v2": "origin",
            "use_off_line": True,
        }


def _init_then_train(tmp_path: Path, script_options: Dict[str, str]) -> Tuple[Any, Dict[str, Any], Path]:
    """Run one rank that calls session.initialize_system() and then builds its training session
    with session.npu_config() over a config that sets ``script_options`` itself."""
    log = tmp_path / "npu_bridge.log"
    code = f"""
import json, os, tensorflow as tf
from npulaunch import session
tf.compat.v1.disable_eager_execution()
shutdown = session.initialize_system()
mine = tf.compat.v1.ConfigProto()
custom = mine.graph_options.rewrite_options.custom_optimizers.add()
custom.name = "NpuOptimizer"
for name, value in {script_options!r}.items():
    custom.parameter_map[name].s = value.encode()
session.npu_config(base=mine)
shutdown()
print(json.dumps(json.load(open(os.path.join(os.environ['NPULAUNCH_RANK_DIR'], 'session_options.json')))))
"""
    path = tmp_path / "job.yaml"
    path.write_text(f"""version: 1
job:
  command: [{sys.executable}, -c, {json.dumps(code)}]
  log_dir: {tmp_path / "logs"}
hosts: [{{host: localhost, devices: 1}}]
env:
  PYTHONPATH: {STANDINS / "python"}
  NPU_BRIDGE_STANDIN_LOG: {log}
session_options:
  enable_dump: true
  dump_path: /tmp/dump/{{rank}}
  hcom_parallel: true
  precision_mode_v2: mixed_float16
  deterministic: 1
  op_compiler_cache_dir: {tmp_path / "cache"}
""")
    result = run_cli("run", str(path), "--job-id", "init", timeout=120)
    assert result.returncode == 0, result.stderr
    return result, json.loads(result.stdout.split("] ", 1)[1]), log


def test_initialize_system_carries_every_global_option_with_the_training_values(tmp_path: Path) -> None:
    result, got, log = _init_then_train(tmp_path, {})
    events = [json.loads(line)["event"] for line in log.read_text().splitlines()]
    assert events == ["npu_init imported", "initialize_system", "shutdown_system"]
    init, train = got["sessions"]
    assert (init["via"], train["via"]) == ("initialize_system", "npu_config")
    # GE reads precision_mode_v2, deterministic and the compile cache once, at initialisation: they
    # must be on the init session; hcom_parallel is read per session and stays off it
    assert init["options"] == {
        "deterministic": 1,
        "dump_path": "/tmp/dump/0",
        "enable_dump": True,
        "op_compiler_cache_dir": str(tmp_path / "cache"),
        "precision_mode_v2": "mixed_float16",
    }
    assert train["options"]["hcom_parallel"] is True

    def global_options(options: Dict[str, Any]) -> Dict[str, Any]:
        return {k: v for k, v in options.items() if k in session.GLOBAL_OPTIONS}

    assert global_options(init["options"]) == global_options(train["options"])
    assert train["conflicts"] == [] and "read once" not in result.stderr


def test_a_script_session_that_changes_a_global_option_is_warned_about(tmp_path: Path) -> None:
    # the script's own precision_mode_v2 wins its session (precedence: script), but GE took the
    # init session's value when it initialised: the script's has no effect, and the user is told
    result, got, _ = _init_then_train(tmp_path, {"precision_mode_v2": "origin"})
    init, train = got["sessions"]
    assert init["options"]["precision_mode_v2"] == "mixed_float16"
    assert train["options"]["precision_mode_v2"] == "origin"
    assert [c for c in train["conflicts"] if "read once" in c] == [
        "session option precision_mode_v2 is read once, when GE initialises: the process's first NPU session "
        "had 'mixed_float16', this one 'origin'; GE keeps the first (set it the same on every session, "
        "initialize_system's included)"
    ]
    assert "precision_mode_v2 is read once" in result.stderr


def test_every_global_and_init_option_is_a_catalog_option() -> None:
    from npulaunch.config.catalog.options import OPTIONS

    names = {spec.name for spec in OPTIONS}
    assert set(session.INIT_SESSION_OPTIONS) - names == set()
    assert set(session.GLOBAL_OPTIONS) <= set(session.INIT_SESSION_OPTIONS)


def test_without_npu_bridge_initialize_system_does_nothing() -> None:
    from npulaunch import session

    assert session.initialize_system()() is None


def test_two_ranks_train_to_identical_weights(log_dir: Path) -> None:
    result = run_cli(
        "run",
        "cluster_configs/local-4.yaml",
        "--nproc-per-node",
        "2",
        "--log-dir",
        str(log_dir),
        "--job-id",
        "two",
        "--",
        "python3",
        "examples/tf_train.py",
        "--steps",
        "60",
        timeout=180,
    )
    assert result.returncode == 0, result.stderr
    assert result.stdout.count("weights identical on all 2 ranks: yes") == 2
    first, second = (json.loads((log_dir / "two" / f"rank-{r}" / "weights.json").read_text()) for r in (0, 1))
    assert first == second


def tf1_python() -> str:
    """An interpreter with TensorFlow 1.15 (CANN's TF stack): NPULAUNCH_TF1_PYTHON, else the venv
    scripts/setup-dev.sh makes when the machine has a Python 3.7."""
    made = ROOT / ".ci" / "venv-tf1" / "bin" / "python"
    return os.environ.get("NPULAUNCH_TF1_PYTHON", str(made) if made.exists() else "")


def test_options_land_in_tensorflow_1_15_sessions(tmp_path: Path) -> None:
    python = tf1_python()
    require(
        bool(python) and os.path.exists(python),
        "a Python 3.7 with tensorflow-cpu 1.15 (bash scripts/setup-dev.sh makes .ci/venv-tf1 from python3.7)",
    )
    path = job(tmp_path, 1, "explicit, config, plain, monitored", f"env:\n  PYTHONPATH: {ROOT}\n")
    path.write_text(path.read_text().replace(sys.executable, python))
    result = run_cli("run", str(path), "--job-id", "tf1", timeout=180)
    assert result.returncode == 0, result.stderr
    ways = results(result.stdout)[0]
    assert sorted(ways) == ["config", "explicit", "monitored", "plain"]
    for way, seen in ways.items():
        assert seen["params"]["hcom_parallel"] == ["b", True], way
        assert seen["params"]["precision_mode"] == ["s", "allow_mix_precision"], way
        assert seen["params"]["iterations_per_loop"] == ["i", 10 if way == "plain" else 5], way
        assert seen["remapping"] == 2 and seen["memory_optimization"] == 2
    assert ways["config"]["script_config_unchanged"] is True


MERGE_EXCLUSIVE = """
import json, sys
import tensorflow as tf
from npulaunch.host import session
config = tf.compat.v1.ConfigProto()
custom = config.graph_options.rewrite_options.custom_optimizers.add()
custom.name = "NpuOptimizer"
custom.parameter_map["precision_mode"].s = b"allow_mix_precision"  # the script's own, as ModelZoo scripts do
out = {}
for prefer in ("script", "yaml"):
    merged = tf.compat.v1.ConfigProto()
    merged.CopyFrom(config)
    conflicts = session.apply_options(merged, {"precision_mode_v2": "mixed_float16", "hcom_parallel": True}, prefer)
    out[prefer] = {"options": session.effective_options(merged), "conflicts": conflicts}
print(json.dumps(out))
"""


def test_a_yaml_option_exclusive_with_the_scripts_own_never_reaches_the_session_beside_it() -> None:
    """The TF Adapter fails the first session.run when precision_mode and precision_mode_v2 are both set."""
    import subprocess

    result = subprocess.run(
        [sys.executable, "-c", MERGE_EXCLUSIVE],
        capture_output=True,
        text=True,
        timeout=120,
        env=dict(os.environ, PYTHONPATH=str(ROOT), TF_CPP_MIN_LOG_LEVEL="3"),
    )
    assert result.returncode == 0, result.stderr
    out = json.loads(result.stdout.strip().splitlines()[-1])
    script, yaml = out["script"], out["yaml"]
    assert script["options"]["precision_mode"] == "allow_mix_precision" and "precision_mode_v2" not in script["options"]
    assert yaml["options"]["precision_mode_v2"] == "mixed_float16" and "precision_mode" not in yaml["options"]
    assert script["options"]["hcom_parallel"] is True and yaml["options"]["hcom_parallel"] is True
    assert script["conflicts"] == [
        "session options precision_mode and precision_mode_v2 cannot be used together: the script sets "
        "precision_mode, the YAML precision_mode_v2; keeping the script's"
    ]
    assert yaml["conflicts"][0].endswith("keeping the YAML's")


RUN_CONFIG = """
import json, sys
from npulaunch.host import session
from npu_bridge.estimator.npu.npu_config import NPURunConfig
config = NPURunConfig(**session.run_config_kwargs())  # the real argument names: a wrong one is a TypeError
given = {k: (type(v).__name__, v.given) if hasattr(v, "given") else v for k, v in config.given.items()}
print(json.dumps(given, sort_keys=True, default=str))
"""


def test_run_config_kwargs_fit_npurunconfigs_real_signature() -> None:
    """Every catalog option with an example: what NPURunConfig takes by name, the dump, profiling,
    memory and dynamic-input options in their config objects, the rest left out with a warning."""
    import subprocess

    from npulaunch.config.catalog.options import OPTIONS
    from npulaunch.host.session import RUN_CONFIG_OBJECTS

    planned = {spec.name: spec.example for spec in OPTIONS if spec.example is not None}
    assert len(planned) > 40
    env = dict(
        os.environ, PYTHONPATH=f"{STANDINS / 'python'}{os.pathsep}{ROOT}", NPULAUNCH_SESSION_OPTIONS=json.dumps(planned)
    )
    result = subprocess.run([sys.executable, "-c", RUN_CONFIG], capture_output=True, text=True, timeout=60, env=env)
    assert result.returncode == 0, result.stderr
    given = json.loads(result.stdout)
    if "enable_dump" in planned:
        assert (
            given["dump_config"][0] == "DumpConfig" and given["dump_config"][1]["enable_dump"] == planned["enable_dump"]
        )
    if "profiling_mode" in planned:
        assert given["profiling_config"] == [
            "ProfilingConfig",
            {
                k: v
                for k, v in (
                    ("enable_profiling", planned.get("profiling_mode")),
                    ("profiling_options", planned.get("profiling_options")),
                )
                if v is not None
            },
        ]
    assert given["iterations_per_loop"] == planned["iterations_per_loop"]
    wrapped = {name for _, fields in RUN_CONFIG_OBJECTS.values() for name in fields}
    left = sorted(set(planned) - set(given) - wrapped)
    assert left, "some catalog options have no NPURunConfig argument (fp_point, use_off_line, ...)"
    assert f"NPURunConfig has no argument for session option(s) {', '.join(left)}" in result.stderr


LOOP_SCRIPT = """
import json, os, tensorflow as tf
from npulaunch import session
tf.compat.v1.disable_eager_execution()
w = tf.compat.v1.get_variable("w", initializer=1.0, use_resource=True)
train_op = tf.compat.v1.assign_add(w, 1.0).op
with tf.compat.v1.Session(config=session.npu_config()) as sess:
    sess.run(tf.compat.v1.global_variables_initializer())
    op = session.set_iteration_per_loop(sess, train_op)
    print(json.dumps({"name": op.name, "same": op is train_op}))
"""


def loop_job(tmp_path: Path, loops: int, standins: bool) -> Path:
    path = tmp_path / "job.yaml"
    env = f"env:\n  PYTHONPATH: {STANDINS / 'python'}\n  NPU_BRIDGE_STANDIN_LOG: {tmp_path / 'bridge.log'}\n"
    path.write_text(f"""version: 1
job:
  command: [{sys.executable}, -c, {json.dumps(LOOP_SCRIPT)}]
  log_dir: {tmp_path / "logs"}
hosts: [{{host: localhost, devices: 1}}]
{env if standins else ""}session_options:
  iterations_per_loop: {loops}
  enable_data_pre_proc: true
""")
    return path


def test_set_iteration_per_loop_hands_the_ranks_value_to_npu_bridge(tmp_path: Path) -> None:
    result = run_cli("run", str(loop_job(tmp_path, 5, True)), "--job-id", "loop", timeout=120)
    assert result.returncode == 0, result.stderr
    assert json.loads(result.stdout.split("] ", 1)[1]) == {"name": "IterationOp", "same": False}
    calls = [json.loads(line) for line in (tmp_path / "bridge.log").read_text().splitlines()]
    assert [c["iterations_per_loop"] for c in calls if c["event"] == "set_iteration_per_loop"] == [5]


def test_set_iteration_per_loop_without_npu_bridge_runs_one_step_and_says_so(tmp_path: Path) -> None:
    result = run_cli("run", str(loop_job(tmp_path, 5, False)), "--job-id", "loop", timeout=120)
    assert result.returncode == 0, result.stderr
    assert json.loads(result.stdout.split("] ", 1)[1])["same"] is True
    assert "iterations_per_loop 5 needs npu_bridge: without it every sess.run() runs one step" in result.stderr
