"""Time to recover from a fault, phase by phase, from the events of each attempt
(<job dir>/attempt-N/events.jsonl), against MindCluster's published figures for its resumable training.

Local: ``npulaunch run`` of 8 training ranks on NPUs 0-7 with NPU 8 as the spare (the npu-smi stand-in of
tests/standins on the PATH, NPU_STANDIN_COUNT=16), ``monitor.health_interval_s`` 1 (and 5); once rank 0 has
printed step 10, after a random delay of up to one interval (the fault lands at any point of the watch's
cycle), "2 Alarm 80E01801" is written to the stand-in's faults file. SSH (root): test hosts h1 and h2 with 2
ranks each and h3 as the spare host (network namespaces with their own sshd, tests/netns_hosts.py, on a
subnet of their own); once h1's rank 0 has printed step 10, h2's link goes down; the launcher has
NPULAUNCH_HEARTBEAT_TIMEOUT_S 5 (and 15). Slurm (root, Slurm installed): the tests' Slurm cluster
(tests/slurm_cluster.py: slurmctld, and nodes n1-n3 that are network namespaces with one slurmd each), the
batch script ``npulaunch sbatch`` renders for 2 nodes x 2 ranks with ``slurm.spare_nodes: 1``, run with
``sbatch --wait``; once n2's rank 2 has printed step 10, n2 dies (its link goes down, its slurmd and every
process on it SIGKILLed); the controller's heartbeat timeout is its default under srun, 5 s. Ranks:
tests/ranks/rank.py ``*=train:N`` (a step every 0.05 s, a TF-format checkpoint every 5 steps); each job runs
to its end (attempt 2 resumes and finishes), and must have recovered.

Phases: detection (fault written or link cut -> the npu_health / agent_lost event), stop (-> the last
rank_exited of attempt 1), re-plan + resume (-> the first rank_started of attempt 2: the attempt's
report, the new plan without the faulty NPU or host, the checkpoint given to every rank's directory,
the new agents), start (first -> last rank_started of attempt 2), total (fault -> last rank started),
first step (-> the moment the last rank ended its first step after resuming: the ranks print it), all
training again (fault -> that moment).

Usage: ``python3 bench/recovery.py [--smoke] [--repeats 5] [--out DIR] [--no-ssh] [--no-slurm]
[--only-slurm]`` (SSH and Slurm rows only as root);
writes recovery.md. ``--smoke``: one local run, interval 1 s, small job, into a temporary directory.
"""

from __future__ import annotations

import argparse
import json
import os
import random
import re
import shutil
import statistics
import subprocess
import sys
import tempfile
import threading
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Callable, Dict, List, Optional

HERE = Path(__file__).resolve().parent
ROOT = HERE.parent
sys.path.insert(0, str(ROOT / "tests"))
from netns_hosts import NetnsHosts, available, network  # noqa: E402

PY = sys.executable
RANK = ROOT / "tests" / "ranks" / "rank.py"
STANDINS = ROOT / "tests" / "standins"
STEP_S = 0.05  # TRAIN_STEP_S
TRIGGER_STEP = 10  # the fault comes after rank 0 printed this step
PHASES = ("detection", "stop", "replan", "start", "total", "first_step", "to_training")
SPLIT = ("exit_to_report", "report_to_next", "next_to_first")
# not BENCH_NET: up() removes its network's leftovers, so hosts of their own never clash with
# ssh_startup.py's or the tests' (tests/test_bench.py runs the benchmarks) when they run at the same time
RECOVERY_NET = network("10.77", "rec", "r")
RECOVERY_SLURM_NET = network("10.73", "recs", "q")  # the Slurm nodes n1-n3


@dataclass(frozen=True)
class Scenario:
    name: str  # "local" or "ssh"
    wait_s: float  # health_interval_s (local) or the heartbeat timeout (SSH)
    repeats: int

    @property
    def label(self) -> str:
        if self.name == "local":
            return f"local, 8 ranks, health_interval_s {self.wait_s:g}"
        if self.name == "slurm":
            return f"Slurm, 2 nodes x 2 ranks + spare node, heartbeat timeout {self.wait_s:g} s (its default)"
        return f"SSH, 2 hosts x 2 ranks + spare host, heartbeat timeout {self.wait_s:g} s"

    @property
    def final_step(self) -> int:
        """Far enough that attempt 1 is still training when the fault is seen (local: up to one interval
        of delay, one interval to be seen; SSH: the timeout), plus 2 s."""
        extra_s = 2 * self.wait_s + 2 if self.name == "local" else self.wait_s + 3
        return TRIGGER_STEP + int(extra_s / STEP_S)


NOTES = """Conditions: every host is this machine (the SSH hosts and the Slurm nodes are network namespaces sharing its
2 cores); the ranks are tests/ranks/rank.py training loops (a step every 0.05 s, a 4-value TF-format
checkpoint every 5 steps), so stopping is immediate (they obey SIGTERM) and the checkpoint given to each
rank's directory is tiny; npu-smi and hccn_tool are the tests' Python stand-ins (tens of ms a call).
Locally, re-plan + resume includes the new plan's device-IP discovery (`hccn_tool -i N -ip -g` for each NPU,
one after another) and the health check of the new placement's NPUs (npu-smi); over SSH the plan uses what
the hosts reported at the start, and the new attempt's agents are started on h1 and h3; under Slurm each
agent of the new attempt is a job step of its own (`srun --nodes=1 --nodelist=NODE --overlap`, on n1 and
n3), so re-plan + resume includes srun's start of the steps (slurmctld's step creation, slurmstepd on each
node). Over SSH, h2's agent stops its own ranks when it has heard nothing from the launcher for the same
timeout, counted from the launcher's last beat (every 2 s) before the cut.

What bounds detection: locally, the health watch asks npu-smi about each job NPU every
`monitor.health_interval_s`, so a fault waits up to one interval for the next round (half of one on
average, as here: the fault lands at a random point of the cycle), plus one round of tool calls. Over
SSH, a host that goes silent is declared lost after NPULAUNCH_HEARTBEAT_TIMEOUT_S by design (the
launcher hears the agent's output and its beats every 2 s, so detection is the timeout itself); under
Slurm the same, with its default of 5 s under srun, where Slurm's own detection of a dead node is
SlurmdTimeout (300 s by default; slurm.conf(5)).

MindCluster's figures (Ascend/mind-cluster docs/en/scheduling/usage/resumable_training/
00_feature_description.md, "Training Recovery Duration Reference": GPT-3 under PyTorch, one node of 8
NPUs, rescheduling mode): fault discovery under 5 s, fault handling under 30 s, training restart about
70 s for 3B parameters (checkpoint loading about 3 s of it) and 210 s for 15B (loading about 90 s).
Their detection is Ascend Device Plugin's (DCMI fault subscription, or polling where the driver has
none; 01_solutions_principles.md) reported through ConfigMaps to ClusterD and Volcano; handling
isolates the device, stops the pods and reschedules them; the restart is new containers, the training
processes, collective communication set-up, checkpoint loading and compilation. The figures here
compare with discovery (detection) and with handling (stop + re-plan + resume + start); npulaunch's
total ends when the processes are started again, before the training program's own set-up (HCCL,
loading the checkpoint into the model, graph compilation), which is the same under either.
"""


def base_env() -> Dict[str, str]:
    env = {k: v for k, v in os.environ.items() if k not in ("PYTHONDONTWRITEBYTECODE", "RANK_ID", "RANK_SIZE")}
    env["PATH"] = os.pathsep.join(p for p in env.get("PATH", "").split(os.pathsep) if p != str(STANDINS))
    env.update(PYTHONPATH=str(ROOT), PYTHONUNBUFFERED="1")
    return env


def local_job(run_dir: Path, scenario: Scenario) -> Path:
    config = run_dir / "job.yaml"
    config.write_text(
        f"job:\n  command: [{PY}, {RANK}, '*=train:{scenario.final_step}']\n  log_dir: {run_dir / 'logs'}\n"
        f"  grace_period_s: 2\nrank_table: none\n"
        f"hosts:\n  - host: localhost\n    devices: [0, 1, 2, 3, 4, 5, 6, 7]\n    spare_devices: [8]\n"
        f"env: {{CKPT_DIR: 'out/{{device_id}}/ckpt', CKPT_EVERY: '5', TRAIN_STEP_S: '{STEP_S}',\n"
        "  TRAIN_STAMP_RESUMED: '1'}\n"
        f"monitor: {{health_interval_s: {scenario.wait_s:g}}}\n"
        "recovery:\n  checkpoint_dir: out/{device_id}/ckpt\n"
    )
    return config


def ssh_job(run_dir: Path, scenario: Scenario, hosts: NetnsHosts) -> Path:
    config = run_dir / "job.yaml"
    config.write_text(f"""job:
  command: [{PY}, {RANK}, "*=train:{scenario.final_step}"]
  log_dir: {run_dir / "logs"}
  grace_period_s: 1
hosts:
  - {{host: h1, devices: 2}}
  - {{host: h2, devices: 2}}
spares:
  - {{host: h3, devices: 2}}
rank_table: none
ssh: {{user: root, identity_file: {hosts.client_key}, known_hosts: {hosts.known_hosts}, config: {hosts.ssh_config}}}
env: {{CKPT_DIR: "out/{{host}}/{{device_id}}", CKPT_EVERY: "5", TRAIN_STEP_S: "{STEP_S}", TRAIN_STAMP_RESUMED: "1"}}
recovery:
  checkpoint_dir: out/{{host}}/{{device_id}}
""")
    return config


def when_step(log: Path, delay_s: float, act: Callable[[], None], stamp: List[float]) -> threading.Thread:
    """Once ``log`` shows step TRIGGER_STEP, wait ``delay_s``, ``act`` and note the time it was done."""

    def wait() -> None:
        deadline = time.monotonic() + 60
        while time.monotonic() < deadline:
            if log.exists() and f"step {TRIGGER_STEP}\n" in log.read_text():
                time.sleep(delay_s)
                act()
                stamp.append(time.time())
                return
            time.sleep(0.02)

    thread = threading.Thread(target=wait, daemon=True)
    thread.start()
    return thread


def events(attempt_dir: Path) -> List[dict]:
    return [json.loads(line) for line in (attempt_dir / "events.jsonl").read_text().splitlines() if line.strip()]


def phases(job_dir: Path, fault_at: float, seen_kind: str, stepped: List[float]) -> Dict[str, float]:
    """The phases of one recovery (seconds), from the two attempts' events; ``stepped``: when every rank had
    ended its first step after resuming (first_steps)."""
    one, two = events(job_dir / "attempt-1"), events(job_dir / "attempt-2")
    if seen_kind == "npu_health":
        seen = min(e["time"] for e in one if e["kind"] == "npu_health" and e.get("action") == "reschedule")
    else:
        seen = min(e["time"] for e in one if e["kind"] == seen_kind)
    exited = max(e["time"] for e in one if e["kind"] == "rank_exited")
    reported = max(e["time"] for e in one if e["kind"] == "job_finished")
    next_job = min(e["time"] for e in two if e["kind"] == "job_started")
    started = sorted(e["time"] for e in two if e["kind"] == "rank_started")
    return {
        "detection": seen - fault_at,
        "stop": exited - seen,
        "replan": started[0] - exited,
        "start": started[-1] - started[0],
        "total": started[-1] - fault_at,
        "first_step": stepped[0] - started[-1] if stepped else float("nan"),
        "to_training": stepped[0] - fault_at if stepped else float("nan"),
        "exit_to_report": reported - exited,
        "report_to_next": next_job - reported,
        "next_to_first": started[0] - next_job,
    }


def first_steps(job_dir: Path) -> List[float]:
    """When the last rank of attempt 2 ended its first step after resuming: the ranks say when
    (tests/ranks/rank.py with TRAIN_STAMP_RESUMED=1), so nothing polls their logs while the recovery is timed."""
    stamps = []
    for log in job_dir.glob("attempt-2/**/stdout.log"):
        found = re.search(r"^first step after resuming at ([0-9.]+)$", log.read_text(errors="replace"), re.M)
        if found:
            stamps.append(float(found.group(1)))
    return [max(stamps)] if stamps else []


def check_recovered(job_dir: Path, moved: str) -> None:
    summary = json.loads((job_dir / "summary.json").read_text())
    attempts = summary.get("attempts") or []
    ok = len(attempts) == 2 and attempts[0].get("then") == "recovered" and attempts[1].get("status") == "succeeded"
    if not ok or moved not in json.dumps(attempts[1].get("devices")):
        raise SystemExit(f"{job_dir}: the job did not recover as expected: {json.dumps(attempts)[:2000]}")


def launch(config: Path, env: Dict[str, str]) -> subprocess.CompletedProcess:
    return subprocess.run(
        [PY, "-m", "npulaunch", "run", str(config), "--job-id", "rec"],
        cwd=config.parent,
        env=env,
        stdout=subprocess.DEVNULL,
        stderr=subprocess.PIPE,
        text=True,
        timeout=600,
    )


def local_once(work: Path, scenario: Scenario, tag: str, rng: random.Random) -> Dict[str, float]:
    run_dir = work / tag
    run_dir.mkdir()
    config = local_job(run_dir, scenario)
    faults = run_dir / "faults"
    faults.write_text("")
    env = base_env()
    env.update(PATH=f"{STANDINS}{os.pathsep}{env['PATH']}", NPU_STANDIN_COUNT="16", NPU_STANDIN_FAULTS=str(faults))
    stamp: List[float] = []
    log = run_dir / "logs" / "rec" / "attempt-1" / "rank-0" / "stdout.log"
    when_step(log, rng.uniform(0, scenario.wait_s), lambda: faults.write_text("2 Alarm 80E01801\n"), stamp)
    done = launch(config, env)
    if done.returncode != 0 or not stamp:
        raise SystemExit(f"{tag}: exit {done.returncode}, fault written: {bool(stamp)}\n{done.stderr[-2000:]}")
    job_dir = run_dir / "logs" / "rec"
    check_recovered(job_dir, "8")
    result = phases(job_dir, stamp[0], "npu_health", first_steps(job_dir))
    shutil.rmtree(run_dir)
    return result


def ssh_once(work: Path, scenario: Scenario, tag: str, hosts: NetnsHosts) -> Dict[str, float]:
    run_dir = work / tag
    run_dir.mkdir()
    config = ssh_job(run_dir, scenario, hosts)
    env = base_env()
    env["NPULAUNCH_HEARTBEAT_TIMEOUT_S"] = f"{scenario.wait_s:g}"
    h2 = next(host for host in hosts.hosts if host.name == "h2")
    stamp: List[float] = []
    gone: List[float] = []
    watchers: List[threading.Thread] = []
    log = run_dir / "logs" / "rec" / "attempt-1" / "hosts" / "h1" / "rank-0" / "stdout.log"

    def cut() -> None:
        hosts.set_link(h2, up=False)
        watchers.append(threading.Thread(target=lambda: gone.append(ranks_gone(h2)), daemon=True))
        watchers[0].start()

    when_step(log, 0.0, cut, stamp)
    try:
        done = launch(config, env)
    finally:
        hosts.set_link(h2, up=True)
    if done.returncode != 0 or not stamp:
        raise SystemExit(f"{tag}: exit {done.returncode}, link cut: {bool(stamp)}\n{done.stderr[-2000:]}")
    job_dir = run_dir / "logs" / "rec"
    check_recovered(job_dir, "h3")
    result = phases(job_dir, stamp[0], "agent_lost", first_steps(job_dir))
    wait_quiet(h2)
    for watcher in watchers:
        watcher.join(5)
    if gone:
        result["h2_ranks_gone"] = gone[0] - stamp[0]
    shutil.rmtree(run_dir)
    return result


def slurm_job(run_dir: Path, scenario: Scenario, partition: str) -> Path:
    config = run_dir / "job.yaml"
    config.write_text(f"""job:
  command: [{PY}, {RANK}, "*=train:{scenario.final_step}"]
  log_dir: {run_dir / "logs"}
  grace_period_s: 1
hosts:
  - {{host: any-node, devices: 2}}
rank_table: none
env: {{CKPT_DIR: '{run_dir}/out/{{rank}}/ckpt', CKPT_EVERY: '5', TRAIN_STEP_S: '{STEP_S}', TRAIN_STAMP_RESUMED: '1'}}
recovery: {{checkpoint_dir: '{run_dir}/out/{{rank}}/ckpt'}}
slurm: {{nodes: 2, spare_nodes: 1, partition: {partition}}}
""")
    return config


def slurm_once(work: Path, scenario: Scenario, tag: str, cluster) -> Dict[str, float]:
    """One run under the tests' Slurm cluster (nodes in network namespaces): the batch script npulaunch
    sbatch renders, n2 dead (its link down, every process on it killed) once its rank 2 printed step 10;
    the job must finish on n1 and n3."""
    run_dir = work / tag
    (run_dir / "logs").mkdir(parents=True)
    config = slurm_job(run_dir, scenario, cluster.partition)
    script = run_dir / "job.sbatch"
    script.write_text(
        subprocess.run(
            [PY, "-m", "npulaunch", "sbatch", str(config)], env=base_env(), capture_output=True, text=True, check=True
        ).stdout
    )
    env = cluster.client_env(base_env())
    env.pop("SBATCH_OUTPUT", None)
    stamp: List[float] = []
    log_glob = "*/attempt-1/hosts/n2/rank-2/stdout.log"

    def watch() -> None:
        deadline = time.monotonic() + 120
        while time.monotonic() < deadline and not stamp:
            for log in (run_dir / "logs").glob(log_glob):
                if f"step {TRIGGER_STEP}\n" in log.read_text(errors="replace"):
                    stamp.append(time.time())
                    cluster.kill_node("n2")
                    return
            time.sleep(0.02)

    threading.Thread(target=watch, daemon=True).start()
    try:
        done = subprocess.run(
            ["sbatch", "--wait", str(script)], env=env, cwd=run_dir, capture_output=True, text=True, timeout=600
        )
    finally:
        cluster.revive_node("n2")
    job_dir = next(p for p in (run_dir / "logs").iterdir() if p.is_dir())
    if done.returncode != 0 or not stamp:
        raise SystemExit(f"{tag}: exit {done.returncode}, n2 killed: {bool(stamp)}\n{done.stderr[-2000:]}")
    check_recovered(job_dir, "n3")
    result = phases(job_dir, stamp[0], "agent_lost", first_steps(job_dir))
    shutil.rmtree(run_dir)
    return result


def host_pids(host) -> List[int]:
    found = subprocess.run(["ip", "netns", "pids", host.netns], capture_output=True, text=True).stdout.split()
    return [int(pid) for pid in found if int(pid) != host.pid]


def ranks_gone(host, limit_s: float = 120.0) -> float:
    """When the last rank process on ``host`` ended (its agent stops them when it stops hearing the
    launcher; the launcher cannot reach them)."""
    deadline = time.monotonic() + limit_s
    while time.monotonic() < deadline:
        alive = False
        for pid in host_pids(host):
            try:
                alive = alive or str(RANK).encode() in Path(f"/proc/{pid}/cmdline").read_bytes()
            except OSError:
                pass
        if not alive:
            break
        time.sleep(0.05)
    return time.time()


def wait_quiet(host, limit_s: float = 60.0) -> None:
    """Until nothing but its sshd runs on ``host``, so that the next run starts on quiet hosts."""
    deadline = time.monotonic() + limit_s
    while host_pids(host) and time.monotonic() < deadline:
        time.sleep(0.2)


def warm_up(work: Path) -> None:
    """One trivial run first: bytecode written once, as users have it."""
    subprocess.run(
        [PY, "-m", "npulaunch", "run", "--nproc-per-node", "1", "--log-dir", str(work / "warm"), "--", PY, "-c", "0"],
        cwd=work,
        env=base_env(),
        stdout=subprocess.DEVNULL,
        stderr=subprocess.DEVNULL,
    )
    shutil.rmtree(work / "warm", ignore_errors=True)


def cell(values: List[float]) -> str:
    if len(values) == 1:
        return f"{values[0]:.2f} s"
    return f"{statistics.median(values):.2f} s ({min(values):.2f}-{max(values):.2f})"


def report(results: Dict[Scenario, List[Dict[str, float]]], args: argparse.Namespace, took_s: float) -> str:
    lines = [
        f"`{' '.join(['python3 bench/recovery.py', *sys.argv[1:]])}`, {time.strftime('%Y-%m-%d')}: "
        f"{os.cpu_count()} cores, Python {sys.version.split()[0]}; {took_s:.0f} s in all. Medians (min-max) "
        "of the runs; times from the attempts' events.jsonl and the moment the fault was written (local) or "
        "h2's link went down (SSH) or n2 died (Slurm).\n",
        "| scenario | runs | detection | stop | re-plan + resume | start | total (fault -> last rank started) "
        "| -> every rank's first step | fault -> all training again |",
        "|---|---:|---:|---:|---:|---:|---:|---:|---:|",
    ]
    for scenario, runs in results.items():
        cells = " | ".join(cell([r[p] for r in runs]) for p in PHASES)
        lines.append(f"| {scenario.label} | {len(runs)} | {cells} |")
    lines += [
        "",
        "Re-plan + resume, split: the last rank's exit -> attempt 1's job_finished (its report) -> attempt 2's "
        "job_started (the new plan, the checkpoint given to every rank's directory, the new agents) -> its "
        "first rank_started.\n",
        "| scenario | exit -> report | report -> next attempt | next attempt -> first rank |",
        "|---|---:|---:|---:|",
    ]
    for scenario, runs in results.items():
        lines.append(f"| {scenario.label} | " + " | ".join(cell([r[p] for r in runs]) for p in SPLIT) + " |")
    gone = [r["h2_ranks_gone"] for runs in results.values() for r in runs if "h2_ranks_gone" in r]
    if gone:
        lines.append(
            "\nSSH: h2's own ranks, which the launcher cannot reach, were stopped by h2's agent when it stopped "
            "hearing the launcher: the link cut -> the last of them gone, "
            + ", ".join(
                f"timeout {s.wait_s:g} s: {cell([r['h2_ranks_gone'] for r in runs])}"
                for s, runs in results.items()
                if s.name == "ssh" and all("h2_ranks_gone" in r for r in runs)
            )
            + "."
        )
    return "\n".join(lines) + "\n\n" + NOTES


def slurm_missing() -> str:
    from slurm_cluster import available as slurm_available

    return slurm_available()


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--smoke", action="store_true", help="one local run, interval 1 s (does it work?)")
    parser.add_argument("--repeats", type=int, default=5)
    parser.add_argument("--out", help="default bench/results (with --smoke, a temporary directory)")
    parser.add_argument("--no-ssh", action="store_true", help="no SSH scenarios")
    parser.add_argument("--no-slurm", action="store_true", help="no Slurm scenario")
    parser.add_argument("--only-slurm", action="store_true", help="the Slurm scenario alone")
    args = parser.parse_args()
    out = Path(args.out or (tempfile.mkdtemp(prefix="npl-recovery-") if args.smoke else HERE / "results"))
    out.mkdir(parents=True, exist_ok=True)
    scenarios = [Scenario("local", 1.0, 1 if args.smoke else args.repeats)]
    ssh = not args.smoke and not args.no_ssh
    if ssh and available():
        print(f"SSH scenarios skipped: this machine lacks {available()}", file=sys.stderr)
        ssh = False
    if not args.smoke:
        scenarios.append(Scenario("local", 5.0, args.repeats))
    if ssh:
        scenarios += [Scenario("ssh", 5.0, args.repeats), Scenario("ssh", 15.0, 1)]
    slurm = not args.smoke and not args.no_slurm and not slurm_missing()
    if slurm:
        scenarios.append(Scenario("slurm", 5.0, args.repeats))
    if args.only_slurm:
        scenarios = [s for s in scenarios if s.name == "slurm"]
    work = Path(tempfile.mkdtemp(prefix="npl-recovery-work-"))
    rng = random.Random(1)
    results: Dict[Scenario, List[Dict[str, float]]] = {s: [] for s in scenarios}
    hosts: Optional[NetnsHosts] = None
    nodes: Optional[NetnsHosts] = None
    cluster = None
    started = time.monotonic()
    try:
        warm_up(work)
        if ssh and any(s.name == "ssh" for s in scenarios):
            hosts = NetnsHosts(work / "hosts", 3, RECOVERY_NET).up()
        if any(s.name == "slurm" for s in scenarios):
            from slurm_cluster import SlurmCluster

            nodes = NetnsHosts(work / "nodes", 3, RECOVERY_SLURM_NET, name_prefix="n").up()
            cluster = SlurmCluster(work / "slurm", netns=nodes).up()
        count = 0
        for round_ in range(max(s.repeats for s in scenarios)):
            for scenario in scenarios:
                if round_ >= scenario.repeats:
                    continue
                count += 1
                tag = f"r{count}"
                if scenario.name == "local":
                    results[scenario].append(local_once(work, scenario, tag, rng))
                elif scenario.name == "slurm":
                    results[scenario].append(slurm_once(work, scenario, tag, cluster))
                else:
                    assert hosts is not None
                    results[scenario].append(ssh_once(work, scenario, tag, hosts))
    finally:
        if hosts is not None:
            hosts.down()
        if cluster is not None:
            cluster.down()
        if nodes is not None:
            nodes.down()
        shutil.rmtree(work, ignore_errors=True)
    text = report(results, args, time.monotonic() - started)
    (out / "recovery.md").write_text(text)
    print(text, end="")


if __name__ == "__main__":
    main()
