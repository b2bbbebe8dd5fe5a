"""The environment variables CANN reads and npulaunch sets, as data (one EnvVarSpec each).
Facts (values, ranges, defaults, units, conflicts) come from the CANN documents in shared/seeds/
and, for the rank and HCCL variables, from the project's issue; the wording is ours.
A default is the value the variable stands for when unset; None where the docs name none.
"""

from npulaunch.config.catalog import EnvVarSpec

ENV_VARS = (
    # --- cluster: ranks, rank table, HCCL timeouts, rank-table-free set-up -----------------------
    EnvVarSpec(
        name="RANK_ID",
        kind="int",
        area="cluster",
        description="Global rank of this process within the job.",
        set_by_launcher=True,
        notes="From 0 to RANK_SIZE - 1; npulaunch derives it from the plan, the YAML may not set it.",
    ),
    EnvVarSpec(
        name="RANK_SIZE",
        kind="int",
        area="cluster",
        description="How many ranks take part in the job.",
        set_by_launcher=True,
    ),
    EnvVarSpec(
        name="RANK_TABLE_FILE",
        kind="path",
        area="cluster",
        description="Location of the HCCL rank table (JSON) that describes every device of the job.",
        set_by_launcher=True,
        notes="npulaunch writes the table into the job directory and points here; without a rank table"
        " (CM_* set-up) it removes any inherited value so HCCL is not misled.",
    ),
    EnvVarSpec(
        name="JOB_ID",
        kind="str",
        area="cluster",
        description="User-chosen identifier of the training job.",
        set_by_launcher=True,
        notes="Only ASCII letters, digits, '-' and '_' are allowed; a value made only of digits that"
        " begins with 0 is discouraged. npulaunch fills it from job.id (or --job-id).",
    ),
    # HCCL's host side and CANN's install path: read by `npulaunch check` (host/health/gather.py,
    # hostnet.py). Meanings from hicann/hccl docs/zh/user_guide/hccl_env/ @ 09300b7 and the CM_* pages.
    EnvVarSpec(
        name="HCCL_IF_IP",
        kind="str",
        area="cluster",
        description="The host address HCCL's host-side sockets use (an IPv4 or IPv6 address of this host).",
        notes="`npulaunch check` refuses an address the host does not have (fatal with rank_table: cm). Beaten"
        " by CM_WORKER_IP in rank-table-free jobs; wins over HCCL_SOCKET_IFNAME.",
    ),
    EnvVarSpec(
        name="HCCL_SOCKET_IFNAME",
        kind="str",
        area="cluster",
        description="The host network interfaces HCCL may pick its host address from (by name).",
        notes="`npulaunch check` refuses a value no interface with an address matches (fatal with rank_table:"
        " cm). Used when HCCL_IF_IP is not set.",
    ),
    EnvVarSpec(
        name="HCCL_SOCKET_FAMILY",
        kind="enum",
        area="cluster",
        description="The address family HCCL's host sockets use.",
        choices=("AF_INET", "AF_INET6"),
    ),
    EnvVarSpec(
        name="HCCL_IF_BASE_PORT",
        kind="int",
        area="cluster",
        description="The first of the host ports HCCL listens on for cluster information.",
        default="60000",
        notes="`npulaunch check` looks whether HCCL's ports from here are free on every host in"
        " rank-table-free jobs, and warns when they are not reserved (net.ipv4.ip_local_reserved_ports).",
    ),
    EnvVarSpec(
        name="HCCL_HOST_SOCKET_PORT_RANGE",
        kind="str",
        area="cluster",
        description="The host ports HCCL's host sockets may use (a range), instead of those from HCCL_IF_BASE_PORT.",
    ),
    EnvVarSpec(
        name="HCCL_NPU_SOCKET_PORT_RANGE",
        kind="str",
        area="cluster",
        description="The ports HCCL's NPU-side sockets may use (a range, or auto).",
        notes="auto avoids port clashes between processes sharing an Atlas A2 device.",
    ),
    EnvVarSpec(
        name="HCCL_INTER_HCCS_DISABLE",
        kind="enum",
        area="cluster",
        description="Whether HCCL avoids the HCCS links inside an Atlas A3 super pod (TRUE: it uses the NICs).",
        choices=("TRUE", "FALSE"),
        notes="With TRUE, a 1.2 rank table needs every device's device_ip inside the super pod too.",
    ),
    EnvVarSpec(
        name="ASCEND_HOME_PATH",
        kind="path",
        area="install",
        description="Where the CANN toolkit the ranks use is installed (set by its set_env.sh).",
        notes="`npulaunch check` reads the toolkit's version there, and compares it across hosts (EI0008).",
    ),
    EnvVarSpec(
        name="ASCEND_TOOLKIT_HOME",
        kind="path",
        area="install",
        description="The CANN toolkit's installation directory, as older set_env.sh scripts set it.",
        notes="`npulaunch check` reads the toolkit's version there when ASCEND_HOME_PATH is not set.",
    ),
    EnvVarSpec(
        name="HCCL_CONNECT_TIMEOUT",
        kind="int",
        area="cluster",
        description="How long HCCL waits for peers to connect when a communicator is set up.",
        default="120",
        min=120,
        max=7200,
        unit="s",
        notes="npulaunch sets 600 unless the YAML says otherwise: hosts can finish graph compilation"
        " minutes apart, and CANN's 120 s is then too short.",
    ),
    EnvVarSpec(
        name="HCCL_EXEC_TIMEOUT",
        kind="int",
        area="cluster",
        description="Time limit for a collective operation to finish executing between devices.",
        default="1836",
        min=0,
        max=2147483647,
        unit="s",
        notes="Range and default depend on the product and the CANN version (config/timeouts.py; name them"
        " with product: and cann_version:). Atlas training series (Ascend 910; the newer session-option"
        " doc says the same of the Atlas 300I Duo card): (0, 17340], and the value actually used is"
        " rounded down to a multiple of 68 (600 -> 544), anything under 68 counting as 68. Atlas"
        " A2/A3 (Ascend 910B): [0, 2147483647], 0 meaning no timeout. Default 1836 s from CANN 7.0.0,"
        " 1800 s in 6.0.1 to 6.3, 600 s (range 60-17340) in 6.0.RC1. The session option hccl_timeout"
        " wins when both are given. stream_sync_timeout (milliseconds) must be larger than this value"
        " (seconds) in cluster jobs. npulaunch leaves it to CANN unless the YAML sets it.",
    ),
    # Rank-table-free set-up (rank_table: cm): npulaunch sets these for every rank; the YAML may give
    # CM_CHIEF_PORT. Sources: TF Adapter docs/en/tfa_env/CM_*.md and tf_adapter/util/ge_plugin.cc
    # (hicann/tensorflow @ 82957b9); Atlas training and Atlas A2 products only.
    EnvVarSpec(
        name="CM_CHIEF_IP",
        kind="str",
        area="cluster",
        description="Host IP address the chief listens on when the cluster is formed without a rank table.",
        notes="Rank-table-free set-up (rank_table: cm): npulaunch sets it to the first host's address. It cannot"
        " be used together with RANK_TABLE_FILE, RANK_ID or RANK_SIZE: with RANK_TABLE_FILE the TF Adapter"
        " configures neither mode.",
    ),
    EnvVarSpec(
        name="CM_CHIEF_PORT",
        kind="int",
        area="cluster",
        description="Port the chief listens on for rank-table-free cluster formation; must be free.",
        min=0,
        max=65520,
        notes="With rank_table: cm npulaunch picks a free port when the whole job runs on this host; give it"
        " in env for a job on several hosts.",
    ),
    EnvVarSpec(
        name="CM_CHIEF_DEVICE",
        kind="int",
        area="cluster",
        description="Logical id, on the chief's host, of the device that collects the cluster's information.",
        min=0,
        notes="From 0 to the host's number of devices - 1. npulaunch sets the first host's first device.",
    ),
    EnvVarSpec(
        name="CM_WORKER_IP",
        kind="str",
        area="cluster",
        description="IP address of the NIC this host uses to talk to the chief (rank-table-free set-up).",
        notes="npulaunch sets each host's address: 127.0.0.1 on this host, the address it reached a remote"
        " host at over SSH, or the name service's answer under a scheduler.",
    ),
    EnvVarSpec(
        name="CM_WORKER_SIZE",
        kind="int",
        area="cluster",
        description="Total number of devices (ranks) of the rank-table-free job, on all hosts together.",
        min=0,
        max=32768,
        notes="Set, it turns the TF Adapter's rank-table mode off, so npulaunch removes an inherited value"
        " when a rank table is used. CANN 6.0.1's guide gave 0 to 4096.",
    ),
    # --- device: which NPU a process drives ----------------------------------------------------
    EnvVarSpec(
        name="ASCEND_RT_VISIBLE_DEVICES",
        kind="str",
        area="device",
        description="The devices (logical ids, ascending, comma-separated) this process may use.",
        notes="The runtime then numbers them 0..k-1, and ASCEND_DEVICE_ID is an index into the list: npulaunch"
        " gives each rank that index and refuses a device outside the list. The runtime stops at the first"
        " character that is not a digit or a comma, and uses no device at all when the ids are not ascending"
        " or repeat (hicann/runtime runtime.cc @ 681ef76). A trial variable in CANN's docs; unsupported with"
        " DCMI, hccn_tool and profiling.",
    ),
    EnvVarSpec(
        name="ASCEND_DEVICE_ID",
        kind="int",
        area="device",
        description="Logical id of the NPU this process runs on.",
        default="0",
        min=0,
        set_by_launcher=True,
        notes="Upper bound is N - 1, N being the number of devices visible in the machine, VM or"
        " container. The session option session_device_id overrides it when both are given"
        " (use that to put several models on different devices from one script). Under"
        " TensorFlow 2.6, npu.open() reads it when no device id is passed.",
    ),
    EnvVarSpec(
        name="DEVICE_ID",
        kind="int",
        area="device",
        description="Logical device id under its older name, still read by the TF adapter.",
        set_by_launcher=True,
        notes="npulaunch gives it the same value as ASCEND_DEVICE_ID.",
    ),
    # --- logging: plog, device logs, levels ----------------------------------------------------
    EnvVarSpec(
        name="ASCEND_PROCESS_LOG_PATH",
        kind="path",
        area="logging",
        description="Directory that receives this process's plog and device logs.",
        set_by_launcher=True,
        notes="npulaunch points it at the rank's own plog directory inside the job directory, so ranks"
        " never share log files.",
    ),
    EnvVarSpec(
        name="ASCEND_SLOG_PRINT_TO_STDOUT",
        kind="enum",
        area="logging",
        description="Send application logs to the terminal instead of log files.",
        default="0",
        choices=("0", "1"),
        notes="0 keeps the usual file output, 1 prints to the screen and writes no log files. Unset,"
        " empty or any other value behaves like the usual file output. Applies to the shell it is"
        " exported in.",
    ),
    EnvVarSpec(
        name="ASCEND_GLOBAL_LOG_LEVEL",
        kind="enum",
        area="logging",
        description="Global level of application logs, for all modules.",
        choices=("0", "1", "2", "3", "4"),
        notes="0 DEBUG, 1 INFO, 2 WARNING, 3 ERROR, 4 NULL (nothing logged). Unset, empty or invalid:"
        " the level from the log configuration file is used.",
    ),
    EnvVarSpec(
        name="ASCEND_GLOBAL_EVENT_ENABLE",
        kind="enum",
        area="logging",
        description="Turn Event logging of applications on or off.",
        choices=("0", "1"),
        notes="0 off, 1 on. Unset, empty or invalid: the log configuration file decides.",
    ),
    EnvVarSpec(
        name="ASCEND_LOG_DEVICE_FLUSH_TIMEOUT",
        kind="int",
        area="logging",
        description="How long an exiting process waits for device-side application logs to reach the host.",
        default="2000",
        min=0,
        max=180000,
        unit="ms",
        notes="Logs still on the device when the wait ends are written on the device under"
        " /var/log/npu/slog. 0 skips the wait; raise it when device-app-<pid> logs arrive"
        " incomplete. Unset, empty or invalid: 2000.",
    ),
    EnvVarSpec(
        name="ASCEND_HOST_LOG_FILE_NUM",
        kind="int",
        area="logging",
        description="How many log files each process keeps in the plog and device-<id> directories.",
        default="10",
        min=1,
        max=1000,
        notes="EP mode. Past the limit the oldest files of that process are deleted; one plog-<pid>_*.log"
        " or device-<pid>_*.log file grows to at most 20 MB before a new one is started. Unset,"
        " empty or invalid: 10.",
    ),
    # --- memory: allocation and reuse ----------------------------------------------------------
    EnvVarSpec(
        name="GE_USE_STATIC_MEMORY",
        kind="enum",
        area="memory",
        description="How the graph engine allocates memory while the network runs.",
        default="0",
        choices=("0", "1", "2"),
        notes="0 allocates dynamically at the size actually needed; 2 expands dynamically so graphs of"
        " one session share memory sized by the largest graph (the previous graph's block is freed"
        " when a larger one is needed); 1 is accepted for old configurations and treated as 2."
        " 2 is not supported when several graphs run concurrently. Due to be retired: prefer the"
        " session option static_memory_policy, and never set both (they conflict at run time).",
    ),
    EnvVarSpec(
        name="OP_NO_REUSE_MEM",
        kind="str",
        area="memory",
        description="Operators that get memory of their own while memory reuse is active.",
        notes="Comma-separated node names, operator types, or a mix of both, e.g."
        " 'FusedMulAddN,BatchNorm'. Memory reuse is on by default; this exempts the listed ones.",
    ),
    # --- profiling ---------------------------------------------------------------------------
    EnvVarSpec(
        name="PROFILING_MODE",
        kind="enum",
        area="profiling",
        description="Switch profiling on; what to collect then comes from PROFILING_OPTIONS.",
        default="false",
        choices=("true", "false"),
        notes="Unset means off, like false. The session option profiling_mode takes priority over it.",
    ),
    EnvVarSpec(
        name="PROFILING_OPTIONS",
        kind="json",
        area="profiling",
        description="JSON object of profiling collection settings, read when PROFILING_MODE is true.",
        notes="Keys: output (result directory, absolute or relative to the working directory; the 6.3"
        " guide wants it created beforehand and writable by the run user, the newer session-option"
        " doc says it is created automatically and outranks ASCEND_WORK_PATH); storage_limit"
        " (200..4294967296 MB written with its unit, e.g. '200MB'; oldest files aged out; when"
        " absent, 90% of the free space of that disk); training_trace, task_trace, hccl, aicpu,"
        " l2, msproftx, runtime_api, task_time (on/off; task_time defaults on, the others off;"
        " task_trace on in training needs training_trace on; online inference has no"
        " training_trace); fp_point / bp_point (first forward / last backward operator name, ''"
        " for automatic; must be given by hand for dynamic shapes); aic_metrics"
        " (ArithmeticUtilization, PipeUtilization (default), Memory, MemoryL0, MemoryUB,"
        " ResourceConflictRatio, L2Cache, or 'Custom:' plus up to 8 registers in 0x1..0x6E);"
        " llc_profiling (capacity/bandwidth on Ascend 310, read/write elsewhere, default read);"
        " sampling rates in Hz: sys_hardware_mem_freq 1..100 (50), sys_io_sampling_freq 1..100"
        " (100), sys_interconnection_freq 1..50 (50), dvpp_freq 1..100 (50), host_sys_usage_freq"
        " 1..50 (50); instr_profiling_freq 300..30000 cycles (1000, Ascend 910B only, excludes the"
        " trace/metric switches); host_sys and host_sys_usage take 'cpu', 'mem' or 'cpu,mem'."
        " Several switches are limited to particular processors (L2Cache and Vector Core data to"
        " 910B).",
    ),
    # --- dump: graph dumps -------------------------------------------------------------------
    EnvVarSpec(
        name="DUMP_GE_GRAPH",
        kind="enum",
        area="dump",
        description="Write the graph at each build stage to files, choosing how much detail goes in.",
        choices=("1", "2", "3"),
        notes="1 everything, 2 a basic dump leaving out weights and similar data, 3 only how nodes"
        " connect. Unset: no graph dump.",
    ),
    EnvVarSpec(
        name="DUMP_GRAPH_LEVEL",
        kind="enum",
        area="dump",
        description="Which of the stage graphs are written when graph dumping is on.",
        default="2",
        choices=("1", "2", "3", "4"),
        notes="Only takes effect when DUMP_GE_GRAPH is set. 1 every graph, 2 every graph except"
        " subgraphs, 3 the last graph built, 4 the first graph built.",
    ),
    # --- compile: operator and graph build ---------------------------------------------------
    EnvVarSpec(
        name="TE_PARALLEL_COMPILER",
        kind="int",
        area="compile",
        description="Maximum number of processes compiling operators in parallel.",
        default="8",
        min=1,
        max=32,
        notes="Values above 1 turn parallel operator compilation on (helps large networks). Besides the"
        " 1..32 range, keep it at most CPU cores * 80% / number of NPUs on the host.",
    ),
    EnvVarSpec(
        name="MAX_COMPILE_CORE_NUMBER",
        kind="int",
        area="compile",
        description="CPU cores graph compilation may use; it runs that many threads.",
        min=1,
        notes="Upper bound is the host's CPU core count.",
    ),
    # --- cache: operator compilation cache ---------------------------------------------------
    EnvVarSpec(
        name="ASCEND_CACHE_PATH",
        kind="path",
        area="cache",
        description="Base directory under which the operator compilation cache is kept.",
        notes="Lookup order for the cache: session option op_compiler_cache_dir, then"
        " ${ASCEND_CACHE_PATH}/kernel_cache (the older Chinese table adds a host-specific suffix),"
        " then $HOME/atc_data.",
    ),
    EnvVarSpec(
        name="ASCEND_MAX_OP_CACHE_SIZE",
        kind="int",
        area="cache",
        description="Disk space limit of one NPU's operator compilation cache folder.",
        default="500",
        unit="MB",
        notes="Applies with the compilation cache on. Past the limit, cache files untouched for over"
        " half an hour are aged out; -1 turns ageing off (500 MB then used). An op_cache.ini in"
        " the cache directory takes precedence over this variable.",
    ),
    EnvVarSpec(
        name="ASCEND_REMAIN_CACHE_SIZE_RATIO",
        kind="int",
        area="cache",
        description="Share of the operator cache kept when old kernels are evicted at the size limit.",
        default="50",
        min=1,
        max=100,
        unit="%",
        notes="Works with ASCEND_MAX_OP_CACHE_SIZE; op_cache.ini (remain_cache_size_ratio) takes"
        " precedence. The 1..100 range is documented for the op_cache.ini key.",
    ),
    # --- debug: working, fault-collection directories ---------------------------------------
    EnvVarSpec(
        name="ASCEND_WORK_PATH",
        kind="path",
        area="debug",
        description="Directory where CANN puts the files it generates at run time.",
        notes="Used when no more specific setting is given: externalised weights"
        " (tmp_weight_<pid>_<sessionid>), fusion results (FE/<pid>/fusion_result.json), operator"
        " debug files and kernel_meta (after debug_dir), exception dumps (after NPU_COLLECT_PATH);"
        " profiling_options output outranks it. Unset: the current directory.",
    ),
    EnvVarSpec(
        name="NPU_COLLECT_PATH",
        kind="path",
        area="debug",
        description="Directory where fault information is gathered.",
        notes="When set, exception-operator data is always dumped in mode 1 (full ExceptionDump) into"
        " this directory, whatever enable_exception_dump says. It rules out the 'oom' global"
        " memory check in op_debug_config (an error is raised when the compiled model or kernel"
        " package is used). With op_debug_level 0, kernel_meta is still created in the current"
        " directory.",
    ),
    # --- performance: tuning and runtime switches --------------------------------------------
    EnvVarSpec(
        name="SKT_ENABLE",
        kind="enum",
        area="performance",
        description="Fuse the tasks of several operators into one super task to cut dispatch time.",
        default="0",
        choices=("0", "1"),
        notes="1 turns superkernel fusion on and is only supported in the SoC scenario; 0 keeps normal task dispatch.",
    ),
    EnvVarSpec(
        name="AOE_MODE",
        kind="enum",
        area="performance",
        description="AOE tuning mode, the environment form of the aoe_mode session option.",
        choices=("1", "2", "4"),
        notes="1 subgraph, 2 operator, 4 gradient-split tuning (values of aoe_mode). The setting in the"
        " training script takes precedence. Atlas A2/A3 do not support subgraph tuning.",
    ),
    EnvVarSpec(
        name="ENABLE_DYNAMIC_SHAPE_MULTI_STREAM",
        kind="str",
        area="performance",
        description="Switch for multi-stream concurrency of dynamic-shape graphs.",
        notes="Cannot be combined with auto_multistream_parallel_mode='cv' (Cube/Vector parallel"
        " execution). The seeds do not list its values.",
    ),
    EnvVarSpec(
        name="STEP_NOW",
        kind="int",
        area="performance",
        description="Current training step, kept up to date by the script for step-based accelerated training.",
        notes="Needed with experimental_accelerate_train_mode in step mode, together with TOTAL_STEP; the"
        " script starts it at 0 and updates it after each step.",
    ),
    EnvVarSpec(
        name="TOTAL_STEP",
        kind="int",
        area="performance",
        description="Total number of steps of the run, for step-based accelerated training.",
        notes="Set by the script alongside STEP_NOW when experimental_accelerate_train_mode splits by step.",
    ),
    EnvVarSpec(
        name="LOSS_NOW",
        kind="str",
        area="performance",
        description="Latest loss value, kept up to date by the script for loss-based accelerated training.",
        notes="A decimal number. Needed with experimental_accelerate_train_mode in loss mode, together"
        " with TARGET_LOSS; start it at the network's initial loss.",
    ),
    EnvVarSpec(
        name="TARGET_LOSS",
        kind="str",
        area="performance",
        description="Loss the run aims for, for loss-based accelerated training.",
        notes="A decimal number, set alongside LOSS_NOW when experimental_accelerate_train_mode splits by loss.",
    ),
)
