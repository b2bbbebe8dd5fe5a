"""Every key of the cluster YAML (version 1) as data: its type, default, allowed values and what it does,
for docs/reference/yaml.md (scripts/gen_docs.py). The parsers (load.py, hostentries.py, sections.py,
recovery.py, framework.py) decide what is accepted; this table only describes, and
tests/test_docs_generated.py checks that its keys are exactly theirs. Imported by nothing at run time
(not by ``npulaunch --help`` nor ``plan``): only the generator and that test read it. A data table: it
may exceed the usual 400-line module size.
"""

from __future__ import annotations

from typing import Any, Iterable, NamedTuple, Tuple

from npulaunch.config.cluster import (
    DEFAULT_GRACE_PERIOD_S,
    DEFAULT_LOG_DIR,
    MAX_DEVICE_ID,
    ConsoleMode,
    Framework,
    Injection,
    JobConfig,
    Precedence,
    RankTableMode,
    RecoveryConfig,
    StartMode,
    Transport,
)
from npulaunch.config.load import MAX_RESTARTS
from npulaunch.config.recovery import MAX_LEDGER_WINDOW_H, MAX_RECOVERIES
from npulaunch.config.sections import DEFAULT_HEALTH_INTERVAL_S, DEFAULT_STRAGGLERS, MAX_SUPER_DEVICE_ID


class Key(NamedTuple):
    """One YAML key. ``path``: dotted, ``[]`` for the entries of a list (``hosts[].devices``)."""

    path: str
    type: str  # in YAML's words: mapping, list, string, integer, number, boolean, or a union of them
    default: str  # what applies when the key is absent ("" when it is required or has no value)
    allowed: str  # the values the parser accepts, in words
    description: str  # what it does


def _choices(enum: Iterable[Any]) -> str:
    return " | ".join(member.value for member in enum)


_PRODUCTS = "atlas-training | atlas-a2 | atlas-a3 | atlas-inference | atlas-300i-duo"
_SIGNALS = "SIGUSR1, SIGUSR2, SIGWINCH (the SIG prefix and case are optional)"
_PLACEHOLDERS = "{rank}, {local_rank}, {device_id}, {node_rank}, {host}, {job_id}, {job_dir}"

KEYS: Tuple[Key, ...] = (
    # -- top level --------------------------------------------------------------------------------
    Key("version", "integer", "1", "1", "The format's version; only 1 exists."),
    Key(
        "framework",
        "string or mapping",
        Framework.TENSORFLOW.value,
        _choices(Framework) + ", or the long form {name, mode, master_addr, master_port, role}",
        "Whose start-up contract the ranks get (the variables each rank is given). `framework: pytorch` is "
        "the short form of `framework: {name: pytorch}`. The flag `--framework` overrides it; in torchrun's "
        "form (`npulaunch run train.py`) the default is what the script imports.",
    ),
    Key(
        "job",
        "mapping",
        "",
        "a mapping with at least `command`",
        "The training job: its command, names, directories and how it is stopped and restarted. Required.",
    ),
    Key(
        "hosts",
        "list",
        "this host alone, `devices: all`",
        "a non-empty list of host entries (a mapping, or a bare host name)",
        "The hosts the job runs on, in rank order. A remote host is reached over SSH (or with mpirun: `transport`); "
        "under a scheduler the scheduler's nodes come first and an entry named like a node gives that node's devices.",
    ),
    Key(
        "ssh",
        "mapping",
        "the user's own ssh settings",
        "a mapping of the keys below",
        "Defaults for every remote host's SSH login (a host entry's `user`, `port`, `identity_file` win).",
    ),
    Key(
        "transport",
        "string",
        Transport.SSH.value,
        _choices(Transport),
        "How each remote host's agent is started. ssh: an SSH session per agent (the `ssh` section). mpirun: Open "
        "MPI's mpirun per agent, one process on that host (`mpirun --host HOST:1 -np 1`), the agent's lines over "
        "mpirun's stdin and stdout; mpirun reaches the host through its own rsh agent (the `mpi` section), and "
        "Open MPI's variables of that process are unset before the agent starts. A lost host is found in 5 s "
        "(as under srun) and spare hosts take its place as over SSH. The flag `--transport` overrides it.",
    ),
    Key(
        "mpi",
        "mapping",
        "mpirun on the PATH, no extra options",
        "a mapping of the keys below",
        "Open MPI's mpirun for `transport: mpirun`.",
    ),
    Key(
        "spares",
        "list",
        "no spare hosts",
        "a list of host entries in the form of `hosts[]` (without `spare_devices`; may be empty)",
        "Hosts held back for recovery: one takes the whole place of a host that is lost. A spare host is "
        "none of the job's hosts and is held back whole.",
    ),
    Key(
        "recovery",
        "mapping",
        "max_recoveries 3, no checkpoint directory, no shrinking, the fault history in <log_dir>/faults.jsonl",
        "a mapping of the keys below",
        "How a job continues past an NPU or host fault: what broke is excluded, spares take its place, and "
        "every rank resumes from the newest complete checkpoint; and the fault history that keeps faulty NPUs "
        "and hosts off the next jobs.",
    ),
    Key(
        "rank_table",
        "string",
        RankTableMode.AUTO.value,
        _choices(RankTableMode),
        "HCCL rank table policy. auto: write one when it can be built (without one, more than one rank on "
        "NPUs is an error); required: refuse to start without one; none: never write one (the ranks cannot "
        "use HCCL together); cm: rank-table-free, HCCL forms the cluster from the CM_* variables npulaunch "
        "sets. The flag `--rank-table` overrides it.",
    ),
    Key(
        "env",
        "mapping",
        "no extra variables",
        "variable names to a string, a number, or null; a mapping for a JSON variable",
        "Extra environment for every rank. null removes a variable inherited from the launcher. Values of "
        "known variables are checked against the catalog ([environment variables](env-vars.md)); the "
        "variables npulaunch sets per rank (RANK_ID, RANK_SIZE, DEVICE_ID, ASCEND_DEVICE_ID, DEVICE_INDEX, "
        "RANK_INDEX, JOB_ID, RANK_TABLE_FILE, ASCEND_PROCESS_LOG_PATH, NPULAUNCH_*) and POD_NAME are "
        "refused. Values may use the placeholders " + _PLACEHOLDERS + ". YAML reads yes/no/on/off as "
        "booleans: quote them.",
    ),
    Key(
        "session_options",
        "mapping",
        "none (CANN's defaults)",
        "TF Adapter option names to values of each option's type ([session options](session-options.md))",
        "TF Adapter session options (`custom_op.parameter_map`) for every rank, checked against the catalog "
        "and the rules between options, passed as NPULAUNCH_SESSION_OPTIONS. An unknown name is an error with "
        "the nearest name suggested; null is refused (remove the key to keep CANN's default).",
    ),
    Key(
        "session_injection",
        "string",
        Injection.OFF.value,
        _choices(Injection) + " (YAML's true/false read as auto/off)",
        "off: the script applies the options itself (npulaunch.session); auto: a sitecustomize hook merges "
        "the options into every TensorFlow session of unchanged scripts.",
    ),
    Key(
        "session_precedence",
        "string",
        Precedence.SCRIPT.value,
        _choices(Precedence),
        "Who wins when both the script and the YAML set an option: script (the script's value is kept, with "
        "a warning) or yaml.",
    ),
    Key(
        "cpu_fallback",
        "boolean",
        "false",
        "true | false",
        "Train on the CPU with TensorFlow collectives (TF_CONFIG per rank) instead of NPUs.",
    ),
    Key(
        "data_preprocess",
        "string",
        "off",
        "off | host_main",
        "host_main: one preprocessing process per host for the host's devices; it sets local_rank_id and "
        "local_device_list for every rank, so session_options may not set them.",
    ),
    Key(
        "monitor",
        "mapping",
        "limits derived from the job's timeouts, no patterns",
        "a mapping of the keys below",
        "Hang limits, the live NPU health watch, what counts as progress, and the job's own error signatures.",
    ),
    Key(
        "slurm",
        "mapping",
        "none",
        "a mapping of the keys below",
        "The header of the batch script `npulaunch sbatch` prints (its flags override each key).",
    ),
    Key(
        "product",
        "string",
        "not set (the range every product accepts, with a warning)",
        _PRODUCTS,
        "The Ascend product line, for the options whose range or availability depends on it; "
        "atlas-a3 allows super pods.",
    ),
    Key(
        "cann_version",
        "string",
        "not set (as 7.0.0)",
        "a CANN version such as 6.0.RC1, 6.0.1, 7.0.0, 8.0.RC2 or 9.0.0 (quote it)",
        "The CANN version the hosts run, for ranges and defaults that changed between versions "
        "(HCCL_EXEC_TIMEOUT, hccl_timeout; the hang limits derived from them).",
    ),
    # -- job ----------------------------------------------------------------------------------------
    Key(
        "job.name",
        "string",
        "the YAML file's name",
        "letters, digits, '-' and '_'",
        "The job's name; the default JOB_ID is <name>-<YYYYmmdd-HHMMSS>.",
    ),
    Key(
        "job.id",
        "string or integer",
        "<name>-<YYYYmmdd-HHMMSS> (under a scheduler: its job id)",
        "letters, digits, '-' and '_', not a number with a leading 0",
        "A fixed JOB_ID, also the job directory's name. The flag `--job-id` overrides it.",
    ),
    Key(
        "job.command",
        "list or string",
        "",
        "a non-empty list of strings, or one string split like a shell would",
        "The argv every rank runs. Arguments may use the placeholders " + _PLACEHOLDERS + " ({{name}} is a "
        "literal {name}; ${name} is left to a shell). Required.",
    ),
    Key(
        "job.workdir",
        "string",
        ".",
        "a directory path; placeholders allowed",
        "The ranks' working directory. Relative paths start at the YAML file's directory; a path starting "
        "with {job_dir} is the rank's job directory. It must exist.",
    ),
    Key(
        "job.log_dir",
        "string",
        DEFAULT_LOG_DIR,
        "a directory path",
        "Where job directories (<log_dir>/<job_id>/) are created; relative to the YAML file's directory. "
        "The flag `--log-dir` overrides it.",
    ),
    Key(
        "job.grace_period_s",
        "number",
        "%g" % DEFAULT_GRACE_PERIOD_S,
        "0 to 3600 seconds",
        "Seconds between SIGTERM and SIGKILL when ranks are stopped. The flag `--grace-period` overrides it.",
    ),
    Key(
        "job.console",
        "string",
        ConsoleMode.ALL.value,
        _choices(ConsoleMode),
        "Which ranks' output the console shows (every rank's goes to its files). The flag `--console` overrides it.",
    ),
    Key(
        "job.forward_signals",
        "list",
        "[SIGUSR1, SIGUSR2]",
        "a list of " + _SIGNALS + "; [] for none",
        "Signals sent to npulaunch that are passed on to every rank.",
    ),
    Key(
        "job.max_restarts",
        "integer",
        "0",
        "0 to 100",
        "Restart the whole job up to this many times after a failure job.restart_on names (hardware faults "
        "count under recovery.max_recoveries instead). Each rank's TORCHELASTIC_RESTART_COUNT (framework "
        "pytorch) says how many restarts came before its attempt. The flag `--max-restarts` overrides it.",
    ),
    Key(
        "job.restart_on",
        "string",
        "retryable",
        "retryable or any",
        "Which failures job.max_restarts restarts after: retryable, only a failure whose root cause a restart "
        "may cure (a link or timeout fault, a pattern marked retryable; never a configuration error, a "
        "Python exception or a killed rank); any, every failure of a rank, as torchrun's --max-restarts does. "
        "A job given by flags alone (torchrun's form, `npulaunch run --nproc-per-node 4 train.py`) restarts "
        "on any; a YAML's job on retryable unless it says any. The flag `--restart-on` overrides it.",
    ),
    Key(
        "job.crash_loop_limit",
        "integer",
        str(JobConfig.crash_loop_limit),
        "0 (never), or 2 to %d" % (MAX_RESTARTS + 1),
        "A crash loop: this many attempts in a row that failed the same way (the same failure class and "
        "code) with no step advanced. The job then stops with exit code 93 (do not requeue), before "
        "job.max_restarts or recovery.max_recoveries run out.",
    ),
    Key(
        "job.make_dirs",
        "list",
        "[]",
        'a list of directory paths, e.g. ["output/{device_id}/ckpt"]; placeholders allowed',
        "Per-rank directories made (mode 0700) by the agent on the rank's host just before the rank starts; "
        "relative paths start at the rank's working directory.",
    ),
    Key(
        "job.cpu_binding",
        "string or mapping",
        "none",
        'none | blocks | auto, or a mapping of device ids to CPU lists ({"0": "0-23", "1": "24-47"})',
        "Pin each rank to CPUs. blocks: the CPUs npulaunch may use, split evenly in device order; auto: CPUs "
        "of the NPU's NUMA node; a mapping: the CPUs written for each physical device id (keys quoted). "
        "The flag `--cpu-binding` overrides it.",
    ),
    # -- hosts[] (and spares[]) ---------------------------------------------------------------------
    Key(
        "hosts[].host",
        "string",
        "",
        "a host name or address (letters, digits, . - _ : %), each host once",
        "The host's name or address. A bare string entry (`- node1`) is this key alone. Required.",
    ),
    Key(
        "hosts[].devices",
        "list, integer or string",
        "all",
        "a list of device ids 0-%d, a count 1-%d, or all" % (MAX_DEVICE_ID, MAX_DEVICE_ID + 1),
        "The host's NPUs for the job, by physical id (/dev/davinci<N>, npu-smi, hccn_tool). A count N "
        "means 0..N-1; all asks npu-smi on this host (give a list or a count for remote hosts). The flags "
        "`--devices` and `--nproc-per-node` override it.",
    ),
    Key(
        "hosts[].device_ips",
        "list",
        "read with hccn_tool where it is needed",
        "IPv4 addresses, one distinct address per device (then one per spare device, optionally)",
        "The NPUs' own network addresses for the HCCL rank table, in the order of devices (and then of spare_devices).",
    ),
    Key(
        "hosts[].spare_devices",
        "list",
        "[]",
        "a list of device ids 0-%d that are not in devices (not on a spare host)" % MAX_DEVICE_ID,
        "NPUs of this host held back for recovery: one takes the place of an NPU that fails.",
    ),
    Key(
        "hosts[].super_pod_id",
        "string or integer",
        "not set",
        "a number or a string, unique per super pod; on every host or on none",
        "Atlas A3 super-node networking (product: atlas-a3): the host's super pod, written to a rank table of "
        "version 1.2. The hosts of one super pod are listed together.",
    ),
    Key(
        "hosts[].super_device_ids",
        "list",
        "not set",
        "super_device_ids 0-%d, one per device in devices, each once in a super pod" % MAX_SUPER_DEVICE_ID,
        "Each device's super_device_id (the SDID of `npu-smi info -t spod-info`), with super_pod_id.",
    ),
    Key("hosts[].user", "string", "ssh.user", "a user name", "The SSH login user for this host."),
    Key("hosts[].port", "integer", "ssh's port (22)", "a TCP port 1-65535", "The SSH port of this host."),
    Key(
        "hosts[].identity_file",
        "string",
        "ssh.identity_file",
        "a path (~ expanded)",
        "The SSH private key for this host.",
    ),
    # -- ssh ----------------------------------------------------------------------------------------
    Key("ssh.user", "string", "the ssh config's, else the local user", "a user name", "The SSH login user."),
    Key("ssh.identity_file", "string", "ssh's defaults", "a path (~ expanded)", "The SSH private key."),
    Key(
        "ssh.known_hosts",
        "string",
        "the user's known_hosts",
        "a path (~ expanded)",
        "The known_hosts file host keys are checked against.",
    ),
    Key(
        "ssh.config",
        "string",
        "the user's ssh config",
        "a path (~ expanded)",
        "The ssh config file for aliases, ports and users.",
    ),
    Key(
        "ssh.accept_unknown_hosts",
        "boolean",
        "false",
        "true | false",
        "true trusts host keys not in known_hosts: an explicit opt-in.",
    ),
    Key(
        "ssh.connect_timeout_s",
        "number",
        "10",
        "1 to 600 seconds",
        "How long opening one SSH connection may take.",
    ),
    Key("ssh.parallel", "integer", "32", "1 to 1024", "How many SSH connections are opened at once."),
    Key(
        "ssh.python",
        "string",
        "python3",
        "a command",
        "The Python command for the remote agent. Accepted and checked; the launcher starts the agent with "
        "python3 today.",
    ),
    # -- recovery -----------------------------------------------------------------------------------
    Key(
        "recovery.max_recoveries",
        "integer",
        str(RecoveryConfig.max_recoveries),
        "0 to %d" % MAX_RECOVERIES,
        "How many NPU or host faults the job continues past (counted apart from job.max_restarts).",
    ),
    Key(
        "recovery.checkpoint_dir",
        "string",
        "not set (no resume)",
        "a directory per rank; placeholders such as {rank} or {device_id}; relative to the rank's workdir",
        "Each rank's TensorFlow (or torch) checkpoint directory: before the next attempt every rank gets the "
        "newest complete checkpoint among them, and NPULAUNCH_RESUME_CHECKPOINT names it.",
    ),
    Key(
        "recovery.shrink",
        "mapping",
        "not set (never shrink)",
        "{min_ranks: N}",
        "Opt-in: without a spare, go on with fewer ranks (the world size changes) rather than stop.",
    ),
    Key(
        "recovery.shrink.min_ranks",
        "integer",
        "",
        "1 or more",
        "The fewest ranks the job may go on with. Required in recovery.shrink.",
    ),
    Key(
        "recovery.ledger",
        "string",
        "<log_dir>/faults.jsonl",
        "a file path that this user can append to (or create); relative to the YAML file's directory; no placeholders",
        "The fault history: every NPU fault and lost host a job saw, appended as JSON lines, shared by the jobs "
        "that name the same file (safe for concurrent writers on a shared file system). plan, check and run "
        "place around what it keeps off; `npulaunch faults` lists and clears it. A path that cannot be written "
        "is an error before anything starts.",
    ),
    Key(
        "recovery.ledger_window_h",
        "number",
        "%g" % RecoveryConfig.ledger_window_h,
        "0 to %d hours" % MAX_LEDGER_WINDOW_H,
        "How long a fault in the history keeps its NPU (or a lost host) off new placements: by default "
        "MindCluster's 24 h, in which a code seen again makes the NPU ManuallySeparateNPU (kept off until "
        "cleared, whatever this window). 0: only such NPUs are kept off.",
    ),
    # -- monitor ------------------------------------------------------------------------------------
    Key(
        "monitor.hang_timeout_s",
        "number",
        "the job's longest collective / stream-sync timeout + 60 s",
        "0 to 2592000 seconds; 0 turns the check off",
        "No progress for this long after the first output is a hang: the hung ranks' stacks are dumped and "
        "the job is stopped. The flag `--hang-timeout` overrides it.",
    ),
    Key(
        "monitor.startup_timeout_s",
        "number",
        "HCCL_CONNECT_TIMEOUT + 20 s + 1800 s for graph compilation",
        "0 to 2592000 seconds; 0 turns the check off",
        "The limit from the launch to a rank's first output.",
    ),
    Key(
        "monitor.patterns",
        "list",
        "[]",
        "a list of {name, pattern, class, kind, retryable, hint, code} mappings",
        "The job's own error signatures, matched in every line of every rank's output.",
    ),
    Key(
        "monitor.progress_regex",
        "string",
        "not set (any line is progress; steps read in the usual forms)",
        "a regular expression",
        "Only lines matching it count as progress for hang detection, and its groups give the step "
        "(step (\\d+)/(\\d+)) in the live view and the report.",
    ),
    Key(
        "monitor.health_interval_s",
        "number",
        "%g (0 with cpu_fallback)" % DEFAULT_HEALTH_INTERVAL_S,
        "0 to 2592000 seconds; 0 turns the watch off",
        "How often each host's agent asks npu-smi about its NPUs' health (and hccn_tool about their links "
        "in a multi-host job) while the job runs.",
    ),
    Key(
        "monitor.stragglers",
        "mapping or off",
        "on: {action: warn, factor: %g, exclude_after_s: %g}"
        % (DEFAULT_STRAGGLERS["factor"], DEFAULT_STRAGGLERS["exclude_after_s"]),
        "off, on, or {action, factor, exclude_after_s}",
        "Straggler detection: each rank's step is timed (busy and waiting for the others) and a rank slower "
        "than its peers by `factor` is named in the live view, `status`, the report and summary.json. "
        "off: the ranks are not timed.",
    ),
    Key(
        "monitor.stragglers.action",
        "string",
        "warn",
        "warn or exclude",
        "warn: name the slow rank. exclude: a rank slow for exclude_after_s is a sub-health fault of its NPU: "
        "the job stops and resumes from the newest checkpoint without that NPU (recovery's path).",
    ),
    Key(
        "monitor.stragglers.factor",
        "number",
        "%g" % DEFAULT_STRAGGLERS["factor"],
        "1.05 to 100",
        "How much slower than the median of its peers a rank's own work per step must be to be named (1.2: 20 %).",
    ),
    Key(
        "monitor.stragglers.exclude_after_s",
        "number",
        "%g" % DEFAULT_STRAGGLERS["exclude_after_s"],
        "0 to 2592000 seconds",
        "With action exclude: how long a rank must stay slow before its NPU is excluded.",
    ),
    Key(
        "monitor.patterns[].name",
        "string",
        "",
        "a name",
        "The signature's name; also its failure class when class is not given. Required.",
    ),
    Key(
        "monitor.patterns[].pattern",
        "string",
        "",
        "a regular expression that compiles",
        "Searched in every line. Required.",
    ),
    Key("monitor.patterns[].class", "string", "the name", "a string", "The failure class the report gives."),
    Key(
        "monitor.patterns[].kind",
        "string",
        "cause",
        "cause | symptom",
        "cause: a failure of its own; symptom: the consequence of a failure elsewhere.",
    ),
    Key(
        "monitor.patterns[].retryable",
        "boolean",
        "false",
        "true | false",
        "Whether job.max_restarts may restart the job after it.",
    ),
    Key(
        "monitor.patterns[].hint",
        "string",
        "matched the job's own pattern",
        "a string",
        "What the report says to check.",
    ),
    Key("monitor.patterns[].code", "string", "none", "a string", "A code the finding carries."),
    # -- mpi ----------------------------------------------------------------------------------------
    Key(
        "mpi.mpirun",
        "string",
        "mpirun",
        "Open MPI's mpirun: a command on the PATH or a path (~ expanded)",
        "The mpirun that starts each agent; checked to be Open MPI's (`mpirun --version`) before any host is reached.",
    ),
    Key(
        "mpi.mpirun_options",
        "list",
        "[]",
        "a list of mpirun's arguments, one word each; not --host, --hostfile, --machinefile, -np (-n, -c), "
        "--stdin, --bind-to, --app, which npulaunch sets",
        'Passed to every agent\'s mpirun as they are, e.g. `["--mca", "plm_rsh_agent", "ssh -F '
        '/etc/npulaunch/ssh_config"]` (how mpirun reaches the hosts), `["--mca", "oob_tcp_if_include", '
        '"10.0.0.0/24"]`, `["--prefix", "/opt/openmpi"]`. The `ssh` section is not used with mpirun.',
    ),
    # -- slurm --------------------------------------------------------------------------------------
    Key(
        "slurm.nodes",
        "integer",
        "the number of hosts",
        "1 to 100000",
        "Nodes to allocate (#SBATCH --nodes). `npulaunch sbatch --nodes` overrides it.",
    ),
    Key(
        "slurm.spare_nodes",
        "integer",
        "0",
        "0 to 10000; more than 0 needs recovery.checkpoint_dir",
        "Nodes allocated beyond `slurm.nodes` and held back: when a node is lost or an NPU faults, the next "
        "attempt runs on a spare as a new job step, resuming from the newest checkpoint (`npulaunch sbatch "
        "--spare-nodes` overrides it).",
    ),
    Key(
        "slurm.time",
        "string",
        "none (the partition's)",
        "a Slurm time limit: minutes, MM:SS, HH:MM:SS, D-HH, D-HH:MM or D-HH:MM:SS (quoted)",
        'The time limit (#SBATCH --time), e.g. "2:00:00". `npulaunch sbatch --time` overrides it.',
    ),
    Key(
        "slurm.partition",
        "string",
        "none (the cluster's default)",
        "letters, digits, '_', '.', '-' (and ',' between names)",
        "The partition (#SBATCH --partition). `npulaunch sbatch --partition` overrides it.",
    ),
    Key(
        "slurm.account",
        "string",
        "none",
        "letters, digits, '_', '.', '-' (and ',' between names)",
        "The account (#SBATCH --account). `npulaunch sbatch --account` overrides it.",
    ),
    Key(
        "slurm.sbatch_options",
        "list",
        "[]",
        'a list of sbatch options starting with --, one line each, e.g. ["--exclusive"]',
        "Extra #SBATCH lines, as written.",
    ),
    # -- framework (long form) -----------------------------------------------------------------------
    Key(
        "framework.name",
        "string",
        Framework.TENSORFLOW.value,
        _choices(Framework),
        "The framework (the short form `framework: NAME` sets only this).",
    ),
    Key(
        "framework.mode",
        "string",
        StartMode.MSRUN.value + " (mindspore only)",
        _choices(StartMode) + "; only with mindspore",
        "How a MindSpore job forms its cluster: msrun's dynamic cluster (a scheduler process npulaunch "
        "starts) or a rank table.",
    ),
    Key(
        "framework.master_addr",
        "string",
        "the first host, as the others reach it",
        "an address or host name; pytorch, or mindspore in msrun mode",
        "Where the processes meet (MASTER_ADDR, MS_SCHED_HOST). The flag `--master-addr` overrides it.",
    ),
    Key(
        "framework.master_port",
        "integer",
        "a free port (one host), else 29500 (pytorch) or 8118 (mindspore)",
        "1 to 65535; pytorch, or mindspore in msrun mode",
        "The meeting point's port (MASTER_PORT, MS_SCHED_PORT), checked free before anything starts. The "
        "flag `--master-port` overrides it.",
    ),
    Key(
        "framework.role",
        "string",
        "default",
        "a role name; pytorch only",
        "torchrun's role: ROLE_NAME of every rank.",
    ),
)
