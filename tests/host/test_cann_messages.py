"""Reading CANN's messages (host/cann/): the code shapes, numbers that are never codes, one finding per
message block with its most specific code, an internal code refined by its block, plog records joined
by time, and the scanner's quiet flush. Lines below follow the templates of CANN's printers (the
sources named in host/cann/shapes.py); the real lines are tests/data/ascend_error_lines.jsonl's."""

from __future__ import annotations

import random
import time
from typing import List, Optional

import pytest

from npulaunch.host.cann.codes import canonical, specificity
from npulaunch.host.cann.findings import Finding
from npulaunch.host.cann.scan import QUIET_S, Scanner
from npulaunch.host.cann.shapes import find_codes, line_time, strip_prefix


def scan(text: str, plog: bool = False, scanner: Optional[Scanner] = None) -> List[Finding]:
    scanner = scanner or Scanner()
    found = scanner.block("s", text.encode(), plog)
    return found + [f for _, f in scanner.flush_all()]


@pytest.mark.parametrize(
    "line, codes",
    [
        ("EE9999: Inner Error!", ["EE9999"]),  # code-first
        ("E10001: [PID: 12] 2025-01-02-03:04:05.678.901 Value [x] for parameter [y] is invalid.", ["E10001"]),
        ("[PID: 4] 2025-11-30-05:12:25.730.116 AclNN_Parameter_Error(EZ1001): bad dims", ["EZ1001"]),  # titled
        ("EE9999[PID: 7] 2026-04-30-03:48:59.964.776 (EE9999):  rtMemcpy failed", ["EE9999", "EE9999"]),
        ("call aclnnEqScalar failed, detail:EZ9999: Inner Error!", ["EZ9999"]),
        ("wait event failed, runtime result = 507011[FUNC:ReportCallError][FILE:log_inner.cpp][LINE:148]", ["507011"]),
        ("NPU function error: AclrtSynchronizeStreamWithTimeout(stream()), error code is 507035", ["507035"]),
        ("ErrCode=507011, desc=[the model stream execute failed], InnerCode=0x7150050", ["507011"]),
        ("RuntimeError: Call rt api rtStreamSynchronize failed, ret: 507011", ["507011"]),
        ("retcode: 507011 ( model execute failed)", ["507011"]),
        ("[ERROR] aclrtSynchronizeStream(stream) failed: 507034 (at main.cpp:12)", ["507034"]),
        ("CANN failure 500001: ACL_ERROR_FAILURE ; NPU=0", ["500001", "500001"]),  # a number, and its identifier
        ("HCCL function error: HcclAllreduce(...), error code is 6", ["HCCL_E_NOT_FOUND"]),
        (
            "[ERROR] HCCL(1,x):2026-03-18-10:34:43.142.156 [hcom.cc:515] [1]errNo[0x0000000005010009] error",
            ["HCCL_E_TIMEOUT"],
        ),
        (
            "[ERROR] HCCL(1,x):2026-06-17-02:21:43.853.666 [t.cc:470] [1][Alloc]call trace: hcclRet -> 4",
            ["HCCL_E_INTERNAL"],
        ),
        (
            "[driver interface] halMemAlloc failed: device_id=6, size=1, drvRetCode=6![FUNC:ReportError]",
            ["DRV_ERROR_OUT_OF_MEMORY"],
        ),
        ("[ERROR] 2025-10-11-15:09:34 (PID:2969, Device:0, RankID:101) ERR00100 PTA call acl api failed", ["ERR00100"]),
        ("Starting the HCCP process failed. Symbol not found. ErrorCode=EE1015.", ["EE1015"]),
        (
            "[ERROR] OP(2,p):2025-11-25-15:02:02.390.004 [op_executor.cpp:119] errno[561000] infer shape fail",
            ["561000"],
        ),
        ("Fault RAS occurs in the system: [event_id:0x80e18400] New uncorrectable ECC", ["80E18400"]),
    ],
)
def test_each_documented_shape_gives_its_code(line: str, codes: List[str]) -> None:
    assert [hit.code for hit in find_codes(strip_prefix(line))] == codes


@pytest.mark.parametrize(
    "line",
    [
        "step 507035 loss 0.2513 lr 0.0001",
        "eval result = 123456 accuracy 0.91",  # a result word, but nothing failed
        "processed 507011 samples in 3.2 s, error 0.0123",
        "AI Core error code = 0x800000, errcode:(0x1, 0, 0)",  # hex values and tuples are no ACL codes
        "W1102 03:04:05.123 140123 session.py:12] E1102 is a glog stamp, not a code",
        "epoch 3 error: 507999 images",  # a number after "error", but no code the catalog lists
        "E123456 E1234 xE10001 E10001x",  # not a six-character code standing alone
        "loading images/E10001.jpg and EZ9999.png",  # a file's name is no code: it would stop a healthy job
        "image E10001 loaded, ERR00100.log written",  # nor a word in a sentence
    ],
)
def test_numbers_a_step_counter_or_a_loss_prints_are_never_codes(line: str) -> None:
    assert find_codes(line) == []


def test_random_training_output_holds_no_code() -> None:
    rng = random.Random(26)
    words = ["step", "loss", "lr", "error", "result =", "ret", "failure rate", "Epoch", "E", "eval", "ERROR:"]
    for _ in range(2000):
        parts = [rng.choice(words) + " " + str(rng.choice([rng.randint(0, 9), rng.randint(100000, 599999)]))]
        parts.append("%.4f" % rng.random())
        line = " ".join(parts)
        hits = find_codes(line)
        # only a number the catalog lists, in a return value's place ("ret", "error"; "result =" with no word of
        # failure is none), may count
        assert all(hit.form == "return value" and hit.code in line and canonical(hit.code) for hit in hits), line
        assert not hits or not line.startswith(("step", "loss", "lr", "result", "failure rate", "Epoch", "eval")), line


# Numbers that are no codes, in the places the return-value rules read (issue 34, item 6): step counters, losses,
# learning rates, PIDs, ports, shapes, sample counts, checkpoint names, and success returns. Most hold a number the
# catalog lists (507033, 507011, 145000, 107001, 561103, the GE status 1343242270), which a careless rule would take.
NO_CODE = [
    "step 507033/1000000 loss 0.2513 lr 0.0001",
    "Epoch 3 step 507033: loss = 2.1034, lr = 1.0e-04, global_step = 507011",
    "loss: 107001.5 grad_norm: 507033.25 learning_rate: 0.000145000",
    "INFO:tensorflow:global_step/sec: 3.2, loss = 0.25, step = 145000",
    "worker pid=145000 started; rendezvous on port 507011",
    "[rank0] MASTER_PORT=29500 pid 507033 device_id=3",
    "input shape [1343242270] dtype float16, output shape (1, 561103, 1024)",
    "processed 507033 samples, 145000 tokens in 3.2 s",
    "saving checkpoint to ./output/model-561103.ckpt",
    "restored from ./ckpt/checkpoint.ckpt-1343242270 at step 507033",
    "unix time 1343242270, request id 1343266818 done",
    "Create Stream Successfully, ret=0",
    "aclrtSetDevice ret 0; aclInit code=0; open errno:0",
    "hcom init done, result = 0.",
    "Build: ErrorNo: 0(success) [COMP][PRE_OPT] graph built",
    "[HCCL] init: errNo[0x0000000000000000] rank 3",
    "[HCCL] call trace: hcclRet -> 0",
    "HCCL function HcclCommInitRootInfo: error code is 0",
    "step 12 ret[0] loss 0.2513",
    "failed: 0 of 507033 requests",
    "eval result = 507011 correct of 600000",  # "result" with no word of failure
]
# the block around a line: one the pre-filter passes (so the line is read), quiet itself
PASSES = "[WARNING] train.py:12 ValueError: a deprecated option, ignored\n"
DEATH = "Traceback (most recent call last):\n  File \"train.py\", line 3, in <module>\nKeyError: 'x'\n"


@pytest.mark.parametrize("line", NO_CODE)
def test_numbers_that_are_no_codes_give_no_finding(line: str) -> None:
    assert find_codes(line) == []
    assert scan(PASSES + line + "\n") == []  # read as a block that reports a failure reads it
    scanner = Scanner()
    assert scanner.block("s", (PASSES + line + "\n").encode()) == [] and scanner.flush("s", died=True) == []
    (traceback,) = scan(line + "\n" + DEATH)  # the lines before a failure: no code among them
    assert traceback.code == "" and traceback.name == "python-traceback"


def test_a_code_no_catalog_lists_is_still_reported() -> None:
    (finding,) = scan("EE1234: [PID: 1] 2025-01-01-00:00:00.000.000 Something the runtime never documented\n")
    assert finding.code == "EE1234" and finding.info is not None and not finding.info.known
    assert finding.info.module == "Runtime" and finding.info.scope == "user" and finding.fatal


@pytest.mark.parametrize(
    "line, prefix_free",
    [
        ("[rank3]: EI0006: Getting socket times out.", "EI0006: Getting socket times out."),
        ("[1,3]<stdout>:EE9999: Inner Error!", "EE9999: Inner Error!"),
        ("(EngineCore_DP0 pid=753) ERROR 04-30 03:48:59 [core.py:700] EE9999: Inner Error!", "EE9999: Inner Error!"),
        ("(RayWorkerWrapper pid=12, ip=10.0.0.2) EL0004: out", "EL0004: out"),
        ("plog-2950_20251125150202583.log:2:[ERROR] OP(2950,p):x", "[ERROR] OP(2950,p):x"),  # grep -n over plogs
    ],
)
def test_what_launchers_put_before_a_line_is_set_aside(line: str, prefix_free: str) -> None:
    assert strip_prefix(line) == prefix_free


def test_time_stamps_in_each_form() -> None:
    for text, expected in (
        ("[ERROR] HCCL(1,p):2024-01-02-03:04:05.678.901 [x.cc:1] y", (2024, 1, 2, 3, 4, 5, 0.678901)),
        ("[ERROR] 2025-10-11-15:09:34 (PID:1, Device:0, RankID:1) ERR00100", (2025, 10, 11, 15, 9, 34, 0.0)),
        ("2024-01-02 03:04:05,250 - ERROR - x", (2024, 1, 2, 3, 4, 5, 0.25)),
    ):
        stamp = line_time(text)
        assert stamp is not None and time.localtime(stamp)[:6] == expected[:6] and abs(stamp % 1 - expected[6]) < 1e-5
    assert line_time("step 3 loss 0.25") is None


TORCH_NPU_FAILURE = """step 41 loss 0.31
Traceback (most recent call last):
  File "train.py", line 30, in <module>
    loss.backward()
RuntimeError: {where} NPU function error: {call}, error code is 507035
[ERROR] 2025-10-11-15:09:34 (PID:2969, Device:0, RankID:3) ERR00100 PTA call acl api failed
[Error]: The vector core execution is abnormal.
        Rectify the fault based on the error information in the ascend log.
EZ9999: Inner Error!
EZ9999[PID: 2969] 2025-10-11-15:09:34.101.200 (EZ9999):  The error from device(chipId:0, dieId:0), {device}
        TraceBack (most recent call last):
        Kernel task happen error, retCode=0x31, [vector core exception].[FUNC:PreCheckTaskErr]
step 42 would never come
""".format(
    where="synchronize:build/CMakeFiles/torch_npu.dir/compiler_depend.ts:361",
    call="c10_npu::acl::AclrtSynchronizeStreamWithTimeout(stream())",
    device="serial number is 6, there is an exception of aivec error, core id is 0, error code = 0x800000",
)


def test_one_message_one_finding_its_most_specific_code_first_and_the_others_listed() -> None:
    (finding,) = scan(TORCH_NPU_FAILURE)
    assert finding.code == "EZ9999" and finding.codes == ("507035", "ERR00100")
    assert finding.cls == "device_kernel_fault" and finding.kind == "cause" and finding.fatal
    assert "(EZ9999):  The error from device" in finding.line  # the line that says more than "Inner Error!"
    assert finding.before[0] == "step 41 loss 0.31" and "Traceback (most recent call last):" in finding.before
    assert finding.after[0].strip().startswith("TraceBack") and finding.detail == "device 0; rank 3"
    assert finding.line_no == 10


def test_the_same_message_split_over_two_reads_is_one_finding() -> None:
    scanner = Scanner()
    cut = TORCH_NPU_FAILURE.index("EZ9999: Inner Error!")
    first = scanner.block("s", TORCH_NPU_FAILURE[:cut].encode())
    second = scanner.block("s", TORCH_NPU_FAILURE[cut:].encode())
    assert first == [] and [f.code for f in second] == ["EZ9999"]


def test_an_internal_code_is_refined_by_its_block() -> None:
    (oom,) = scan(
        "EE9999: Inner Error!\n"
        "        [driver interface] halMemAlloc failed: device_id=6, size=1024, drvRetCode=6!"
        "[FUNC:ReportError][FILE:npu_driver.cc][LINE:568]\n"
    )
    assert (oom.code, oom.codes, oom.cls) == ("EE9999", ("DRV_ERROR_OUT_OF_MEMORY",), "device_out_of_memory")
    assert oom.detail == "driver call halMemAlloc failed; device 6" and "halMemAlloc" in oom.line
    (timeout,) = scan(
        "EI9999  The error from device(chipId:5, dieId:0), serial number is 3, hccl fftsplus task timeout occurred "
        "during task execution, stream_id:2, sq_id:2, task_id:4, stuck notify num:1, timeout=30min(default).\n"
    )
    assert (timeout.cls, timeout.kind) == ("hccl_exec_timeout", "symptom")
    (reason,) = scan(
        "EE9999: Inner Error, Please contact support engineer!\n"
        "EE9999  Task execute failed, base info: device_id=0, stream_id=2, task_id=5[FUNC:GetError]\n"
        "        rtStreamSynchronize execute failed, reason=[aicore exception][FUNC:FuncErrorReason]\n"
    )
    assert reason.cls == "device_kernel_fault"
    assert "runtime call rtStreamSynchronize failed" in reason.detail and "aicore exception (507015)" in reason.detail


def test_a_message_with_only_the_runtimes_reason_gets_the_code_it_implies() -> None:
    (finding,) = scan(
        "[ERROR] RUNTIME(1,python):2025-01-01-00:00:00.000.000 [stream.cc:1] 1 Sync: rtStreamSynchronize execute "
        "failed, reason=[aicore exception]\n",
        plog=True,
    )
    assert finding.code == "507015" and "the code it implies" in finding.detail


def test_plog_records_within_a_second_are_one_message_later_ones_another() -> None:
    plog = (
        "[ERROR] HCCL(7,p):2026-03-18-10:33:52.113.403 [s.cc:797] [7][Wait][LinkEstablish]wait socket establish "
        "timeout, role[1] rank[1] timeout[120 s]\n"
        "[INFO] HCCL(7,p):2026-03-18-10:33:52.113.420 [s.cc:800] [7] something routine\n"
        "[ERROR] HCCL(7,p):2026-03-18-10:33:52.113.454 [s.cc:861] [7][Wait][LinksEstablishCompleted] is failed. "
        "ret[9].\n"
        "[ERROR] HCCL(7,p):2026-03-18-10:34:43.142.156 [hcom.cc:515] [7][AllReduce][Result]errNo[0x0000000005010009]\n"
    )
    first, second = scan(plog, plog=True)
    assert (first.code, first.codes, first.cls, first.kind) == (
        "EI0006",
        ("HCCL_E_TIMEOUT",),
        "hccl_connect_timeout",
        "symptom",
    )
    assert second.code == "HCCL_E_TIMEOUT" and first.time is not None and second.time is not None
    assert second.time - first.time > 50


def test_warnings_are_not_failures() -> None:
    assert scan("[W compiler_depend.ts:28] Warning: EZ9999 something to note (function x)\n") == []
    assert scan("[WARNING] GE(1,p):2025-01-01-00:00:00.000.000 [g.cc:1] W11001: op not optimal\n", plog=True) == []
    assert scan("W11001: High-priority service is not optimal\n") == []  # a W code opens no message


def test_a_message_flattened_into_one_line_is_read_as_its_lines() -> None:
    line = (
        "[rank54]: an exception occurred : ('enable_peer_access:NPUPeerToPeerAccess.cpp:39 NPU function error: "
        "aclrtDeviceEnablePeerAccess(dest_dev, enable_flag_value), error code is 507899\\n[ERROR] 2026-04-17-11:29:42 "
        "(PID:7136, Device:6, RankID:54) ERR00100 PTA call acl api failed\\nEL9999: Inner Error!\\nEL9999[PID: 7136] "
        "2026-04-17-11:29:42.001.734 (EL9999):  [drv api] halDeviceEnableP2P failed: drv devId=6, drvRetCode=17!\\n')"
    )
    (finding,) = scan(line + "\n")
    assert finding.code == "EL9999" and finding.codes == ("507899", "ERR00100", "DRV_ERROR_IOCRL_FAIL")


def test_a_quiet_stream_completes_its_message() -> None:
    now = [100.0]
    scanner = Scanner(clock=lambda: now[0])
    assert scanner.block("s", b"EI0002: [PID: 1] 2025-01-01-00:00:00.000.000 The wait execution timed out.\n") == []
    assert scanner.due_s() == QUIET_S and scanner.flush_quiet() == []
    now[0] += QUIET_S
    ((key, finding),) = scanner.flush_quiet()
    assert key == "s" and finding.code == "EI0002" and scanner.due_s() is None


def test_a_stream_that_prints_errors_in_a_loop_says_no_more_after_a_while() -> None:
    text = "".join(f"step {i}\nEH0006: [PID: 1] 2025-01-01-00:00:00.000.000 Not supported {i}\n" for i in range(500))
    found = scan(text)
    assert 0 < len(found) <= 64


def test_specificity_orders_the_families() -> None:
    ordered = [
        "EI0002",
        "EZ9999",
        "507035",
        "1343242270",
        "HCCL_E_TIMEOUT",
        "DRV_ERROR_OUT_OF_MEMORY",
        "ERR00100",
        "80E18402",
        "W11001",
    ]
    assert sorted(ordered, key=specificity) == ordered


def test_mindspores_frame_around_cann_s_message() -> None:
    # MindSpore's log line, then the frame ascend_err_manager.cc puts around CANN's message
    found = scan(
        "[ERROR] DEVICE(170414,fffe397fa1e0,python):2021-09-13-15:29:07.466.049 [mindspore/ccsrc/runtime/device/"
        "ascend/ascend_kernel_runtime.cc:375] Init] Ascend error occurred, error message:\n"
        "Traceback (most recent call last):\n"
        '  File "train.py", line 9, in <module>\n'
        "RuntimeError: Ascend kernel runtime initialization failed.\n"
        "\n"
        "----------------------------------------------------\n"
        "- Ascend Error Message:\n"
        "----------------------------------------------------\n"
        "EI0004: The ranktable is invalid,Reason:[The ranktable file does not exist]. Please check the configuration.\n"
        '(Please search "Ascend Error Message" at https://www.mindspore.cn for error code description)\n'
    )
    assert [(f.code, f.cls) for f in found] == [("EI0004", "invalid_rank_table")]
    assert "- Ascend Error Message:" in found[0].before


def test_the_tf_adapters_geop_wrapper() -> None:
    (finding,) = scan(
        "tensorflow.python.framework.errors_impl.InternalError: GeOp5_0GEOP::::DoRunAsync Failed\n"
        "Error Message is : \n"
        "EI0008: The CANN versions are inconsistent: the local version is 8.0.0, the remote 7.0.0.\n"
        "\t [[{{node GeOp5_0}}]]\n"
    )
    assert (finding.code, finding.cls, finding.kind) == ("EI0008", "cann_version_mismatch", "cause")
    assert finding.after == ("\t [[{{node GeOp5_0}}]]",)


def test_mindspores_runtime_call_lines() -> None:
    (finding,) = scan(
        "RuntimeError: Call rt api rtStreamSynchronize failed, ret: 507011\nretcode: 507011 ( model execute failed)\n"
    )
    assert finding.code == "507011" and finding.info is not None and finding.info.title == "ACL_ERROR_RT_MODEL_EXECUTE"
