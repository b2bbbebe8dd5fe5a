"""A tiny rank program for tests: each rank does what the command line says for its RANK_ID.

    rank.py 'RANK=ACTION[@DELAY]' ... '*=ACTION'

ACTION is one of: ok, exit:N, segfault, sigkill, hang, ignore_term, grandchild, escape,
spam:N (print N numbered lines), spam_crash:N (print N lines, then SIGKILL itself mid-stream),
env (print the rank's environment as one JSON line, and keep it in env.json), parent (print the
parent process's name), usr1 (wait for SIGUSR1, print, exit 0),
utf8 (write multi-byte characters split across writes, and \\r progress lines).
DELAY: seconds to sleep first. Every rank prints "ready <pid>" first.
"""

import json
import os
import signal
import subprocess
import sys
import time


def hang():
    while True:
        time.sleep(3600)


def spawn_sleeper(new_session):
    # The grandchild keeps the rank's environment (and so the job's uuid), as real helpers do.
    return subprocess.Popen([sys.executable, "-c", "import time; time.sleep(3600)"], start_new_session=new_session).pid


def train(final):
    """Steps of 0.05 s each (TRAIN_STEP_S), a checkpoint of w and global_step every CKPT_EVERY steps into
    CKPT_DIR (relative to the working directory); resumes from NPULAUNCH_RESUME_CHECKPOINT, else from the
    directory's own latest checkpoint (TRAIN_STAMP_RESUMED=1: then says when its first step ended). w is the
    same on every rank: step s adds s to each of 4 values."""
    sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
    import tfckpt

    directory = os.environ["CKPT_DIR"]
    every = int(os.environ.get("CKPT_EVERY", "5"))
    step, w = 0, [0.0] * 4
    start = os.environ.get("NPULAUNCH_RESUME_CHECKPOINT") or tfckpt.latest(directory)
    if start:
        values = tfckpt.read_checkpoint(start)
        step, w = int(values["global_step"]), list(values["w"])
        print("resumed from %s at step %d" % (start, step), flush=True)
    stamp = bool(start) and os.environ.get("TRAIN_STAMP_RESUMED") == "1"
    while step < final:
        step += 1
        w = [x + step for x in w]
        print("step %d" % step, flush=True)
        if stamp:  # TRAIN_STAMP_RESUMED=1: when the first step after resuming ended (bench/recovery.py reads it)
            print("first step after resuming at %.6f" % time.time(), flush=True)
            stamp = False
        # "RANK:STEP:LINE": at that step of the first attempt the NPU fails under that rank, which exits 1:
        # FAULT_AT writes LINE to the npu-smi stand-in's faults file, FAULT_PRINT prints it (a device error)
        for name in ("FAULT_AT", "FAULT_PRINT"):
            fault = os.environ.get(name, "")
            if fault and os.environ.get("NPULAUNCH_ATTEMPT") in (None, "1"):
                rank, at, line = fault.split(":", 2)
                if rank == os.environ.get("RANK_ID") and int(at) == step:
                    if name == "FAULT_PRINT":
                        print(line, flush=True)
                    else:
                        with open(os.environ["NPU_STANDIN_FAULTS"], "a") as faults:  # what npu-smi says now
                            faults.write(line + "\n")
                    sys.exit(1)
        if step % every == 0:
            tfckpt.write_checkpoint(directory, step, w)
        time.sleep(float(os.environ.get("TRAIN_STEP_S", "0.05")))
    print("final step %d w %s" % (step, json.dumps(w)), flush=True)


def act(action):
    name, _, arg = action.partition(":")
    if name == "ok":
        print("ok")
    elif name == "exit":
        sys.exit(int(arg))
    elif name == "segfault":
        sys.stdout.flush()
        os.kill(os.getpid(), signal.SIGSEGV)
    elif name == "sigkill":
        os.kill(os.getpid(), signal.SIGKILL)
    elif name == "hang":
        hang()
    elif name == "ignore_term":
        signal.signal(signal.SIGTERM, signal.SIG_IGN)
        print("ignoring SIGTERM", flush=True)
        hang()
    elif name in ("grandchild", "escape"):
        # grandchild: stays in the rank's process group; escape: a new session (daemon-like)
        pid = spawn_sleeper(new_session=(name == "escape"))
        print("grandchild %d" % pid, flush=True)
        if arg == "hang":
            hang()
    elif name in ("spam", "spam_crash"):
        out = sys.stdout
        for i in range(int(arg)):
            out.write("line %07d %s\n" % (i, "x" * 60))
        out.flush()
        if name == "spam_crash":
            os.write(1, b"partial last line without newline")
            os.kill(os.getpid(), signal.SIGKILL)
    elif name == "tick":  # a line every 0.1 s, for ever
        while True:
            print("tick", flush=True)
            time.sleep(0.1)
    elif name == "silent":  # one line, then nothing (a hang)
        print("started", flush=True)
        hang()
    elif name == "say":  # print the argument (dashes for spaces), then go on
        print(arg.replace("-", " "), flush=True)
    elif name == "hccp_fails_until":  # EJ0001 (retryable) and exit 1 on attempts before ARG
        attempt = int(os.environ.get("NPULAUNCH_ATTEMPT", "1"))
        if attempt < int(arg):
            print(
                "EJ0001: [PID: %d] 2024-05-21-11:57:54.167.645 Failed to initialize the HCCP process. "
                "Reason: Maybe the last training process is running." % os.getpid(),
                flush=True,
            )
            sys.exit(1)
        print("connected on attempt %d" % attempt)
    elif name == "attempt_step":  # a step further on every attempt: step 10 x NPULAUNCH_ATTEMPT (progress)
        print("step %d" % (10 * int(os.environ.get("NPULAUNCH_ATTEMPT", "1"))), flush=True)
    elif name == "beat":  # silent, but a heartbeat every 0.2 s for ARG seconds, then exit 0
        from npulaunch import session

        deadline = time.monotonic() + float(arg)
        while time.monotonic() < deadline:
            session.heartbeat()
            time.sleep(0.2)
    elif name == "noise":  # lines that are not progress ("step" lines are)
        while True:
            print("still compiling...", flush=True)
            time.sleep(0.1)
    elif name == "train":  # train to step ARG, checkpointing every CKPT_EVERY steps in TF's format (tfckpt.py)
        train(int(arg))
    elif name == "hostname":
        import socket

        print("host " + socket.gethostname(), flush=True)
    elif name == "argv":  # this rank's argv and one variable, as JSON
        print("ARGV " + json.dumps({"argv": sys.argv[1:], "hostile": os.environ.get("HOSTILE")}), flush=True)
    elif name == "env":  # printed, and kept as env.json in the rank's directory (rank mode has no log of its own)
        print(json.dumps(dict(os.environ)), flush=True)
        if os.environ.get("NPULAUNCH_RANK_DIR"):
            with open(os.path.join(os.environ["NPULAUNCH_RANK_DIR"], "env.json"), "w") as out:
                json.dump(dict(os.environ), out)
    elif name == "parent":  # the name of the process that started this one
        with open("/proc/%d/comm" % os.getppid()) as comm:
            print("parent " + comm.read().strip(), flush=True)
    elif name == "usr1":
        got = []
        signal.signal(signal.SIGUSR1, lambda signum, frame: got.append(signum))
        print("waiting for SIGUSR1", flush=True)
        deadline = time.monotonic() + 20
        while not got and time.monotonic() < deadline:
            time.sleep(0.01)
        print("got SIGUSR1" if got else "no SIGUSR1", flush=True)
    elif name == "utf8":
        data = "héllo wörld ✓ 中文\n".encode("utf-8")
        for i in range(len(data)):  # one byte per write: characters split across reads
            os.write(1, data[i : i + 1])
        for pct in (10, 50, 100):
            os.write(1, ("progress %d%%\r" % pct).encode())
            time.sleep(0.02)
        os.write(1, b"\ndone\r\n")
    else:
        raise SystemExit("unknown action %r" % action)


def main():
    rank = os.environ.get("RANK_ID", "?")
    plan = {}
    for item in sys.argv[1:]:
        key, _, action = item.partition("=")
        plan[key] = action
    action = plan.get(rank, plan.get("*", "ok"))
    action, _, delay = action.partition("@")
    print("ready %d" % os.getpid(), flush=True)
    if delay:
        time.sleep(float(delay))
    for step in action.split("+"):
        act(step)


if __name__ == "__main__":
    main()
