"""Stand-in ranks that fail the way Ascend jobs do, printing CANN-style error lines with plog
timestamps: ``cann.py FAULTY_RANK``. The faulty rank writes an EZ9999 AI Core error into its plog
(timestamp start+1 s) half a second in, then hangs like a faulted device; every other rank prints
an EI0002 collective timeout to stdout (timestamp start+3 s) a little later, then waits."""

import os
import sys
import time

START = time.time()


def stamp(offset_s):
    t = START + offset_s
    return time.strftime("%Y-%m-%d-%H:%M:%S", time.localtime(t)) + ".%03d.%03d" % (
        int(t * 1000) % 1000,
        int(t * 1e6) % 1000,
    )


def main():
    rank, faulty = int(os.environ["RANK_ID"]), int(sys.argv[1])
    pid = os.getpid()
    print("rank %d compiling graph" % rank, flush=True)
    if rank == faulty:
        time.sleep(0.5)
        plog_dir = os.path.join(os.environ["ASCEND_PROCESS_LOG_PATH"], "plog")
        os.makedirs(plog_dir, exist_ok=True)
        with open(os.path.join(plog_dir, "plog-%d_20240101000000000.log" % pid), "a") as plog:
            plog.write("[INFO] GE(%d,python3):%s [graph_manager.cc:100] run graph 1\n" % (pid, stamp(0.9)))
            plog.write(
                "[ERROR] RUNTIME(%d,python3):%s [device_error_proc.cc:713] EZ9999: Inner Error! "
                "there is an aicore error exception, core id is 12, error code = 0x800000\n" % (pid, stamp(1.0))
            )
    else:
        time.sleep(0.8)
        print(
            "[ERROR] HCCL(%d,python3):%s [task_exception_handler.cc:120] EI0002: The wait operation "
            "for the notify timed out. Timeout: 1836 s" % (pid, stamp(3.0)),
            flush=True,
        )
    while True:
        time.sleep(3600)


if __name__ == "__main__":
    main()
