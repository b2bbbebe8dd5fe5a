"""Slurm: its environment (srun's task variables, or the batch script's job variables), its compact texts
(host lists ``node[01-04,07]`` and task counts ``4(x2),2``, expanded as Slurm itself does, with a bound on
the size so that a typo fails at once), and ``npulaunch sbatch``'s batch script. Pure: the environment is
passed in; nothing here runs ``scontrol`` or ``srun``.
"""

from __future__ import annotations

import math
import os
import shlex
from dataclasses import dataclass
from itertools import product
from typing import List, Mapping, Optional, Sequence, Tuple

from npulaunch import __version__
from npulaunch.config.cluster import ClusterConfig
from npulaunch.host.errors import UsageError
from npulaunch.host.lazyre import lazy_re
from npulaunch.plan.schedulers.view import Draft, SchedulerKind, first_set, invalid_value, settle_nodes, value_of

MAX_HOSTS = 65536  # a typo such as node[1-10000000] must fail at once, not fill the launcher's memory


class _Malformed(ValueError):
    """Raised inside the text parsers; turned into a SchedulerError naming the variable."""


_HOSTLIST_ALLOWED = "comma-separated host names, with ranges in brackets: node01, node[01-04,07], rack[1-2]-n[1-3]"
_HOSTLIST_PIECE = lazy_re(r"\[([^\[\]]*)\]|([A-Za-z0-9._-]+)")
_RANGE = lazy_re(r"([0-9]+)(?:-([0-9]+))?")
_TASKS = lazy_re(r"([0-9]+)(?:\(x([0-9]+)\))?")


def expand_hostlist(text: str, where: str = "hostlist") -> List[str]:
    """Every host of a Slurm hostlist, in Slurm's order (what ``scontrol show hostnames`` prints).
    ``where`` names the text in errors (the variable it came from)."""
    try:
        hosts: List[str] = []
        for item in _split_items(text.strip()):
            hosts.extend(_expand_item(item, MAX_HOSTS - len(hosts)))
        return hosts
    except _Malformed as exc:
        raise invalid_value(where, f"{text!r} ({exc})", _HOSTLIST_ALLOWED) from None


def _split_items(text: str) -> List[str]:
    """Split at the commas outside brackets."""
    items, depth, start = [], 0, 0
    for at, char in enumerate(text):
        if char == "[":
            if depth:
                raise _Malformed(f"'[' inside brackets at position {at}")
            depth = 1
        elif char == "]":
            if not depth:
                raise _Malformed(f"']' without '[' at position {at}")
            depth = 0
        elif char == "," and not depth:
            items.append(text[start:at])
            start = at + 1
    if depth:
        raise _Malformed("'[' without ']'")
    return items + [text[start:]]


def _expand_item(item: str, room: int) -> List[str]:
    """``rack[1-2]-n[1-3]``: the product of its bracket groups, the leftmost varying slowest."""
    if not item:
        raise _Malformed("an empty name")
    choices: List[List[str]] = []
    at = 0
    for match in _HOSTLIST_PIECE.finditer(item):
        if match.start() != at:
            break
        choices.append([match.group(2)] if match.group(2) is not None else _expand_group(match.group(1)))
        at = match.end()
    if at != len(item):
        raise _Malformed(f"{item[at]!r} in {item!r}: host names hold letters, digits, '.', '-' and '_'")
    if math.prod(len(c) for c in choices) > room:
        raise _Malformed(f"more than {MAX_HOSTS} hosts")
    return ["".join(parts) for parts in product(*choices)]


def _expand_group(group: str) -> List[str]:
    """``01-03,7`` -> 01, 02, 03, 7: each range keeps the width of its start."""
    values: List[str] = []
    for piece in group.split(","):
        match = _RANGE.fullmatch(piece)
        if not match:
            raise _Malformed(f"[{group}]: {piece!r} is not a number or a range such as 01-04")
        low, high = int(match.group(1)), int(match.group(2) or match.group(1))
        if low > high:
            raise _Malformed(f"[{group}]: the range {piece} runs backwards")
        if high - low >= MAX_HOSTS:
            raise _Malformed(f"more than {MAX_HOSTS} hosts")
        values.extend(str(n).zfill(len(match.group(1))) for n in range(low, high + 1))
    return values


def parse_tasks_per_node(text: str, where: str = "tasks per node") -> List[int]:
    """``4(x2),2`` -> [4, 4, 2] (Slurm's ``SLURM_TASKS_PER_NODE``: a count, ``(xN)`` repeats it)."""
    counts: List[int] = []
    for piece in text.strip().split(","):
        match = _TASKS.fullmatch(piece)
        repeat = int(match.group(2) or 1) if match else 0
        if not match or int(match.group(1)) < 1 or repeat < 1 or len(counts) + repeat > MAX_HOSTS:
            raise invalid_value(
                where,
                f"{text!r} (at {piece!r})",
                "comma-separated task counts >= 1, each optionally repeated: 8, 4(x2),2",
            )
        counts.extend([int(match.group(1))] * repeat)
    return counts


# --- the environment

JOB_VARS = ("SLURM_JOB_ID", "SLURM_JOBID")
# A step's nodes first: SLURM_NODEID, SLURM_NNODES and SLURM_TASKS_PER_NODE describe the step under srun.
NODELIST_VARS = ("SLURM_STEP_NODELIST", "SLURM_JOB_NODELIST", "SLURM_NODELIST")


def put_hosts(draft: Draft, env: Mapping[str, str], names: Sequence[str]) -> None:
    var = first_set(env, names)
    if var is not None:
        text = env[var].strip()
        draft.put("hosts", tuple(expand_hostlist(text, var)), f"{var}={text}")


def read(env: Mapping[str, str], hostname: str) -> Optional[Draft]:
    """srun's task variables or, in the batch script itself, the job's (no SLURM_PROCID there)."""
    if first_set(env, JOB_VARS) is None:
        return None
    draft = Draft(SchedulerKind.SLURM)
    draft.put_text("job_id", env, JOB_VARS)
    put_hosts(draft, env, NODELIST_VARS)
    draft.put_int("node_index", env, "SLURM_NODEID")
    draft.put_int("node_count", env, "SLURM_NNODES", 1)
    settle_nodes(draft)
    _put_tasks_per_node(draft, env)
    draft.put_int("rank", env, "SLURM_PROCID")
    draft.put_int("local_rank", env, "SLURM_LOCALID")
    draft.put_int("world_size", env, "SLURM_NTASKS", 1)
    return draft


def _put_tasks_per_node(draft: Draft, env: Mapping[str, str]) -> None:
    var = "SLURM_TASKS_PER_NODE"
    text = value_of(env, var)
    if text is None:
        return
    counts = tuple(parse_tasks_per_node(text, var))
    count, index = draft.get("node_count"), draft.get("node_index")
    if count is not None and len(counts) != count:
        raise invalid_value(
            var, f"{text!r} ({len(counts)} nodes)", f"one entry per node: {count}, since {draft.sources['node_count']}"
        )
    if index is not None and index >= len(counts):
        raise invalid_value(
            var, f"{text!r} ({len(counts)} nodes)", f"an entry for node {index}, since {draft.sources['node_index']}"
        )
    draft.put("tasks_per_node", counts, f"{var}={text}")
    if index is not None:
        draft.put("local_size", counts[index], f"{var}={text} (node {index})")


# --- npulaunch sbatch


MODES = ("steps", "node", "rank")
_WHY = {
    "steps": (
        "this script's one npulaunch holds the allocation and runs the job's ranks as job\n# steps, one per "
        "node; a lost node or an NPU fault moves its ranks to a spare node, or requeues\n# the job without it"
    ),
    "node": "one npulaunch per node starts that node's ranks",
    "rank": "Slurm starts every rank; npulaunch exec gives each its environment, then becomes it",
}


@dataclass(frozen=True)
class BatchOptions:
    """Flags of ``npulaunch sbatch``; None: from the YAML's ``slurm`` section (or the default)."""

    nodes: Optional[int] = None
    spare_nodes: Optional[int] = None
    time: Optional[str] = None
    partition: Optional[str] = None
    account: Optional[str] = None
    mode: str = "steps"  # steps: npulaunch holds the allocation; node: one npulaunch per node; rank: exec per rank
    job_id: Optional[str] = None
    exclude: Tuple[str, ...] = ()  # nodes kept off (the fault history's)


def render_sbatch(config: ClusterConfig, config_path: str, options: BatchOptions, python: str) -> str:
    """The batch script. ``python``: the interpreter (with npulaunch) the nodes run."""
    slurm = config.slurm
    nodes = options.nodes or slurm.get("nodes") or len(config.hosts)
    spare = options.spare_nodes if options.spare_nodes is not None else slurm.get("spare_nodes", 0)
    if spare and options.mode != "steps":
        raise UsageError(f"spare nodes need the steps mode (npulaunch holds the allocation), not --mode {options.mode}")
    if spare and not config.recovery.checkpoint_dir:
        raise UsageError(
            f"{spare} spare nodes without recovery.checkpoint_dir: a spare takes a lost node's ranks, which resume "
            "from the newest checkpoint there; set recovery.checkpoint_dir"
        )
    per_node = _ranks_per_node(config) if options.mode == "rank" else 1
    header = [("job-name", config.job.name), ("nodes", str(nodes + spare)), ("ntasks-per-node", str(per_node))]
    for key in ("time", "partition", "account"):
        value = getattr(options, key) or slurm.get(key)
        if value:
            header.append((key, value))
    header.append(("output", os.path.join(config.job.log_dir, "slurm-%j.out")))
    lines = [
        "#!/bin/bash",
        f"# Rendered by npulaunch {__version__} (npulaunch sbatch) from {os.path.abspath(config_path)}.",
        f"# {options.mode} mode: {_WHY[options.mode]}.",
    ]
    if options.mode != "steps":
        lines.append(
            "# A failing rank ends its task with a non-zero status; --kill-on-bad-exit=1 then stops every node."
        )
    lines.append("# The --output directory must exist when the job starts (npulaunch sbatch --submit creates it).")
    lines += [f"#SBATCH --{key}={_quoted(value)}" for key, value in header]
    if options.mode == "steps":
        lines += _steps_header(config, nodes, spare, options.exclude)
    lines += [f"#SBATCH {option}" for option in slurm.get("sbatch_options", ())]
    argv = [python, "-m", "npulaunch", "exec" if options.mode == "rank" else "run", "--scheduler", "slurm"]
    argv += [os.path.abspath(config_path)] + (["--job-id", options.job_id] if options.job_id else [])
    if options.mode != "steps":
        argv = ["srun", "--kill-on-bad-exit=1", f"--ntasks-per-node={per_node}", "--distribution=block"] + argv
    lines += ["set -eu", f"mkdir -p {shlex.quote(config.job.log_dir)}", "exec " + shlex.join(argv), ""]
    return "\n".join(lines)


def _steps_header(config: ClusterConfig, nodes: int, spare: int, exclude: Sequence[str]) -> List[str]:
    """The steps mode's own lines: the allocation survives a node's failure (--no-kill: npulaunch moves its
    ranks), the job may be requeued (npulaunch requeues it without a broken node), a requeued run appends to
    the same output, and the nodes the fault history keeps off are excluded."""
    lines = [
        f"# {nodes} node{'s' if nodes != 1 else ''} run the job"
        + (
            f"; {spare} more {'is' if spare == 1 else 'are'} held back as spare{'s' if spare != 1 else ''}."
            if spare
            else "."
        ),
        "#SBATCH --no-kill",
    ]
    if config.recovery.max_recoveries:
        lines += ["#SBATCH --requeue", "#SBATCH --open-mode=append"]
    if exclude:
        lines += [f"# Kept off by the fault history (npulaunch faults): {', '.join(exclude)}."]
        lines += [f"#SBATCH --exclude={','.join(exclude)}"]
    return lines


def _ranks_per_node(config: ClusterConfig) -> int:
    counts = {len(h.devices) for h in config.hosts if isinstance(h.devices, tuple)}
    if len(counts) != 1 or any(not isinstance(h.devices, tuple) for h in config.hosts):
        raise UsageError(
            "rank mode needs the same number of devices listed on every host (not devices: all): "
            "sbatch starts that many tasks per node"
        )
    return counts.pop()


def _quoted(value: str) -> str:
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


# --- the step transport: one job step per node carries its agent (launch/fleet/srun.py runs it)

# What srun tells a task about itself and its step. The agent is the step's one task, and its ranks are no
# Slurm tasks: a rank that saw these would take SLURM_PROCID=0 of SLURM_NTASKS=1 for its own place (as
# PyTorch Lightning's SLURMEnvironment reads them), so the agent's shell unsets them before it starts.
STEP_TASK_VARS = (
    "SLURM_PROCID",
    "SLURM_LOCALID",
    "SLURM_NODEID",
    "SLURM_GTIDS",
    "SLURM_TASK_PID",
    "SLURM_NTASKS",
    "SLURM_NPROCS",
    "SLURM_NNODES",
    "SLURM_TASKS_PER_NODE",
    "SLURM_STEP_ID",
    "SLURM_STEPID",
    "SLURM_STEP_NODELIST",
    "SLURM_STEP_NUM_NODES",
    "SLURM_STEP_NUM_TASKS",
    "SLURM_STEP_TASKS_PER_NODE",
    "SLURM_STEP_LAUNCHER_PORT",
    "SLURM_SRUN_COMM_HOST",
    "SLURM_SRUN_COMM_PORT",
    "SLURM_LAUNCH_NODE_IPADDR",
    "SLURM_CPU_BIND",
    "SLURM_CPU_BIND_LIST",
    "SLURM_CPU_BIND_TYPE",
    "SLURM_CPU_BIND_VERBOSE",
    "SLURM_DISTRIBUTION",
    "SLURM_UMASK",
)


def step_argv(srun: str, job_id: str, node: str, command: str) -> List[str]:
    """The job step that runs the shell ``command`` on ``node`` alone: one task, beside the other steps
    (--overlap: a node's agent, a probe and the next attempt's agent may share it), binding no CPU (the ranks
    bind their own: job.cpu_binding), unbuffered, with the step's task variables unset (STEP_TASK_VARS)."""
    return [
        srun,
        f"--jobid={job_id}",
        "--nodes=1",
        "--ntasks=1",
        f"--nodelist={node}",
        "--overlap",
        "--cpu-bind=none",
        "--unbuffered",
        "--quiet",
        "--job-name=npulaunch-agent",
        "/bin/sh",
        "-c",
        f"unset {' '.join(STEP_TASK_VARS)}; {command}",
    ]


# --- requeue: the job back in the queue without its broken nodes (launch/requeue.py runs these)

RELEASE_WAIT_S = 900  # how long the release job waits for the requeued job to be pending


def requeue_argv(scontrol: str, job_id: str) -> List[str]:
    """Requeue the job held: it goes back to pending once it has ended here, and starts no run of its own
    before the release job has changed its excluded nodes (Slurm changes them only on a pending job)."""
    return [scontrol, "requeuehold", job_id]


def release_script(scontrol: str, job_id: str, nodes: Sequence[str]) -> str:
    """The shell of the release job: wait until job ``job_id`` is pending, add ``nodes`` to the nodes it
    excludes (after those it had), start it now (not after Slurm's requeue delay) and release it."""
    q = shlex.quote
    adding = q(",".join(nodes))
    return "\n".join(
        [
            f"job={q(job_id)}; add={adding}; state=",
            f"for i in $(seq 1 {RELEASE_WAIT_S}); do",
            f'  state=$({q(scontrol)} show job -o "$job") || exit 1',
            '  case "$state" in *JobState=PENDING*) break;; esac',
            "  sleep 1",
            "done",
            "old=$(printf '%s\\n' \"$state\" | sed -n 's/.*ExcNodeList=\\([^ ]*\\).*/\\1/p')",
            '[ "$old" = "(null)" ] && old=',
            f'{q(scontrol)} update JobId="$job" ExcNodeList="${{old:+$old,}}$add" StartTime=now',
            f'{q(scontrol)} release "$job"',
        ]
    )


def release_job_argv(
    sbatch: str, scontrol: str, job_id: str, nodes: Sequence[str], partition: str = "", account: str = ""
) -> List[str]:
    """The small job that releases job ``job_id`` once it is pending again, without ``nodes``."""
    argv = [sbatch, f"--job-name=npulaunch-release-{job_id}", "--nodes=1", "--ntasks=1", "--time=20"]
    argv += [f"--partition={partition}"] if partition else []
    argv += [f"--account={account}"] if account else []
    return argv + ["--output=/dev/null", f"--wrap={release_script(scontrol, job_id, nodes)}"]
