"""The catalog of CANN's codes (host/cann/catalog.py) and the script that generates it
(scripts/gen_cann_catalog.py): the committed module is exactly what the script writes for its data, it
records where every table came from, and the script regenerates it from checkouts of the sources."""

from __future__ import annotations

import importlib.util
import json
import re
import subprocess
import sys
from pathlib import Path
from types import ModuleType
from typing import Dict

import pytest

from npulaunch.host.cann import catalog
from npulaunch.host.cann.codes import canonical, family_of
from npulaunch.host.cann.lookup import describe

ROOT = Path(__file__).resolve().parents[2]
SCRIPT = ROOT / "scripts" / "gen_cann_catalog.py"
TABLES = ("SOURCES", "ECODES", "NUMERIC", "RT_REASONS", "HCCL_RESULTS", "DRV_ERRORS")
TABLES += ("TORCH_NPU_SUBMODULES", "TORCH_NPU_ERRORS", "FAULT_LEVELS", "GE_STATUS_LAYOUT", "GE_STATUS_SCHEME")
TABLES += ("GE_STATUSES", "DOCS")


def load_script() -> ModuleType:
    spec = importlib.util.spec_from_file_location("gen_cann_catalog", SCRIPT)
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def test_the_module_is_what_the_script_writes_for_its_data() -> None:
    gen = load_script()
    tables = {name: getattr(catalog, name) for name in TABLES}
    assert gen.render(tables) == Path(catalog.__file__).read_text(encoding="utf-8")


def test_every_table_says_where_it_came_from() -> None:
    gen = load_script()
    assert set(catalog.SOURCES) == set(gen.SOURCES)
    for key, (repo, commit, path) in catalog.SOURCES.items():
        assert re.fullmatch(r"[\w.-]+/[\w.-]+", repo) and re.fullmatch(r"[0-9a-f]{40}", commit), key
        assert (repo, path) == gen.SOURCES[key][:2]
    used = {entry[4] for entry in catalog.ECODES.values()} | {source for _, source in catalog.NUMERIC.values()}
    used |= {key for key, _ in catalog.DOCS.values()} | {source for _, _, source in catalog.GE_STATUSES.values()}
    assert used <= set(catalog.SOURCES)


def test_the_catalog_holds_what_the_sources_hold() -> None:
    # counts of the snapshots the module was generated from (../shared/sources/cann_error_codes.md gives the same)
    assert len(catalog.ECODES) >= 597 and len(catalog.FAULT_LEVELS) == 802
    assert len(catalog.NUMERIC) >= 250 and len(catalog.HCCL_RESULTS) == 25 and len(catalog.DRV_ERRORS) >= 100
    assert catalog.ECODES["EL0004"][:4] == ("Memory_Allocation_Failure", "Driver Errors", "Driver", "user")
    assert catalog.ECODES["EI0002"][0] == "Communication_Error_Timeout" and catalog.ECODES["EZ9999"][3] == "internal"
    assert catalog.NUMERIC[507035][0] == "ACL_ERROR_RT_VECTOR_CORE_EXCEPTION"
    assert catalog.HCCL_RESULTS[9] == "HCCL_E_TIMEOUT" and catalog.DRV_ERRORS[6] == "DRV_ERROR_OUT_OF_MEMORY"
    assert catalog.FAULT_LEVELS["80E18402"] == "SeparateNPU" and catalog.FAULT_LEVELS["80C98008"] == "RestartRequest"
    assert catalog.RT_REASONS["aicore exception"] == 507015
    # GE's statuses, composed as GE_ERRORNO composes them (the headers' own comments give the same numbers)
    assert catalog.GE_STATUSES[1343242270][:2] == ("GE_GRAPH_INFERSHAPE_FAILED", "Prepare Graph infershape failed")
    assert catalog.GE_STATUSES[1343266818][0] == "GE_GENERATOR_GRAPH_MANAGER_ADD_GRAPH_FAILED"
    assert len(catalog.GE_STATUSES) >= 180 and 0xFFFFFFFF not in catalog.GE_STATUSES and 0 not in catalog.GE_STATUSES


def all_codes() -> Dict[str, str]:
    codes = {code: "cann" for code in catalog.ECODES}
    codes.update({str(number): "acl" for number in catalog.NUMERIC})
    codes.update({name: "hccl" for name in catalog.HCCL_RESULTS.values()})
    codes.update({name: "driver" for name in catalog.DRV_ERRORS.values()})
    codes.update({code: "fault" for code in catalog.FAULT_LEVELS})
    codes.update({str(status): "ge" for status in catalog.GE_STATUSES})
    for sub in catalog.TORCH_NPU_SUBMODULES:
        for err in catalog.TORCH_NPU_ERRORS:
            codes["ERR%02d%03d" % (sub, err)] = "torch_npu"
    return codes


def test_every_code_of_the_catalog_is_known_by_its_family() -> None:
    for code, family in all_codes().items():
        assert family_of(code) == family and canonical(code) == code, code
        info = describe(code)
        assert info is not None and info.known and info.family == family, code
        assert info.cls and info.hint and info.page.startswith("https://"), code
        assert info.kind in ("cause", "symptom") and info.module, code


def test_explain_answers_for_every_code_of_the_catalog() -> None:
    codes = sorted(all_codes())
    done = subprocess.run(
        [sys.executable, "-m", "npulaunch", "explain", "--json", *codes], capture_output=True, text=True, check=False
    )
    assert done.returncode == 0, done.stderr
    answered = json.loads(done.stdout)
    assert [a["code"] for a in answered] == codes and all(a["known"] and a["shape"] is None for a in answered)


# -- the script, on checkouts of its own making ----------------------------------------------------------------


def registry(codes: Dict[str, str]) -> str:
    entries = [
        {"errClass": "X Errors", "errTitle": title, "ErrCode": code, "ErrMessage": "%s"}
        for code, title in codes.items()
    ]
    return json.dumps({"error_info_list": entries}, indent=1)


def git_repo(path: Path, files: Dict[str, str], older: Dict[str, str] = {}) -> str:  # noqa: B006 (read only)
    """A repository with ``older`` committed first, then ``files``; the first commit's hash."""
    path.mkdir(parents=True)
    run = lambda *args: subprocess.run(["git", "-C", str(path), *args], check=True, capture_output=True, text=True)  # noqa: E731
    run("init", "-q")
    run("config", "user.email", "t@example.com")
    run("config", "user.name", "t")
    first = ""
    for batch in (older, files):
        if not batch:
            continue
        for name, text in batch.items():
            (path / name).parent.mkdir(parents=True, exist_ok=True)
            (path / name).write_text(text)
        run("add", "-A")
        run("commit", "-qm", "x")
        first = first or run("rev-parse", "HEAD").stdout.strip()
    return first


# GE's headers, cut to what the script reads: GE_ERRORNO's layout (hicann/ge inc/external/ge/ge_api_error_codes.h),
# the modules' macros and the enums they use (hicann/metadef pkg_inc/common/ge_common/error_codes_define.h)
GE_ERRORNO = """#ifndef GE_ERRORNO
// Code compose(4 byte), runtime: 2 bit,  type: 2 bit,   level: 3 bit,  sysid: 8 bit, modid: 5 bit, value: 12 bit
#define GE_ERRORNO(runtime, type, level, sysid, modid, name, value, desc)                                \\
  constexpr ge::Status name = (static_cast<uint32_t>(0xFFU & (static_cast<uint32_t>(runtime))) << 30U) | \\
                              (static_cast<uint32_t>(0xFFU & (static_cast<uint32_t>(type))) << 28U) |    \\
                              (static_cast<uint32_t>(0xFFU & (static_cast<uint32_t>(level))) << 25U) |   \\
                              (static_cast<uint32_t>(0xFFU & (static_cast<uint32_t>(sysid))) << 17U) |   \\
                              (static_cast<uint32_t>(0xFFU & (static_cast<uint32_t>(modid))) << 12U) |   \\
                              (static_cast<uint32_t>(0x0FFFU) & (static_cast<uint32_t>(value)));         \\
  const ErrorNoRegisterar g_errorno_##name((name), (desc))
GE_ERRORNO(0b11, 0b11, 0b111, 0xFFU, 0b11111, FAILED, 0xFFFU, "failed");
#endif
"""
GE_SCHEME = """#define GE_ERRORNO_COMMON(name, value, desc) \\
  GE_ERRORNO(ge::InnLogRuntime::RT_HOST, ge::InnErrorCodeType::ERROR_CODE, ge::InnErrorLevel::COMMON_LEVEL, \\
             ge::InnSystemIdType::SYSID_GE, ge::InnSubModuleId::COMMON_MODULE, name, (value), (desc))
#define GE_ERRORNO_GRAPH(name, value, desc)                                                                 \\
  GE_ERRORNO(ge::InnLogRuntime::RT_HOST, ge::InnErrorCodeType::ERROR_CODE, ge::InnErrorLevel::COMMON_LEVEL, \\
             ge::InnSystemIdType::SYSID_GE, ge::InnSubModuleId::GRAPH_MODULE, name, (value), (desc))
#define GE_ERRORNO_EXECUTOR(name, value, desc)                                                                \\
  GE_ERRORNO(ge::InnLogRuntime::RT_DEVICE, ge::InnErrorCodeType::ERROR_CODE, ge::InnErrorLevel::COMMON_LEVEL, \\
             ge::InnSystemIdType::SYSID_GE, ge::InnSubModuleId::EXECUTOR_MODULE, name, (value), (desc))
enum class InnSystemIdType : std::uint8_t { SYSID_GE = 8 };
enum class InnLogRuntime : std::uint8_t {
  RT_HOST = 0b01,
  RT_DEVICE = 0b10,
};
enum class InnSubModuleId : std::uint8_t {
  COMMON_MODULE = 0,
  GRAPH_MODULE = 4,
  EXECUTOR_MODULE = 9,
};
enum class InnErrorCodeType : std::uint8_t {
  ERROR_CODE = 0b01,
};
enum class InnErrorLevel : std::uint8_t {
  COMMON_LEVEL = 0b000,
};
GE_ERRORNO_COMMON(PARAM_INVALID, 1, "Parameter invalid!");  // 1343225857
"""


def test_the_script_regenerates_the_module_from_checkouts(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    gen = load_script()
    mirrors = tmp_path / "mirrors"
    runtime_files = {
        "src/dfx/error_manager/error_code.json": registry({"EE1002": "Execution_Error_Stream_Synchronize_Timeout"}),
        "src/runtime/core/inc/spec/base_info.hpp": 'static constexpr const char_t* RT_INNER_ERROR = "EE9999";\n',
        "include/external/acl/acl_base_rt.h": "static const int ACL_ERROR_FAILURE = 500001;\n",
        "include/external/acl/error_codes/rt_error_codes.h": "#define ACL_ERROR_RT_AICORE_EXCEPTION 507015 // x\n",
        "include/external/acl/error_codes/ge_error_codes.h": (
            "static const uint32_t ACL_ERROR_GE_PARAM_INVALID = 145000U;\n"
        ),
        "src/runtime/core/src/common/errcode_manage.cc": (
            'rtErrMap_[RT_ERROR_AICORE] = {ACL_ERROR_RT_AICORE_EXCEPTION, "aicore exception"};\n'
        ),
        "docs/en/error_code_ref/RTS-Errors/EE1002-Execution_Error.md": "# EE1002\n",
    }
    initial = {"src/dfx/error_manager/error_code.json": registry({"E10015": "Invalid_Argument", "EN0001": "X"})}
    first = git_repo(mirrors / "hicann+runtime", runtime_files, older=initial)
    repo, path, _, what = gen.SOURCES["runtime-json-initial"]
    monkeypatch.setitem(gen.SOURCES, "runtime-json-initial", (repo, path, first, what))
    escaped = "".join(
        '    "%s\\n"\n' % line.replace('"', '\\"') for line in registry({"EL0019": "Resource_Error"}).splitlines()
    )
    git_repo(
        mirrors / "hicann+driver",
        {
            "pkg_inc/hal_error_code/drv_error_code.h": "static const char g_drv_error_code[] =\n" + escaped + ";\n",
            "pkg_inc/ascend_hal_error.h": (
                "typedef enum tagDrvError {\n    DRV_ERROR_NONE = 0,\n    DRV_ERROR_OUT_OF_MEMORY = 6,\n"
            ),
        },
    )
    raw = 'const std::string g = R"(\n%s\n)";\n'
    git_repo(
        mirrors / "hicann+ge",
        {
            "base/common/error_registry/error_registry.cc": raw % registry({"E10001": "Invalid_Argument"}),
            "docs/en/user_guides/error_codes/E10001-Invalid_Argument.md": "# E10001\n",
            "inc/external/ge/ge_api_error_codes.h": GE_ERRORNO,
            "inc/graph_metadef/common/ge_common/ge_inner_error_codes.h": (
                'GE_ERRORNO_GRAPH(GE_GRAPH_INFERSHAPE_FAILED, 30, "Prepare Graph infershape failed");  // 1343242270\n'
                'GE_ERRORNO_EXECUTOR(GE_EXEC_NOT_INIT, 1,\n    "GE Executor is not yet initialized.");\n'
            ),
        },
    )
    git_repo(mirrors / "hicann+metadef", {"pkg_inc/common/ge_common/error_codes_define.h": GE_SCHEME})
    git_repo(
        mirrors / "xiaobingling93-pixel+cann-hcomm",
        {"src/common/error_code/error_code.cc": raw % registry({"EI0002": "Communication_Error_Timeout"})},
    )
    hcomm = git_repo(  # Huawei's own repository, for HcclResult (the mirror's registry is not in it here)
        mirrors / "hicann+hcomm",
        {
            "include/hccl/hccl_types.h": "typedef enum {\n    HCCL_SUCCESS = 0,\n    HCCL_E_TIMEOUT = 9,\n"
            "} HcclResult;\n"
            "typedef enum {\n    HCCL_REDUCE_SUM = 0,\n} HcclReduceOp;\n",
        },
    )
    git_repo(
        mirrors / "hicann+opbase",
        {
            "src/nnopbase/composite_op/log/op_error_manager.cpp": raw % registry({"EZ9999": "AclNN_Inner_Error"}),
            "src/op_common/log/log.cpp": raw % registry({"E70001": "Invalid_Argument"}),
            "include/nnopbase/opdev/op_errno.h": "#define ACLNN_ERR_INNER 561000\n",
        },
    )
    git_repo(
        mirrors / "Ascend+pytorch",
        {
            "torch_npu/utils/_error_code.py": "class _SubModuleID(Enum):\n    PTA = 0\n    DIST = 2\n\n\n"
            'class ErrCode(Enum):\n    ACL = (100, "call acl api failed")\n    HCCL = (200, "x")\n\n\n',
        },
    )
    git_repo(
        mirrors / "Ascend+mind-cluster",
        {
            "component/ascend-device-plugin/build/faultCode.json": json.dumps(
                {"RestartBusinessCodes": ["A2301001", "80e01801"], "SeparateNPUCodes": ["A2301001"]}
            ),
        },
    )
    written: Dict[str, str] = {}
    assert gen.main(["--mirrors", str(mirrors)], write=lambda text: written.setdefault("text", text)) == 0
    module: Dict[str, object] = {}
    exec(compile(written["text"], "catalog", "exec"), module)  # noqa: S102 (the script's output, read back)
    sources = module["SOURCES"]
    assert isinstance(sources, dict) and sources["runtime-json-initial"][1] == first
    assert all(re.fullmatch(r"[0-9a-f]{40}", commit) for _, commit, _ in sources.values())
    ecodes = module["ECODES"]
    assert isinstance(ecodes, dict)
    assert set(ecodes) == {"E10001", "E10015", "EE1002", "EE9999", "EI0002", "EL0019", "EN0001", "EZ9999", "E70001"}
    assert ecodes["EE9999"][:5] == ("RT_INNER_ERROR", "", "Runtime", "internal", "runtime-inner")
    assert ecodes["E10015"][4] == "runtime-json-initial" and ecodes["E10001"][4] == "ge-registry"
    assert module["NUMERIC"] == {
        145000: ("ACL_ERROR_GE_PARAM_INVALID", "ge-codes"),
        500001: ("ACL_ERROR_FAILURE", "acl-codes"),
        507015: ("ACL_ERROR_RT_AICORE_EXCEPTION", "rt-codes"),
        561000: ("ACLNN_ERR_INNER", "aclnn-codes"),
    }
    assert module["RT_REASONS"] == {"aicore exception": 507015}
    assert module["HCCL_RESULTS"] == {9: "HCCL_E_TIMEOUT"} and module["DRV_ERRORS"] == {6: "DRV_ERROR_OUT_OF_MEMORY"}
    assert sources["hccl-results"] == ("hicann/hcomm", hcomm, "include/hccl/hccl_types.h")
    assert module["TORCH_NPU_SUBMODULES"] == {0: "PTA", 2: "DIST"} and module["TORCH_NPU_ERRORS"] == {
        100: "ACL",
        200: "HCCL",
    }
    assert module["GE_STATUS_LAYOUT"] == {
        "runtime": (30, 2),
        "type": (28, 2),
        "level": (25, 3),
        "sysid": (17, 8),
        "modid": (12, 5),
        "value": (0, 12),
    }
    assert module["GE_STATUS_SCHEME"] == {
        "runtime": {1: "RT_HOST", 2: "RT_DEVICE"},
        "type": {1: "ERROR_CODE"},
        "level": {0: "COMMON_LEVEL"},
        "sysid": {8: "SYSID_GE"},
        "modid": {0: "COMMON_MODULE", 4: "GRAPH_MODULE", 9: "EXECUTOR_MODULE"},
    }
    assert module["GE_STATUSES"] == {  # EXECUTOR's statuses are the device's (RT_DEVICE): 0x90109001
        1343225857: ("PARAM_INVALID", "Parameter invalid!", "ge-status-scheme"),
        1343242270: ("GE_GRAPH_INFERSHAPE_FAILED", "Prepare Graph infershape failed", "ge-statuses"),
        0x90109001: ("GE_EXEC_NOT_INIT", "GE Executor is not yet initialized.", "ge-statuses"),
    }
    # a code listed twice takes the more severe level, as MindCluster does
    assert module["FAULT_LEVELS"] == {"80E01801": "RestartBusiness", "A2301001": "SeparateNPU"}
    assert module["DOCS"] == {
        "E10001": ("ge-docs", "docs/en/user_guides/error_codes/E10001-Invalid_Argument.md"),
        "EE1002": ("runtime-docs", "docs/en/error_code_ref/RTS-Errors/EE1002-Execution_Error.md"),
    }


def test_a_status_whose_header_gives_another_number_stops_the_script() -> None:
    """A header's comment (// 1343242270) and GE_ERRORNO's composition must agree: when they do not, the layout or
    the enums were misread, and no table is written."""
    gen = load_script()
    layout = gen.read_ge_layout(GE_ERRORNO)
    scheme, macros = gen.read_ge_scheme(GE_SCHEME)
    texts = {"ge-status-scheme": "", "ge-statuses": 'GE_ERRORNO_GRAPH(GE_GRAPH_X, 30, "x");  // 1343242271\n'}
    with pytest.raises(SystemExit, match="1343242270 by GE_ERRORNO, 1343242271 by its comment"):
        gen.read_ge_statuses(texts, layout, scheme, macros)


def test_the_script_says_which_checkout_is_missing(tmp_path: Path) -> None:
    done = subprocess.run(
        [sys.executable, str(SCRIPT), "--mirrors", str(tmp_path)], capture_output=True, text=True, check=False
    )
    assert done.returncode == 1 and "no checkout of" in done.stderr and "hicann/runtime" in done.stderr
