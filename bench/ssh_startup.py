"""Multi-host start-up over SSH: time from `npulaunch run` to every rank started, and to the end
of a job of trivial ranks, for 1, 3 and 6 test hosts (network namespaces with their own sshd, as
in the tests; needs root, iproute2, util-linux, openssh-server and the ssh extra). Also: time
from a remote rank's failure to the launcher's exit.
Usage: sudo python3 bench/ssh_startup.py [--hosts 1,3,6] [--repeats 5]

Besides wall times it reports the launcher's own CPU time and the CPU time the whole machine
spent (every sshd, login shell, agent and rank of every test host, since they all share this
machine's cores): when the machine's CPU time approaches cores x wall time, the start-up is
bound by the hosts' shared CPU, not by anything serial in the launcher."""

from __future__ import annotations

import argparse
import json
import os
import resource
import shutil
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent / "tests"))
from netns_hosts import BENCH_NET, NetnsHosts  # noqa: E402


def job(root: Path, hosts: NetnsHosts, count: int, rank_args: str) -> Path:
    entries = "".join(f"  - {{host: h{i}, devices: 2}}\n" for i in range(1, count + 1))
    config = root / f"job-{count}.yaml"
    config.write_text(f"""job:
  command: [{sys.executable}, -c, "{rank_args}"]
  log_dir: {root / "logs"}
  grace_period_s: 1
hosts:
{entries}rank_table: none
ssh: {{user: root, identity_file: {hosts.client_key}, known_hosts: {hosts.known_hosts}, config: {hosts.ssh_config}}}
""")
    return config


def busy_cpu_s() -> float:
    """CPU seconds every core of this machine has spent not idle, since boot (/proc/stat)."""
    fields = [int(x) for x in Path("/proc/stat").read_text().split("\n", 1)[0].split()[1:]]
    return (sum(fields) - fields[3] - fields[4]) / os.sysconf("SC_CLK_TCK")  # minus idle and iowait


def floor_once(hosts: NetnsHosts, count: int, ranks: int = 2) -> float:
    """The floor of a fan-out: OpenSSH's client starting ``ranks`` trivial Python processes on each of
    ``count`` hosts at once, one session a host (the same sshd, login shell and rank start-up every
    host pays under npulaunch, and nothing else). Seconds from the start to the last host's shell
    reaching its command (its ``date``, printed as the ranks start)."""
    command = "date +%s.%N; " + " ".join(f"{sys.executable} -c 'print(1)' &" for _ in range(ranks)) + " wait"
    start = time.time()
    procs = [
        subprocess.Popen(
            ["ssh", "-F", str(hosts.ssh_config), f"h{i}", command], stdout=subprocess.PIPE, stderr=subprocess.DEVNULL
        )
        for i in range(1, count + 1)
    ]
    started = [float(proc.communicate()[0].split()[0]) for proc in procs]
    return max(started) - start


def once(config: Path, job_id: str) -> tuple:
    """(run -> all started, run -> done, failure -> exit, launcher CPU s, whole machine's CPU s)."""
    children = resource.getrusage(resource.RUSAGE_CHILDREN)
    busy = busy_cpu_s()
    start = time.time()
    done = subprocess.run(
        [sys.executable, "-m", "npulaunch", "run", str(config), "--job-id", job_id],
        stdout=subprocess.DEVNULL,
        stderr=subprocess.PIPE,
        text=True,
    )
    end = time.time()
    if not (config.parent / "logs" / job_id / "events.jsonl").exists():  # it never started: say why
        raise SystemExit(f"npulaunch run {config} did not start (exit {done.returncode}):\n{done.stderr[-2000:]}")
    busy = busy_cpu_s() - busy
    after = resource.getrusage(resource.RUSAGE_CHILDREN)
    launcher = after.ru_utime + after.ru_stime - children.ru_utime - children.ru_stime
    events = [json.loads(line) for line in (config.parent / "logs" / job_id / "events.jsonl").read_text().splitlines()]
    started = max(e["time"] for e in events if e["kind"] == "rank_started")
    failed = [e["time"] for e in events if e["kind"] == "rank_exited" and e.get("state") == "failed"]
    return started - start, end - start, (end - min(failed)) if failed else None, launcher, busy


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--hosts", default="1,3,6", help="host counts to start")
    parser.add_argument("--repeats", type=int, default=5)
    args = parser.parse_args()
    counts = [int(c) for c in args.hosts.split(",")]
    root = Path(tempfile.mkdtemp(prefix="npl-ssh-bench-"))
    hosts = NetnsHosts(root / "hosts", max(counts + [3]), BENCH_NET).up()  # apart from the tests' hosts
    try:
        print(f"machine: {os.cpu_count()} cores; 2 trivial ranks per host; {args.repeats} runs, medians")
        print(
            "| hosts | ranks | run -> all ranks started | run -> job done | launcher CPU | machine CPU |\n"
            "|---:|---:|---:|---:|---:|---:|"
        )
        for count in counts:
            config = job(root, hosts, count, "print(1)")
            runs = [once(config, f"s{count}-{i}") for i in range(args.repeats)]
            print(
                f"| {count} | {2 * count} | {statistics.median(r[0] for r in runs):.2f} s | "
                f"{statistics.median(r[1] for r in runs):.2f} s | {statistics.median(r[3] for r in runs):.2f} s | "
                f"{statistics.median(r[4] for r in runs):.2f} s |"
            )
        config = job(
            root,
            hosts,
            3,
            "import os, time, sys; time.sleep(1); "
            "sys.exit(3 if os.environ['RANK_ID'] == '3' else 0) if os.environ['RANK_ID'] == '3' "
            "else time.sleep(60)",
        )
        runs = [once(config, f"f-{i}") for i in range(max(1, min(3, args.repeats)))]
        print(
            f"\nremote rank failure -> launcher exit (3 hosts, grace 1 s, ranks obey SIGTERM): "
            f"{statistics.median(r[2] for r in runs):.2f} s"
        )
    finally:
        hosts.down()
        shutil.rmtree(root, ignore_errors=True)


if __name__ == "__main__":
    main()
