#!/usr/bin/env python3
"""Regenerate npulaunch/host/cann/catalog.py, CANN's error codes and MindCluster's fault levels as
data, from local checkouts of Huawei's repositories. The module records which repository, commit
and path each table came from; facts only (codes, CANN's identifiers, the catalog group, levels),
no message or solution text: npulaunch's hints are its own (host/cann/knowledge.py).

    python3 scripts/gen_cann_catalog.py --mirrors /work/.mirror        # repositories as <owner>+<name>/repo
    python3 scripts/gen_cann_catalog.py --repo hicann/runtime=/src/runtime --repo ...   # one at a time
    python3 scripts/gen_cann_catalog.py --mirrors DIR --check          # exit 1 if the module is stale

A checkout is a work tree or a bare git directory (as ``fetch`` leaves it); files are read at its
HEAD, and older versions (the runtime's first public error_code.json) at the commit named below.
"""

from __future__ import annotations

import argparse
import ast
import json
import re
import subprocess
import sys
from pathlib import Path
from typing import Callable, Dict, Iterable, List, Optional, Tuple

ROOT = Path(__file__).resolve().parent.parent
OUT = ROOT / "npulaunch" / "host" / "cann" / "catalog.py"
sys.path.insert(0, str(ROOT))
from npulaunch.host.cann.codes import ecode_module, ecode_scope  # noqa: E402  (the structure is the package's)
from npulaunch.host.health.judge import SEVERITY  # noqa: E402

# the runtime's first public error_code.json, which still held GE's E1xxxx codes and DVPP's EN codes
RUNTIME_INITIAL = "d8beaaf0955bc307cdda0ae971275fb48f652a26"

# key: (repository, path, commit or None for the checkout's HEAD, what it gives)
SOURCES: Dict[str, Tuple[str, str, Optional[str], str]] = {
    "runtime-json": ("hicann/runtime", "src/dfx/error_manager/error_code.json", None, "E-codes"),
    "runtime-json-initial": (
        "hicann/runtime",
        "src/dfx/error_manager/error_code.json",
        RUNTIME_INITIAL,
        "E-codes moved out later",
    ),
    "ge-registry": ("hicann/ge", "base/common/error_registry/error_registry.cc", None, "E-codes"),
    # HCCL's registry from a third-party mirror of hicann/hcomm: Huawei's repository could not be read here to
    # compare (no snapshot of it; the index holds hicann/hcomm without this file)
    "hcomm-registry": ("xiaobingling93-pixel/cann-hcomm", "src/common/error_code/error_code.cc", None, "E-codes"),
    "driver-registry": ("hicann/driver", "pkg_inc/hal_error_code/drv_error_code.h", None, "E-codes"),
    "aclnn-registry": ("hicann/opbase", "src/nnopbase/composite_op/log/op_error_manager.cpp", None, "E-codes"),
    "op-registry": ("hicann/opbase", "src/op_common/log/log.cpp", None, "E-codes"),
    "runtime-inner": (
        "hicann/runtime",
        "src/runtime/core/inc/spec/base_info.hpp",
        None,
        "codes it reports for modules",
    ),
    "acl-codes": ("hicann/runtime", "include/external/acl/acl_base_rt.h", None, "numeric codes"),
    "rt-codes": ("hicann/runtime", "include/external/acl/error_codes/rt_error_codes.h", None, "numeric codes"),
    "ge-codes": ("hicann/runtime", "include/external/acl/error_codes/ge_error_codes.h", None, "numeric codes"),
    "aclnn-codes": ("hicann/opbase", "include/nnopbase/opdev/op_errno.h", None, "numeric codes"),
    "rt-reasons": ("hicann/runtime", "src/runtime/core/src/common/errcode_manage.cc", None, "reason= texts"),
    # Huawei's own hcomm (its HcclResult, names, values and comments, is the mirror's at b5f3e5be, compared at
    # 2b912e7d); it could not be fetched here: the module's row was set to that commit by hand (issue 34)
    "hccl-results": ("hicann/hcomm", "include/hccl/hccl_types.h", None, "HcclResult"),
    "drv-errors": ("hicann/driver", "pkg_inc/ascend_hal_error.h", None, "DRV_ERROR_*"),
    "torch-npu-errors": ("Ascend/pytorch", "torch_npu/utils/_error_code.py", None, "ERRxxxxx"),
    "fault-levels": ("Ascend/mind-cluster", "component/ascend-device-plugin/build/faultCode.json", None, "levels"),
    # Graph Engine's own statuses (the ten-digit ``ErrorNo: 1343242270(Prepare Graph infershape failed)`` of its
    # logs): GE_ERRORNO's bit layout (runtime, type, level, system, module, value), the modules' macros and the
    # enumerators they use, and the statuses each module defines with them
    "ge-status-layout": ("hicann/ge", "inc/external/ge/ge_api_error_codes.h", None, "GE_ERRORNO's fields"),
    "ge-status-scheme": ("hicann/metadef", "pkg_inc/common/ge_common/error_codes_define.h", None, "GE statuses"),
    "ge-statuses": ("hicann/ge", "inc/graph_metadef/common/ge_common/ge_inner_error_codes.h", None, "GE statuses"),
    "runtime-docs": ("hicann/runtime", "docs/en/error_code_ref", None, "pages"),
    "ge-docs": ("hicann/ge", "docs/en/user_guides/error_codes", None, "pages"),
}
# the order E-code registries are merged in: a later one wins (the runtime's current table over its first
# version; the modules' own registrations over the runtime's table, as error_manager.cc gives them priority)
ECODE_ORDER = (
    "runtime-json-initial",
    "runtime-json",
    "ge-registry",
    "hcomm-registry",
    "driver-registry",
    "op-registry",
    "aclnn-registry",
)
# a code faultCode.json lists under several levels takes the most severe, in MindCluster's order
# (host/health/judge.py SEVERITY: getMostSeriousFaultType, component/ascend-device-plugin/pkg/common/fault_code.go)
LEVEL_ORDER = SEVERITY


class Checkout:
    """A repository on disk: a work tree or a bare git directory."""

    def __init__(self, repo: str, path: Path) -> None:
        self.repo = repo
        self.path = path
        self.git_dir = path / ".git" if (path / ".git").exists() else path
        self.head = self._git("rev-parse", "HEAD").strip()

    def _git(self, *args: str) -> str:
        done = subprocess.run(
            ["git", "--git-dir", str(self.git_dir), *args], capture_output=True, text=True, check=False
        )
        if done.returncode != 0:
            raise SystemExit(f"{self.repo} at {self.path}: git {' '.join(args)}: {done.stderr.strip()}")
        return done.stdout

    def read(self, path: str, commit: Optional[str] = None) -> str:
        return self._git("show", f"{commit or self.head}:{path}")

    def listing(self, folder: str) -> List[str]:
        return self._git("ls-tree", "-r", "--name-only", self.head, folder).split()


def find_checkouts(mirrors: Optional[Path], given: Iterable[str]) -> Dict[str, Checkout]:
    repos = sorted({repo for repo, _, _, _ in SOURCES.values()})
    paths: Dict[str, Path] = {}
    for item in given:
        repo, _, path = item.partition("=")
        paths[repo] = Path(path)
    for repo in repos:
        if repo not in paths and mirrors is not None:
            candidate = mirrors / repo.replace("/", "+") / "repo"
            paths[repo] = candidate if candidate.exists() else mirrors / repo.replace("/", "+")
    missing = [repo for repo in repos if repo not in paths or not paths[repo].exists()]
    if missing:
        raise SystemExit("no checkout of " + ", ".join(missing) + " (--mirrors DIR or --repo owner/name=PATH)")
    return {repo: Checkout(repo, paths[repo]) for repo in repos}


# -- readers: each turns one source's text into facts ---------------------------------------------------


def _registry_json(text: str) -> List[dict]:
    """The error_info_list of a registry: a JSON file, a C++ raw string R"( ... )", or a C string of
    escaped JSON lines ("{\\n" "...")."""
    raw = re.search(r'R"\((.*?)\)"', text, re.S)
    if raw:
        body = raw.group(1)
    elif text.lstrip().startswith("{"):
        body = text
    else:
        pieces = re.findall(r'^\s*"((?:[^"\\]|\\.)*)"', text, re.M)
        body = "".join(ast.literal_eval('"' + piece + '"') for piece in pieces)
    return list(json.loads(body)["error_info_list"])


def _defines(text: str, pattern: str) -> Dict[int, str]:
    """``NAME value`` pairs from #define / static const lines whose name matches ``pattern``: value -> the
    first name (a later alias, such as a corrected spelling, does not replace it)."""
    found: Dict[int, str] = {}
    regex = re.compile(r"(?:#define\s+|static\s+const\s+\w+\s+)(" + pattern + r")\s*=?\s*(\d+)U?\b")
    for name, value in regex.findall(text):
        found.setdefault(int(value), name)
    return found


def _enum(text: str, prefix: str) -> Dict[int, str]:
    """``NAME = value`` members of a C enum (decimal or hex)."""
    return {
        int(value, 0): name for name, value in re.findall(r"\b(" + prefix + r"\w+)\s*=\s*(0x[0-9a-fA-F]+|\d+)", text)
    }


def _block(text: str, name: str) -> str:
    """The body of ``typedef enum { ... } name;``."""
    match = re.search(r"typedef\s+enum\s*\w*\s*\{([^}]*)\}\s*" + name + r"\s*;", text)
    if match is None:
        raise SystemExit(f"enum {name} not found")
    return match.group(1)


def read_ecodes(texts: Dict[str, str]) -> Dict[str, Tuple[str, str, str]]:
    """code -> (title, group, source key), later registries over earlier ones."""
    codes: Dict[str, Tuple[str, str, str]] = {}
    for key in ECODE_ORDER:
        for entry in _registry_json(texts[key]):
            code = entry["ErrCode"].strip()
            title = (entry.get("errTitle") or "").strip()
            group = (entry.get("errClass") or "").strip()
            known = codes.get(code)
            # a registry that leaves the title or group out keeps what an earlier one said
            codes[code] = (title or (known[0] if known else ""), group or (known[1] if known else ""), key)
    return codes


def read_reasons(text: str, rt_names: Dict[str, int]) -> Dict[str, int]:
    """The runtime's reason texts (``reason=[aicore exception]``) -> the ACL code it returns with them."""
    reasons: Dict[str, int] = {}
    for name, reason in re.findall(r"rtErrMap_\[\w+\]\s*=\s*\{\s*(\w+)\s*,\s*\"([^\"]*)\"\s*\}", text, re.S):
        if name in rt_names and reason and reason != "SUCCESS":
            reasons.setdefault(reason, rt_names[name])
    return reasons


def read_torch_npu(text: str) -> Tuple[Dict[int, str], Dict[int, str]]:
    """torch_npu's submodules (``ERR<SS>...``) and error types (``ERR..<EEE>``), by their enum names."""
    sub = re.search(r"class _SubModuleID\(Enum\):(.*?)\n\n", text, re.S)
    err = re.search(r"class ErrCode\(Enum\):(.*?)\n\n", text, re.S)
    if sub is None or err is None:
        raise SystemExit("torch_npu/utils/_error_code.py: _SubModuleID or ErrCode not found")
    submodules = {int(v): k for k, v in re.findall(r"(\w+) = (\d+)", sub.group(1))}
    errors = {int(v): k for k, v in re.findall(r"(\w+) = \((\d+),", err.group(1))}
    return submodules, errors


def read_levels(text: str) -> Dict[str, str]:
    table = json.loads(text)
    levels: Dict[str, str] = {}
    for key, codes in table.items():
        level = key[: -len("Codes")]
        for code in codes:
            code = code.upper()
            if code not in levels or LEVEL_ORDER.index(level) < LEVEL_ORDER.index(levels[code]):
                levels[code] = level
    return levels


def read_ge_layout(text: str) -> Dict[str, Tuple[int, int]]:
    """GE_ERRORNO's fields, as its macro composes a status: field -> (shift, width in bits). The widths are the
    gaps between the shifts (the macro's comment: runtime 2 bits, type 2, level 3, sysid 8, modid 5, value 12)."""
    macro = re.search(
        r"#define GE_ERRORNO\(runtime, type, level, sysid, modid, name, value, desc\)(.*?)\n[^\n\\]*$",
        text,
        re.S | re.M,
    )
    if macro is None:
        raise SystemExit("ge_api_error_codes.h: the GE_ERRORNO macro not found")
    shifts = [(name, int(shift)) for name, shift in re.findall(r"\((\w+)\)\)\) << (\d+)U", macro.group(1))]
    value = re.search(r"\(0x([0-9A-Fa-f]+)U\) & \(static_cast<uint32_t>\(value\)\)", macro.group(1))
    if [name for name, _ in shifts] != ["runtime", "type", "level", "sysid", "modid"] or value is None:
        raise SystemExit("ge_api_error_codes.h: GE_ERRORNO's fields are not the ones this script knows")
    layout: Dict[str, Tuple[int, int]] = {}
    top = 32
    for name, shift in shifts:
        layout[name] = (shift, top - shift)
        top = shift
    if int(value.group(1), 16) != (1 << top) - 1:
        raise SystemExit("ge_api_error_codes.h: GE_ERRORNO's value mask does not fill the bits under modid")
    layout["value"] = (0, top)
    return layout


# GE_ERRORNO's arguments, in its order, by the enum each one's enumerator belongs to (error_codes_define.h)
_GE_ENUMS = (("runtime", "InnLogRuntime"), ("type", "InnErrorCodeType"), ("level", "InnErrorLevel"))
_GE_ENUMS += (("sysid", "InnSystemIdType"), ("modid", "InnSubModuleId"))


def read_ge_scheme(text: str) -> Tuple[Dict[str, Dict[int, str]], Dict[str, Dict[str, str]]]:
    """GE's status scheme: each field's enumerators (value -> name), and each module's macro (GE_ERRORNO_GRAPH)
    -> the enumerator it passes for each field."""
    enums: Dict[str, Dict[int, str]] = {}
    for field, enum in _GE_ENUMS:
        body = re.search(r"enum class " + enum + r"\b[^{]*\{([^}]*)\}", text)
        if body is None:
            raise SystemExit(f"error_codes_define.h: enum {enum} not found")
        enums[field] = {int(v, 0): n for n, v in re.findall(r"(\w+)\s*=\s*(0b[01]+|0x[0-9A-Fa-f]+|\d+)", body.group(1))}
    macros: Dict[str, Dict[str, str]] = {}
    for macro, args in re.findall(
        r"#define (\w+_ERRORNO_\w+)\(name, value, desc\)\s*\\\s*GE_ERRORNO\(([^;]*?), name, \(value\), \(desc\)\)",
        text,
    ):
        names = [arg.strip(" \\\n").split("::")[-1] for arg in args.split(",")]
        macros[macro] = dict(zip((field for field, _ in _GE_ENUMS), names))
    if not macros:
        raise SystemExit("error_codes_define.h: no GE_ERRORNO_<module> macro found")
    return enums, macros


def read_ge_statuses(
    texts: Dict[str, str],
    layout: Dict[str, Tuple[int, int]],
    scheme: Dict[str, Dict[int, str]],
    macros: Dict[str, Dict[str, str]],
) -> Dict[int, Tuple[str, str, str]]:
    """GE's statuses: value -> (name, description, source key), composed as GE_ERRORNO composes them; where a
    header's comment gives the number (``// 1343242270``), the two must agree."""
    by_name = {field: {name: value for value, name in values.items()} for field, values in scheme.items()}
    statuses: Dict[int, Tuple[str, str, str]] = {}
    for key in ("ge-status-scheme", "ge-statuses"):
        pattern = r'\b(\w+_ERRORNO_\w+)\((\w+),\s*(\d+),\s*"((?:[^"\\]|\\.)*)"\);[ \t]*(?://\s*(\d+))?'
        for macro, name, value, desc, noted in re.findall(pattern, texts[key]):
            if macro not in macros:
                continue
            status = int(value) & ((1 << layout["value"][1]) - 1)
            for field, enumerator in macros[macro].items():
                shift, width = layout[field]
                status |= (by_name[field][enumerator] & ((1 << width) - 1)) << shift
            if noted and int(noted) != status:
                raise SystemExit(f"{key}: {name} is {status} by GE_ERRORNO, {noted} by its comment")
            statuses.setdefault(status, (name, desc, key))
    return statuses


def read_docs(checkouts: Dict[str, Checkout]) -> Dict[str, Tuple[str, str]]:
    """code -> (source key, path) of CANN's own page for it, in the repositories' English docs."""
    docs: Dict[str, Tuple[str, str]] = {}
    for key in ("runtime-docs", "ge-docs"):
        repo, folder, _, _ = SOURCES[key]
        for path in checkouts[repo].listing(folder):
            match = re.match(r"([EW][0-9A-Z]\d{4})-", Path(path).name)
            if match and path.endswith(".md"):
                docs.setdefault(match.group(1), (key, path))
    return docs


# -- the module ----------------------------------------------------------------------------------------------


def collect(checkouts: Dict[str, Checkout]) -> Dict[str, object]:
    texts = {
        key: checkouts[repo].read(path, commit)
        for key, (repo, path, commit, _) in SOURCES.items()
        if not key.endswith("-docs")
    }
    ecodes = read_ecodes(texts)
    # the codes the runtime reports on behalf of other modules (RT_INNER_ERROR = "EE9999", ...), where no registry
    # lists them: titled by the runtime's own constant
    for name, code in re.findall(r'\b(RT_\w+)\s*=\s*"([EW][0-9A-Z]\d{4})"', texts["runtime-inner"]):
        ecodes.setdefault(code, (name, "", "runtime-inner"))
    numeric: Dict[int, Tuple[str, str]] = {}
    for key, pattern in (
        ("acl-codes", r"ACL_ERROR_\w+"),
        ("rt-codes", r"ACL_ERROR_RT_\w+"),
        ("ge-codes", r"ACL_ERROR_GE_\w+"),
        ("aclnn-codes", r"ACLNN_ERR_\w+"),
    ):
        for value, name in _defines(texts[key], pattern).items():
            if value:
                numeric.setdefault(value, (name, key))
    rt_names = {name: value for value, (name, _) in numeric.items()}
    submodules, errors = read_torch_npu(texts["torch-npu-errors"])
    layout = read_ge_layout(texts["ge-status-layout"])
    scheme, macros = read_ge_scheme(texts["ge-status-scheme"])
    return {
        "SOURCES": {
            key: (repo, checkouts[repo].head if commit is None else commit, path)
            for key, (repo, path, commit, _) in SOURCES.items()
        },
        "ECODES": {
            code: (title, group, ecode_module(code), ecode_scope(code), source)
            for code, (title, group, source) in sorted(ecodes.items())
        },
        "NUMERIC": dict(sorted(numeric.items())),
        "RT_REASONS": dict(sorted(read_reasons(texts["rt-reasons"], rt_names).items())),
        "HCCL_RESULTS": dict(sorted(_enum(_block(texts["hccl-results"], "HcclResult"), "HCCL_E_").items())),
        "DRV_ERRORS": {v: n for v, n in sorted(_enum(texts["drv-errors"], "(?:DRV|DEV)_ERROR_").items()) if v},
        "TORCH_NPU_SUBMODULES": submodules,
        "TORCH_NPU_ERRORS": errors,
        "FAULT_LEVELS": dict(sorted(read_levels(texts["fault-levels"]).items())),
        "GE_STATUS_LAYOUT": layout,
        "GE_STATUS_SCHEME": {field: dict(sorted(values.items())) for field, values in scheme.items()},
        "GE_STATUSES": dict(sorted(read_ge_statuses(texts, layout, scheme, macros).items())),
        "DOCS": dict(sorted(read_docs(checkouts).items())),
    }


HEADER = '''"""CANN's error codes and MindCluster's NPU fault levels, as data: GENERATED by
scripts/gen_cann_catalog.py from the sources in SOURCES (repository, commit, path). Do not edit by
hand; regenerate. Facts only (codes, CANN's identifiers, catalog groups, levels); what npulaunch
says about them is in host/cann/knowledge.py. Standard library only, Python 3.7+.
"""

# fmt: off
# ruff: noqa: E501
'''
TABLES = (
    ("SOURCES", "source key -> (repository, commit, path)"),
    ("ECODES", "code -> (title, catalog group, module, user or internal, source key)"),
    ("NUMERIC", "ACL / runtime / GE / aclnn return code -> (identifier, source key)"),
    ("RT_REASONS", "the runtime's reason text (reason=[...]) -> the ACL code returned with it"),
    ("HCCL_RESULTS", "HcclResult -> identifier"),
    ("DRV_ERRORS", "drvError_t -> identifier"),
    ("TORCH_NPU_SUBMODULES", "torch_npu ERR<SS>xxx -> submodule"),
    ("TORCH_NPU_ERRORS", "torch_npu ERRxx<EEE> -> error type"),
    ("FAULT_LEVELS", "NPU hardware fault code (hex) -> MindCluster's handling level"),
    ("GE_STATUS_LAYOUT", "a GE status's fields (GE_ERRORNO) -> (shift, width in bits)"),
    ("GE_STATUS_SCHEME", "a GE status's field -> its values' enumerators"),
    ("GE_STATUSES", "GE status (ErrorNo) -> (name, description, source key)"),
    ("DOCS", "code -> (source key, path of CANN's page for it)"),
)


def render(tables: Dict[str, object]) -> str:
    """The module's text: one entry a line, so that a regeneration's diff shows what changed."""
    out = [HEADER]
    for name, what in TABLES:
        table = tables[name]
        assert isinstance(table, dict)
        out.append(f"# {what}\n{name} = {{\n")
        out.extend(f"    {key!r}: {value!r},\n" for key, value in table.items())
        out.append("}\n\n")
    return "".join(out).rstrip("\n") + "\n"


def main(argv: Optional[List[str]] = None, write: Callable[[str], None] = OUT.write_text) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--mirrors", type=Path, help="a folder of checkouts named <owner>+<name>[/repo]")
    parser.add_argument("--repo", action="append", default=[], metavar="OWNER/NAME=PATH", help="one checkout")
    parser.add_argument("--check", action="store_true", help="compare with the committed module, write nothing")
    args = parser.parse_args(argv)
    text = render(collect(find_checkouts(args.mirrors, args.repo)))
    if args.check:
        same = OUT.read_text(encoding="utf-8") == text
        print(f"{OUT.relative_to(ROOT)} is {'up to date' if same else 'stale: regenerate it'}")
        return 0 if same else 1
    write(text)
    print(f"wrote {OUT.relative_to(ROOT)} ({len(text):,} bytes)")
    return 0


if __name__ == "__main__":
    sys.exit(main())
