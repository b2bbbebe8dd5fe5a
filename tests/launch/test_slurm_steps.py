"""npulaunch holding a Slurm allocation, on a real Slurm cluster whose nodes n1-n3 are network-namespace
hosts with their own slurmd (the slurm_nodes fixture): the batch script's one ``npulaunch run`` starts each
node's agent as a job step (srun is the transport, as SSH is over SSH), and when a node dies mid-run (every
process on it killed, its link down) the agents' heartbeats say so in seconds, the ranks move to the spare
node as new job steps and resume from the newest checkpoint; an NPU fault on a node does the same; with no
spare left the job requeues itself without the broken node; the next job keeps off it; a crash loop ends
with its own exit code. No process is left on any node."""

from __future__ import annotations

import json
import re
import subprocess
import sys
import threading
import time
from pathlib import Path
from typing import Callable, Dict, List, Optional

from helpers import RANKS, base_env, marked_pids, run_cli

HEARTBEAT_S = 3  # NPULAUNCH_HEARTBEAT_TIMEOUT_S for these jobs: a silent node is lost after this long
FINAL = 400  # training steps of 0.05 s: 20 s, time enough to lose a node in the middle


def write_job(tmp_path: Path, marker: str, action: str, extra: str = "", devices: str = "2") -> Path:
    config = tmp_path / "job.yaml"
    config.write_text(f"""job:
  name: steps
  command: [{sys.executable}, {RANKS / "rank.py"}, "{action}"]
  log_dir: {tmp_path / "logs"}
  grace_period_s: 1
hosts:
  - {{host: any-node, devices: {devices}}}
rank_table: none
env:
  NPLTEST_MARKER: {marker}
  CKPT_DIR: '{tmp_path}/out/{{rank}}/ckpt'
  CKPT_EVERY: '5'
  TRAIN_STEP_S: '0.05'
{extra}""")
    return config


def submit(cluster, tmp_path: Path, marker: str, config: Path, env: Optional[Dict[str, str]] = None):
    """The batch script ``npulaunch sbatch`` renders, submitted with ``sbatch --wait`` (the Popen: the test acts
    on the job while it runs)."""
    rendered = run_cli("sbatch", str(config))
    assert rendered.returncode == 0, rendered.stderr
    script = tmp_path / "job.sbatch"
    script.write_text(rendered.stdout)
    (tmp_path / "logs").mkdir(exist_ok=True)  # --output's directory (npulaunch sbatch --submit makes it)
    environment = cluster.client_env(
        base_env({"NPLTEST_MARKER": marker, "NPULAUNCH_HEARTBEAT_TIMEOUT_S": str(HEARTBEAT_S), **(env or {})}, True)
    )
    environment.pop("SBATCH_OUTPUT", None)  # the script's own --output (in log_dir), as a user gets it
    return subprocess.Popen(
        ["sbatch", "--wait", str(script)],
        env=environment,
        cwd=str(tmp_path),
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
    )


def finish(proc: "subprocess.Popen[str]", tmp_path: Path, timeout: float = 180) -> Dict:
    """The job's end: sbatch's status, the batch script's output, the job directory and its summary."""
    out, err = proc.communicate(timeout=timeout)
    logs = tmp_path / "logs"
    job = next(p for p in logs.iterdir() if p.is_dir())
    output = "\n".join(p.read_text() for p in logs.glob("slurm-*.out"))
    summary = json.loads((job / "summary.json").read_text()) if (job / "summary.json").exists() else {}
    return {"status": proc.returncode, "output": output + out + err, "job": job, "summary": summary}


def when_rank_reaches(job_logs: Path, pattern: str, step: int, act: Callable[[], None]) -> threading.Thread:
    """Do ``act`` once a rank log under ``job_logs`` matching ``pattern`` shows ``step`` (the node's own copy:
    hosts/<node>/rank-N/stdout.log, written as the rank prints)."""

    def wait() -> None:
        deadline = time.monotonic() + 120
        while time.monotonic() < deadline:
            for log in job_logs.glob(pattern):
                if f"step {step}\n" in log.read_text(errors="replace"):
                    act()
                    return
            time.sleep(0.05)

    thread = threading.Thread(target=wait, daemon=True)
    thread.start()
    return thread


def finals(job: Path, attempt: int) -> Dict[int, str]:
    """Each rank's last line of the attempt (rank.py's train prints "final step N w [...]")."""
    found = {}
    for log in job.glob(f"attempt-{attempt}/rank-*/stdout.log"):
        lines = [line for line in log.read_text().splitlines() if line.startswith("final step")]
        if lines:
            found[int(log.parent.name.split("-")[1])] = lines[-1]
    return found


def test_the_batch_scripts_npulaunch_runs_every_node_as_a_job_step(slurm_nodes, tmp_path: Path, marker: str) -> None:
    config = write_job(tmp_path, marker, "*=env", extra=f"slurm: {{nodes: 2, partition: {slurm_nodes.partition}}}\n")
    done = finish(submit(slurm_nodes, tmp_path, marker, config), tmp_path)
    assert done["status"] == 0, done["output"]
    job = done["job"]
    assert job.name.isdigit()  # JOB_ID is SLURM_JOB_ID
    envs = {}
    for log in job.glob("attempt-1/rank-*/stdout.log"):  # a job npulaunch may requeue keeps its attempts apart
        env = json.loads(next(line for line in log.read_text().splitlines() if line.startswith("{")))
        envs[int(env["RANK_ID"])] = env
    assert sorted(envs) == [0, 1, 2, 3]
    assert {r: e["NPULAUNCH_HOST"] for r, e in envs.items()} == {0: "n1", 1: "n1", 2: "n2", 3: "n2"}
    assert {e["JOB_ID"] for e in envs.values()} == {job.name}
    # the agent's step is no rank's: its task variables do not reach them; the job's do
    assert not any(name in e for e in envs.values() for name in ("SLURM_PROCID", "SLURM_NTASKS", "SLURM_STEP_ID"))
    assert {e["SLURM_JOB_ID"] for e in envs.values()} == {job.name}
    plan = json.loads((job / "plan.json").read_text())
    assert plan["sources"]["scheduler"].startswith("slurm") and "job steps" in plan["sources"]["scheduler"]
    assert not marked_pids(marker)


def test_a_node_lost_mid_run_moves_its_ranks_to_the_spare_and_every_rank_resumes(
    slurm_nodes, tmp_path: Path, marker: str
) -> None:
    extra = (
        f"recovery: {{checkpoint_dir: '{tmp_path}/out/{{rank}}/ckpt'}}\n"
        f"slurm: {{nodes: 2, spare_nodes: 1, partition: {slurm_nodes.partition}}}\n"
    )
    config = write_job(tmp_path, marker, f"*=train:{FINAL}", extra)
    proc = submit(slurm_nodes, tmp_path, marker, config)
    killed: List[float] = []

    def kill_n2() -> None:
        killed.append(time.time())
        slurm_nodes.kill_node("n2")

    when_rank_reaches(tmp_path / "logs", "*/attempt-1/hosts/n2/rank-2/stdout.log", 40, kill_n2)
    try:
        done = finish(proc, tmp_path)
    finally:
        slurm_nodes.revive_node("n2")
    assert killed, done["output"]
    assert done["status"] == 0, done["output"]
    job, summary = done["job"], done["summary"]
    attempts = summary["attempts"]
    assert [a["status"] for a in attempts] == ["failed", "succeeded"], attempts
    assert attempts[0]["root_cause"]["cls"] == "host_lost"
    assert attempts[0]["excluded"][0]["host"] == "n2" and attempts[0]["then"] == "recovered"
    assert attempts[1]["devices"] == {"n1": [0, 1], "n3": [0, 1]}
    assert attempts[1]["resumed"]["step"] >= 40
    ended = finals(job, 2)
    assert sorted(ended) == [0, 1, 2, 3] and len(set(ended.values())) == 1, ended
    assert all(line.startswith(f"final step {FINAL} ") for line in ended.values())
    events = [json.loads(line) for line in (job / "attempt-1" / "events.jsonl").read_text().splitlines()]
    lost = next(e for e in events if e["kind"] == "agent_lost")
    assert lost["host"] == "n2" and lost["time"] - killed[0] < HEARTBEAT_S + 3  # heartbeats, not SlurmdTimeout
    assert not marked_pids(marker)

    # the next job of this log_dir keeps off n2: its batch script excludes it, and an allocation that holds n2
    # anyway (a script of the user's own, --nodelist) places the ranks on the other nodes, the spare taking n2's
    ledger = [json.loads(line) for line in (tmp_path / "logs" / "faults.jsonl").read_text().splitlines()]
    assert [(e["what"], e["host"], e["job_id"]) for e in ledger] == [("host_lost", "n2", job.name)]
    rendered = run_cli("sbatch", str(config))
    assert "#SBATCH --exclude=n2\n" in rendered.stdout and "Kept off by the fault history" in rendered.stdout
    nxt = tmp_path / "next"
    nxt.mkdir()
    config = write_job(nxt, marker, "*=env", extra.replace(str(tmp_path), str(nxt)))
    config.write_text(config.read_text().replace(str(nxt / "logs"), str(tmp_path / "logs")))
    script = nxt / "job.sbatch"
    script.write_text(run_cli("sbatch", str(config)).stdout.replace("#SBATCH --exclude=n2\n", ""))
    environment = slurm_nodes.client_env(base_env({"NPLTEST_MARKER": marker}, True))
    environment.pop("SBATCH_OUTPUT", None)
    second = subprocess.run(
        ["sbatch", "--wait", "--nodelist=n1,n2,n3", str(script)],
        env=environment,
        cwd=str(nxt),
        capture_output=True,
        text=True,
        timeout=180,
    )
    assert second.returncode == 0, second.stderr
    again = next(p for p in (tmp_path / "logs").iterdir() if p.is_dir() and p != job)
    plan = json.loads((again / "plan.json").read_text())
    assert plan["recovery"]["history"]["kept_off"], plan["recovery"]["history"]
    events = [json.loads(line) for line in (again / "attempt-1" / "events.jsonl").read_text().splitlines()]
    assert {e["host"] for e in events if e["kind"] == "rank_started"} == {"n1", "n3"}, events
    assert not marked_pids(marker)


def test_a_node_slurm_sets_down_is_lost_when_its_step_ends(slurm_nodes, tmp_path: Path, marker: str) -> None:
    """Slurm itself reports the node failed (an administrator's or a health check's ``scontrol update
    State=DOWN``): its job step ends with srun's error, and the agent is lost then, not a heartbeat later."""
    extra = (
        f"recovery: {{checkpoint_dir: '{tmp_path}/out/{{rank}}/ckpt'}}\n"
        f"slurm: {{nodes: 2, spare_nodes: 1, partition: {slurm_nodes.partition}}}\n"
    )
    config = write_job(tmp_path, marker, f"*=train:{FINAL}", extra)
    proc = submit(slurm_nodes, tmp_path, marker, config, {"NPULAUNCH_HEARTBEAT_TIMEOUT_S": "60"})
    downed: List[float] = []

    def set_down() -> None:
        downed.append(time.time())
        scontrol = ["scontrol", "update", "NodeName=n2", "State=DOWN", "Reason=npltest"]
        subprocess.run(scontrol, env=slurm_nodes.client_env(), capture_output=True, timeout=30)

    when_rank_reaches(tmp_path / "logs", "*/attempt-1/hosts/n2/rank-2/stdout.log", 40, set_down)
    try:
        done = finish(proc, tmp_path)
    finally:
        slurm_nodes.revive_node("n2")
    assert downed and done["status"] == 0, done["output"]
    attempts = done["summary"]["attempts"]
    assert [a["status"] for a in attempts] == ["failed", "succeeded"], attempts
    assert attempts[0]["root_cause"]["cls"] == "host_lost" and attempts[0]["excluded"][0]["host"] == "n2"
    assert attempts[1]["devices"] == {"n1": [0, 1], "n3": [0, 1]} and attempts[1]["resumed"]["step"] >= 40
    events = [json.loads(line) for line in (done["job"] / "attempt-1" / "events.jsonl").read_text().splitlines()]
    lost = next(e for e in events if e["kind"] == "agent_lost")
    assert lost["host"] == "n2" and lost["time"] - downed[0] < 30, lost  # the step's end, not the 60 s timeout
    assert "nothing from the agent" not in lost.get("why", ""), lost
    assert not marked_pids(marker)


def test_an_npu_fault_on_a_node_is_recovered_on_the_spare(slurm_nodes, tmp_path: Path, marker: str) -> None:
    """With an earlier job's fault of the same code on the same NPU in the history (ledger_window_h 0: only a
    repeated code keeps an NPU off), the second makes it ManuallySeparateNPU: kept off until cleared."""
    faults = tmp_path / "faults-{node}"
    (tmp_path / "logs").mkdir()
    earlier = {"time": time.time() - 7200, "what": "npu_fault", "host": "n2", "device": 1, "code": "80E01801"}
    earlier.update(level="RestartBusiness", reason="NPU fault 80E01801 (RestartBusiness)", job_id="0", attempt=1)
    (tmp_path / "logs" / "faults.jsonl").write_text(json.dumps(earlier) + "\n")
    extra = (
        f"recovery: {{checkpoint_dir: '{tmp_path}/out/{{rank}}/ckpt', ledger_window_h: 0}}\n"
        "monitor: {health_interval_s: 0.3}\n"
        f"slurm: {{nodes: 2, spare_nodes: 1, partition: {slurm_nodes.partition}}}\n"
    )
    config = write_job(tmp_path, marker, f"*=train:{FINAL}", extra)
    proc = submit(slurm_nodes, tmp_path, marker, config, {"NPU_STANDIN_FAULTS": str(faults)})
    fault = lambda: (tmp_path / "faults-n2").write_text("1 Alarm 80E01801\n")  # noqa: E731
    when_rank_reaches(tmp_path / "logs", "*/attempt-1/hosts/n2/rank-3/stdout.log", 40, fault)
    done = finish(proc, tmp_path)
    assert done["status"] == 0, done["output"]
    attempts = done["summary"]["attempts"]
    assert attempts[0]["root_cause"]["cls"] == "npu_fault"
    assert {(e["host"], e.get("device")) for e in attempts[0]["excluded"]} == {("n2", 1)}
    assert "n3" in attempts[1]["devices"] and attempts[1]["resumed"]["step"] >= 40
    ended = finals(done["job"], 2)
    assert sorted(ended) == [0, 1, 2, 3] and len(set(ended.values())) == 1, ended
    assert re.search(r"NPU fault on n2 NPU 1", done["output"])
    assert not marked_pids(marker)

    listed = json.loads(run_cli("faults", str(config), "--json").stdout)
    assert [(k["host"], k["device"]) for k in listed["kept_off"]] == [("n2", 1)], listed
    assert "until cleared" in listed["kept_off"][0]["why"] or listed["kept_off"][0]["until"] is None, listed
    assert "#SBATCH --exclude=n2\n" in run_cli("sbatch", str(config)).stdout  # a node with an NPU kept off
    cleared = run_cli("faults", str(config), "--clear", "n2:1")
    assert cleared.returncode == 0, cleared.stderr
    assert "--exclude" not in run_cli("sbatch", str(config)).stdout


def test_a_crash_loop_under_slurm_ends_with_its_own_exit_code(slurm_nodes, tmp_path: Path, marker: str) -> None:
    """Ranks that fail the same way at once on every attempt: the job stops after job.crash_loop_limit
    attempts, however many restarts are allowed, and the batch script exits 93 (do not requeue)."""
    action = '2=say:step-0+hccp_fails_until:99", "*=hang'  # rank 2 on n2: HCCL's set-up fails (retryable)
    config = write_job(tmp_path, marker, action, f"slurm: {{nodes: 2, partition: {slurm_nodes.partition}}}\n")
    config.write_text(config.read_text().replace("  grace_period_s: 1\n", "  grace_period_s: 1\n  max_restarts: 9\n"))
    done = finish(submit(slurm_nodes, tmp_path, marker, config), tmp_path)
    assert done["status"] != 0, done["output"]
    summary = done["summary"]
    assert summary["job"]["exit_code"] == 93 and len(summary["attempts"]) == 3, summary
    assert summary["crash_loop"]["attempts"] == [1, 2, 3], summary["crash_loop"]
    state = subprocess.run(
        ["sacct", "-n", "-X", "-P", "-j", done["job"].name, "-o", "ExitCode"],
        env=slurm_nodes.client_env(),
        capture_output=True,
        text=True,
        timeout=30,
    )
    shown = subprocess.run(
        ["scontrol", "show", "job", "-o", done["job"].name],
        env=slurm_nodes.client_env(),
        capture_output=True,
        text=True,
        timeout=30,
    ).stdout
    assert "ExitCode=93:0" in shown or state.stdout.strip() == "93:0", shown + state.stdout + state.stderr
    assert not marked_pids(marker)


def test_without_a_spare_the_job_requeues_itself_without_the_lost_node_and_resumes(
    slurm_nodes, tmp_path: Path, marker: str
) -> None:
    extra = (
        f"recovery: {{checkpoint_dir: '{tmp_path}/out/{{rank}}/ckpt'}}\n"
        f"slurm: {{nodes: 2, partition: {slurm_nodes.partition}}}\n"
    )
    config = write_job(tmp_path, marker, f"*=train:{FINAL}", extra)
    proc = submit(slurm_nodes, tmp_path, marker, config)
    when_rank_reaches(
        tmp_path / "logs", "*/attempt-1/hosts/n2/rank-2/stdout.log", 40, lambda: slurm_nodes.kill_node("n2")
    )
    try:
        done = finish(proc, tmp_path, timeout=300)
    finally:
        slurm_nodes.revive_node("n2")
    assert done["status"] == 0, done["output"]
    attempts = done["summary"]["attempts"]
    assert [(a["status"], a["then"]) for a in attempts] == [("failed", "requeued"), ("succeeded", "")], attempts
    assert attempts[0]["excluded"][0]["host"] == "n2" and attempts[0]["root_cause"]["cls"] == "host_lost"
    assert attempts[1]["devices"] == {"n1": [0, 1], "n3": [0, 1]} and attempts[1]["resumed"]["step"] >= 40
    assert "requeued job" in done["output"] and "without n2" in done["output"]
    ended = finals(done["job"], 2)
    assert sorted(ended) == [0, 1, 2, 3] and len(set(ended.values())) == 1, ended
    assert all(line.startswith(f"final step {FINAL} ") for line in ended.values())
    shown = subprocess.run(
        ["scontrol", "show", "job", "-o", done["job"].name],
        env=slurm_nodes.client_env(),
        capture_output=True,
        text=True,
        timeout=30,
    ).stdout
    assert "ExcNodeList=n2" in shown and "Restarts=1" in shown, shown
    assert not marked_pids(marker)
