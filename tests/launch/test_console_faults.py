"""The launcher's console going away (issue 15): a terminal that hangs up while the live view runs,
``--nohup``, and a reader that closes the pipe (``npulaunch run ... | head``). Real launchers on a real
pseudo-terminal and real pipes; real rank processes."""

from __future__ import annotations

import json
import os
import pty
import select
import subprocess
import sys
import time
from pathlib import Path
from typing import List, Tuple

from helpers import base_env, marked_pids, npulaunch_argv, wait_until

STEPS = "import time,sys\nfor i in range({n}):\n  print('step', i, '{marker}', flush=True); time.sleep({pause})"


def job_yaml(tmp_path: Path, marker: str, steps: int, pause: float, fail: bool = False) -> Path:
    code = STEPS.format(n=steps, marker=marker, pause=pause)
    if fail:  # rank 1 fails after a few steps: there is a root cause to report
        code = code.replace("for i in", "import os\nfor i in")
        code += "\n  if i == 20 and os.environ['RANK_ID'] == '1': sys.exit(3)"
    path = tmp_path / "job.yaml"
    path.write_text(
        f"version: 1\njob:\n  command: [{sys.executable}, -c, {json.dumps(code)}]\n"
        f"  log_dir: {tmp_path / 'logs'}\n  grace_period_s: 5\n"
        "hosts: [{host: localhost, devices: 2}]\nrank_table: none\n"
    )
    return path


def run_on_a_terminal(argv: List[str], stderr_path: Path) -> Tuple[int, int]:
    """Start ``argv`` as the session leader of a new pseudo-terminal (its stdout and stdin; stderr
    to a file, to read afterwards). Returns (pid, master fd)."""
    pid, master = pty.fork()
    if pid == 0:  # the child: the terminal is its controlling terminal
        fd = os.open(str(stderr_path), os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o600)
        os.dup2(fd, 2)
        env = base_env()
        os.execvpe(argv[0], argv, env)
    return pid, master


def read_until(master: int, needle: bytes, timeout_s: float) -> bytes:
    seen, deadline = b"", time.monotonic() + timeout_s
    while needle not in seen and time.monotonic() < deadline:
        ready, _, _ = select.select([master], [], [], 0.1)
        if ready:
            try:
                seen += os.read(master, 65536)
            except OSError:
                break
    return seen


def wait_exit(pid: int, timeout_s: float) -> int:
    deadline = time.monotonic() + timeout_s
    while time.monotonic() < deadline:
        done, status = os.waitpid(pid, os.WNOHANG)
        if done:
            return os.waitstatus_to_exitcode(status)
        time.sleep(0.05)
    os.kill(pid, 9)
    os.waitpid(pid, 0)
    raise AssertionError(f"the launcher did not exit in {timeout_s} s")


def summary(tmp_path: Path, job_id: str) -> dict:
    return json.loads((tmp_path / "logs" / job_id / "summary.json").read_text())


def test_a_terminal_hang_up_stops_the_job_gracefully_with_its_record(tmp_path: Path) -> None:
    marker = "hangup-marker-1"
    argv = npulaunch_argv("run", str(job_yaml(tmp_path, marker, 2000, 0.02)), "--job-id", "hup")
    pid, master = run_on_a_terminal(argv, tmp_path / "stderr.txt")
    assert b"step" in read_until(master, marker.encode(), 30)
    os.close(master)  # the terminal goes away: the kernel sends SIGHUP to the session
    code = wait_exit(pid, 30)
    stderr = (tmp_path / "stderr.txt").read_text()
    assert code == 129, stderr
    assert "Traceback" not in stderr and "Exception ignored" not in stderr, stderr
    job = summary(tmp_path, "hup")["job"]
    assert (job["status"], job["stop_signal"], job["exit_code"]) == ("stopped", "SIGHUP", 129)
    events = [json.loads(line) for line in (tmp_path / "logs" / "hup" / "events.jsonl").read_text().splitlines()]
    # the ranks were stopped with SIGTERM (their grace period), not killed
    assert sorted(e["signal"] for e in events if e["kind"] == "rank_exited") == ["SIGTERM", "SIGTERM"]
    assert wait_until(lambda: not marked_pids(marker), 10)


def test_with_nohup_a_hang_up_leaves_the_job_running_to_its_end(tmp_path: Path) -> None:
    marker = "hangup-marker-2"
    argv = npulaunch_argv("run", str(job_yaml(tmp_path, marker, 150, 0.02)), "--job-id", "nohup", "--nohup")
    pid, master = run_on_a_terminal(argv, tmp_path / "stderr.txt")
    assert b"step" in read_until(master, marker.encode(), 30)
    os.close(master)
    code = wait_exit(pid, 60)
    stderr = (tmp_path / "stderr.txt").read_text()
    assert code == 0, stderr
    assert "Traceback" not in stderr and "Exception ignored" not in stderr, stderr
    assert summary(tmp_path, "nohup")["job"]["status"] == "succeeded"
    for rank in (0, 1):  # nothing lost: every step is in the logs, printed after the hang-up too
        lines = (tmp_path / "logs" / "nohup" / f"rank-{rank}" / "stdout.log").read_text().splitlines()
        assert len([line for line in lines if line.startswith("step")]) == 150


def test_a_reader_that_goes_away_does_not_take_the_report_with_it(tmp_path: Path) -> None:
    # npulaunch run ... | head -1: stdout's reader leaves at once, stderr still has the report
    marker = "pipe-marker"
    argv = npulaunch_argv("run", str(job_yaml(tmp_path, marker, 400, 0.01, fail=True)), "--job-id", "pipe")
    with open(tmp_path / "stderr.txt", "w") as err:
        proc = subprocess.Popen(argv, stdout=subprocess.PIPE, stderr=err, env=base_env())
        assert proc.stdout is not None
        proc.stdout.readline()
        proc.stdout.close()
        code = proc.wait(60)
    stderr = (tmp_path / "stderr.txt").read_text()
    assert code == 1, stderr
    assert "root cause: rank 1 exited with code 3" in stderr, stderr
    assert "Traceback" not in stderr and "Exception ignored" not in stderr, stderr
    assert summary(tmp_path, "pipe")["job"]["root_cause_rank"] == 1


BURST = "import sys\nout = sys.stdout.buffer\nfor i in range(300000): out.write(b'line %d\\n' % i)\nout.flush()"


def test_a_burst_the_console_cannot_take_is_counted_not_queued(tmp_path: Path) -> None:
    # one rank writes 300,000 lines at once and exits: the log keeps every line, the console shows
    # what it could and counts the rest in a note, and nothing is both shown and counted
    path = tmp_path / "job.yaml"
    path.write_text(
        f"version: 1\njob:\n  command: [{sys.executable}, -c, {json.dumps(BURST)}]\n  log_dir: {tmp_path / 'logs'}\n"
        "hosts: [{host: localhost, devices: 1}]\nrank_table: none\n"
    )
    result = subprocess.run(
        npulaunch_argv("run", str(path), "--job-id", "burst", "--no-live"),
        capture_output=True,
        text=True,
        env=base_env(),
        timeout=120,
    )
    assert result.returncode == 0, result.stderr
    log = (tmp_path / "logs" / "burst" / "rank-0" / "stdout.log").read_text().splitlines()
    assert log == [f"line {i}" for i in range(300000)]
    shown = [line for line in result.stdout.splitlines() if line.startswith("[r0 d0] line ")]
    notes = [line for line in result.stdout.splitlines() if "lines not shown" in line]
    counted = sum(int(note.split("npulaunch: ")[1].split(" lines")[0].replace(",", "")) for note in notes)
    assert len(shown) + counted == 300000  # every line shown or counted, none both
    assert all("all are in the" in note for note in notes)


def test_the_local_runner_counts_what_the_console_has_no_room_for(tmp_path: Path) -> None:
    from helpers import host_plan

    from npulaunch.launch import local

    runner = local.LocalRunner(host_plan(tmp_path, "cap-marker", "*=exit:0"), {})
    spec = runner.agent.plan.ranks[0]
    block = b"x\n" * 1000  # 2,000 bytes
    for _ in range(local.MAX_PENDING_BYTES // 2000 + 5):
        runner._output(spec, "stdout", block)
    items = runner.items(0.0)
    kept = sum(len(item.block) for item in items[:-1])
    assert kept == local.MAX_PENDING_BYTES // 2000 * 2000  # queued up to the cap, not beyond
    dropped = (local.MAX_PENDING_BYTES // 2000 + 5) * 1000 - kept // 2
    assert (
        items[-1].block
        == (
            f"[npulaunch: {dropped:,} lines not shown here (the console fell behind); all are in the rank's log]\n"
        ).encode()
    )
    runner.close()


def test_a_slow_reader_does_not_hold_up_the_failure_or_the_report(tmp_path: Path) -> None:
    # stdout goes to a reader that takes a line every 10 ms while 2 ranks flood; rank 1 fails: the job
    # is stopped at once and the report reaches stderr, whatever stdout's reader still has to take
    marker = "slow-reader-marker"
    code = (
        "import os, sys, time\n"
        "if os.environ['RANK_ID'] == '1':\n    time.sleep(1.0)\n    sys.exit(3)\n"
        f"while True:\n    print('flooding {marker} ' + 'x' * 60, flush=False)\n"
    )
    path = tmp_path / "job.yaml"
    path.write_text(
        f"version: 1\njob:\n  command: [{sys.executable}, -c, {json.dumps(code)}]\n"
        f"  log_dir: {tmp_path / 'logs'}\n  grace_period_s: 5\n"
        "hosts: [{host: localhost, devices: 2}]\nrank_table: none\n"
    )
    argv = npulaunch_argv("run", str(path), "--job-id", "slow")
    reader = subprocess.Popen(
        [sys.executable, "-c", "import sys, time\nfor line in sys.stdin:\n    time.sleep(0.01)"],
        stdin=subprocess.PIPE,
    )
    start = time.monotonic()
    with open(tmp_path / "stderr.txt", "w") as err:
        launcher = subprocess.Popen(argv, stdout=reader.stdin, stderr=err, env=base_env())
        assert reader.stdin is not None
        reader.stdin.close()
        code = launcher.wait(60)
    took = time.monotonic() - start
    reader.kill()
    stderr = (tmp_path / "stderr.txt").read_text()
    assert code == 1, stderr
    assert "root cause: rank 1 exited with code 3" in stderr
    events = [json.loads(line) for line in (tmp_path / "logs" / "slow" / "events.jsonl").read_text().splitlines()]
    failed = next(e["time"] for e in events if e["kind"] == "rank_exited" and e["rank"] == 1)
    finished = next(e["time"] for e in events if e["kind"] == "job_finished")
    assert finished - failed < 5.0  # teardown did not wait for the reader (it would need minutes)
    assert took < 30.0, took  # and the launcher waited for it at most DRAIN_AT_EXIT_S at the end
    assert wait_until(lambda: not marked_pids(marker), 10)


def test_rank_lines_for_dev_null_are_not_formatted_but_a_file_gets_them_prefixed(tmp_path: Path) -> None:
    from helpers import host_plan

    from npulaunch.config.cluster import ConsoleMode
    from npulaunch.views.console import Console, is_devnull

    spec = host_plan(tmp_path, "console-marker", "*=exit:0").ranks[0]
    block = b"one\r\ntwo\n10%\r50%\r100%\n"  # a run of progress updates shows as its last
    with open(os.devnull, "wb") as null, open(tmp_path / "err", "wb") as err:
        assert is_devnull(null) and not is_devnull(err)
        console = Console(ConsoleMode.ALL, out=null, err=err)
        console.rank_output(spec, "stdout", block)
        console.rank_output(spec, "stderr", block)
        console.drain(5.0)
        assert list(console._writers) == [id(err)]  # nothing was queued for /dev/null
    prefix = f"[{spec.label}] "
    assert (tmp_path / "err").read_text() == f"{prefix}one\n{prefix}two\n{prefix}50%\n{prefix}100%\n"
