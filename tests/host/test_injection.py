"""Zero-code injection without TensorFlow: it stays out of the way (no TensorFlow import, the user's
own sitecustomize still runs) and warns when the options reached no session."""

from __future__ import annotations

import sys
from pathlib import Path

from helpers import run_cli


def write_job(tmp_path: Path, code: str, extra: str = "") -> Path:
    path = tmp_path / "job.yaml"
    path.write_text(f"""version: 1
job:
  command: [{sys.executable}, -c, "{code}"]
  log_dir: {tmp_path / "logs"}
hosts:
  - {{host: localhost, devices: 1}}
session_injection: on
session_options: {{hcom_parallel: true}}
{extra}""")
    return path


def test_no_tensorflow_import_and_a_warning_that_nothing_was_reached(tmp_path: Path) -> None:
    code = "import sys; print('tensorflow' in sys.modules, 'sitecustomize' in sys.modules)"
    result = run_cli("run", str(write_job(tmp_path, code)), "--job-id", "j")
    assert result.returncode == 0, result.stderr
    assert "[r0 d0] False True" in result.stdout  # our sitecustomize ran; TensorFlow was not imported
    assert "session_injection is on but the script never imported TensorFlow" in result.stderr


def test_the_users_own_sitecustomize_still_runs(tmp_path: Path) -> None:
    mine = tmp_path / "mysite"
    mine.mkdir()
    (mine / "sitecustomize.py").write_text("import builtins\nbuiltins.USER_SITE_RAN = 'yes'\n")
    code = "import builtins; print('user site:', getattr(builtins, 'USER_SITE_RAN', 'no'))"
    result = run_cli("run", str(write_job(tmp_path, code, f"env:\n  PYTHONPATH: {mine}\n")), "--job-id", "j")
    assert result.returncode == 0, result.stderr
    assert "[r0 d0] user site: yes" in result.stdout


def test_injection_off_leaves_pythonpath_alone(tmp_path: Path) -> None:
    code = "import sys; print('sitecustomize' in sys.modules and 'npulaunch' in sys.modules['sitecustomize'].__file__)"
    path = write_job(tmp_path, code, "monitor: {stragglers: off}\n")
    path.write_text(path.read_text().replace("session_injection: on", "session_injection: off"))
    result = run_cli("run", str(path), "--job-id", "j")
    assert result.returncode == 0, result.stderr
    assert "[r0 d0] False" in result.stdout


def test_with_only_the_pace_hook_tensorflow_sessions_are_left_alone(tmp_path: Path) -> None:
    # straggler detection (on by default) puts the hook on PYTHONPATH; session injection off installs no session patch
    code = (
        "import os, sys; site = sys.modules['sitecustomize']; "
        "print('npulaunch' in site.__file__, sorted(site._TARGETS), os.environ['NPULAUNCH_HOOKS'])"
    )
    path = write_job(tmp_path, code)
    path.write_text(path.read_text().replace("session_injection: on", "session_injection: off"))
    result = run_cli("run", str(path), "--job-id", "j")
    assert result.returncode == 0, result.stderr
    assert "tensorflow.python.client.session" not in result.stdout
    assert "'torch.nn.parallel.distributed'" in result.stdout and "True" in result.stdout and " pace" in result.stdout
    assert "session_injection is on" not in result.stderr
