"""Codes in every ordinary spelling (host/cann/shapes.py, messages.py; issue 34): a number in a return value's place
is a code when the catalog lists it or GE's scheme decodes it, whatever the program put between name and value; a
name is given only when the catalog has it; the coded lines before a failure, and a rank's last coded warning, name
it. The lines are written here in the forms the issue's families print (none is a held-out case's text); the real
ones are tests/data/diagnosis_corpus/'s."""

from __future__ import annotations

from typing import List

import pytest

from npulaunch.host.cann.codes import canonical, family_of, ge_fields
from npulaunch.host.cann.lookup import describe
from npulaunch.host.cann.prefilter import Matcher
from npulaunch.host.cann.scan import Scanner
from npulaunch.host.cann.shapes import find_codes, split_prefix


@pytest.mark.parametrize(
    "line, codes",
    [
        # a catalog code after a colon, an equals sign, a bracket or a space, no word "error" on the line
        ("aclrtMallocHost failed: 207001 (at resource.cpp:40)", ["207001"]),
        ("RegisterKernelBinary aiv ret 107000", ["107000"]),
        ("aclmdlExecute returned 507011", ["507011"]),
        ("open device 1 failed.ret=507033", ["507033"]),
        ("aclrtSetDevice failed, ret[107001]. Got device count[8]", ["107001"]),
        ("load model failed, code=145000", ["145000"]),
        ("stream sync failed, result = 507035.", ["507035"]),
        ("/src/model.cpp:13 aclError:145000", ["145000"]),  # an identifier's last part names the value
        ("aclnnMatmul launch: aclnnStatus=161002", ["161002"]),
        # Python and JSON reprs
        ("RuntimeError: ({'errCode': 'E80012', 'op_name': 'reduce'}, 'In op, the dims are out of range')", ["E80012"]),
        ('{"error_code": 507015, "error_msg": "aicore exception"}', ["507015"]),
        # Graph Engine's statuses, decoded by GE's own scheme (the generic 4294967295, FAILED, is none of them)
        ("Build: ErrorNo: 1343242270(Prepare Graph infershape failed) [COMP][PRE_OPT] failed", ["1343242270"]),
        ("Init plugin so failed, ret = 1343225860", ["1343225860"]),
        ("OptimizeGraph: ErrorNo: 4294967295(failed) [COMP][PRE_OPT] failed", []),
        # a check of a call's result against its family's success value
        ("Check failed: ret == HCCL_SUCCESS (7 vs. 0) init failed", ["HCCL_E_UNAVAIL"]),
        ("Check failed: ACL_SUCCESS == aclrtSetDevice(3) (0 vs. 507033)", ["507033"]),
    ],
)
def test_a_code_in_a_return_values_place(line: str, codes: List[str]) -> None:
    assert [hit.code for hit in find_codes(line)] == codes


@pytest.mark.parametrize(
    "line",
    [
        "[ERROR] HCCL(1,p):2026-03-18-10:34:43.142.156 [hcom.cc:1] [1][Init]errNo[0x0000000005010144] failed",
        "[ERROR] HCCL(1,p):2026-03-18-10:34:43.142.156 [hcom.cc:1] [1] is failed. ret[328004].",
        "HCCL function error: HcclCommInitRootInfo(...), error code is 77",
        "[driver interface] halMemAlloc failed: device_id=6, drvRetCode=9999!",
        "Check failed: status == HCCL_SUCCESS (4242 vs. 0)",
    ],
)
def test_a_name_is_given_only_when_the_catalog_has_it(line: str) -> None:
    """HCCL_E_328004, DRV_ERROR_9999 exist nowhere: a value no enum of the family names is no code of it."""
    assert find_codes(line) == []


def test_ge_statuses_are_decoded_by_ges_scheme() -> None:
    fields = ge_fields(1343242270)  # 0x5010401E
    assert fields == {"runtime": 1, "type": 1, "level": 0, "sysid": 8, "modid": 4, "value": 30}
    info = describe("1343242270")
    assert info is not None and info.known and info.family == "ge" and info.title == "GE_GRAPH_INFERSHAPE_FAILED"
    assert info.module == "GE (graph module)" and "Prepare Graph infershape failed" in info.hint
    assert info.source.startswith("hicann/ge@")
    # a status of GE's shape that no header lists: decoded, not known
    unlisted = describe(str(0x5010401E + 700))
    assert unlisted is not None and unlisted.family == "ge" and not unlisted.known and "value 730" in unlisted.group
    # SUCCESS and the generic FAILED, a time stamp, another system's status: none is GE's
    assert [ge_fields(v) for v in (0, 0xFFFFFFFF, 1343242270 + (1 << 17), 1700000000)] == [None] * 4
    assert canonical("0x5010401E") == "1343242270" and family_of("1700000000") is None


def test_ge_statuses_in_a_plog() -> None:
    plog = (
        "[ERROR] GE(7,demo):2024-05-24-21:17:48.149.111 [graph_prepare.cc:2282]7 InferShapeForPreprocess: "
        "ErrorNo: 4294967295(failed) [COMP][PRE_OPT][Recover][IrDefinitions] failed, graph[g0]\n"
        "[ERROR] GE(7,demo):2024-05-24-21:17:48.149.129 [graph_prepare.cc:1769]7 FormatAndShapeProcess: "
        "ErrorNo: 1343242270(Prepare Graph infershape failed) [COMP][PRE_OPT] Prepare Graph infershape failed\n"
    )
    scanner = Scanner()
    (finding,) = scanner.block("p", plog.encode(), plog=True) + scanner.flush("p")
    assert finding.code == "1343242270" and finding.cls == "ge_error"


def scan(text: str, died: bool = False) -> List[str]:
    scanner = Scanner()
    found = scanner.block("s", text.encode())
    return [f.code for f in found + scanner.flush("s", died)]


WARNING = (
    "[W compiler_depend.ts:526] Warning: NPU warning, error code is 507035[Error]: \n"
    "[Error]: The vector core execution is abnormal.\n"
    "        Rectify the fault based on the error information in the ascend log.\n"
)
DEATH = 'Traceback (most recent call last):\n  File "train.py", line 9, in <module>\nRuntimeError: stream sync\n'


def test_a_ranks_last_coded_warning_names_the_failure_that_follows_it() -> None:
    scanner = Scanner()
    (finding,) = scanner.block("s", (WARNING + DEATH).encode()) + scanner.flush("s")
    assert finding.code == "507035" and "NPU warning" in finding.line and finding.fatal


def test_a_ranks_last_coded_warning_names_its_death_when_nothing_follows() -> None:
    assert scan(WARNING) == []  # the stream ended: a rank that succeeded printed a warning
    assert scan(WARNING, died=True) == ["507035"]  # a rank that died printed it last
    assert scan(WARNING + "\n", died=True) == ["507035"]
    scanner = Scanner()  # the agent's monitor flushes every stream at its end, saying which ranks died
    for key in ("rank 0", "rank 1"):
        scanner.block(key, WARNING.encode())
    assert [(key, f.code) for key, f in scanner.flush_all(died=lambda key: key == "rank 1")] == [("rank 1", "507035")]


def test_a_coded_warning_long_before_a_failure_does_not_name_it() -> None:
    steps = "".join("step %d loss 0.25\n" % i for i in range(10))
    assert scan(WARNING + steps + DEATH) == [""]  # the traceback's finding, with no code
    assert scan(WARNING + steps, died=True) == []


def test_a_return_value_printed_before_the_failure_line_joins_its_message() -> None:
    scanner = Scanner()
    first = scanner.block("s", b"RegisterKernelBinary aiv ret 107000\n\n")  # no word the pre-filter looks for
    failed = scanner.block("s", b"[FATAL]  Acl return error kernels.cc:140, with ERROR 561103\n")
    (finding,) = failed + scanner.flush("s")
    assert first == [] and finding.code == "107000" and finding.codes == ("561103",)
    assert finding.line == "RegisterKernelBinary aiv ret 107000" and finding.line_no == 1


def test_a_line_logged_at_an_information_level_is_passed_over() -> None:
    assert scan("[INFO] model loaded, aclmdlLoad ret 507011 retried\n" + DEATH) == [""]


def test_a_line_a_logger_wrote_at_warning_level_is_no_failure() -> None:
    """vLLM puts the level after its process tag: a Traceback it logged at WARNING, while it carried on, is not one."""
    prefix = "(APIServer pid=16) WARNING 07-22 05:12:47 [base.py:192] "
    text = "".join(prefix + line + "\n" for line in ["Chat template warmup failed", *DEATH.splitlines()])
    text += prefix + "            * (Out of Memory) errors or inference hangs. If you encounter such issues,\n"
    assert scan(text) == [] and split_prefix(prefix + "x") == ("x", "WARNING")
    assert scan(text.replace("WARNING", "ERROR")) != []


def test_number_lines_are_read_only_in_a_block_that_reports_a_failure() -> None:
    lines = ["step 507033 loss 0.25", "RegisterKernelBinary aiv ret 107000", "lr 0.0001"]
    matcher = Matcher()
    assert matcher.candidate_lines(lines) == ()
    assert list(matcher.candidate_lines(lines + ["[ERROR] kernel launch aborted"])) == [1, 3]  # not the step
