"""torchrun's command line, read with torchrun's meaning: every flag of ``torch.distributed.run`` (torch
2.13.0's ``get_args_parser``, torch/distributed/run.py), in its dash and underscore spellings, each also
read from its ``PET_<DEST>`` variable when the flag is not given (torch/distributed/argparse_util.py:
``env`` takes the value, ``check_env`` a switch as "0" or "1"), and normalised onto npulaunch's own flags
before cliargs.py turns them into the YAML's overrides.

A flag that means something to npulaunch maps onto it (``--standalone``, ``--nnodes MIN:MAX``,
``--nproc-per-node auto``, ``--rdzv-endpoint``, ``--shutdown-timeout``, ``--redirects``, ...); a flag that
has no use here (``--start-method``: every rank is a program of its own, exec'd, not a child Python forked
or spawned) is accepted and named in the plan's notes and in ``--debug``'s log, never an error. The
``PET_`` variables are read in torchrun's form only (a script or a command, no YAML): that is where
torchrun would have read them, as Kubeflow's PyTorchJob sets them in each pod.
"""

from __future__ import annotations

import argparse
import os
from dataclasses import dataclass
from typing import TYPE_CHECKING, Callable, Dict, List, Mapping, Optional, Tuple

from npulaunch.host.errors import ConfigError, ConfigProblem

if TYPE_CHECKING:
    from npulaunch.config.cluster import Rendezvous

TORCHRUN = "torch 2.13.0, torch/distributed/run.py"
C10D_PORT = 29400  # the c10d rendezvous' default port (torch/distributed/elastic/rendezvous/c10d_rendezvous_backend.py)
BACKENDS = ("static", "c10d")
# torchrun's --rdzv-conf keys (dynamic_rendezvous.py, c10d_rendezvous_backend.py, static_tcp_rendezvous.py)
RDZV_CONF_KEYS = (
    "join_timeout",
    "last_call_timeout",
    "close_timeout",
    "heartbeat",
    "keep_alive_interval",
    "keep_alive_max_attempt",
    "timeout",
    "read_timeout",
    "is_host",
    "store_type",
    "use_libuv",
    "rank",
    "local_addr",
)


@dataclass(frozen=True)
class TorchrunFlag:
    """One flag of torchrun's: its spellings, its ``dest`` (and so its ``PET_`` variable), whether it is a
    switch, and what npulaunch does with it (the docs' table, --help, the plan's note)."""

    names: Tuple[str, ...]
    dest: str
    meaning: str
    switch: bool = False
    used: bool = True  # False: accepted, no use here (named in the plan and --debug)
    own: bool = False  # npulaunch's own flag of the same name (cliargs.py defines it)
    pet: bool = True  # torchrun reads PET_<DEST> for it

    @property
    def name(self) -> str:
        """The long spelling, with dashes."""
        return next(n for n in self.names if n.startswith("--"))

    @property
    def variable(self) -> str:
        return f"PET_{self.dest.upper()}"


def _flag(names: str, dest: str, meaning: str, **kw: bool) -> TorchrunFlag:
    return TorchrunFlag(tuple(names.split()), dest, meaning, **kw)


FLAGS = (
    _flag(
        "--nnodes",
        "nnodes",
        "N or MIN:MAX nodes; one node unless more are asked for; several: one npulaunch per node, given its "
        "--node-rank (static), or told it at the c10d rendezvous, which starts with MIN nodes after the last call "
        "and re-forms the world when a node joins or leaves",
        own=True,
    ),
    _flag(
        "--nproc-per-node --nproc_per_node",
        "nproc_per_node",
        "ranks on this node: N, or auto (the NPUs npu-smi lists, else the CPUs), gpu (the NPUs), cpu (the CPUs)",
        own=True,
    ),
    _flag(
        "--rdzv-backend --rdzv_backend", "rdzv_backend", "static (default) or c10d; --standalone is c10d on one node"
    ),
    _flag(
        "--rdzv-endpoint --rdzv_endpoint",
        "rdzv_endpoint",
        "HOST[:PORT] where the nodes meet (c10d's port 29400 by default); c10d across nodes: the npulaunch of "
        "that host serves the rendezvous, node 0's agent the ranks' store; otherwise MASTER_ADDR and MASTER_PORT",
    ),
    _flag("--rdzv-id --rdzv_id", "rdzv_id", "the job's id: JOB_ID and TORCHELASTIC_RUN_ID, unless --job-id says"),
    _flag(
        "--rdzv-conf --rdzv_conf",
        "rdzv_conf",
        "KEY=VALUE,...: torchrun's rendezvous settings, checked; join_timeout (600 s), last_call_timeout (30 s) "
        "and is_host apply when nodes meet at the c10d rendezvous",
    ),
    _flag("--standalone", "standalone", "one node, meeting on a free local port", switch=True),
    _flag(
        "--max-restarts --max_restarts",
        "max_restarts",
        "restart every rank after any failure, up to N times (job.restart_on: any in torchrun's form); "
        "TORCHELASTIC_RESTART_COUNT counts them",
        own=True,
    ),
    _flag(
        "--monitor-interval --monitor_interval",
        "monitor_interval",
        "no use: npulaunch is woken by each rank's exit, it does not poll",
        used=False,
    ),
    _flag(
        "--start-method --start_method",
        "start_method",
        "no use: every rank is a program of its own, exec'd (torchrun's spawn, in effect)",
        used=False,
    ),
    _flag(
        "--event-log-handler --event_log_handler",
        "event_log_handler",
        "no use: npulaunch's events go to events.jsonl in the job directory",
        used=False,
    ),
    _flag("--role", "role", "ROLE_NAME (framework.role)"),
    _flag("-m --module", "module", "the script is a module: python -m MODULE", switch=True, own=True),
    _flag("--no-python --no_python", "no_python", "run the script as a program, not with Python", switch=True),
    _flag(
        "--run-path --run_path",
        "run_path",
        "the script runs as its own program with this Python (torchrun runs it with runpy.run_path)",
        switch=True,
    ),
    _flag(
        "--log-dir --log_dir",
        "log_dir",
        "where the job's directory is made, <log-dir>/<job id>: every rank's stdout and stderr",
        own=True,
    ),
    _flag(
        "-r --redirects",
        "redirects",
        "3 (or 0:3,1:3, ...: per local rank): that rank's output only to its files, not the console; "
        "1 or 2 (one stream) keep the rank on the console (npulaunch shows both streams or none)",
    ),
    _flag("-t --tee", "tee", "no use: every rank's output always goes to its files and to the console", used=False),
    _flag(
        "--local-ranks-filter --local_ranks_filter",
        "local_ranks_filter",
        "show only these local ranks' output on the console (all of it still goes to the files)",
    ),
    _flag(
        "--duplicate-stdout-filters --duplicate_stdout_filters",
        "duplicate_stdout_filters",
        "no use: every line is in the rank's stdout.log (grep it)",
        used=False,
    ),
    _flag(
        "--duplicate-stderr-filters --duplicate_stderr_filters",
        "duplicate_stderr_filters",
        "no use: every line is in the rank's stderr.log (grep it)",
        used=False,
    ),
    _flag("--node-rank --node_rank", "node_rank", "this node's index with --nnodes N (static)", own=True),
    _flag("--master-addr --master_addr", "master_addr", "MASTER_ADDR (static)", own=True),
    _flag("--master-port --master_port", "master_port", "MASTER_PORT (static)", own=True),
    _flag(
        "--local-addr --local_addr",
        "local_addr",
        "no use on one node: this node's address for the other nodes",
        used=False,
    ),
    _flag(
        "--logs-specs --logs_specs",
        "logs_specs",
        "no use: npulaunch's files per rank are fixed",
        used=False,
        pet=False,
    ),
    _flag(
        "--numa-binding --numa_binding",
        "numa_binding",
        "any mode binds each rank to CPUs near its NPU (--cpu-binding auto)",
        pet=False,
    ),
    _flag(
        "--signals-to-handle --signals_to_handle",
        "signals_to_handle",
        "no use: npulaunch stops every rank on SIGINT, SIGTERM, SIGHUP and SIGQUIT, and passes job.forward_signals on",
        used=False,
    ),
    _flag(
        "--shutdown-timeout --shutdown_timeout",
        "shutdown_timeout",
        "seconds between SIGTERM and SIGKILL when the ranks are stopped (job.grace_period_s)",
    ),
    _flag(
        "--virtual-local-rank --virtual_local_rank",
        "virtual_local_rank",
        "no use: torch_npu picks its NPU from LOCAL_RANK among ASCEND_RT_VISIBLE_DEVICES",
        switch=True,
        used=False,
    ),
)
BY_DEST = {flag.dest: flag for flag in FLAGS}
WHOLE_NUMBERS = ("max_restarts", "master_port", "node_rank")  # npulaunch's own flags of type int


def add_torchrun_flags(parser: argparse.ArgumentParser) -> None:
    """torchrun's flags that npulaunch has no flag of its own for, in a group of their own in --help."""
    group = parser.add_argument_group(
        f"torchrun's flags ({TORCHRUN}): also read from PET_<NAME> in torchrun's form; "
        "docs/reference/torchrun.md says what each does here"
    )
    for flag in FLAGS:
        if flag.own:
            continue
        if flag.switch:
            group.add_argument(*flag.names, dest=flag.dest, action="store_true", default=None, help=flag.meaning)
        else:
            group.add_argument(*flag.names, dest=flag.dest, metavar="VALUE", help=flag.meaning)


@dataclass(frozen=True)
class Torchrun:
    """What torchrun's flags came to: values for npulaunch's flags (set on the parsed arguments), and the
    notes the plan shows (flags with no use, values read from PET_ variables)."""

    notes: Tuple[str, ...] = ()
    shown_local: Optional[Tuple[int, ...]] = None  # --local-ranks-filter (None: every local rank); ()
    hidden_local: Tuple[int, ...] = ()  # --redirects LOCAL_RANK:3: these only in their files
    nnodes_range: Optional[Tuple[int, int]] = None  # --nnodes MIN:MAX as given
    all_devices: bool = False  # --nproc-per-node auto / gpu on a host with NPUs


def read_torchrun(args: argparse.Namespace, environ: Mapping[str, str], torchrun_form: bool) -> Torchrun:
    """Normalise torchrun's flags on ``args`` in place (``nnodes`` and ``nproc_per_node`` become ints or
    None, ``master_addr``/``master_port``/``job_id``/``grace_period``/``cpu_binding``/``console`` take what
    the rendezvous, shutdown, NUMA and redirect flags say); ConfigError naming each flag that cannot be
    read as torchrun reads it."""
    problems: List[ConfigProblem] = []
    notes: List[str] = []

    def bad(flag: str, found: object, allowed: str, hint: str = "") -> None:
        problems.append(ConfigProblem("command line", None, flag, str(found), allowed, hint))

    if torchrun_form:
        for flag in FLAGS:
            if not flag.pet or getattr(args, flag.dest, None) not in (None, False):
                continue
            value = environ.get(flag.variable)
            if value is None or value == "":
                continue
            if flag.switch:
                if value.strip() not in ("0", "1"):
                    bad(flag.variable, repr(value), "0 or 1 (torchrun's switches)")
                    continue
                setattr(args, flag.dest, value.strip() == "1")
            elif flag.dest in WHOLE_NUMBERS:
                if not value.strip().isdigit():
                    bad(flag.variable, repr(value), "a whole number, as " + flag.name + " takes")
                    continue
                setattr(args, flag.dest, int(value))
            else:
                setattr(args, flag.dest, value)
            notes.append(f"{flag.name} {value} from {flag.variable}")
    for flag in FLAGS:
        if not flag.used and getattr(args, flag.dest, None) not in (None, False):
            given = "" if flag.switch else f" {getattr(args, flag.dest)}"
            notes.append(f"torchrun's {flag.name}{given} is accepted and has no use here: {flag.meaning[8:]}")
    backend = (args.rdzv_backend or "static").strip()
    if backend not in BACKENDS:
        hint = (
            "etcd needs a server of its own; c10d meets at a node's TCPStore, with no server"
            if "etcd" in backend
            else ""
        )
        bad("--rdzv-backend", backend, "static or c10d", hint)
    if args.standalone:
        backend = "c10d"
        if args.rdzv_endpoint:
            notes.append(f"--standalone: --rdzv-endpoint {args.rdzv_endpoint} is ignored, as torchrun ignores it")
        args.rdzv_endpoint = None
    nnodes_text, nnodes_range = args.nnodes, _nnodes(args.nnodes, bad)
    args.nnodes = None
    if nnodes_range is not None and nnodes_range[1] == 1 and args.node_rank == 0:
        args.node_rank = None  # torchrun's --nnodes 1 --node-rank 0: one node
    if nnodes_range is not None:
        low, high = nnodes_range
        if high > 1 and args.standalone:
            bad("--nnodes", nnodes_text, "1 with --standalone", "--standalone runs one node")
        elif high > 1 and backend == "c10d" and args.node_rank is None:
            args.nnodes = high  # node rank and count: decided where the nodes meet (plan/schedulers/c10d.py)
        elif high > 1 and low != high:
            bad("--nnodes", nnodes_text, "N (a fixed number of nodes) with --rdzv-backend static")
        elif high > 1:
            args.nnodes = high
    all_devices = _nproc(args, environ, bad)
    endpoint = (args.rdzv_endpoint or "").strip()
    conf = _rdzv_conf(args.rdzv_conf, bad) if args.rdzv_conf else {}
    args.rendezvous = None
    if args.nnodes and backend == "c10d" and args.node_rank is None and nnodes_range is not None:
        host, port = _endpoint(endpoint, C10D_PORT, bad) if endpoint else ("localhost", C10D_PORT)
        args.rendezvous = _rendezvous(host, port, args.rdzv_id or "none", nnodes_range, conf, bad)
        if args.config is None:
            args.master_addr = args.master_addr or host  # a stand-in until the nodes meet
    elif endpoint:
        host, port = _endpoint(endpoint, C10D_PORT if backend == "c10d" else None, bad)
        if host and args.master_addr is None:
            args.master_addr = host
        if port is not None and args.master_port is None:
            args.master_port = port
    if args.rdzv_id and args.job_id is None and not args.standalone:
        args.job_id = args.rdzv_id
    if args.shutdown_timeout is not None and args.grace_period is None:
        seconds = _number(args.shutdown_timeout, "--shutdown-timeout", "whole seconds from 0 to 3600", bad)
        args.grace_period = seconds
    if args.numa_binding and args.cpu_binding is None:
        args.cpu_binding = "auto"
        notes.append(
            f"--numa-binding {args.numa_binding}: each rank is bound to the CPUs near its NPU (cpu_binding auto)"
        )
    shown, hidden = _shown(args.redirects, args.local_ranks_filter, bad)
    if args.no_python and args.module:
        bad("--no-python", "--no-python with -m", "one of them", "torchrun refuses the pair too")
    if problems:
        raise ConfigError(problems)
    return Torchrun(tuple(notes), shown, hidden, nnodes_range, all_devices)


def _nnodes(text: Optional[str], bad: Callable[..., None]) -> Optional[Tuple[int, int]]:
    if text is None:
        return None
    parts = str(text).strip().split(":")
    try:
        low, high = (int(parts[0]), int(parts[0])) if len(parts) == 1 else (int(parts[0]), int(parts[1]))
    except (ValueError, IndexError):
        low = high = -1
    if len(parts) > 2 or not 0 < low <= high <= 65536:
        bad("--nnodes", text, "N or MIN:MAX, 0 < MIN <= MAX <= 65536", "e.g. --nnodes 2 or --nnodes 1:4")
        return None
    return low, high


def _nproc(args: argparse.Namespace, environ: Mapping[str, str], bad: Callable[..., None]) -> bool:
    """``args.nproc_per_node`` as an int (auto/cpu: a count); True when it asks for every NPU of the host."""
    text = args.nproc_per_node
    if text is None or isinstance(text, int):
        return False
    word = str(text).strip().lower()
    if word.isdigit():
        args.nproc_per_node = int(word)
        if not 1 <= args.nproc_per_node <= 64:
            bad("--nproc-per-node", text, "an integer from 1 to 64, or auto, gpu, cpu")
        return False
    if word == "cpu" or (word == "auto" and not _has_npus()):
        args.nproc_per_node = min(os.cpu_count() or 1, 64)
        return False
    if word in ("auto", "gpu", "npu"):
        args.nproc_per_node = None
        if not _has_npus():
            bad("--nproc-per-node", text, "auto or cpu on a host without NPUs", "npu-smi is not on PATH here")
        return True
    bad("--nproc-per-node", text, "an integer from 1 to 64, or auto, gpu, cpu")
    args.nproc_per_node = None
    return False


def _has_npus() -> bool:
    import shutil

    return shutil.which("npu-smi") is not None


def _endpoint(text: str, default_port: Optional[int], bad: Callable[..., None]) -> Tuple[str, Optional[int]]:
    """``HOST[:PORT]`` (``[v6]:PORT`` too), as torchrun's parse_rendezvous_endpoint reads it."""
    host, port = text, ""
    if text.startswith("["):
        host, _, rest = text[1:].partition("]")
        port = rest[1:] if rest.startswith(":") else ""
    elif text.count(":") == 1:
        host, port = text.split(":")
    if not host:
        bad("--rdzv-endpoint", text, "HOST or HOST:PORT, e.g. node0:29400")
        return "", None
    if not port:
        return host, default_port
    if not port.isdigit() or not 0 <= int(port) <= 65535:
        bad("--rdzv-endpoint", text, "HOST:PORT with a port from 0 to 65535")
        return host, None
    return host, int(port) or None  # port 0: a free one


def _rendezvous(
    host: str,
    port: Optional[int],
    run_id: str,
    nnodes: Tuple[int, int],
    conf: Mapping[str, str],
    bad: Callable[..., None],
) -> Optional[Rendezvous]:
    """The c10d rendezvous of one npulaunch per node with no node rank, with --rdzv-conf's timeouts."""
    timeouts = {"join_timeout": 600.0, "last_call_timeout": 30.0}
    for name in timeouts:
        if name in conf:
            try:
                timeouts[name] = float(conf[name])
            except ValueError:
                timeouts[name] = -1.0
            if not 0 < timeouts[name] <= 86400:
                bad("--rdzv-conf", f"{name}={conf[name]}", f"{name}=SECONDS, more than 0 and at most 86400")
    is_host = None
    if "is_host" in conf:
        word = conf["is_host"].lower()
        is_host = word in ("1", "true", "t", "yes", "y")  # torch's RendezvousParameters.get_as_bool
        if not is_host and word not in ("0", "false", "f", "no", "n"):
            bad("--rdzv-conf", f"is_host={conf['is_host']}", "is_host=1 or is_host=0 (true, false, yes, no)")
    from npulaunch.config.cluster import Rendezvous

    if port is None:
        bad("--rdzv-endpoint", f"{host}:0", "HOST:PORT with a port from 1 to 65535 when nodes meet there")
        return None
    return Rendezvous(
        host, port, run_id, nnodes[0], nnodes[1], timeouts["join_timeout"], timeouts["last_call_timeout"], is_host
    )


def _rdzv_conf(text: str, bad: Callable[..., None]) -> Dict[str, str]:
    found: Dict[str, str] = {}
    for item in text.split(","):
        key, sep, value = item.partition("=")
        key = key.strip()
        if not item.strip():
            continue
        if not sep or key not in RDZV_CONF_KEYS:
            bad("--rdzv-conf", item, "KEY=VALUE pairs of torchrun's keys: " + ", ".join(RDZV_CONF_KEYS))
            continue
        found[key] = value.strip()
    return found


def _number(text: str, flag: str, allowed: str, bad: Callable[..., None]) -> Optional[float]:
    try:
        value = float(text)
    except ValueError:
        value = -1.0
    if not 0 <= value <= 3600:
        bad(flag, text, allowed)
        return None
    return value


def _shown(
    redirects: Optional[str], local_filter: Optional[str], bad: Callable[..., None]
) -> Tuple[Optional[Tuple[int, ...]], Tuple[int, ...]]:
    """``(shown, hidden)`` local ranks on the console: --local-ranks-filter's (None: every one), and those
    --redirects sends wholly to their files (3: stdout and stderr; a bare 3 hides every rank)."""
    hidden: List[int] = []
    every = False
    if redirects:
        text = redirects.strip()
        if text in ("0", "1", "2", "3"):
            every = text == "3"
        else:
            for item in text.split(","):
                rank, sep, value = item.partition(":")
                if not sep or not rank.strip().isdigit() or value.strip() not in ("0", "1", "2", "3"):
                    bad("-r/--redirects", redirects, "0, 1, 2, 3, or LOCAL_RANK:VALUE pairs such as 0:3,1:0")
                    return None, ()
                if value.strip() == "3":
                    hidden.append(int(rank))
    shown: Optional[Tuple[int, ...]] = None
    if local_filter:
        try:
            shown = tuple(sorted({int(part) for part in local_filter.split(",")}))
        except ValueError:
            bad("--local-ranks-filter", local_filter, "local ranks separated by commas, e.g. 0,1,2")
            return None, ()
    return (() if every else shown), tuple(sorted(hidden))
