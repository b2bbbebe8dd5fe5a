#!/usr/bin/env python3
"""Regenerates the repository part of the clean-log corpus (tests/data/clean_logs/repo-*.log.gz): this
repository's TensorFlow, PyTorch and MindSpore examples run through ``npulaunch run`` to a successful end
at their frameworks' verbose logging, every rank's stdout and stderr kept. The public part of the corpus
(pub-*.log.gz, real logs of successful NPU runs) is not touched: README.md there says where each came from.

  python3 scripts/gen_clean_logs.py                 # every run (a few minutes on 2 cores)
  python3 scripts/gen_clean_logs.py --only torch-local-4 --keep /tmp/jobs

A run that does not succeed stops the script with its job directory named: a corpus of clean logs holds
only runs that succeeded. Needs the tf, torch and mindspore extras (scripts/setup-dev.sh installs them).
"""

from __future__ import annotations

import argparse
import gzip
import json
import os
import re
import subprocess
import sys
import tempfile
from dataclasses import dataclass, field
from pathlib import Path
from typing import Dict, List, Optional, Sequence, Tuple

import yaml

ROOT = Path(__file__).resolve().parent.parent
CORPUS = ROOT / "tests" / "data" / "clean_logs"
TIMEOUT_S = 900

# verbose logging of each framework (TensorFlow: C++ INFO and VLOG 1; torch: c10d's INFO and the INFO debug
# mode; MindSpore: glog INFO (1) or DEBUG (0)). TORCH_DISTRIBUTED_DEBUG=DETAIL is not used: with torch 2.13's
# CPU build every rank dies of SIGSEGV in DistributedDataParallel's _ddp_init_helper under it (gloo, 2 and 4 ranks).
TF_VERBOSE = {"TF_CPP_MIN_LOG_LEVEL": "0", "TF_CPP_MAX_VLOG_LEVEL": "1"}
TF_INFO = {"TF_CPP_MIN_LOG_LEVEL": "0"}
TORCH_VERBOSE = {"TORCH_DISTRIBUTED_DEBUG": "INFO", "TORCH_CPP_LOG_LEVEL": "INFO"}


@dataclass(frozen=True)
class Run:
    """One job of the corpus: a YAML of this repository (its command's arguments replaced where
    ``args`` is given, to keep the corpus small), or a command in torchrun's form (``cli``)."""

    name: str
    source: str  # what the README says it was generated from
    config: str = ""  # a YAML under the repository's root
    args: Tuple[str, ...] = ()  # the command's arguments after the script (the YAML's when empty)
    env: Dict[str, str] = field(default_factory=dict)
    cli: Tuple[str, ...] = ()  # npulaunch run's arguments instead of a YAML


RUNS: Tuple[Run, ...] = (
    Run(
        "tf-local-4-vlog1",
        "cluster_configs/local-4.yaml (TF, 4 ranks, 40 steps)",
        "cluster_configs/local-4.yaml",
        ("--steps", "40"),
        TF_VERBOSE,
    ),
    Run(
        "tf-local-4",
        "cluster_configs/local-4.yaml (TF, 4 ranks, 300 steps)",
        "cluster_configs/local-4.yaml",
        (),
        TF_INFO,
    ),
    Run(
        "tf-recovery",
        "cluster_configs/local-4-recovery.yaml (TF, checkpoints every 20 steps, no fault)",
        "cluster_configs/local-4-recovery.yaml",
        (
            "--steps",
            "100",
            "--step-time",
            "0.01",
            "--checkpoint-dir",
            "{scratch}/{job_id}/{device_id}/ckpt",
            "--save-every",
            "20",
        ),
        TF_INFO,
    ),
    Run(
        "tf-legacy",
        "examples/legacy.yaml (TF, session injection, MonitoredTrainingSession)",
        "examples/legacy.yaml",
        (),
        TF_VERBOSE,
    ),
    Run(
        "py-quick",
        "cluster_configs/local-4-quick.yaml (plain Python, 4 ranks)",
        "cluster_configs/local-4-quick.yaml",
        ("--steps", "200", "--step-time", "0"),
    ),
    Run(
        "py-server-8npu",
        "cluster_configs/server-8npu.yaml (plain Python, 8 ranks, rank table)",
        "cluster_configs/server-8npu.yaml",
        ("--steps", "100", "--step-time", "0"),
    ),
    Run(
        "py-dump-and-profile",
        "examples/dump-and-profile.yaml (plain Python, 2 ranks)",
        "examples/dump-and-profile.yaml",
        ("--steps", "100", "--step-time", "0"),
    ),
    Run(
        "torch-local-4",
        "cluster_configs/local-4-torch.yaml (torch, gloo, 4 ranks, 200 steps)",
        "cluster_configs/local-4-torch.yaml",
        (),
        TORCH_VERBOSE,
    ),
    Run(
        "torch-nproc-2",
        "examples/torch_train.py in torchrun's form (--nproc-per-node 2)",
        env=TORCH_VERBOSE,
        cli=("--nproc-per-node", "2", "examples/torch_train.py", "--steps", "300"),
    ),
    Run(
        "ms-glog1",
        "tests/ranks/mindspore_rank.py (MindSpore, msrun's cluster, 2 workers, GLOG_v=1)",
        env={"GLOG_v": "1"},
        cli=("--framework", "mindspore", "--devices", "0,1", "tests/ranks/mindspore_rank.py"),
    ),
    Run(
        "ms-glog0",
        "tests/ranks/mindspore_rank.py (MindSpore, msrun's cluster, 2 workers, GLOG_v=0)",
        env={"GLOG_v": "0"},
        cli=("--framework", "mindspore", "--devices", "0,1", "tests/ranks/mindspore_rank.py"),
    ),
)


class RunFailed(Exception):
    def __init__(self, run: Run, code: int, job_dir: Path, tail: str) -> None:
        super().__init__(f"{run.name}: npulaunch run exited {code}; job directory {job_dir}\n{tail}")


def derived_config(run: Run, folder: Path) -> Path:
    """The run's YAML with its paths made absolute, its arguments replaced and its verbose variables added."""
    source = ROOT / run.config
    data = yaml.safe_load(source.read_text("utf-8"))
    job = data["job"]
    job["workdir"] = str((source.parent / job.get("workdir", ".")).resolve())
    if run.args:
        script = next(i for i, part in enumerate(job["command"]) if str(part).endswith(".py"))
        job["command"] = list(job["command"][: script + 1]) + [a.replace("{scratch}", str(folder)) for a in run.args]
    if "recovery" in data:  # checkpoints in the scratch folder, not the checkout's output/
        data["recovery"]["checkpoint_dir"] = f"{folder}/{{job_id}}/{{device_id}}/ckpt"
    data["env"] = {**(data.get("env") or {}), **run.env}
    path = folder / f"{run.name}.yaml"
    path.write_text(yaml.safe_dump(data, sort_keys=False), "utf-8")
    return path


def start_argv(run: Run, folder: Path, log_dir: Path) -> List[str]:
    target = [str(derived_config(run, folder))] if run.config else list(run.cli)
    common = ["--log-dir", str(log_dir), "--job-id", run.name, "--console", "none", "--no-live"]
    return [sys.executable, "-m", "npulaunch", "run", *common, *target]


def run_job(run: Run, folder: Path, log_dir: Path) -> Path:
    """Runs the job to its end; its job directory (RunFailed when it did not succeed)."""
    env = {**os.environ, **run.env, "PATH": f"{ROOT / 'tests' / 'standins'}{os.pathsep}{os.environ['PATH']}"}
    env.pop("NPU_STANDIN_FAULTS", None)
    done = subprocess.run(
        start_argv(run, folder, log_dir), cwd=ROOT, env=env, capture_output=True, text=True, timeout=TIMEOUT_S
    )
    job_dir = log_dir / run.name
    if not succeeded(job_dir) or f"job {run.name} succeeded" not in done.stderr:
        raise RunFailed(run, done.returncode, job_dir, done.stderr[-3000:])
    return job_dir


def succeeded(job_dir: Path) -> bool:
    """Whether every rank (and the framework's extra process) succeeded and no root cause was named, by the
    job's summary.json (not npulaunch's exit code: a fault of the launcher after the ranks' end is none of theirs)."""
    try:
        summary = json.loads((job_dir / "summary.json").read_text("utf-8"))
    except (OSError, ValueError):
        return False
    ranks = summary.get("ranks") or []
    return bool(ranks) and not summary.get("root_cause") and all(r.get("state") == "succeeded" for r in ranks)


def _rank_key(path: Path) -> Tuple[str, int, str]:
    found = re.search(r"rank-(\d+)", path.parent.name)
    return (path.parent.parent.name, int(found.group(1)) if found else 1 << 30, path.parent.name)


def stream_files(job_dir: Path, stream: str) -> List[Path]:
    """Every rank's (and the framework's extra process's) file of one stream, by attempt and rank."""
    return sorted((p for p in job_dir.rglob(f"{stream}.log") if p.is_file()), key=_rank_key)


def collect(run: Run, job_dir: Path, out: Path) -> Dict[str, int]:
    """Writes the run's streams, every rank's in turn, to repo-<run>.<stream>.log.gz; lines per file."""
    counts: Dict[str, int] = {}
    for stream in ("stdout", "stderr"):
        data = b"".join(_whole_lines(p.read_bytes()) for p in stream_files(job_dir, stream))
        if not data:
            continue
        name = f"repo-{run.name}.{stream}.log.gz"
        (out / name).write_bytes(gzip.compress(data, 9, mtime=0))
        counts[name] = data.count(b"\n")
    plogs = sorted(job_dir.rglob("ascend/**/*.log"))
    for plog in plogs:  # CANN writes none on a host without an NPU; kept by its own name if it does
        name = f"repo-{run.name}.{plog.parent.parent.name}.{plog.name}.gz"
        data = _whole_lines(plog.read_bytes())
        (out / name).write_bytes(gzip.compress(data, 9, mtime=0))
        counts[name] = data.count(b"\n")
    return counts


def _whole_lines(data: bytes) -> bytes:
    return data if not data or data.endswith(b"\n") else data + b"\n"


def main(argv: Optional[Sequence[str]] = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument(
        "--only", action="append", default=[], help="run only this one (repeatable)", choices=[r.name for r in RUNS]
    )
    parser.add_argument("--out", type=Path, default=CORPUS)
    parser.add_argument("--keep", type=Path, help="keep the job directories here")
    args = parser.parse_args(argv)
    args.out.mkdir(parents=True, exist_ok=True)
    runs = [r for r in RUNS if not args.only or r.name in args.only]
    with tempfile.TemporaryDirectory(prefix="clean-logs-") as scratch:
        log_dir = args.keep or Path(scratch) / "jobs"
        for run in runs:
            for old in args.out.glob(f"repo-{run.name}.*"):
                old.unlink()
            try:
                job_dir = run_job(run, Path(scratch), log_dir)
            except (RunFailed, subprocess.TimeoutExpired) as error:
                print(f"gen_clean_logs: {error}", file=sys.stderr)
                return 1
            for name, lines in collect(run, job_dir, args.out).items():
                print(f"| {name} | {lines} | generated by scripts/gen_clean_logs.py from {run.source} |")
    return 0


if __name__ == "__main__":
    sys.exit(main())
