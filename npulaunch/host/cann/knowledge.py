"""What npulaunch says about CANN's codes, in its own words (data): the failure class, cause or symptom,
whether Huawei's own text says a retry can help (with where it says so), and what to check. Per family
first, then for the codes people meet most. Facts come from the sources named in SOURCE_NOTES; the
catalog (catalog.py, generated) says which codes exist; lookup.py puts the two together. Standard
library only, Python 3.7+.
"""

from __future__ import annotations

from typing import Dict, NamedTuple

from npulaunch.host.cann.codes import CAUSE, SYMPTOM

# where the facts below come from (each named once, cited by key)
SOURCE_NOTES = {
    "ecode-doc": "CANN error-code reference, Description (hiascend, CANN 9.0.0, troubleshooting_0225)",
    "inner-doc": "CANN error-code reference, E*9*** internal codes (hiascend, 8.1.RC1, atlaserrorcode_15_0314)",
    "rt-json": "hicann/runtime src/dfx/error_manager/error_code.json @ 681ef761 (Possible Cause / Solution)",
    "hcomm": "cann-hcomm src/common/error_code/error_code.cc @ b5f3e5be (HCCL's registry: Possible Cause / Solution)",
    "hccl-docs": "hicann/hccl docs/zh/user_guide/fault_diagnosis/*.md @ 09300b70",
    "acl-err": "hicann/runtime docs/zh/api_ref/25-01_aclError.md @ 681ef761 (meaning and handling of each aclError)",
    "hccl-types": "hicann/hcomm include/hccl/hccl_types.h @ 2b912e7d (HcclResult and its comments)",
    "drv-errors": "hicann/driver pkg_inc/ascend_hal_error.h @ ef377e95 (drvError_t and its comments)",
    "torch-npu": "Ascend/pytorch torch_npu/utils/_error_code.py and torch_npu/csrc/core/npu/NPUException.h/.cpp "
    "@ 9e73e708 (ERR<submodule><type>)",
    "mindcluster": "Ascend/mind-cluster docs/en/scheduling/usage/resumable_training/"
    "03_configuring_fault_detection_levels.md and component/ascend-device-plugin/pkg/common/fault_code.go "
    "(getFaultTypeBySeverity) @ 22bb3d98",
    "ms-cann": "mindspore-ai/docs tutorials/source_en/debug/error_analysis/cann_error_cases.md @ 0e400746",
}

INNER_REFERENCE = (
    "https://www.hiascend.com/doc_center/source/zh/CANNCommunityEdition/81RC1beta1/maintenref/troubleshooting/"
    "atlaserrorcode_15_0314.html"
)
ECODE_REFERENCE = (
    "https://www.hiascend.com/document/detail/en/CANNCommunityEdition/900/maintenref/troubleshooting/"
    "troubleshooting_0225.html"
)
ACL_REFERENCE = "https://github.com/hicann/runtime/blob/%s/docs/zh/api_ref/25-01_aclError.md"
TORCH_NPU_REFERENCE = (
    "https://github.com/Ascend/pytorch/blob/%s/docs/zh/user_guide/troubleshooting/error_code_description/"
    "error_code_mechanism.md"
)
FAULT_REFERENCE = (
    "https://github.com/Ascend/mind-cluster/blob/%s/docs/en/scheduling/usage/resumable_training/"
    "03_configuring_fault_detection_levels.md"
)

# the internal codes CANN's reference lists, one per module (inner-doc), and the runtime's EE8888 (catalog)
DOCUMENTED_INNER = frozenset(
    "E19999 E29999 E39999 E49999 E59999 E69999 E79999 E89999 E99999 EA9999 EC9999 ED9999 EE9999 EF9999 EG9999 "
    "EH9999 EI9999 EJ9999 EK9999 EL9999 EN9999 EO9999 EZ9999".split()
)


class Known(NamedTuple):
    cls: str
    kind: str
    hint: str
    source: str = ""  # a SOURCE_NOTES key, where the class or the kind is Huawei's word


_EXEC_TIMEOUT = (
    "a collective timed out waiting for a peer, usually because another rank failed or stalled first: "
    "look for the earliest error on the other ranks; HCCL_EXEC_TIMEOUT sets how long ranks wait"
)
_CONNECT_TIMEOUT = (
    "a peer never connected while HCCL built its links: find the rank that did not start, started late or "
    "failed first; HCCL_CONNECT_TIMEOUT sets how long ranks wait"
)
_KERNEL_FAULT = (
    "a kernel faulted on the NPU: the plog names the operator (kernel_name); check its inputs, shapes and "
    "addresses; op_debug_config can locate memory overwrites"
)
_KERNEL_TIMEOUT = "a kernel ran too long on the NPU: the plog names the operator; check its shapes and inputs"
_DEVICE_OOM = "device memory ran out: reduce the batch size or the memory options, and check nothing else holds the NPU"
_HOST_OOM = "host memory ran out: stop other processes or give the job more memory"
_SYNC_TIMEOUT = (
    "a stream synchronisation timed out: a kernel or a collective did not finish, often waiting on another "
    "rank; stream_sync_timeout (milliseconds) sets the limit"
)
_DEVICE_LOST = "the NPU stopped answering (heartbeat lost, channel down): check npu-smi info; the NPU may need a reset"
_LINK = "a link between NPUs failed (a port going down, or the peer process gone): check the peer's log, then the link"

# per code: the failure class, cause or symptom, hint
CODES: Dict[str, Known] = {
    "EI0001": Known(
        "invalid_hccl_env", CAUSE, "an HCCL environment variable holds a value HCCL refuses: the line names it"
    ),
    "EI0002": Known("hccl_exec_timeout", SYMPTOM, _EXEC_TIMEOUT, "hcomm"),
    "EI0003": Known("hccl_invalid_argument", CAUSE, "a collective was called with an argument HCCL refuses"),
    "EI0004": Known("invalid_rank_table", CAUSE, "HCCL could not read the rank table: check RANK_TABLE_FILE"),
    "EI0005": Known(
        "hccl_inconsistent_arguments", CAUSE, "ranks called a collective with different arguments: the ranks diverged"
    ),
    "EI0006": Known("hccl_connect_timeout", SYMPTOM, _CONNECT_TIMEOUT, "hccl-docs"),
    "EI0007": Known("hccl_resources_exhausted", CAUSE, "HCCL ran out of a resource it allocates"),
    "EI0008": Known("cann_version_mismatch", CAUSE, "ranks run different HCCL/CANN versions: install one everywhere"),
    "EI0009": Known(
        "hccl_transport_init_failed",
        SYMPTOM,
        "HCCL could not set up a link to a peer: check the peer's errors first, then the link (hccn_tool -link, -ip)",
        "hcomm",
    ),
    "EI0010": Known("hccl_p2p_failed", CAUSE, "HCCL's NPU-to-NPU copy failed: check the NPUs (npu-smi info)"),
    "EI0011": Known(
        "device_out_of_memory", CAUSE, "HCCL could not allocate device memory: lower HCCL_BUFFSIZE or the batch"
    ),
    "EI0012": Known("hccl_sdma_error", SYMPTOM, _LINK + "; a buffer freed too early does this too", "hcomm"),
    "EI0013": Known("hccl_link_error", SYMPTOM, _LINK, "hcomm"),
    "EI0014": Known("invalid_rank_table", CAUSE, "the rank table does not match the NPUs: compare it with hccn_tool"),
    "EI0015": Known(
        "hccl_rendezvous_timeout",
        SYMPTOM,
        "ranks did not all reach HCCL's root rank in time: find the rank that never connected "
        "(HCCL_SOCKET_IFNAME, HCCL_CONNECT_TIMEOUT)",
        "hcomm",
    ),
    "EI0016": Known("invalid_cluster_info", CAUSE, "an HCCL configuration value is invalid: the line names it"),
    "EI0017": Known("invalid_rank_table", CAUSE, "the rank table lacks a field HCCL needs"),
    "EI0018": Known("hccl_link_error", SYMPTOM, _LINK, "hcomm"),
    "EI0019": Known("hccl_listen_failed", CAUSE, "HCCL could not listen on its host port: HCCL_IF_BASE_PORT moves it"),
    "EI0020": Known(
        "hccl_listen_failed", CAUSE, "HCCL could not listen on its NPU port: HCCL_NPU_SOCKET_PORT_RANGE moves it"
    ),
    "EJ0001": Known(
        "hccp_init_failed", CAUSE, "the NPU's HCCP process did not start, often because an earlier job still holds it"
    ),
    "EJ0002": Known("npu_port_down", CAUSE, "an NPU network port is down: hccn_tool -i N -link -g"),
    "EJ0003": Known("hccl_listen_failed", CAUSE, "HCCL could not bind its port, which another process holds"),
    "EJ0004": Known("invalid_rank_table", CAUSE, "a device IP is not the NPU's: compare with hccn_tool -i N -ip -g"),
    "EE1002": Known("stream_sync_timeout", SYMPTOM, _SYNC_TIMEOUT, "rt-json"),
    "EL0001": Known("device_absent", CAUSE, "the NPU is missing or abnormal: npu-smi info"),
    "EL0004": Known("device_out_of_memory", CAUSE, _DEVICE_OOM),
    "EL0005": Known(
        "device_busy", CAUSE, "the NPU's resources are busy (held by another process, or the NPU is resetting)"
    ),
    "EL0018": Known("host_out_of_memory", CAUSE, _HOST_OOM),
    "EL0019": Known("device_out_of_memory", CAUSE, _DEVICE_OOM),
    "EE1013": Known("host_out_of_memory", CAUSE, _HOST_OOM),
    "EH0010": Known("host_out_of_memory", CAUSE, _HOST_OOM),
    "E30003": Known(
        "aicpu_process_limit", CAUSE, "too many processes on the NPU's AI CPU: an earlier job may still run"
    ),
    "E30005": Known("device_lost", CAUSE, _DEVICE_LOST, "rt-json"),
    "E39009": Known("device_lost", CAUSE, _DEVICE_LOST, "rt-json"),
    "E30008": Known(
        "aicpu_kernel_timeout", CAUSE, "an AI CPU operator timed out (GetNext preprocessing, large shapes)"
    ),
    "EZ2001": Known(
        "npu_hardware_fault", CAUSE, "the system reported a hardware fault (RAS): the line has its event id"
    ),
    # numeric: acl-err
    "107019": Known("device_wait_timeout", CAUSE, "a wait on the device timed out"),
    "107020": Known(
        "device_task_timeout", CAUSE, "a task ran past its time limit: check the timeouts and the workload"
    ),
    "107022": Known("device_task_aborted", SYMPTOM, "the device's tasks were aborted (after a failure elsewhere)"),
    "107023": Known("device_task_aborted", SYMPTOM, "the stream's tasks were aborted (after a failure elsewhere)"),
    "207001": Known("device_out_of_memory", CAUSE, _DEVICE_OOM),
    "207004": Known("device_absent", CAUSE, "no usable NPU: npu-smi info, and the visible devices"),
    "207018": Known("device_out_of_memory", CAUSE, _DEVICE_OOM),
    "507010": Known("device_lost", CAUSE, _DEVICE_LOST, "acl-err"),
    "507033": Known("device_setup_failed", CAUSE, "the NPU did not start: npu-smi info, and the driver's logs"),
    "507046": Known("stream_sync_timeout", SYMPTOM, _SYNC_TIMEOUT),
    "507047": Known("stream_sync_timeout", SYMPTOM, _SYNC_TIMEOUT),
    "507048": Known(
        "stream_sync_timeout", SYMPTOM, "a device task (FFTS+) timed out, often a collective waiting on another rank"
    ),
    "507053": Known("device_memory_fault", CAUSE, "an uncorrectable memory error (UCE) on the NPU", "acl-err"),
    "507054": Known("device_memory_fault", CAUSE, "an HBM multi-bit ECC error on the NPU", "acl-err"),
    "507055": Known("device_memory_fault", SYMPTOM, "a peer NPU's memory failed: look at the peer's errors", "acl-err"),
    "507056": Known("hccs_link_error", CAUSE, "the link between two NPUs broke", "acl-err"),
    "507057": Known(
        "device_memory_fault", SYMPTOM, "a peer NPU's memory failed, or this NPU read out of bounds", "acl-err"
    ),
    "507899": Known("driver_inner_error", CAUSE, "an internal error of the driver: the lines under it name the call"),
    "507904": Known("hccl_exec_failed", CAUSE, "HCCL re-ran a collective and it failed again"),
    "HCCL_E_TIMEOUT": Known("hccl_exec_timeout", SYMPTOM, _EXEC_TIMEOUT),
    "HCCL_E_REMOTE": Known("hccl_link_error", SYMPTOM, _LINK, "hccl-types"),
    "HCCL_E_OOM": Known("device_out_of_memory", CAUSE, _DEVICE_OOM),
    "HCCL_E_OPRETRY_FAIL": Known("hccl_exec_failed", CAUSE, "HCCL re-ran a collective and it failed again"),
    "DRV_ERROR_OUT_OF_MEMORY": Known("device_out_of_memory", CAUSE, _DEVICE_OOM),
    "DRV_ERROR_NO_DEVICE": Known("device_absent", CAUSE, "the driver sees no NPU: npu-smi info"),
    "DRV_ERROR_BUS_DOWN": Known("device_lost", CAUSE, _DEVICE_LOST),
    "DRV_ERROR_DEVICE_NOT_READY": Known("device_lost", CAUSE, _DEVICE_LOST),
    "DRV_ERROR_BUSY": Known("device_busy", CAUSE, "the driver reports the resource busy"),
}
for _code in ("507014", "507034", "507017"):
    CODES[_code] = Known("device_kernel_timeout", CAUSE, _KERNEL_TIMEOUT, "acl-err")
for _code in ("507015", "507016", "507035", "507036", "507042", "507043", "507044", "507045", "507049", "507050"):
    CODES[_code] = Known("device_kernel_fault", CAUSE, _KERNEL_FAULT, "acl-err")
CODES["507018"] = Known("aicpu_kernel_fault", CAUSE, "an AI CPU operator failed: the plog names it", "acl-err")

# where Huawei's own text says a retry can help (the rule: only there)
RETRYABLE: Dict[str, str] = {
    "EL0005": "rt-json EL0005: 'Wait for a while and try again.'",
    "EJ0001": "rt-json EJ0001: 'Wait for 10s after killing the last training process and try again.'",
    "E30003": "rt-json E30003: 'Try again 10 seconds after the last training job exits.'",
    "EI0013": "hcomm EI0013: the network port is intermittently disconnected",
    "EI0018": "hcomm EI0018: the network port is intermittently disconnected",
    "107019": "acl-err 107019: run the call that issued the task again",
    "507056": "acl-err 507056: retry; if it fails again, check the link between the two NPUs",
    "545602": "acl-err 545602: call again once the redeployment has finished",
    "HCCL_E_AGAIN": "hccl-types HCCL_E_AGAIN: 'try again'",
    "DRV_ERROR_TRY_AGAIN": "drv-errors DRV_ERROR_TRY_AGAIN",
    "DRV_ERROR_BUSY": "drv-errors DRV_ERROR_BUSY: 'task already running'",
    "DRV_ERROR_HOT_RESET_IN_PROGRESS": "drv-errors DRV_ERROR_HOT_RESET_IN_PROGRESS",
}

# the failure classes that mean the NPU itself (or its link) is at fault, not the job
DEVICE_FAULT_CLASSES = frozenset(
    ("npu_hardware_fault", "device_lost", "device_memory_fault", "hccs_link_error", "device_absent", "npu_port_down")
)

# what a title's first words say (CANN's titles: Invalid_Argument_..., Resource_Error_..., Inner_Error_...)
CATEGORIES = (
    ("inner", "internal"),
    ("invalid", "invalid argument"),
    ("parameter", "invalid argument"),
    ("not_supported", "not supported"),
    ("unsupported", "not supported"),
    ("config", "configuration"),
    ("resource", "resources"),
    ("insufficient", "resources"),
    ("memory", "resources"),
    ("execution", "execution"),
    ("communication", "communication"),
    ("file", "file"),
    ("compilation", "compilation"),
    ("package", "installation"),
    ("environment", "environment"),
    ("device", "device"),
)
CATEGORY_HINTS = {
    "internal": "an internal error of %s: the lines under it (TraceBack) name the call that failed; the plog has "
    "the details",
    "invalid argument": "%s refused an argument: the message names it and what is allowed",
    "not supported": "%s does not support what was asked (an operator, shape, type or format): the message says which",
    "configuration": "%s refused a configuration value: the message names it",
    "resources": "%s ran out of a resource: the message says which",
    "execution": "%s failed while running: the message says what failed",
    "communication": "%s could not communicate with a peer: check the peer's own errors first",
    "file": "%s could not read or write a file: the message names it",
    "compilation": "%s could not compile an operator: the message names it",
    "installation": "the CANN installation does not fit: check the versions of its packages",
    "environment": "the environment does not fit what %s needs: the message says what",
    "device": "%s reports a problem with the NPU: npu-smi info",
    "error": "%s reported an error: the message says what failed",
}
WARNING_HINT = "a warning, not a failure: the job can go on; the message says what to improve"
# Graph Engine's own status (a log's "ErrorNo: 1343242270(Prepare Graph infershape failed)"): GE composes it of its
# system, module and value (codes.ge_fields); the module's step failed, and GE's log lines before it say why
GE_STATUS_HINT = (
    "Graph Engine's %s failed (%s): the GE log lines before it name the operator or the step; "
    "the first of them is the cause"
)
# torch_npu's ERR<SS><EEE>: the two tables are torch_npu's (Ascend/pytorch @ 9e73e708: SubModule and ErrCode in
# torch_npu/csrc/core/npu/NPUException.h L58-76, their words in NPUException.cpp L9-32; _error_code.py adds UNKNOWN 99
# and EXCEPT 999); the catalog holds the numbers (catalog.TORCH_NPU_SUBMODULES, TORCH_NPU_ERRORS, generated). The
# line: "[ERROR] <time> (PID:<pid>, Device:<device, -1 unknown>, RankID:<$RANK, -1 unset>) ERR<SS><EEE> <SUBMODULE>
# <words>" (NPUException.cpp formatErrorCode L90-105). The code says which layer's call failed; the CANN message
# printed with it names the cause, and a CANN code in the same message goes before it (codes.specificity).
TORCH_NPU_PARTS = {  # what each submodule is, in a few words
    "PTA": "torch_npu's core (device, memory, streams)",
    "OPS": "an operator's call",
    "DIST": "distributed (the HCCL process group)",
    "GRAPH": "graph mode",
    "PROF": "the profiler",
    "UNKNOWN": "outside torch_npu",
}
TORCH_NPU_TYPES = {  # errCodeMap's words (NPUException.cpp L16-32), and _error_code.py's for EXCEPT
    "SUCCESS": "success",
    "PARAM": "invalid parameter",
    "TYPE": "invalid type",
    "VALUE": "invalid value",
    "PTR": "invalid pointer",
    "INTERNAL": "internal error",
    "MEMORY": "memory error",
    "NOT_SUPPORT": "feature not supported",
    "NOT_FOUND": "resource not found",
    "UNAVAIL": "resource unavailable",
    "SYSCALL": "system call failed",
    "TIMEOUT": "timeout error",
    "PERMISSION": "permission error",
    "ACL": "call acl api failed",
    "HCCL": "call hccl api failed",
    "GE": "call ge api failed",
    "EXCEPT": "application exception",
}
# the failure class of an ERR code by its type (the others: torch_npu_<type>). EXCEPT is printed by torch_npu's exit
# handler when the process ends on an exception that is no NPU error (_error_code.py _NPUExceptionHandler
# .handle_exception: "raised by other component, such as original PyTorch, third-party library, or application code")
TORCH_NPU_CLASSES = {
    "ACL": "acl_call_failed",
    "HCCL": "hccl_call_failed",
    "GE": "ge_call_failed",
    "EXCEPT": "python_exception",
}
TORCH_NPU_HINTS = {
    "EXCEPT": "the process ended on an exception raised outside torch_npu (PyTorch, a library or the script): "
    "the traceback above the line names it",
}
