"""The table of error signatures (data): every line pattern npulaunch recognises, with its CANN code,
failure class, cause or symptom, retryability, whether it stops the job, its hint and its source.
host/signatures.py matches them. Standard library only, Python 3.7+.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Tuple

CAUSE, SYMPTOM = "cause", "symptom"


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
_EXEC_TIMEOUT_HINT = (  # EI0002 and the plog line it stands for
    "a collective operation timed out, usually because another rank failed or stalled first; "
    "hccl_timeout / HCCL_EXEC_TIMEOUT set how long ranks wait"
)


def _acl(code: str) -> str:
    """An ACL runtime code as CANN and torch_npu print it ("error code is 507035", "runtime result = 507035",
    "ErrCode=507035", "failed: 507035"), never a bare number that a step counter could print."""
    return r"(?i:error ?code|errcode|result|failed)(?: is)?[\s:=]*" + code + r"\b"


SIGNATURES: Tuple[Signature, ...] = (
    # EI0006 (hcomm-err Communication_Error_Get_Socket; hccl-docs param_link_stage.md "建链超时（EI0006）"): a timeout
    # alone may heal, a peer that started late or compiled longer (the docs' fix: HCCL_CONNECT_TIMEOUT), so it is
    # retryable. What never heals shows in lines of its own, matched below as causes that a restart cannot fix: a
    # port another process holds (EI0019/EI0020/EJ0003, "listen on ip[...] fail"), a device IP that is not the rank
    # table's (EI0014, EJ0004 in CANN 8.0), an HCCL variable naming a missing NIC (EI0001). HCCL prints them at
    # set-up, HCCL_CONNECT_TIMEOUT before the timeout they lead to (vllm-project/vllm-ascend#1955: listen failed at
    # 03:47:57, timeout at 03:49:57), and diagnose/rootcause.py ranks a cause before any symptom: the root cause is
    # then that line, not retryable, and the job is not restarted. (A firewall shows only as the timeout; it stays
    # retryable, bounded by max_restarts.)
    Signature(
        "EI0006",
        r"\bEI0006\b",
        "hccl_connect_timeout",
        SYMPTOM,
        True,
        "a peer never connected while HCCL set up its links: look for the rank that did not start "
        "or was slower (compilation); HCCL_CONNECT_TIMEOUT sets how long ranks wait",
        "EI0006",
        fatal=True,
        needles=("EI0006",),
    ),
    # the plog side of EI0006 (hccl-docs param_link_stage.md: "wait socket establish timeout", and from CANN 8.5.0
    # "[InitChannelStage][Timeout]")
    Signature(
        "hccl-socket-timeout",
        r"\[ERROR\].*(?:wait socket establish timeout|\[InitChannelStage\]\[Timeout\])",
        "hccl_connect_timeout",
        SYMPTOM,
        True,
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
        True,
        "ranks did not all reach HCCL's root rank in time: find the rank that never connected (started late, or "
        "cannot reach the root host: HCCL_SOCKET_IFNAME); HCCL_CONNECT_TIMEOUT sets how long ranks wait",
        "EI0015",
        fatal=True,
        needles=(_PLOG_ERROR,),
    ),
    Signature(
        "EI0015",
        r"\bEI0015\b",
        "hccl_rendezvous_timeout",
        SYMPTOM,
        True,
        "ranks did not all reach HCCL's root rank in time (hcomm-err EI0015): find the rank that never connected",
        "EI0015",
        fatal=True,
        needles=("EI0015",),
    ),
    Signature(
        "EI0002",
        r"\bEI0002\b",
        "hccl_exec_timeout",
        SYMPTOM,
        False,
        _EXEC_TIMEOUT_HINT,
        "EI0002",
        fatal=True,
        needles=("EI0002",),
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
    # LlamaFactory#5347: "EI9999 ... hccl fftsplus task timeout": an HCCL inner error that is a collective's timeout
    Signature(
        "EI9999-timeout",
        r"\bEI9999\b.*\btimeout\b",
        "hccl_exec_timeout",
        SYMPTOM,
        False,
        "a collective task timed out on the device (an HCCL inner error), usually because another rank failed or "
        "stalled first; HCCL_EXEC_TIMEOUT sets how long ranks wait",
        "EI9999",
        fatal=True,
        needles=("EI9999",),
    ),
    # hcomm-err EI0009: "Check other NPUs that are not reporting errors" (8.x pages); 9.0 adds link checks (hccn_tool)
    Signature(
        "EI0009",
        r"\bEI0009\b",
        "hccl_transport_init_failed",
        SYMPTOM,
        False,
        "HCCL could not set up a link to a peer: check the peer's own errors first, then the link "
        "(hccn_tool -optical / -ip / -lldp)",
        "EI0009",
        fatal=True,
        needles=("EI0009",),
    ),
    Signature(
        "EI0004",
        r"\bEI0004\b",
        "invalid_rank_table",
        CAUSE,
        False,
        "the rank table is invalid: check RANK_TABLE_FILE, device IPs and rank ids",
        "EI0004",
        fatal=True,
        needles=("EI0004",),
    ),
    Signature(
        "EI0014",
        r"\bEI0014\b",
        "invalid_rank_table",
        CAUSE,
        False,
        "the rank table does not match the ranks started: check RANK_TABLE_FILE",
        "EI0014",
        fatal=True,
        needles=("EI0014",),
    ),
    Signature(
        "EI0008",
        r"\bEI0008\b",
        "cann_version_mismatch",
        CAUSE,
        False,
        "ranks run different CANN versions: install the same version on every host",
        "EI0008",
        fatal=True,
        needles=("EI0008",),
    ),
    # hcomm-err EI0001 Config_Error_Invalid_Environment_Variable; hccl-docs env_config_error_EI0001.md
    Signature(
        "EI0001",
        r"\bEI0001\b",
        "invalid_hccl_env",
        CAUSE,
        False,
        "an HCCL environment variable is invalid (the line names it and the values allowed)",
        "EI0001",
        fatal=True,
        needles=("EI0001",),
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
    # hcomm-err EI0005; hccl-docs param_link_stage.md "参数一致性校验(EI0005)": ranks called different collectives
    Signature(
        "EI0005",
        r"\bEI0005\b",
        "hccl_inconsistent_arguments",
        CAUSE,
        False,
        "ranks called a collective with different arguments (operator, count, data type): the script's ranks "
        "diverged; the line shows the local and the remote value",
        "EI0005",
        fatal=True,
        needles=("EI0005",),
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
    # hcomm-err EI0011 Resource_Error_Insufficient_Device_Memory
    Signature(
        "EI0011",
        r"\bEI0011\b",
        "device_out_of_memory",
        CAUSE,
        False,
        "HCCL could not allocate device memory: reduce the batch size or HCCL_BUFFSIZE",
        "EI0011",
        fatal=True,
        needles=("EI0011",),
    ),
    # hcomm-err EI0019/EI0020 Communication_Error_Bind_IP_Port; hiascend hcclug_000035/_000049 (CANN 8.5.0: EJ0003
    # Bind_Failed): another process holds the port, which a restart does not free; the fix is a port setting
    # (HCCL_IF_BASE_PORT, HCCL_NPU_SOCKET_PORT_RANGE)
    Signature(
        "EI0019",
        r"\bEI00(?:19|20)\b",
        "hccl_listen_failed",
        CAUSE,
        False,
        "HCCL could not listen on its port, which another process holds: HCCL_IF_BASE_PORT (host) or "
        "HCCL_NPU_SOCKET_PORT_RANGE (NPU, several processes a device) move it",
        "EI0019",
        fatal=True,
        needles=("EI0019", "EI0020"),
    ),
    Signature(
        "EJ0003",
        r"\bEJ0003\b",
        "hccl_listen_failed",
        CAUSE,
        False,
        "HCCL could not bind its port, which another process holds: HCCL_IF_BASE_PORT (host) or "
        "HCCL_NPU_SOCKET_PORT_RANGE (NPU) move it",
        "EJ0003",
        fatal=True,
        needles=("EJ0003",),
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
    # hiascend EJ0001 (atlaserrorcode_15_0251/0252): "Maybe the last training process is running ... Wait for 10s
    # after killing the last training process and try again": a restart, after the old processes are gone, heals it
    Signature(
        "EJ0001",
        r"\bEJ0001\b",
        "hccp_init_failed",
        CAUSE,
        True,
        "the NPU's HCCP process did not start, usually because a previous job still holds the device: "
        "make sure its processes are gone (npu-smi info), then retry",
        "EJ0001",
        fatal=True,
        needles=("EJ0001",),
    ),
    Signature(
        "EE1002",
        r"\bEE1002\b",
        "stream_sync_timeout",
        SYMPTOM,
        False,
        "stream synchronisation timed out (stream_sync_timeout, milliseconds): a kernel or a "
        "collective did not finish, often waiting on another rank",
        "EE1002",
        fatal=True,
        needles=("EE1002",),
    ),
    Signature(
        "507046",
        _acl("507046"),
        "stream_sync_timeout",
        SYMPTOM,
        False,
        "the runtime reported a stream synchronisation timeout (507046)",
        "507046",
        fatal=True,
        needles=("507046",),
    ),
    # acl-err 507048 ACL_ERROR_RT_FFTS_PLUS_TIMEOUT, "internal task execution timed out"; seen with EI0002 and
    # "fftsplus timeout" (vllm-ascend#1443, #2800)
    Signature(
        "507048",
        _acl("507048"),
        "stream_sync_timeout",
        SYMPTOM,
        False,
        "a device task timed out (507048, an FFTS+ task: often a collective waiting on another rank)",
        "507048",
        fatal=True,
        needles=("507048",),
    ),
    Signature(
        "EZ9999-aicore",
        r"\bEZ9999\b.*\b(aicore|aivec) error\b|\b(aicore|aivec) error\b.*\bEZ9999\b",
        "device_kernel_fault",
        CAUSE,
        False,
        "a kernel faulted on the NPU (AI Core/vector error): look at the operator named in the plog; "
        "op_debug_config oom can locate memory overwrites",
        "EZ9999",
        fatal=True,
        needles=("EZ9999",),
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
    # acl-err: 507035 ACL_ERROR_RT_VECTOR_CORE_EXCEPTION, 507034 _VECTOR_CORE_TIMEOUT, 507015 _AICORE_EXCEPTION,
    # 507014 _AICORE_TIMEOUT: a kernel of this rank faulted or ran too long
    Signature(
        "507035",
        _acl("507035"),
        "device_kernel_fault",
        CAUSE,
        False,
        "a kernel faulted on the NPU's vector core (507035): look at the operator named in the plog",
        "507035",
        fatal=True,
        needles=("507035",),
    ),
    Signature(
        "507015",
        _acl("507015"),
        "device_kernel_fault",
        CAUSE,
        False,
        "a kernel faulted on the NPU's AI Core (507015): look at the operator named in the plog",
        "507015",
        fatal=True,
        needles=("507015",),
    ),
    Signature(
        "507034",
        _acl("507034"),
        "device_kernel_timeout",
        CAUSE,
        False,
        "a kernel ran too long on the NPU's vector core (507034): look at the operator named in the plog",
        "507034",
        fatal=True,
        needles=("507034",),
    ),
    Signature(
        "507014",
        _acl("507014"),
        "device_kernel_timeout",
        CAUSE,
        False,
        "a kernel ran too long on the NPU's AI Core (507014): look at the operator named in the plog",
        "507014",
        fatal=True,
        needles=("507014",),
    ),
    Signature(
        "EL0004",
        r"\bEL0004\b",
        "device_out_of_memory",
        CAUSE,
        False,
        "device memory ran out: reduce the batch size or memory options",
        "EL0004",
        fatal=True,
        needles=("EL0004",),
    ),
    # inner: an internal error of HCCL (EI9999), the runtime (EE9999) or ACL (EH9999); its detail line names what
    # failed. The bare header "EE9999: Inner Error!" is not matched: it carries nothing, and the detail line that
    # follows it (or a code above, like 507035 in "EH9999: ... runtime result = 507035") says more.
    Signature(
        "EI9999",
        r"\bEI9999\b(?!: Inner Error!\s*$)",
        "hccl_inner_error",
        CAUSE,
        False,
        "an internal error in HCCL: the line says what failed; collect the plogs of every rank",
        "EI9999",
        fatal=True,
        needles=("EI9999",),
    ),
    Signature(
        "EE9999",
        r"\bEE9999\b(?!: Inner Error!\s*$)",
        "runtime_inner_error",
        CAUSE,
        False,
        "an internal error in the CANN runtime: the line says what failed; the plog has the details",
        "EE9999",
        fatal=True,
        needles=("EE9999",),
    ),
    Signature(
        "EH9999",
        r"\bEH9999\b(?!: Inner Error!\s*$)",
        "acl_inner_error",
        CAUSE,
        False,
        "an internal error in ACL (AscendCL): the line says what failed; the plog has the details",
        "EH9999",
        fatal=True,
        needles=("EH9999",),
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
