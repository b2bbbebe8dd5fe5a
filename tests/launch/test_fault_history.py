"""The fault history with real jobs (real rank processes, the npu-smi stand-in playing the fault): a recovered
job records its NPU fault in the log_dir's ledger; the next job of that log_dir keeps the NPU off (``plan`` and
``check`` say so and why, ``run`` places its rank on the spare); the same code twice on one NPU within 24 h
keeps it off until ``npulaunch faults --clear``, after which it is placed again; a ledger that cannot be
written is refused before anything starts, naming file, line and key."""

from __future__ import annotations

import json
import sys
import threading
import time
from pathlib import Path
from typing import Dict, List

from helpers import TESTS, run_cli

from npulaunch.plan.ledger import Entry

RANK = TESTS / "ranks" / "rank.py"


def job(tmp_path: Path, job_id: str, final: int, extra: str = "") -> Path:
    """A 4-rank job on NPUs 0-3 with spare NPU 4, training to step ``final``, in the shared log_dir."""
    path = tmp_path / f"{job_id}.yaml"
    path.write_text(
        f"job:\n  command: [{sys.executable}, {RANK}, '*=train:{final}']\n  log_dir: {tmp_path / 'logs'}\n"
        f"  id: {job_id}\n  grace_period_s: 2\n"
        "rank_table: none\n"
        "hosts:\n  - host: localhost\n    devices: [0, 1, 2, 3]\n    spare_devices: [4]\n"
        "env: {CKPT_DIR: 'out/{device_id}/ckpt', CKPT_EVERY: '5', TRAIN_STEP_S: '0.05'}\n"
        "monitor: {health_interval_s: 0.3}\n"
        f"recovery:\n  checkpoint_dir: out/{{device_id}}/ckpt\n{extra}"
    )
    return path


def npulaunch(tmp_path: Path, marker: str, *args: str, faults: str = ""):
    (tmp_path / "npu-faults").write_text(faults)
    env = {"NPLTEST_MARKER": marker, "NPU_STANDIN_FAULTS": str(tmp_path / "npu-faults")}
    return run_cli(*args, standins=True, cwd=tmp_path, env=env, timeout=90)


def fault_at_step(tmp_path: Path, job_id: str, line: str, step: int = 8) -> threading.Thread:
    """The stand-in reports ``line`` once rank 0 of the first attempt printed ``step``."""
    log = tmp_path / "logs" / job_id / "attempt-1" / "rank-0" / "stdout.log"

    def wait() -> None:
        deadline = time.monotonic() + 30
        while time.monotonic() < deadline:
            if log.exists() and f"step {step}\n" in log.read_text():
                (tmp_path / "npu-faults").write_text(line + "\n")
                return
            time.sleep(0.05)

    thread = threading.Thread(target=wait, daemon=True)
    thread.start()
    return thread


def ledger(tmp_path: Path) -> List[Dict]:
    return [json.loads(line) for line in (tmp_path / "logs" / "faults.jsonl").read_text().splitlines()]


def devices(tmp_path: Path, job_id: str) -> List[Dict]:
    summary = json.loads((tmp_path / "logs" / job_id / "summary.json").read_text())
    return [a["devices"] for a in summary["attempts"]]


def test_a_recovered_fault_keeps_its_npu_off_the_next_job(tmp_path: Path, marker: str) -> None:
    fault_at_step(tmp_path, "first", "2 Alarm 80E01801")
    result = npulaunch(tmp_path, marker, "run", str(job(tmp_path, "first", 25)))
    assert result.returncode == 0, result.stdout + result.stderr
    assert devices(tmp_path, "first") == [{"localhost": [0, 1, 2, 3]}, {"localhost": [0, 1, 4, 3]}]
    (entry,) = ledger(tmp_path)
    assert entry["what"] == "npu_fault" and (entry["host"], entry["device"]) == ("localhost", 2)
    assert (entry["code"], entry["level"], entry["job_id"], entry["attempt"]) == (
        "80E01801",
        "RestartBusiness",
        "first",
        1,
    )
    assert abs(entry["time"] - time.time()) < 60

    second = job(tmp_path, "second", 3)
    plan = npulaunch(tmp_path, marker, "plan", str(second))
    assert plan.returncode == 0, plan.stderr
    assert "keeps localhost NPU 2 off (the notes say why)" in plan.stdout
    said = "note: the fault history (%s) keeps localhost NPU 2 off: NPU fault 80E01801 (RestartBusiness) in job " % (
        tmp_path / "logs" / "faults.jsonl"
    )
    assert said + "first attempt 1 at " in plan.stdout and "kept off for 24 h" in plan.stdout
    assert "note: recovery: localhost: NPU 2 -> spare NPU 4" in plan.stdout
    check = npulaunch(tmp_path, marker, "check", str(second), "--json")
    assert check.returncode == 0, check.stdout + check.stderr
    kept = json.loads(check.stdout)["job"]["fault_history"]["kept_off"]
    assert [(k["host"], k["device"], k["level"]) for k in kept] == [("localhost", 2, "RestartBusiness")]
    run = npulaunch(tmp_path, marker, "run", str(second))
    assert run.returncode == 0, run.stdout + run.stderr
    assert devices(tmp_path, "second") == [{"localhost": [0, 1, 4, 3]}]
    plan_json = json.loads((tmp_path / "logs" / "second" / "attempt-1" / "plan.json").read_text())
    assert plan_json["recovery"]["history"]["kept_off"][0]["device"] == 2
    assert len(ledger(tmp_path)) == 1  # a job without a fault adds nothing


def test_the_same_code_twice_in_24_h_keeps_the_npu_off_until_cleared(tmp_path: Path, marker: str) -> None:
    (tmp_path / "logs").mkdir()
    earlier = Entry(time.time() - 5 * 3600, "npu_fault", "localhost", 2, "80E01801", "RestartBusiness", "", "old", 1)
    (tmp_path / "logs" / "faults.jsonl").write_bytes(earlier.to_line())
    window = "  ledger_window_h: 1\n"  # the fault 5 h ago alone keeps nothing off
    first = job(tmp_path, "again", 25, window)
    plan = npulaunch(tmp_path, marker, "plan", str(first))
    assert "keeps nothing off this job" in plan.stdout and "NPU 2 -> spare" not in plan.stdout, plan.stdout
    fault_at_step(tmp_path, "again", "2 Alarm 80E01801")
    result = npulaunch(tmp_path, marker, "run", str(first))
    assert result.returncode == 0, result.stdout + result.stderr
    assert [e["job_id"] for e in ledger(tmp_path)] == ["old", "again"]

    later = job(tmp_path, "later", 3, "  ledger_window_h: 0\n")  # only escalated NPUs are kept off
    plan = npulaunch(tmp_path, marker, "plan", str(later))
    assert "keeps localhost NPU 2 off: ManuallySeparateNPU: fault 80E01801 2 times within 24 h (old attempt 1 at " in (
        plan.stdout
    )
    assert "kept off until a person clears it" in plan.stdout and "NPU 2 -> spare NPU 4" in plan.stdout
    listed = npulaunch(tmp_path, marker, "faults", str(later))
    assert listed.returncode == 0 and "localhost:2: ManuallySeparateNPU" in listed.stdout, listed.stdout

    cleared = npulaunch(tmp_path, marker, "faults", str(tmp_path / "logs"), "--clear", "localhost:2")
    assert cleared.returncode == 0, cleared.stderr
    assert "cleared localhost NPU 2 (released: localhost:2)" in cleared.stdout
    assert "it keeps nothing off now" in cleared.stdout
    assert ledger(tmp_path)[-1]["what"] == "cleared"
    run = npulaunch(tmp_path, marker, "run", str(later))
    assert run.returncode == 0, run.stdout + run.stderr
    assert devices(tmp_path, "later") == [{"localhost": [0, 1, 2, 3]}]  # placed again


def test_a_ledger_that_cannot_be_written_is_refused_before_anything_starts(tmp_path: Path, marker: str) -> None:
    (tmp_path / "a-file").write_text("")
    yaml = job(tmp_path, "never", 3, f"  ledger: {tmp_path / 'a-file' / 'faults.jsonl'}\n")
    line = yaml.read_text().splitlines().index(f"  ledger: {tmp_path / 'a-file' / 'faults.jsonl'}") + 1
    for command in ("run", "check", "plan"):
        result = npulaunch(tmp_path, marker, command, str(yaml))
        assert result.returncode == 2, result.stdout + result.stderr
        assert f"{yaml}:{line}: recovery.ledger: found '{tmp_path / 'a-file' / 'faults.jsonl'}'" in result.stderr
        assert f"{tmp_path / 'a-file'} is not a directory" in result.stderr
        assert "Traceback" not in result.stderr
    assert not (tmp_path / "logs" / "never").exists()  # nothing started


def test_a_torn_ledger_is_said_and_never_fatal(tmp_path: Path, marker: str) -> None:
    (tmp_path / "logs").mkdir()
    good = Entry(time.time(), "npu_fault", "localhost", 1, "80E01801", "RestartBusiness", "", "old", 1)
    (tmp_path / "logs" / "faults.jsonl").write_bytes(b"not json\n" + good.to_line() + good.to_line()[:20])
    result = npulaunch(tmp_path, marker, "plan", str(job(tmp_path, "torn", 3)))
    assert result.returncode == 0 and "Traceback" not in result.stderr, result.stderr
    assert (
        "warning: fault history %s: skipped 2 torn or corrupt lines: line 1 (not JSON), 3 (torn"
        % (tmp_path / "logs" / "faults.jsonl")
        in result.stdout
    )
    assert "keeps localhost NPU 1 off" in result.stdout


def test_under_volcano_the_fault_is_written_and_the_history_said(tmp_path: Path, marker: str) -> None:
    import socket

    node = socket.gethostname()
    yaml = tmp_path / "vc.yaml"
    yaml.write_text(
        job(tmp_path, "unused", 30)
        .read_text()
        .replace("  id: unused\n", "")
        .replace("    spare_devices: [4]\n", "")
        .replace("host: localhost", f"host: {node}")
    )
    volcano = {"VC_TASK_INDEX": "0", "VC_WORKER_HOSTS": node, "VC_WORKER_NUM": "1", "VOLCANO_JOB_NAME": "vc1"}
    (tmp_path / "npu-faults").write_text("")
    fault_at = tmp_path / "logs" / "vc1" / "node-0" / "rank-0" / "stdout.log"

    def fault() -> None:
        deadline = time.monotonic() + 30
        while time.monotonic() < deadline:
            if fault_at.exists() and "step 8\n" in fault_at.read_text():
                (tmp_path / "npu-faults").write_text("2 Alarm 80E01801\n")
                return
            time.sleep(0.05)

    threading.Thread(target=fault, daemon=True).start()
    env = {"NPLTEST_MARKER": marker, "NPU_STANDIN_FAULTS": str(tmp_path / "npu-faults"), **volcano}
    result = run_cli("run", str(yaml), standins=True, cwd=tmp_path, env=env, timeout=90)
    assert result.returncode == 1, result.stdout + result.stderr  # reported, not recovered: Volcano places
    assert "NPU fault on %s NPU 2" % node in result.stdout + result.stderr
    (entry,) = ledger(tmp_path)
    assert (entry["host"], entry["device"], entry["code"], entry["job_id"]) == (node, 2, "80E01801", "vc1")
    env["VOLCANO_JOB_NAME"] = "vc2"
    plan = run_cli("plan", str(yaml), standins=True, cwd=tmp_path, env=env)
    assert plan.returncode == 0, plan.stderr
    assert f"would keep {node} NPU 2 off, but the scheduler placed this job" in plan.stdout


def test_the_faults_command(tmp_path: Path) -> None:
    logs = tmp_path / "logs"
    none = run_cli("faults", str(logs / "faults.jsonl"), cwd=tmp_path)
    assert none.returncode == 0 and "no entries yet" in none.stdout and "it keeps nothing off now" in none.stdout
    logs.mkdir()
    now = time.time()
    entries = [
        Entry(now - 60, "npu_fault", "h1", 3, "80E18402", "SeparateNPU", "NPU fault 80E18402 (SeparateNPU)", "j", 1),
        Entry(now - 30, "host_lost", "h2", None, None, None, "host lost (exit status 255)", "j", 2),
    ]
    (logs / "faults.jsonl").write_bytes(b"".join(e.to_line() for e in entries))
    listed = run_cli("faults", "logs", cwd=tmp_path)
    assert listed.returncode == 0, listed.stderr
    assert "80E18402  SeparateNPU" in listed.stdout and "host_lost" in listed.stdout
    assert "  h1:3: NPU fault 80E18402 (SeparateNPU) in job j attempt 1 at " in listed.stdout
    assert "  h2: host lost (exit status 255) in job j attempt 2 at " in listed.stdout
    document = json.loads(run_cli("faults", "logs", "--json", cwd=tmp_path).stdout)
    assert [k["host"] for k in document["kept_off"]] == ["h1", "h2"] and len(document["entries"]) == 2
    bad = run_cli("faults", "logs", "--clear", "h1:", cwd=tmp_path)
    assert bad.returncode == 2 and "--clear 'h1:': HOST or HOST:NPU" in bad.stderr
    missing = run_cli("faults", "nowhere.yaml", cwd=tmp_path)
    assert missing.returncode == 2 and "nowhere.yaml: no such file or directory" in missing.stderr
    host = run_cli("faults", "logs", "--clear", "h2", cwd=tmp_path)
    assert "cleared host h2 and its NPUs (released: h2)" in host.stdout and "  h1:3:" in host.stdout
    every = run_cli("faults", str(logs / "faults.jsonl"), "--all", cwd=tmp_path)
    assert "cleared everything (released: h1:3)" in every.stdout and "it keeps nothing off now" in every.stdout
    assert len((logs / "faults.jsonl").read_text().splitlines()) == 4  # appended, never rewritten
