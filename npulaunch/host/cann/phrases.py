"""The table of error phrases (data): the lines that name a failure without printing a code (HCCL's plog
keywords, the runtime's device exceptions, MindSpore's own errors and its cluster's lost processes, Python
tracebacks, segmentation faults), with the CANN code CANN's documentation files them under, the failure class,
cause or symptom, retryability, whether they stop the job, the hint and the source. Lines that print a code are
read by their shape (host/cann/); host/cann/prefilter.py matches these. Standard library only, Python 3.7+.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Tuple

from npulaunch.host.cann.codes import CAUSE, SYMPTOM

__all__ = ["CAUSE", "SYMPTOM", "SIGNATURES", "Signature"]


@dataclass(frozen=True)
class Signature:
    name: str  # stable id, e.g. "EZ9999-aicore"
    pattern: str  # a regular expression searched in each line
    cls: str  # failure class, e.g. "device_kernel_fault"
    kind: str  # CAUSE or SYMPTOM
    retryable: bool
    hint: str
    code: str = ""  # the CANN error code, when there is one
    fatal: bool = False  # the job cannot go on: stop it now rather than wait for timeouts
    needles: Tuple[str, ...] = ()  # literal texts a matching line contains one of (lower-case: any case)
    # its lines come with one of host/cann/shapes.py's E_SHAPES in their block (a Python exception's "Error:", an
    # "[ERROR]" record): the block's pre-filter passes them by that, so its needles cost no search of every block
    shaped: bool = False


# Sources cited below, by short name:
#   hccl-docs  hicann/hccl docs/zh/user_guide/fault_diagnosis/*.md @ 09300b70df9a (what each plog keyword means,
#              which code it belongs to, what to check)
#   hcomm-err  the HCCL error-code table, cann-hcomm src/common/error_code/error_code.cc @ b5f3e5be094a (read from
#              the mirror xiaobingling93-pixel/cann-hcomm), and its hiascend pages (atlaserrorcode_15_03xx)
#   acl-err    hicann/runtime docs/zh/api_ref/25-01_aclError.md @ 681ef7610df1 (the ACL runtime codes 5070xx)
#   inner      hiascend "E*9*** Inner Error" (maintenref/troubleshooting/atlaserrorcode_15_0314.html) and hicann/runtime
#              docs/zh/guidelines/error_message_guide/macro-selection-guide.md @ 681ef7610df1: xx9999 is a module's
#              internal error; E = runtime, H = ACL, I = HCCL, J = HCCP, Z = operators
# Plog keywords such as "[InitChannelStage][Timeout]" exist from CANN 8.5.0 (hccl-docs debug_thinking.md); the older
# wording ("wait socket establish timeout", "listen on ip[...] fail") is matched too. A plog line that prints no
# code gets the code hccl-docs files it under, or none when that differs between CANN versions.


# The plog lines matched below are ERROR-level lines ("[ERROR] HCCL(pid,name):time [file:line] ...", the same when
# ASCEND_SLOG_PRINT_TO_STDOUT prints them): they share this needle, which the pre-filter finds in the same pass as the
# E-codes ("ERROR]" starts with E), instead of one pass over every batch for each phrase (8 ranks x 200k ordinary
# lines: 0.40 s, as before these signatures; 0.79 s with a needle each). INFO lines naming the same events (the run
# log's "[HeartbeatAbnormal]local rank ...") are not failures and are not matched.
_PLOG_ERROR = "ERROR]"
_EXEC_TIMEOUT_HINT = (  # the plog line EI0002 stands for
    "a collective operation timed out, usually because another rank failed or stalled first; "
    "hccl_timeout / HCCL_EXEC_TIMEOUT set how long ranks wait"
)
_PEER_HINT = (
    "this rank waited for a peer that exited, crashed or stalled first (or the network between them failed): "
    "the cause is in the peer's own log"
)
# A timeout is retryable only where Huawei's text says a retry helps (host/cann/knowledge.py RETRYABLE): for
# EI0006 and EI0015 it says to find the peer that failed or started late, or to raise HCCL_CONNECT_TIMEOUT
# (hccl-docs param_link_stage.md, cluster_info_nego.md), so their plog lines are not retryable either.


SIGNATURES: Tuple[Signature, ...] = (
    # the plog side of EI0006 (hccl-docs param_link_stage.md: "wait socket establish timeout", and from CANN 8.5.0
    # "[InitChannelStage][Timeout]")
    Signature(
        "hccl-socket-timeout",
        r"\[ERROR\].*(?:wait socket establish timeout|\[InitChannelStage\]\[Timeout\])",
        "hccl_connect_timeout",
        SYMPTOM,
        False,
        "HCCL timed out building a link to a peer: look for the peer's own error, or the rank that started late; "
        "HCCL_CONNECT_TIMEOUT sets how long ranks wait",
        "EI0006",
        fatal=True,
        needles=(_PLOG_ERROR,),
    ),
    # hccl-docs cluster_info_nego.md (EI0015): the root rank waited for ranks that never connected, or a rank could
    # not reach the root; the doc's fixes are a late rank (HCCL_CONNECT_TIMEOUT) or the host NIC (HCCL_SOCKET_IFNAME)
    Signature(
        "hccl-rendezvous-timeout",
        r"\[ERROR\].*(?:topo exchange (?:server|agent) get socket timeout"
        r"|TopoDetect ERROR occur.*Failed to connect agent)",
        "hccl_rendezvous_timeout",
        SYMPTOM,
        False,
        "ranks did not all reach HCCL's root rank in time: find the rank that never connected (started late, or "
        "cannot reach the root host: HCCL_SOCKET_IFNAME); HCCL_CONNECT_TIMEOUT sets how long ranks wait",
        "EI0015",
        fatal=True,
        needles=(_PLOG_ERROR,),
    ),
    # hccl-docs debug_thinking.md: "[TaskExecStage][Timeout]" is the execution timeout, code EI0002
    Signature(
        "hccl-task-timeout",
        r"\[ERROR\].*\[TaskExecStage\]\[Timeout\]",
        "hccl_exec_timeout",
        SYMPTOM,
        False,
        _EXEC_TIMEOUT_HINT,
        "EI0002",
        fatal=True,
        needles=(_PLOG_ERROR,),
    ),
    # hccl-docs task_exec_stage.md: HCCL's heartbeat names the rank that died or stuck ("Cluster Exception Location")
    Signature(
        "hccl-peer-lost",
        r"\[ERROR\].*\[TaskExecStage\]\[HeartbeatAbnormal\]Cluster Exception Location",
        "hccl_peer_lost",
        SYMPTOM,
        False,
        "HCCL's heartbeat lost another rank (exited, stuck or unreachable): the line names it; look at its log",
        fatal=True,
        needles=(_PLOG_ERROR,),
    ),
    Signature(
        "hccl-env-config",
        r"\[ERROR\].*\[InitGroupStage\]\[EnvConfig\]",
        "invalid_hccl_env",
        CAUSE,
        False,
        "HCCL rejected its environment (an invalid value, or HCCL_SOCKET_IFNAME naming a missing NIC)",
        "EI0001",
        fatal=True,
        needles=(_PLOG_ERROR,),
    ),
    Signature(
        "hccl-parameter-conflict",
        r"\[ERROR\].*\[InitChannelStage\]\[ParameterConflict\]",
        "hccl_inconsistent_arguments",
        CAUSE,
        False,
        "ranks called a collective with different arguments: the script's ranks diverged",
        "EI0005",
        fatal=True,
        needles=(_PLOG_ERROR,),
    ),
    # hccl-docs rank_table_load_fail.md "rank table文件读取失败（EI0004）"
    Signature(
        "hccl-ranktable-config",
        r"\[ERROR\].*\[InitGroupStage\]\[RanktableConfig\]",
        "invalid_rank_table",
        CAUSE,
        False,
        "HCCL could not load the rank table (path, permissions or format): check RANK_TABLE_FILE",
        "EI0004",
        fatal=True,
        needles=(_PLOG_ERROR,),
    ),
    # hccl-docs cluster_info_verify_fail.md: the cluster check failed (IP family, TLS switch, super_device_id); its
    # code varies with the check (EI0001, EI0004, EI0016)
    Signature(
        "hccl-ranktable-check",
        r"\[ERROR\].*\[InitGroupStage\]\[RanktableCheck\]",
        "invalid_cluster_info",
        CAUSE,
        False,
        "HCCL's check of the cluster failed (rank table fields, device IP family, TLS switch differing between ranks)",
        fatal=True,
        needles=(_PLOG_ERROR,),
    ),
    # hccl-docs rank_table_load_fail.md (EI0014) / hiascend hcclug_000042 (EJ0004 in CANN 8.0): the device IP in the
    # rank table is not the NIC's; a restart cannot fix it
    Signature(
        "device-ip-mismatch",
        r"\[ERROR\].*in the ranktable is inconsistent with the IP",
        "invalid_rank_table",
        CAUSE,
        False,
        "a device IP in the rank table is not the one configured on the NPU: compare with hccn_tool -i N -ip -g",
        fatal=True,
        needles=(_PLOG_ERROR,),
    ),
    # the plog side (hccl_socket.cc in cann-hcomm): the code is EI0019/EI0020 or EJ0003 depending on the version
    Signature(
        "hccl-listen-fail",
        r"\[ERROR\].*listen on ip\[[^\]]*\] and (?:specific )?port\[\d+\] fail",
        "hccl_listen_failed",
        CAUSE,
        False,
        "HCCL could not listen on its IP and port (in use by another process, or an IP not on this host): "
        "HCCL_IF_BASE_PORT / HCCL_NPU_SOCKET_PORT_RANGE, HCCL_IF_IP",
        fatal=True,
        needles=(_PLOG_ERROR,),
    ),
    # the runtime's plog line behind EZ9999 (vllm-ascend#14214): "The error from device(...) ... aivector error"
    Signature(
        "device-core-error",
        r"\[ERROR\].*The error from device\(.*\b(?:aicore|aivec|aivector) error\b",
        "device_kernel_fault",
        CAUSE,
        False,
        "a kernel faulted on the NPU (AI Core/vector error): look at the operator named in the plog",
        fatal=True,
        needles=(_PLOG_ERROR,),
    ),
    # hccl-docs task_exec_stage.md "AIV通信算子执行失败": a failed aiv_* kernel is HCCL's own collective (AIV mode),
    # to be traced like EI0002 (which rank failed first); any other kernel is the operator's own fault (hiascend
    # maintenref troubleshooting_0019)
    Signature(
        "hccl-aiv-kernel-failed",
        r"\[ERROR\].*Aicore kernel execute failed.*kernel_name=aiv_",
        "hccl_exec_failed",
        SYMPTOM,
        False,
        "an HCCL collective kernel (AIV mode) failed on the NPU, usually because another rank failed or stalled "
        "first: trace it like EI0002",
        fatal=True,
        needles=(_PLOG_ERROR,),
    ),
    Signature(
        "aicore-kernel-failed",
        r"\[ERROR\].*Aicore kernel execute failed",
        "device_kernel_fault",
        CAUSE,
        False,
        "a kernel failed on the NPU: the line names it (fault kernel_name); check its inputs' addresses",
        fatal=True,
        needles=(_PLOG_ERROR,),
    ),
    # the runtime's line for an AI CPU kernel's fault (hicann/runtime device_error_proc.cc ProcessStarsAicpuErrorInfo,
    # "An exception occurred ..." before CANN 8), which MindSpore prints in its "Launch kernel failed" exception
    # without the EZ9999/E39999 header; the runtime returns 507018 ACL_ERROR_RT_AICPU_EXCEPTION for it (acl-err)
    Signature(
        "device-aicpu-error",
        r"(?i:exception occurred during AICPU execution)",
        "aicpu_kernel_fault",
        CAUSE,
        False,
        "an AI CPU operator failed on the NPU: the line gives its stream, task and errcode; the plog names the kernel",
        fatal=True,
        needles=("during AICPU",),
    ),
    # MindSpore (mindspore-ai/mindspore @ the commits named): a framework's own failure carries no CANN code. Its
    # internal errors: MS_EXCEPTION_IF_NULL's "The pointer[x] is null." (mindspore/core/utils/log_adapter.h @
    # a40147fb, MS_LOG(INTERNAL_EXCEPTION)) and MS_INTERNAL_EXCEPTION's "- Framework Unexpected Exception Raised:"
    # part (tests/ut/cpp/utils/log_adapter_test.cc @ 5076d1b3). They say only that the framework failed, so a CANN
    # code in the same message goes before them (host/cann/findings.py GENERIC_PHRASES), and MindSpore's frame around
    # them ("- C++ Call Stack: ...") is part of the message, never a failure of its own.
    Signature(
        "mindspore-internal-error",
        r"The pointer\[[^\]]*\] is null|^- Framework Unexpected Exception Raised:",
        "framework_internal_error",
        CAUSE,
        False,
        "MindSpore failed inside the framework (an internal check): the message and its C++ call stack say where; "
        "look for an earlier CANN error of the same rank, else report it to MindSpore with the call stack",
        needles=("The pointer[", "Framework Unexpected"),
        shaped=True,
    ),
    # mindspore/core/utils/ms_context.cc @ c88480a8 (SetDeviceTarget): the Ascend backend did not load, its reason
    # under "- Device load error message:" (a CANN library not found: CANN's set_env.sh not sourced, or a wheel for CPU)
    Signature(
        "mindspore-no-ascend",
        r"Unsupported device target Ascend\b",
        "ascend_backend_unavailable",
        CAUSE,
        False,
        "MindSpore could not load its Ascend backend: the lines under it name the library it could not open; "
        "source CANN's set_env.sh in the ranks' environment and install the MindSpore wheel built for Ascend",
        fatal=True,
        needles=("Unsupported device target",),
        shaped=True,
    ),
    # MindSpore's cluster (msrun and the scheduler, the "meta server"): lines that say another process failed first.
    # msrun: "Worker process N exit with exception." / "Scheduler process N exit with exception." / "Time out nodes
    # are [...]" (mindspore/python/mindspore/parallel/cluster/process_entity/_api.py @ 1d200336); the scheduler: "The
    # node: X is timed out." / "There are N abnormal compute graph nodes." / "The total number of timed out node is N"
    # (mindspore/ccsrc/distributed/cluster/topology/meta_server_node.cc @ 04431c95); a worker: "The state of the
    # cluster is error, total nodes num: N, abnormal nodes num: M" / "Failed to connect to the meta server. Maybe it
    # has exited." (compute_graph_node.cc @ 02bc35af). A node's heartbeat stops when its process exits or hangs.
    Signature(
        "msrun-process-failed",
        r"\[ERROR\].*(?:(?:Worker|Scheduler) process \d+ exit with exception|Time out nodes are \[)",
        "cluster_process_failed",
        SYMPTOM,
        False,
        "msrun saw a worker or the scheduler exit (or lists the nodes whose heartbeat timed out): the cause is the "
        "first error in the failed worker's own log",
        needles=(_PLOG_ERROR,),
        shaped=True,
    ),
    Signature(
        "mindspore-node-lost",
        r"\[ERROR\].*(?:The node: \S+ is timed out|There are \d+ abnormal compute graph nodes)"
        r"|The total number of timed out node is \d+|The state of the cluster is error, .*abnormal nodes num: [1-9]",
        "cluster_node_lost",
        SYMPTOM,
        False,
        "MindSpore's scheduler lost a node's heartbeat (its process exited or hung): the node id is its rank; the "
        "cause is in that rank's log",
        fatal=True,
        needles=(_PLOG_ERROR, "The total number of timed out node", "The state of the cluster is error"),
        shaped=True,
    ),
    Signature(
        "mindspore-scheduler-lost",
        r"Failed to connect to the meta server\. Maybe it has exited",
        "cluster_scheduler_lost",
        SYMPTOM,
        False,
        "a worker lost MindSpore's scheduler (the meta server): it exited or its host is unreachable; look at the "
        "scheduler's log, then MS_SCHED_HOST / MS_SCHED_PORT",
        fatal=True,
        needles=("Failed to connect to the meta server",),
        shaped=True,
    ),
    # A peer that went away or never answered, as the waiting side sees it: the rank that prints these waited for
    # another one, which exited, crashed or stalled first (they are never the cause while another rank's failure
    # is known). gloo: "Connection closed by peer [addr]:port. This is typically caused by a remote worker
    # crashing" and "Timed out waiting Nms for recv operation" (gloo/transport/tcp/pair.cc, unbound_buffer.cc);
    # Python's ConnectionResetError / BrokenPipeError on a peer's socket; torch's store: DistNetworkError "The
    # client socket has failed to connect to" / "has timed out after", DistStoreError "Timed out after N seconds
    # waiting for clients", "wait timeout after" (each of these, gloo's included, is in torch 2.13.0's
    # libtorch_cpu.so); NCCL's ncclRemoteError ("remote process exited or there was a network error",
    # ncclGetErrorString) and its socket's "Connection closed by remote peer". Each one a rank printed names its peer
    # where it can ([127.0.0.1]:22210): diagnose/peers.py.
    Signature(
        "peer-gone",
        r"(?i:connection (?:closed|reset) by (?:remote )?peer|remote worker crash|remote process exited|\bbroken pipe\b"
        r"|client socket has (?:failed to connect|timed out)|\bDist(?:Network|Store)Error\b|ncclRemoteError"
        r"|timed out waiting \d+\s*ms for (?:recv|send)|wait timeout after \d+|timed out after \d+ seconds waiting"
        r"|socket timeout)",
        "peer_gone",
        SYMPTOM,
        False,
        _PEER_HINT,
        needles=(
            "by peer",
            "remote peer",
            "remote worker",
            "remote process",
            "broken pipe",
            "client socket has",
            "networkerror",
            "storeerror",
            "ncclremoteerror",
            "timed out waiting",
            "wait timeout after",
            "seconds waiting",
            "socket timeout",
        ),
        shaped=True,
    ),
    Signature(
        "out-of-memory",
        r"(?i:\bout of memory\b)",
        "device_out_of_memory",
        CAUSE,
        False,
        "memory ran out: reduce the batch size or memory options",
        needles=("out of memory",),
    ),
    Signature(
        "python-traceback",
        r"^Traceback \(most recent call last\):",
        "python_exception",
        CAUSE,
        False,
        "the script raised an exception: its traceback is in the rank's log",
        needles=("Traceback",),
    ),
    Signature(
        "segfault",
        r"(?i:\bsegmentation fault\b)",
        "segfault",
        CAUSE,
        False,
        "the process crashed with a segmentation fault",
        needles=("segmentation fault",),
    ),
)
