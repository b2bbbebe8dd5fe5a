"""torch_npu's and MindSpore's failure output read in CANN's terms (host/cann/): torch_npu's ERRxxxxx decoded from its
tables, the CANN code of the same message kept as the failure's code, torch_npu's RankID as the rank, MindSpore's
exception frame one message with the code inside it, its framework errors named, and msrun's and the scheduler's
lines taken as symptoms. The blocks in REAL are lines users quoted in public issues (each case's URL), verbatim, cut
only before or after; none of them was read while host/cann/ was written before this file (measured first: 6 of 14)."""

from __future__ import annotations

from typing import Dict, List, Optional, Tuple

import pytest

from npulaunch.host.cann import catalog
from npulaunch.host.cann.findings import Finding
from npulaunch.host.cann.lookup import describe
from npulaunch.host.cann.phrases import SIGNATURES
from npulaunch.host.cann.prefilter import Matcher
from npulaunch.host.cann.scan import Scanner
from npulaunch.host.cann.shapes import record_level, strip_prefix

ORDINARY = [
    "I1126 04:05:06.123456 140123 basic_session_run_hooks.py:260] loss = 0.2513, step = 41 (0.312 sec)",
    "Epoch 3/10 41/5000 [=====>........] - ETA: 3s - loss: 0.2513 - mean_squared_error: 0.0213",
]


def scan(lines: List[str]) -> List[Finding]:
    scanner = Scanner()
    found = scanner.block("s", "".join(line + "\n" for line in lines).encode())
    return found + [f for _, f in scanner.flush_all()]


# (id, url, lines, (code or phrase name, class, kind) of the first finding, or None for no finding)
Case = Tuple[str, str, List[str], Optional[Tuple[str, str, str]]]
VLLM = "(vLLMHttpServer pid=2790382) "
WORKER = "(EngineCore_1 pid=113803) (VllmWorker rank=0 pid=114020) ERROR 07-01 08:38:50 [multiproc_executor.py:492] "
ENGINE = "ERROR 12-17 09:31:58 [engine.py:458] "
MSRUN = "ME(162078:281473590168608,MainProcess):2025-03-10-09:40:"
SPLIT = "----------------------------------------------------"
REAL: List[Case] = [
    (
        "verl-5046",
        "https://github.com/verl-project/verl/issues/5046",
        [
            VLLM + "[rank0]:[E126 03:28:29.988683190 compiler_depend.ts:444] operator():build/CMakeFiles/torch_npu.dir/"
            "compiler_depend.ts:88 NPU function error: call aclnnInplaceCopy failed, error code is 107000",
            VLLM + "[ERROR] 2026-01-26-03:28:29 (PID:2804108, Device:0, RankID:-1) ERR00100 PTA call acl api failed",
            VLLM + "[Error]: Parameter verification failed.",
            VLLM + "        Check whether the input parameters of the interface are correct.",
            VLLM
            + "[PID: 2804108] 2026-01-26-03:28:29.625.369 Invalid_Argument(EE1001): The argument is invalid.Reason: "
            "Memory async failed, src loc type=0, dst loc type=1, kind=3 is invalid!",
            VLLM
            + "        Solution: 1.Check the input parameter range of the function. 2.Check the function invocation "
            "relationship.",
            VLLM + "        TraceBack (most recent call last):",
            VLLM + "        Memory async check kind and loc failed, retCode=0x7110001, copyKind=3, srcLoc=0, dstLoc=1"
            "[FUNC:MemcpyAsyncCheckLocation][FILE:api_error.cc][LINE:1938]",
        ],
        ("EE1001", "runtime_invalid_argument", "cause"),
    ),
    (
        "vllm-ascend-9447",
        "https://github.com/vllm-project/vllm-ascend/issues/9447",
        [
            "[PID: 108272] 2026-05-21-21:41:11.284.296 Communication_Error_Get_Socket(EI0006): Getting socket times "
            "out. Reason: No abnormal periods were discovered. please prioritize investigating the consistency of "
            "cluster script behaviors.",
            "        TraceBack (most recent call last):",
            "        Nnopbase fails to invoke the HcclAllocComResourceByTiling function of the hccl module. ret = 9, "
            "comm = 0xfffec1e5e800.",
            "        Check NnopbaseGetHcomResource(executor, stream) failed",
        ],
        ("EI0006", "hccl_connect_timeout", "symptom"),
    ),
    (
        "vllm-ascend-4284",  # torch_npu's message inside a JSON string, its newlines escaped
        "https://github.com/vllm-project/vllm-ascend/issues/4284",
        [
            "mineru-npu-model-server   | 2025-11-19 11:14:59.028 | ERROR    | __main__:doc_parse:95 | Dispatch error "
            'to http://127.0.0.1:8100/infer: 500: {"detail":"'
            + "\\n".join(
                [
                    "Initialize:build/CMakeFiles/torch_npu.dir/compiler_depend.ts:152 NPU function error: "
                    "c10_npu::SetDevice(device_id_), error code is 507033",
                    "[ERROR] 2025-11-19-11:14:58 (PID:356, Device:0, RankID:-1) ERR00100 PTA call acl api failed",
                    "[Error]: Failed to start the device. ",
                    "        Rectify the fault based on the error information in the ascend log.",
                    "E30006: 2025-11-19-11:14:58.516.606 Failed to verify the OPP",
                    "        Possible Cause: 1.The OPP is incorrect.",
                    "        Solution: 1. Use a correct OPP.",
                    "        TraceBack (most recent call last):",
                    "        tsd client wait response fail, hostpid:1944202, device response code[1]. unknown device "
                    "error.[FUNC:WaitRsp][FILE:process_mode_manager.cpp][LINE:332]",
                    "",
                ]
            ),
        ],
        ("E30006", "aicpu_installation", "cause"),  # its own title, not the 507033 of the device it kept from starting
    ),
    (
        "vllm-ascend-1558",
        "https://github.com/vllm-project/vllm-ascend/issues/1558",
        [
            WORKER + "    torch_npu._C._npu_setDevice(device_id)",
            WORKER
            + "RuntimeError: Initialize:torch_npu/csrc/core/npu/sys_ctrl/npu_sys_ctrl.cpp:146 NPU function error: "
            "c10_npu::SetDevice(device_id_), error code is 507033",
            WORKER + "[ERROR] 2025-07-01-08:38:50 (PID:114020, Device:-1, RankID:1) ERR00100 PTA call acl api failed",
        ],
        ("507033", "device_setup_failed", "cause"),
    ),
    (
        "vllm-ascend-6935",  # torch_npu's exit handler: the process ended on an exception that is no NPU error
        "https://github.com/vllm-project/vllm-ascend/issues/6935",
        ["[ERROR] 2026-03-02-15:44:05 (PID:1, Device:-1, RankID:-1) ERR99999 UNKNOWN applicaiton exception"],
        ("ERR99999", "python_exception", "cause"),
    ),
    (
        "vllm-ascend-8186",  # a warning with a code opens nothing; the code line under it does
        "https://github.com/vllm-project/vllm-ascend/issues/8186",
        [
            "[W430 23:39:01.305254567 NPUStream.cpp:577] Warning: NPU warning, error code is 507010[Error]: ",
            "[Error]: The task scheduler loses the heartbeat. ",
            "        Rectify the fault based on the error information in the ascend log.",
            "[PID: 1070] 2026-04-30-23:39:01.135.160 Device_Absent/Abnormal(EL0001): Device not found or invalid.",
            "        Possible Cause: Device does not exist or is abnormal.",
            "        TraceBack (most recent call last):",
            "        [drv api] halCqReportRecv failed: device_id=0, ts_id=0, type=2, logic_cq=9, drv_ret_code=33"
            "[FUNC:LogicCqReportV2][FILE:npu_driver_res.cc][LINE:2103]",
        ],
        ("EL0001", "device_absent", "cause"),
    ),
    (
        "vllm-ascend-5135",
        "https://github.com/vllm-project/vllm-ascend/issues/5135",
        [
            ENGINE + "[ERROR] 2025-12-17-09:31:53 (PID:53769, Device:0, RankID:-1) ERR02200 DIST call hccl api failed.",
            ENGINE + "EH9999: Inner Error!",
            ENGINE + "EH9999: [PID: 53769] 2025-12-17-09:31:39.804.969 rtSetStreamFailureMode failed, runtime result = "
            "207000.[FUNC:ReportCallError][FILE:log_inner.cpp][LINE:161]",
            ENGINE + "        TraceBack (most recent call last):",
            ENGINE + "Traceback (most recent call last):",
        ],
        ("EH9999", "acl_inner_error", "cause"),
    ),
    (
        "mindact-1909",
        "https://github.com/candle-org/MindAct/issues/1909",
        [
            "ERROR:root:An error occurred: The pointer[GetDevicePtr()] is null.",
            "",
            SPLIT,
            "- Framework Unexpected Exception Raised:",
            SPLIT,
            "This exception is caused by framework's unexpected error. Please create an issue at "
            "https://gitee.com/mindspore/mindspore/issues to get help.",
            "",
            SPLIT,
            "- C++ Call Stack: (For framework developers)",
            SPLIT,
            "mindspore/ccsrc/plugin/device/ascend/hal/device/ascend_device_address.cc:924 CopyDeviceToHost",
        ],
        ("mindspore-internal-error", "framework_internal_error", "cause"),
    ),
    (
        "mindyolo-186",  # MindSpore's log line before the traceback names the failure; the traceback says less
        "https://github.com/mindspore-lab/mindyolo/issues/186",
        [
            "[ERROR] DEVICE(246,ffff807c8ac0,python):2023-08-10-12:33:06.836.235 [mindspore/ccsrc/runtime/device/"
            "kernel_runtime_manager.cc:136] WaitTaskFinishOnDevice] SyncStream failed, exception:The pointer[stream] "
            "is null.",
            "",
            SPLIT,
            "- C++ Call Stack: (For framework developers)",
            SPLIT,
            "mindspore/ccsrc/runtime/device/kernel_runtime.cc:108 LockRuntime",
            "",
            "Traceback (most recent call last):",
            '  File "train.py", line 290, in <module>',
            "    train(args)",
        ],
        ("mindspore-internal-error", "framework_internal_error", "cause"),
    ),
    (
        "mindyolo-273",
        "https://github.com/mindspore-lab/mindyolo/issues/273",
        [
            "    self._context_handle.set_param(param, value)",
            "RuntimeError: Unsupported device target Ascend. This process only supports one of the ['CPU']. Please "
            "check whether the Ascend environment is installed and configured correctly, and check whether current "
            'mindspore wheel package was built with "-e Ascend". For details, please refer to "Device load error '
            'message".',
            "",
            SPLIT,
            "- Device load error message:",
            SPLIT,
            "Load dynamic library: libmindspore_ascend.so.2 failed. libge_runner.so: cannot open shared object file: "
            "No such file or directory",
            "",
            SPLIT,
            "- C++ Call Stack: (For framework developers)",
            SPLIT,
            "mindspore/core/utils/ms_context.cc:327 SetDeviceTargetFromInner",
        ],
        ("mindspore-no-ascend", "ascend_backend_unavailable", "cause"),
    ),
    (
        "mindact-1698",  # the runtime's AI CPU fault without its EZ9999 header, as MindSpore's exception holds it
        "https://github.com/candle-org/MindAct/issues/1698",
        [
            "Launch kernel failed: Bprop/gradDense/Reshape-op278",
            "",
            "The error from device(chipId:0, dieId:0), serial number is 13, an exception occurred during AICPU "
            "execution, stream_id:2, task_id:19016, errcode:21008, msg:inner error.[FUNC:ProcessStarsAicpuErrorInfo]"
            "[FILE:device_error_proc.cc][LINE:1232]",
            "",
            "mindspore/ccsrc/runtime/graph_scheduler/actor/kernel_actor.cc:917 ExecuteLaunchKernelTask",
        ],
        ("device-aicpu-error", "aicpu_kernel_fault", "cause"),
    ),
    (
        "mindspore-246",  # ERROR lines of a job that went on (run_check had passed): no failure
        "https://github.com/mindspore-ai/mindspore/issues/246",
        [
            "The result of multiplication calculation is correct, MindSpore has been installed on platform [Ascend] "
            "successfully!",
            "[ERROR] KERNEL(40354,fffdd6e1f1e0,python):2023-10-13-09:30:47.546.313 [mindspore/ccsrc/kernel/oplib/"
            "op_info_utils.cc:172] LoadOpInfoJson] Get op info json suffix path failed, soc_version: Ascend310P3",
        ],
        None,
    ),
    (
        "mindact-1983",  # msrun's report: another process failed first
        "https://github.com/candle-org/MindAct/issues/1983",
        [
            "[WARNING] " + MSRUN + "12.444.000 [mindspore/parallel/cluster/process_entity/_api.py:318] There's worker "
            "exits with exception, kill all other workers.",
            "[ERROR] " + MSRUN + "38.720.000 [mindspore/parallel/cluster/process_entity/_api.py:331] Scheduler process "
            "162146 exit with exception.",
            "[WARNING] " + MSRUN + "38.721.000 [mindspore/parallel/cluster/process_entity/_api.py:334] Analyzing "
            "exception log...",
            "[ERROR] " + MSRUN + "38.722.000 [mindspore/parallel/cluster/process_entity/_api.py:431] Time out nodes "
            "are ['3']",
            "scheduler.log-58-[WARNING] DISTRIBUTED(162146,ffffb85d0c80,python):2025-03-10-09:40:20.507.092 "
            "[mindspore/ccsrc/distributed/cluster/cluster_context.cc:153] Finalize] This log means the cluster is "
            "successfully created. Retry to finalize the node and exit cluster...",
        ],
        ("msrun-process-failed", "cluster_process_failed", "symptom"),
    ),
]


def named(finding: Finding) -> Tuple[str, str, str]:
    return (finding.code or finding.name, finding.cls, finding.kind)


@pytest.mark.parametrize("case", REAL, ids=[case[0] for case in REAL])
def test_a_real_block_is_named_by_its_code_and_class(case: Case) -> None:
    _, url, lines, expected = case
    assert url.startswith("https://github.com/")
    found = scan(lines)
    assert (named(found[0]) if found else None) == expected, found
    # the same among ordinary lines, as the agent reads a rank's output (the pre-filter lets the block through)
    among = scan(ORDINARY * 50 + lines + ORDINARY * 50)
    assert [named(f) for f in among] == [named(f) for f in found]


def test_the_collection_is_real_and_covers_both_frameworks() -> None:
    assert len(REAL) >= 12 and len({url for _, url, _, _ in REAL}) == len(REAL)
    assert sum("ERR" in " ".join(lines) for _, _, lines, _ in REAL) >= 6  # torch_npu's blocks
    assert sum("mindspore" in " ".join(lines).lower() for _, _, lines, _ in REAL) >= 5


# torch_npu's tables as NPUException.h declares them (Ascend/pytorch torch_npu/csrc/core/npu/NPUException.h L58-76
# @ 9e73e708ab9350d203475609f36f8a43f6a0c2ab), and _error_code.py's two more (UNKNOWN 99, EXCEPT 999)
SUBMODULES = {"PTA": 0, "OPS": 1, "DIST": 2, "GRAPH": 3, "PROF": 4, "UNKNOWN": 99}
ERRCODES = {"PARAM": 1, "TYPE": 2, "VALUE": 3, "PTR": 4, "INTERNAL": 5, "MEMORY": 6, "NOT_SUPPORT": 7}
ERRCODES.update(NOT_FOUND=8, UNAVAIL=9, SYSCALL=10, TIMEOUT=11, PERMISSION=12, ACL=100, HCCL=200, GE=300, EXCEPT=999)


def test_torch_npu_tables_are_the_header_s() -> None:
    assert {name: number for number, name in catalog.TORCH_NPU_SUBMODULES.items()} == SUBMODULES
    errors = {name: number for number, name in catalog.TORCH_NPU_ERRORS.items() if name != "SUCCESS"}
    assert errors == ERRCODES


@pytest.mark.parametrize(
    "code, module, title, words, cls",
    [
        ("ERR02200", "torch_npu DIST", "DIST HCCL", "call hccl api failed", "hccl_call_failed"),
        ("ERR00100", "torch_npu PTA", "PTA ACL", "call acl api failed", "acl_call_failed"),
        ("ERR01100", "torch_npu OPS", "OPS ACL", "call acl api failed", "acl_call_failed"),
        ("ERR00006", "torch_npu PTA", "PTA MEMORY", "memory error", "torch_npu_memory"),
        ("ERR03011", "torch_npu GRAPH", "GRAPH TIMEOUT", "timeout error", "torch_npu_timeout"),
        ("ERR99999", "torch_npu UNKNOWN", "UNKNOWN EXCEPT", "application exception", "python_exception"),
    ],
)
def test_an_err_code_is_decoded_from_torch_npu_s_tables(
    code: str, module: str, title: str, words: str, cls: str
) -> None:
    info = describe(code)
    assert info is not None and info.family == "torch_npu" and info.known
    assert (info.module, info.title, info.category, info.cls) == (module, title, words, cls)
    assert "Ascend/pytorch" in info.source


def test_the_cann_code_of_the_same_message_stays_the_failure_s_code() -> None:
    # the shapes of Ascend/pytorch#67 and vllm-ascend#486 (the brief's examples): torch_npu's ERR only says which
    # layer's call failed
    (setup,) = scan(
        [
            "RuntimeError: Initialize:build/CMakeFiles/torch_npu.dir/compiler_depend.ts:146 NPU function error: "
            "c10_npu::SetDevice(device_id_), error code is 507033",
            "[ERROR] 2025-06-24-11:20:49 (PID:528886, Device:-1, RankID:-1) ERR00100 PTA call acl api failed",
            "[Error]: Failed to start the device. ",
            "EL0003: [PID: 528886] 2025-06-24-11:20:41.662.506 The argument is invalid.",
        ]
    )
    assert (setup.code, setup.codes) == ("EL0003", ("507033", "ERR00100"))
    assert setup.cls == "device_setup_failed"  # EL0003 says "invalid argument", 507033 says which: the device
    (socket,) = scan(
        [
            "[rank1]: RuntimeError: InnerRunOpApi:torch_npu/csrc/framework/OpParamMaker.cpp:281 OPS function error: "
            "HcclAllreduce, error code is 6",
            "[rank1]: [ERROR] 2025-04-08-18:07:20 (PID:1292363, Device:1, RankID:1) ERR01100 OPS call acl api failed.",
            "[rank1]: EI0006: [PID: 1292363] 2025-04-08-18:07:20.444.436 Getting socket times out. Reason: Remote Rank "
            "did not send the data in time.",
        ]
    )
    assert (socket.code, socket.codes, socket.kind) == ("EI0006", ("HCCL_E_NOT_FOUND", "ERR01100"), "symptom")
    assert socket.detail == "device 1; rank 1"  # torch_npu's header attributes it
    (alone,) = scan(["[ERROR] 2025-09-03-03:02:37 (PID:7226, Device:1, RankID:-1) ERR02200 DIST call hccl api failed."])
    assert (alone.code, alone.cls, alone.detail) == ("ERR02200", "hccl_call_failed", "device 1")  # RankID -1: unset


def test_mindspore_s_frame_is_one_message_named_by_the_cann_code_inside() -> None:
    # the frame as mindspore/core/utils/log_adapter.cc writes it: the CANN code goes before the framework's banner
    found = scan(
        [
            "Traceback (most recent call last):",
            '  File "train.py", line 9, in <module>',
            "RuntimeError: Sync stream failed",
            "",
            SPLIT,
            "- Ascend Error Message:",
            SPLIT,
            "EI0002: [PID: 170414] 2024-05-21-12:06:49.978.985 The wait execution of the Notify register times out.",
            "",
            SPLIT,
            "- Framework Unexpected Exception Raised:",
            SPLIT,
            "This exception is caused by framework's unexpected error. Please create an issue at "
            "https://gitee.com/mindspore/mindspore/issues to get help.",
            "",
            SPLIT,
            "- C++ Call Stack: (For framework developers)",
            SPLIT,
            "mindspore/ccsrc/runtime/graph_scheduler/actor/kernel_actor.cc:917 ExecuteLaunchKernelTask",
        ]
    )
    assert [named(f) for f in found] == [("EI0002", "hccl_exec_timeout", "symptom")]
    assert found[0].after[-1].startswith("mindspore/ccsrc/") and "- C++ Call Stack" in "\n".join(found[0].after)


def test_msrun_s_and_the_scheduler_s_lines_are_symptoms() -> None:
    # templates of meta_server_node.cc @ 04431c95 and compute_graph_node.cc @ 02bc35af (mindspore-ai/mindspore)
    lines = {
        "[ERROR] DISTRIBUTED(162146,ffffb85d0c80,python):2025-03-10-09:40:25.507.237 [mindspore/ccsrc/distributed/"
        "cluster/topology/meta_server_node.cc:538] UpdateTopoState] The node: 3 is timed out.": "cluster_node_lost",
        "RuntimeError: The total number of timed out node is 1": "cluster_node_lost",
        "RuntimeError: The state of the cluster is error, total nodes num: 8, abnormal nodes num: 1": (
            "cluster_node_lost"
        ),
        "RuntimeError: Failed to connect to the meta server. Maybe it has exited. Please check scheduler's log.": (
            "cluster_scheduler_lost"
        ),
        "[ERROR] ME(1:2,MainProcess):2025-03-10-09:40:12.444.000 [mindspore/parallel/cluster/process_entity/_api.py:"
        "312] Worker process 162150 exit with exception.": "cluster_process_failed",
    }
    for line, cls in lines.items():
        (finding,) = scan(ORDINARY + [line])
        assert (finding.cls, finding.kind) == (cls, "symptom"), line
    assert scan(["RuntimeError: The state of the cluster is error, total nodes num: 8, abnormal nodes num: 0"]) == []


def test_msrun_s_grep_of_its_workers_logs_is_read_as_their_lines() -> None:
    # msrun's _analyze_log runs grep -rn -C 5 over its log folder (_api.py @ 1d200336)
    line = "msrun_log/worker_3.log:120:[ERROR] DEVICE(1,2,python):2025-03-10-09:40:12.444.000 [a.cc:1] F] x"
    assert record_level(strip_prefix(line)) == "ERROR"
    context = "output/msrun_log/scheduler.log-58-[WARNING] DISTRIBUTED(162146,ffff,python):2025-03-10-09:40:20.507.092"
    assert record_level(strip_prefix(context)) == "WARNING"
    (finding,) = scan(
        ["msrun_log/worker_3.log:121:EL0004: [PID: 7] 2025-03-10-09:40:12.1.2 Failed to allocate memory."]
    )
    assert (finding.code, finding.cls) == ("EL0004", "device_out_of_memory")


def test_phrases_printed_with_an_exception_cost_the_log_path_no_search() -> None:
    """Their lines come with "Error:" or "[ERROR]" in the block, which the block's first check finds: no gate of
    their own (a gate for "The pointer[" alone opened on every block of training output, bench/log_path.py's kind)."""
    gated = {needle for gate in Matcher()._gates for needle in gate.needles}
    shaped: Dict[str, List[str]] = {s.name: list(s.needles) for s in SIGNATURES if s.shaped}
    assert {"mindspore-internal-error", "mindspore-no-ascend", "msrun-process-failed"} <= set(shaped)
    assert not gated & {n.encode() for needles in shaped.values() for n in needles if n != "ERROR]"}
    block = "".join(line + "\n" for line in ORDINARY * 500).encode()
    assert not Matcher().block_may_match(block)
