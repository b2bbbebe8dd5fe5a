"""``npulaunch sbatch``: a ready Slurm batch script for a cluster YAML. Pure text rendering; the
header comes from the YAML's ``slurm`` section or flags, the body starts npulaunch on every node
with srun, so the same YAML, plan and checks apply under Slurm as on SSH hosts.
"""

from __future__ import annotations

import os
import shlex
from dataclasses import dataclass
from typing import Optional, Tuple

from npulaunch import __version__
from npulaunch.config.cluster import ClusterConfig
from npulaunch.host.errors import UsageError


@dataclass(frozen=True)
class BatchOptions:
    """Flags of ``npulaunch sbatch``; None: from the YAML's ``slurm`` section (or the default)."""

    nodes: Optional[int] = None
    time: Optional[str] = None
    partition: Optional[str] = None
    account: Optional[str] = None
    mode: str = "node"  # node: one npulaunch per node; rank: one npulaunch exec per rank
    job_id: Optional[str] = None


def render_sbatch(config: ClusterConfig, config_path: str, options: BatchOptions, python: str) -> str:
    """The batch script. ``python``: the interpreter (with npulaunch) the nodes run."""
    slurm = config.slurm
    nodes = options.nodes or slurm.get("nodes") or len(config.hosts)
    per_node = 1 if options.mode == "node" else _ranks_per_node(config)
    header = [("job-name", config.job.name), ("nodes", str(nodes)), ("ntasks-per-node", str(per_node))]
    for key in ("time", "partition", "account"):
        value = getattr(options, key) or slurm.get(key)
        if value:
            header.append((key, value))
    header.append(("output", os.path.join(config.job.log_dir, "slurm-%j.out")))
    command = "run" if options.mode == "node" else "exec"
    argv = [python, "-m", "npulaunch", command, "--scheduler", "slurm", os.path.abspath(config_path)]
    if options.job_id:
        argv += ["--job-id", options.job_id]
    srun = ["srun", "--kill-on-bad-exit=1", f"--ntasks-per-node={per_node}", "--distribution=block"]
    why = (
        "one npulaunch per node starts that node's ranks"
        if options.mode == "node"
        else "Slurm starts every rank; npulaunch exec gives each its environment, then becomes it"
    )
    lines = [
        "#!/bin/bash",
        f"# Rendered by npulaunch {__version__} (npulaunch sbatch) from {os.path.abspath(config_path)}.",
        f"# {options.mode} mode: {why}.",
        "# A failing rank ends its task with a non-zero status; --kill-on-bad-exit=1 then stops every node.",
        "# The --output directory must exist when the job starts (npulaunch sbatch --submit creates it).",
    ]
    lines += [f"#SBATCH --{key}={_quoted_value(value)}" for key, value in header]
    lines += [f"#SBATCH {option}" for option in slurm.get("sbatch_options", ())]
    lines += [
        "set -eu",
        f"mkdir -p {shlex.quote(config.job.log_dir)}",
        "exec " + " ".join(shlex.quote(word) for word in srun + argv),
        "",
    ]
    return "\n".join(lines)


def _ranks_per_node(config: ClusterConfig) -> int:
    counts = {len(h.devices) for h in config.hosts if isinstance(h.devices, tuple)}
    if len(counts) != 1 or any(not isinstance(h.devices, tuple) for h in config.hosts):
        raise UsageError(
            "rank mode needs the same number of devices listed on every host (not devices: all): "
            "sbatch starts that many tasks per node"
        )
    return counts.pop()


def _quoted_value(value: str) -> str:
    """sbatch reads #SBATCH lines itself (no shell): only whitespace needs quoting."""
    return f'"{value}"' if any(c.isspace() for c in value) else value


def submit(script: str, sbatch: str = "sbatch") -> Tuple[int, str]:
    """Submit the script on stdin; ``(exit status, sbatch's output)``."""
    import subprocess

    try:
        done = subprocess.run([sbatch], input=script, capture_output=True, text=True, timeout=120)
    except FileNotFoundError:
        raise UsageError(f"{sbatch} is not on the PATH: is this a Slurm login node?") from None
    return done.returncode, (done.stdout + done.stderr).strip()
