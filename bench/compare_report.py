"""compare.md from bench/compare.py's measurements: one Markdown table per figure, ratios to the
floor, the hand-written notes below NOTES_MARK kept across runs.
"""

from __future__ import annotations

import json
import os
import statistics
from typing import Callable

from launchers import GRACE_S, Launcher

NOTES_MARK = "<!-- hand-written notes: compare.py keeps everything below this line -->"


def med(values) -> float | None:
    values = list(values)
    return statistics.median(values) if values else None


def fmt(value: float | None, digits: int = 2) -> str:
    return "-" if value is None else f"{value:.{digits}f}"


def ratio(value: float | None, floor: float | None) -> str:
    return "-" if value is None or not floor else f"{value / floor:.2f}"


def table(head: str, align: str, launchers: list[Launcher], cells: Callable[[Launcher], list[str]]) -> list[str]:
    """A Markdown table: a row per launcher (``cells`` gives all but its name), or "not installed"."""
    columns = align.count("|") - 1
    rows = [head, align]
    for ln in launchers:
        body = ["not installed"] + ["-"] * (columns - 2) if ln.missing else cells(ln)
        rows.append(f"| {ln.name} | " + " | ".join(body) + " |")
    return rows


def launch_table(data: dict, launchers: list[Launcher]) -> list[str]:
    sizes = list(data["launch"])
    head = "| launcher | " + " | ".join(f"{n} rank{'s' * (n != '1')} (s) | ratio" for n in sizes) + " |"

    def cells(ln: Launcher) -> list[str]:
        out = []
        for n in sizes:
            wall, floor = med(data["launch"][n][ln.name]), med(data["launch"][n]["floor"])
            out += [fmt(wall, 3), ratio(wall, floor)]
        return out

    return table(head, "|---|" + "---:|---:|" * len(sizes), launchers, cells)


def failure_table(runs: dict, launchers: list[Launcher]) -> list[str]:
    floor = med(r["exit_s"] for r in runs.get("floor", []))

    def cells(ln: Launcher) -> list[str]:
        rs = runs[ln.name]
        exit_s = med(r["exit_s"] for r in rs)
        return [
            ln.grace,
            fmt(exit_s, 3),
            ratio(exit_s, floor),
            fmt(med(r["left_at_exit"] for r in rs), 0),
            fmt(med(r["gone_s"] for r in rs), 3),
            ", ".join(sorted({str(r["code"]) for r in rs})),
        ]

    return table(
        "| launcher | grace (SIGTERM -> SIGKILL) | failure -> launcher exit (s) | ratio | ranks left at exit"
        " | failure -> all ranks gone (s) | launcher's exit code |",
        "|---|---|---:|---:|---:|---:|---|",
        launchers,
        cells,
    )


def logs_table(runs: dict, launchers: list[Launcher], n: int, lines_per_rank: int) -> list[str]:
    floor_wall, floor_cpu = (med(r[k] for r in runs.get("floor", [])) for k in ("wall_s", "cpu_s"))

    def cells(ln: Launcher) -> list[str]:
        rs = runs[ln.name]
        wall, cpu = med(r["wall_s"] for r in rs), med(r["cpu_s"] for r in rs)
        own = "-" if ln.name == "floor" or cpu is None or floor_cpu is None else fmt(cpu - floor_cpu)
        got = [sum(r["lines"]) for r in rs]
        short = [r for r in rs if any(c != lines_per_rank for c in r["lines"])]
        arrived = (
            f"all {n} x {lines_per_rank:,} in {len(rs)} runs"
            if not short
            else f"MISSING: {min(got):,} of {n * lines_per_rank:,} (worst run)"
        )
        return [fmt(wall), ratio(wall, floor_wall), fmt(cpu), ratio(cpu, floor_cpu), own, arrived]

    return table(
        "| launcher | wall (s) | ratio | CPU of the whole run (s) | ratio | launcher's own CPU (s) | "
        "lines in its per-rank logs |",
        "|---|---:|---:|---:|---:|---:|---|",
        launchers,
        cells,
    )


def memory_table(runs: dict, launchers: list[Launcher]) -> list[str]:
    floor = med(r["mb"] for r in runs.get("floor", []))

    def cells(ln: Launcher) -> list[str]:
        rs = runs[ln.name]
        mb = med(r["mb"] for r in rs)
        kinds = ", ".join(f"{count} x `{kind}`" for kind, count in sorted(rs[-1]["processes"].items()))
        return [fmt(mb, 1), ratio(mb, floor), kinds]

    return table(
        "| launcher | peak RSS (MB) | ratio | processes counted (last run) |", "|---|---:|---:|---|", launchers, cells
    )


def render(data: dict, launchers: list[Launcher], cfg: dict) -> str:
    m = data["machine"]
    out = [
        "# npulaunch beside the other launchers",
        "",
        (
            f"`python3 bench/compare.py{' --smoke' if cfg['smoke'] else ''}`, {m['date']}: {m['cores']} cores, "
            f"Python {m['python']}, Linux {m['kernel']}, load average {m['load_before']} before the run; "
            f"{m['run_s']:.0f} s in all. Launchers alternated "
            f"({', '.join(ln.name for ln in launchers if not ln.missing)}, "
            f"floor, ...); medians of {cfg['repeats']} runs ({cfg['heavy']} for the log test and the "
            "ranks that ignore SIGTERM). Every launcher's console goes to /dev/null."
        ),
        "",
        "| launcher | version | how it is run |",
        "|---|---|---|",
    ]
    how = {
        "floor": "`python3 -c FLOOR N DIR GRACE CMD...`: Popen per rank (RANK_ID, RANK_SIZE, DEVICE_ID),"
        " stdout+stderr to DIR/rankN.log, os.wait(); on a failure SIGTERM, SIGKILL after GRACE",
        "bash": "`for r ...; do RANK_ID=$r RANK_SIZE=$n DEVICE_ID=$r CMD 2>&1 \\| tee DIR/rank$r.log & done; wait`",
        "torchrun": "`bench/.venv/bin/python -m torch.distributed.run --standalone --nproc-per-node N "
        "--log-dir DIR --redirects 3 --tee 3 --shutdown-timeout 2 --no-python CMD...` "
        "(defaults kept: --monitor-interval 0.1, --start-method spawn, --max-restarts 0)",
        "npulaunch": f"`python3 -m npulaunch run --nproc-per-node N --log-dir DIR --job-id job --console none "
        f"--grace-period {GRACE_S} -- CMD...` (--console all in the log test)",
        "msrun": "`bench/.venv/bin/msrun --worker_num N --local_worker_num N --log_dir DIR --join True python3 "
        "ARGS...` (python3 on PATH is this interpreter)",
    }
    for ln in launchers:
        out.append(f"| {ln.name} | {ln.missing or ln.version} | {how[ln.name]} |")
    out += [
        "",
        "Every rank is `python3 -S rank.py MODE ... MARKER`; the marker finds the ranks in /proc.",
        "",
        "## 1. Launch overhead",
        "",
        "Wall time of N trivial ranks (print the rank, exit), and its ratio to the floor's.",
        "",
    ]
    out += launch_table(data, launchers)
    f = cfg["failure"]
    for key, title in (("failure_term", "ranks honour SIGTERM"), ("failure_ignore", "ranks ignore SIGTERM")):
        if key not in data:
            continue
        out += [
            "",
            f"## 2. Failure propagation: {title}",
            "",
            (
                f"{f['n']} ranks; rank {min(3, f['n'] - 1)} writes time.time() to a file and exits 1 after "
                f"{f['after_s']:g} s, the others sleep {f['sleep_s']:g} s. From that time to the launcher's exit; "
                "ranks still alive then are counted (scanning /proc for the run's marker) and waited for."
            ),
            "",
        ]
        out += failure_table(data[key], launchers)
    lg = cfg["logs"]
    out += [
        "",
        "## 3. Log throughput",
        "",
        (
            f"{lg['n']} ranks x {lg['lines']:,} lines of 80 bytes. CPU = RUSAGE_CHILDREN over the run (launcher, "
            "its helpers, the ranks; orphans are reaped by this script as subreaper); the launcher's own CPU = "
            "that minus the floor's (ranks writing files directly). Lines counted in each launcher's per-rank "
            "log files."
        ),
        "",
    ]
    out += logs_table(data["logs"], launchers, lg["n"], lg["lines"])
    mm = cfg["memory"]
    out += [
        "",
        "## 4. Launcher memory",
        "",
        (
            f"{mm['n']} ranks sleeping {mm['sleep_s']:g} s. The launcher's process tree without the ranks, sampled "
            "every 10 ms from /proc; VmHWM of each process at its last sample, summed (MB = 2^20 bytes)."
        ),
        "",
    ]
    out += memory_table(data["memory"], launchers)
    if data["errors"]:
        out += ["", "## Problems seen during the run", ""] + [f"- {e}" for e in data["errors"]]
    return "\n".join(out) + "\n"


def write_report(out_dir: str, data: dict, launchers: list[Launcher], cfg: dict) -> str:
    os.makedirs(out_dir, exist_ok=True)
    with open(os.path.join(out_dir, "compare.json"), "w") as f:
        json.dump(data, f, indent=1)
    path = os.path.join(out_dir, "compare.md")
    kept = ""
    if os.path.exists(path):
        with open(path) as f:
            text = f.read()
        if NOTES_MARK in text:
            kept = text[text.index(NOTES_MARK) :]
    with open(path, "w") as f:
        f.write(render(data, launchers, cfg) + ("\n" + kept if kept else ""))
    return path


# ---- main -------------------------------------------------------------------------------------
