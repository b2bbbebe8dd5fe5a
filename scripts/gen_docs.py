#!/usr/bin/env python3
"""Write the reference pages that would drift if written by hand, from the code that decides them:
docs/reference/cli.md (the argument parser), yaml.md (npulaunch/config/schema.py), session-options.md and
env-vars.md (the catalog), codes.md (the diagnosis catalog: knowledge, phrases, the generated code catalog).

    python3 scripts/gen_docs.py           # write the pages
    python3 scripts/gen_docs.py --check   # exit 1, naming each page that is not what the code says

Output is deterministic (no dates, widths or versions of the machine), so --check can run in a test.
Rendering only: it reads the package's data and never changes it.
"""

from __future__ import annotations

import argparse
import ast
import html
import json
import re
import sys
import unicodedata
from collections import Counter, defaultdict
from pathlib import Path
from typing import Any, Callable, Dict, Iterable, List, Optional, Sequence, Tuple

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))
REFERENCE = Path("docs/reference")
COMMAND = "python3 scripts/gen_docs.py"


def header(what: str, title: str) -> str:
    """The page's first lines: MultiMarkdown metadata, which MkDocs reads and does not show (an HTML comment
    first would hide the page's title from MkDocs), then the title."""
    return (
        f"Generated: by scripts/gen_docs.py from {what}. Do not edit by hand: change the source and run "
        f"`{COMMAND}`.\nTitle: {title}\n\n# {title}\n\n"
    )


# -- Markdown helpers ------------------------------------------------------------------------------


def _plain(value: str) -> str:
    """Text outside code spans made to show as written: no HTML, emphasis or attribute lists ({...})."""
    out = html.escape(value, quote=False).replace("|", "\\|").replace("*", "\\*")
    out = out.replace("{", "&#123;").replace("}", "&#125;")
    return re.sub(r"(?<![A-Za-z0-9])_|_(?![A-Za-z0-9])", r"\\_", out)


def text(value: Any) -> str:
    """Plain text from the code as Markdown that shows it as written, also inside a table cell."""
    if value is None:
        return ""
    out = " ".join(str(value).split()).replace("\\", "\\\\").replace("[", "\\[").replace("]", "\\]")
    return _plain(out)


def prose(value: str) -> str:
    """Text written as Markdown (the schema's descriptions with `code` and links, the catalog's notes with
    `code`): code spans and links kept, the rest shown as written, also inside a table cell."""
    parts = " ".join(value.split()).split("`")
    for i in range(len(parts)):
        parts[i] = _plain(parts[i]) if i % 2 == 0 else parts[i].replace("|", "\\|")
    return "`".join(parts)


def code(value: Any) -> str:
    """Inline code that survives a table cell and any character (regular expressions, <placeholders>)."""
    raw = str(value)
    safe = "".join(c if c.isalnum() or c in " .,:;=+-/'\"()!?#%@$^~_" else f"&#{ord(c)};" for c in raw)
    return "<code>%s</code>" % re.sub(r"(?<![A-Za-z0-9])_|_(?![A-Za-z0-9])", "&#95;", safe)


def value(item: Any) -> str:
    """A default or a choice, as YAML would write it."""
    if item is None:
        return ""
    if isinstance(item, bool):
        return code(str(item).lower())
    if isinstance(item, (dict, list, tuple)):
        return code(json.dumps(item, ensure_ascii=False))
    return code(item)


def table(head: Sequence[str], rows: Iterable[Sequence[str]]) -> str:
    lines = ["| " + " | ".join(head) + " |", "|" + "---|" * len(head)]
    lines += ["| " + " | ".join(cell or " " for cell in row) + " |" for row in rows]
    return "\n".join(lines) + "\n"


def slug(title: str) -> str:
    """The anchor Python-Markdown's toc extension (MkDocs) gives a heading."""
    title = unicodedata.normalize("NFKD", title).encode("ascii", "ignore").decode("ascii")
    title = re.sub(r"[^\w\s-]", "", title).strip().lower()
    return re.sub(r"[-\s]+", "-", title)


def comments_above(path: Path, call: str, key: Callable[[ast.Call], Optional[str]]) -> Dict[str, Tuple[int, str]]:
    """For each ``call(...)`` in a module's source: its key, its line and the comment block right above it."""
    source = path.read_text(encoding="utf-8")
    lines = source.splitlines()
    found: Dict[str, Tuple[int, str]] = {}
    for node in ast.walk(ast.parse(source)):
        if isinstance(node, ast.Call) and getattr(node.func, "id", None) == call:
            name = key(node)
            if name is None:
                continue
            above: List[str] = []
            row = node.lineno - 2
            while row >= 0 and lines[row].strip().startswith("#"):
                above.insert(0, lines[row].strip().lstrip("#").strip())
                row -= 1
            found[name] = (node.lineno, " ".join(above))
    return found


def _keyword(node: ast.Call, name: str) -> Optional[str]:
    for keyword in node.keywords:
        if keyword.arg == name and isinstance(keyword.value, ast.Constant):
            return str(keyword.value.value)
    return None


# -- cli.md ----------------------------------------------------------------------------------------


def _subparsers(parser: argparse.ArgumentParser) -> Dict[str, argparse.ArgumentParser]:
    for action in parser._actions:  # argparse keeps its subparsers here; no public accessor exists
        if isinstance(action, argparse._SubParsersAction):
            return dict(action.choices)
    return {}


def _command_helps(parser: argparse.ArgumentParser) -> Dict[str, str]:
    for action in parser._actions:
        if isinstance(action, argparse._SubParsersAction):
            return {choice.dest: choice.help or "" for choice in action._choices_actions}
    return {}


def _metavar(action: argparse.Action) -> str:
    if action.metavar is not None:
        return str(action.metavar)
    return action.dest.upper() if action.option_strings else action.dest


def _usage_part(action: argparse.Action) -> str:
    """One argument as a usage line shows it; written here, not by argparse, whose layout changes with the
    Python version and the terminal's width."""
    if isinstance(action, argparse._SubParsersAction):
        return f"{_metavar(action)} ..."
    if isinstance(action, argparse.BooleanOptionalAction):
        return "[" + " | ".join(action.option_strings) + "]"
    if action.option_strings:
        flag = action.option_strings[0]
        return f"[{flag}]" if action.nargs == 0 else f"[{flag} {_metavar(action)}]"
    name = _metavar(action)
    return {"?": f"[{name}]", "+": f"{name} [{name} ...]", "*": f"[{name} ...]"}.get(str(action.nargs), name)


def _usage(parser: argparse.ArgumentParser, prog: str) -> str:
    """The usage line: the flags, then the positional arguments, as argparse orders them."""
    shown = [a for a in parser._actions if a.help != argparse.SUPPRESS]
    ordered = [a for a in shown if a.option_strings] + [a for a in shown if not a.option_strings]
    return " ".join([prog] + [_usage_part(a) for a in ordered])


def _help(action: argparse.Action, prog: str) -> str:
    words = action.help or ""
    if "%(" in words:
        words = words % dict(vars(action), prog=prog)
    return words.replace("%%", "%")


def _arguments(sub: argparse.ArgumentParser) -> str:
    rows = []
    for action in sub._actions:
        if action.help == argparse.SUPPRESS:
            continue
        names = ", ".join(action.option_strings) or _metavar(action)
        if action.option_strings and action.nargs != 0:
            names += " " + _metavar(action)
        default = action.default
        shown = "" if default in (None, False, argparse.SUPPRESS) or action.nargs == 0 else value(default)
        choices = ", ".join(value(c) for c in action.choices) if action.choices else ""
        rows.append((code(names), shown, choices, text(_help(action, sub.prog))))
    return table(("argument", "default", "choices", "what it does"), rows)


def render_cli() -> str:
    from npulaunch.cliargs import build_parser

    parser = build_parser()
    commands, helps = _subparsers(parser), _command_helps(parser)
    out = [header("npulaunch/cliargs.py (build_parser)", "Command line")]
    out.append("```text\n" + (parser.description or "") + "\n```\n\n")
    out.append("```text\n" + _usage(parser, "npulaunch") + "\n```\n\n")
    top = [a for a in parser._actions if a.option_strings]
    out.append(table(("argument", "what it does"), [(code(", ".join(a.option_strings)), text(a.help)) for a in top]))
    out.append("\n## Commands\n\n")
    rows = [(f"[{name}](#{slug('npulaunch ' + name)})", text(helps.get(name, ""))) for name in commands]
    out.append(table(("command", "what it does"), rows))
    out.append("\n" + "```text\n" + (parser.epilog or "") + "\n```\n")
    for name, sub in commands.items():
        out.append(f"\n## npulaunch {name}\n\n{text(sub.description or helps.get(name, ''))}\n\n")
        out.append("```text\n" + _usage(sub, "npulaunch " + name) + "\n```\n\n")
        out.append(_arguments(sub))
    return "".join(out)


# -- yaml.md ---------------------------------------------------------------------------------------

SECTION_TITLES = {
    "": "Top level",
    "job": "job",
    "hosts[]": "hosts[]: each host entry (and spares[])",
    "ssh": "ssh",
    "mpi": "mpi (transport: mpirun)",
    "recovery": "recovery",
    "recovery.shrink": "recovery.shrink",
    "monitor": "monitor",
    "monitor.patterns[]": "monitor.patterns[]: each pattern",
    "slurm": "slurm",
    "framework": "framework (long form)",
}


def render_yaml() -> str:
    from npulaunch.config.schema import KEYS

    sections: Dict[str, list] = defaultdict(list)
    for key in KEYS:
        parent, _, _ = key.path.rpartition(".")
        sections[parent].append(key)
    out = [header("npulaunch/config/schema.py (checked against the parsers in npulaunch/config/)", "The cluster YAML")]
    out.append(
        "Every key of the cluster YAML (version 1): its type, its default when it is absent, what is allowed and "
        "what it does. Unknown keys are errors (with the nearest name suggested), and every problem of a file is "
        "reported at once with its line; `npulaunch plan` shows what a file means. Relative paths start at the YAML "
        "file's directory. Session options and environment variables have pages of their own: "
        "[session options](session-options.md), [environment variables](env-vars.md); the flags that override "
        "keys are in the [command line](cli.md) reference.\n"
    )
    for parent in sorted(sections, key=lambda p: list(SECTION_TITLES).index(p) if p in SECTION_TITLES else 99):
        out.append(f"\n## {SECTION_TITLES.get(parent, parent)}\n\n")
        rows = [
            (code(k.path), text(k.type), prose(k.default) if k.default else "", prose(k.allowed), prose(k.description))
            for k in sections[parent]
        ]
        out.append(table(("key", "type", "default", "allowed", "what it does"), rows))
    return "".join(out)


# -- session-options.md and env-vars.md -------------------------------------------------------------

SEEDS = {
    "000": "CANN session options table, an earlier Chinese edition",
    "001": "CANN session configuration options (English): every NpuOptimizer parameter_map option",
    "002": "npu_ops.initialize_system(): the options a separate initialising session needs",
    "003": "the --op_select_implmode build parameter",
    "004": "CANN 6.3 TensorFlow 1.15 online inference guide: session options (7.1), environment variables (7.4)",
}
CITATION = re.compile(
    r"\b00[0-4](?:/00[0-4])*(?: sections? \d+(?:\.\d+)*)?(?![\w.])"  # a seed document (and its section)
    r"|[A-Za-z][\w.-]*/[\w.-]+(?: [\w./*-]+)? @ [0-9a-f]{7,40}"  # owner/repo [path] @ commit
)


def _citations(*texts: str) -> List[str]:
    seen: List[str] = []
    for found in CITATION.findall(" ".join(texts)):
        if found not in seen:
            seen.append(found)
    return seen


def _seed_legend() -> str:
    rows = [(code(number), text(what)) for number, what in SEEDS.items()]
    return (
        "Documents are cited by number: Huawei's CANN documents the catalog's facts come from "
        "(`shared/seeds/` in the project).\n\n" + table(("document", "what it is"), rows)
    )


def _fields(rows: Sequence[Tuple[str, str]]) -> str:
    return "".join(f"- **{name}**: {shown}\n" for name, shown in rows if shown)


def _option_entry(spec: Any) -> str:
    cited = _citations(spec.description, spec.notes, spec.default_note)
    base = "002 and 004" if spec.area == "compression" else "001, section " + spec.area.replace("_", " ")
    source = base + ("; cited: " + ", ".join(cited) if cited else "")
    status = spec.status + (f" (use {spec.replacement})" if spec.replacement else "")
    default = value(spec.default) if spec.default is not None else "not set"
    rows = [
        ("type", code("." + spec.type) + " " + text({"b": "boolean", "i": "integer", "s": "string"}[spec.type])),
        ("default", default + (" — " + text(spec.default_note) if spec.default_note else "")),
        ("allowed", text(spec.to_dict()["allowed"])),
        ("area", text(spec.area)),
        ("scenario", text(spec.scenario)),
        ("status", text(status)),
        ("products", text(spec.products)),
        ("ranks write there", "yes: a path per rank, placeholders allowed" if spec.writes else ""),
        ("example", value(spec.example) if spec.example is not None else ""),
        ("source", text(source)),
    ]
    notes = f"\n{text(spec.notes)}\n" if spec.notes else ""
    return f"\n### {spec.name}\n\n{text(spec.description)}\n\n{_fields(rows)}{notes}"


def render_options() -> str:
    from npulaunch.config.catalog.options import OPTIONS

    out = [header("npulaunch/config/catalog/options.py", "Session options")]
    out.append(
        f"The {len(OPTIONS)} TF Adapter session options (`custom_op.parameter_map`) npulaunch knows and checks, "
        "for the YAML's `session_options` (see [the cluster YAML](yaml.md)). `npulaunch options NAME` shows one; "
        "`npulaunch options --json` all of them. Values are checked against each option's type and range, and the "
        "rules between options (`npulaunch/config/catalog/RULES.md`) before anything starts.\n\n"
    )
    out.append(_seed_legend())
    areas: Dict[str, list] = defaultdict(list)
    for spec in OPTIONS:
        areas[spec.area].append(spec)
    out.append("\n## Index\n\n")
    rows = [
        (f"[{text(s.name)}](#{slug(s.name)})", text(s.area), code("." + s.type), value(s.default), text(s.status))
        for s in OPTIONS
    ]
    out.append(table(("option", "area", "type", "default", "status"), rows))
    for area, specs in areas.items():
        out.append(f"\n## Area: {area.replace('_', ' ')}\n")
        out.extend(_option_entry(spec) for spec in specs)
    return "".join(out)


def _env_sources() -> Dict[str, str]:
    """Each variable's citations: its own, else those of the comments of its group in envvars.py."""
    from npulaunch.config.catalog import envvars

    path = Path(envvars.__file__)
    lines = path.read_text(encoding="utf-8").splitlines()
    entries = comments_above(path, "EnvVarSpec", lambda node: _keyword(node, "name"))
    sources = {}
    for name, (line, _) in entries.items():
        group: List[str] = []
        for row in range(line - 2, -1, -1):
            stripped = lines[row].strip()
            if stripped.startswith("# ---") or stripped.startswith("ENV_VARS"):
                break
            if stripped.startswith("#"):
                group.insert(0, stripped.lstrip("#"))
        sources[name] = ", ".join(_citations(" ".join(group)))
    return sources


def _env_entry(spec: Any, group_source: str) -> str:
    cited = _citations(spec.description, spec.notes) or ([group_source] if group_source else [])
    source = ", ".join(cited) if cited else "CANN documents (004 section 7.4) and the project's issues"
    rows = [
        ("type", text(spec.kind)),
        ("default", value(spec.default) if spec.default is not None else "not set"),
        ("allowed", text(spec.to_dict()["allowed"])),
        ("unit", text(spec.unit)),
        ("area", text(spec.area)),
        ("status", "stable"),
        ("set by npulaunch", "yes: every rank gets it, the YAML's env may not set it" if spec.set_by_launcher else ""),
        ("source", text(source)),
    ]
    notes = f"\n{prose(spec.notes)}\n" if spec.notes else ""
    return f"\n### {spec.name}\n\n{text(spec.description)}\n\n{_fields(rows)}{notes}"


def render_env_vars() -> str:
    from npulaunch.config.catalog.envvars import ENV_VARS

    sources = _env_sources()
    out = [header("npulaunch/config/catalog/envvars.py", "Environment variables")]
    out.append(
        f"The {len(ENV_VARS)} environment variables npulaunch knows: those CANN reads, checked when the YAML's "
        "`env` sets them (see [the cluster YAML](yaml.md)), and those npulaunch sets for every rank. "
        "`npulaunch env-vars NAME` shows one; `npulaunch env-vars --json` all of them.\n\n"
    )
    out.append(_seed_legend())
    out.append("\n## Index\n\n")
    rows = [
        (
            f"[{text(s.name)}](#{slug(s.name)})",
            text(s.area),
            text(s.kind),
            value(s.default),
            text(s.to_dict()["allowed"]),
        )
        for s in ENV_VARS
    ]
    out.append(table(("variable", "area", "type", "default", "allowed"), rows))
    areas: Dict[str, list] = defaultdict(list)
    for spec in ENV_VARS:
        areas[spec.area].append(spec)
    for area, specs in areas.items():
        out.append(f"\n## Area: {area}\n")
        out.extend(_env_entry(spec, sources.get(spec.name, "")) for spec in specs)
    return "".join(out)


# -- codes.md --------------------------------------------------------------------------------------


def _source_counts() -> Counter:
    from npulaunch.host.cann import catalog

    counts: Counter = Counter(entry[4] for entry in catalog.ECODES.values())
    counts.update(entry[1] for entry in catalog.NUMERIC.values())
    counts.update(entry[0] for entry in catalog.DOCS.values())
    counts["rt-reasons"] += len(catalog.RT_REASONS)
    counts["hccl-results"] += len(catalog.HCCL_RESULTS)
    counts["drv-errors"] += len(catalog.DRV_ERRORS)
    counts["torch-npu-errors"] += len(catalog.TORCH_NPU_SUBMODULES) + len(catalog.TORCH_NPU_ERRORS)
    counts["fault-levels"] += len(catalog.FAULT_LEVELS)
    counts.update(entry[2] for entry in catalog.GE_STATUSES.values())
    counts["ge-status-layout"] += len(catalog.GE_STATUS_LAYOUT)
    return counts


def _sources_section() -> str:
    from npulaunch.host.cann import catalog, knowledge

    counts = _source_counts()
    rows = [
        (
            code(key),
            f"[{text(repo)}](https://github.com/{repo}/tree/{commit})",
            code(commit[:12]),
            code(path),
            str(counts[key]),
        )
        for key, (repo, commit, path) in catalog.SOURCES.items()
    ]
    out = ["\n## The catalog's sources\n\n"]
    out.append(
        "`npulaunch/host/cann/catalog.py` is generated by `scripts/gen_cann_catalog.py` from these files of "
        "Huawei's repositories, at the commit it records (entries: what the catalog holds from each; the docs "
        "rows count CANN's pages linked to codes).\n\n"
    )
    out.append(table(("source", "repository", "commit", "path", "entries"), rows))
    out.append("\nWhat npulaunch says of the codes (classes, hints, retry verdicts) cites:\n\n")
    out.append(table(("key", "source"), [(code(k), text(v)) for k, v in knowledge.SOURCE_NOTES.items()]))
    return "".join(out)


def _known_codes() -> str:
    from npulaunch.host.cann.knowledge import CODES, DEVICE_FAULT_CLASSES, RETRYABLE
    from npulaunch.host.cann.lookup import describe

    rows = []
    for name in list(CODES) + [c for c in RETRYABLE if c not in CODES]:
        info = describe(name)
        if info is None:
            continue
        device = " (hardware fault)" if info.cls in DEVICE_FAULT_CLASSES else ""
        retry = "yes: " + text(info.retryable_why) if info.retryable else "no"
        rows.append((code(name), text(info.title), code(info.cls) + device, text(info.kind), retry, text(info.hint)))
    return (
        "\n## Codes npulaunch says more of\n\n"
        "npulaunch's own words for the codes people meet most (`host/cann/knowledge.py`): the failure class, "
        "whether the code is a cause or the symptom of a failure elsewhere, whether a retry can help (only where "
        "Huawei's text says so, and where), and what to check. A hardware fault class makes recovery exclude the "
        "NPU. Every other code gets its family's class and hint (below).\n\n"
        + table(("code", "title", "class", "kind", "retryable", "what to check"), rows)
    )


def _classes() -> str:
    from npulaunch.host.cann.knowledge import CODES, DEVICE_FAULT_CLASSES
    from npulaunch.host.cann.phrases import SIGNATURES

    kinds: Dict[str, set] = defaultdict(set)
    codes: Dict[str, List[str]] = defaultdict(list)
    names: Dict[str, List[str]] = defaultdict(list)
    for name, known in CODES.items():
        kinds[known.cls].add(known.kind)
        codes[known.cls].append(name)
    for signature in SIGNATURES:
        kinds[signature.cls].add(signature.kind)
        names[signature.cls].append(signature.name)
    rows = [
        (
            code(cls),
            text(", ".join(sorted(kinds[cls]))),
            "yes" if cls in DEVICE_FAULT_CLASSES else "",
            ", ".join(code(c) for c in codes[cls]),
            ", ".join(f"[{text(n)}](#{slug('phrase ' + n)})" for n in names[cls]),
        )
        for cls in sorted(kinds)
    ]
    return (
        "\n## Failure classes\n\n"
        "The classes npulaunch names a failure by, with the codes and phrases it files under each. A code of no "
        "row below gets its family's class: `<module>_inner_error` for an internal code (`EZ9999`: "
        "`operator_inner_error`), `<module>_<category>` from its title for a user code, `<component>_error` or "
        "`<component>_inner_error` for an ACL return code, `hccl_error`, `driver_error`, `npu_hardware_fault` "
        "for a fault code; torch_npu's `ERR` codes by their type.\n\n"
        + table(("class", "kind", "hardware fault", "codes", "phrases"), rows)
    )


def _phrases() -> str:
    from npulaunch.host.cann import phrases

    sources = comments_above(
        Path(phrases.__file__),
        "Signature",
        lambda node: str(node.args[0].value) if node.args and isinstance(node.args[0], ast.Constant) else None,
    )
    out = [
        "\n## Phrases: failures without a code\n\n"
        "The lines that name a failure without printing a code (`host/cann/phrases.py`), matched in every line "
        "of every rank's output and plogs. Fatal: the job is stopped when the message is complete, not at the "
        "rank's exit. The sources' short names are explained in the module.\n"
    ]
    for s in phrases.SIGNATURES:
        rows = [
            ("pattern", code(s.pattern)),
            ("class", code(s.cls)),
            ("kind", text(s.kind)),
            ("code CANN files it under", code(s.code) if s.code else "none"),
            ("retryable", "yes" if s.retryable else "no"),
            ("fatal", "yes" if s.fatal else "no"),
            ("what to check", text(s.hint)),
            ("source", text(sources.get(s.name, (0, ""))[1])),
        ]
        out.append(f"\n### Phrase {s.name}\n\n{_fields(rows)}")
    return "".join(out)


def _ecode_tables() -> str:
    from npulaunch.host.cann import catalog
    from npulaunch.host.cann.lookup import describe

    modules: Dict[str, List[str]] = defaultdict(list)
    for name, entry in catalog.ECODES.items():
        modules[entry[2]].append(name)
    out = [
        f"\n## CANN's six-character codes ({len(catalog.ECODES)})\n\n"
        "By module, as the catalog lists them: CANN's title, user or internal error, and the class npulaunch "
        "gives it (`npulaunch explain CODE` says the rest: cause, hint, CANN's page).\n"
    ]
    for module in sorted(modules):
        rows = []
        for name in sorted(modules[module]):
            info = describe(name)
            title, group, _, scope, _ = catalog.ECODES[name]
            rows.append((code(name), text(title), text(group), text(scope), code(info.cls) if info else ""))
        out.append(f"\n### {module} ({len(rows)})\n\n")
        out.append(table(("code", "title", "group", "scope", "class"), rows))
    return "".join(out)


def _numeric_tables() -> str:
    from npulaunch.host.cann import catalog
    from npulaunch.host.cann.lookup import describe

    out = [f"\n## ACL, runtime, GE and aclnn return codes ({len(catalog.NUMERIC)})\n"]
    by_source: Dict[str, List[int]] = defaultdict(list)
    for number, (_, source) in catalog.NUMERIC.items():
        by_source[source].append(number)
    for source in sorted(by_source):
        rows = []
        for number in sorted(by_source[source]):
            info = describe(str(number))
            rows.append((code(number), code(catalog.NUMERIC[number][0]), code(info.cls) if info else ""))
        out.append(f"\n### {catalog.SOURCES[source][2]} ({len(rows)})\n\n")
        out.append(table(("code", "name", "class"), rows))
    return "".join(out)


def _enum_tables() -> str:
    from npulaunch.host.cann import catalog

    out = [f"\n## HCCL results ({len(catalog.HCCL_RESULTS)})\n\n"]
    out.append(table(("number", "name"), [(code(n), code(name)) for n, name in sorted(catalog.HCCL_RESULTS.items())]))
    out.append(f"\n## Driver results ({len(catalog.DRV_ERRORS)})\n\n")
    out.append(table(("number", "name"), [(code(n), code(name)) for n, name in sorted(catalog.DRV_ERRORS.items())]))
    out.append("\n## torch\\_npu's ERR codes\n\n`ERR<submodule><type>`: two digits of submodule, three of type.\n\n")
    out.append(
        table(("submodule", "name"), [(code("%02d" % n), code(m)) for n, m in catalog.TORCH_NPU_SUBMODULES.items()])
    )
    out.append("\n")
    out.append(table(("type", "name"), [(code("%03d" % n), code(m)) for n, m in catalog.TORCH_NPU_ERRORS.items()]))
    out.append(_ge_statuses())
    return "".join(out)


def _ge_statuses() -> str:
    """GE's ten-digit statuses (``ErrorNo: 1343242270(...)``): its scheme's fields, then every status it names."""
    from npulaunch.host.cann import catalog

    layout = ", ".join(
        f"{name} {width} bits" for name, (_, width) in sorted(catalog.GE_STATUS_LAYOUT.items(), key=lambda f: -f[1][0])
    )
    out = [
        f"\n## Graph Engine statuses ({len(catalog.GE_STATUSES)})\n\n"
        f"A GE status is read by GE's own scheme, from the high bits down: {layout}. A number whose fields "
        "GE's enumerators do not all name is no GE status; 0 (SUCCESS) and 4294967295 (the generic FAILED) never "
        "are.\n\n"
    ]
    out.append(
        table(
            ("status", "name", "what GE says", "source"),
            [(code(n), code(name), text, code(src)) for n, (name, text, src) in sorted(catalog.GE_STATUSES.items())],
        )
    )
    return "".join(out)


def _faults_and_reasons() -> str:
    from npulaunch.host.cann import catalog

    levels: Dict[str, List[str]] = defaultdict(list)
    for fault, level in sorted(catalog.FAULT_LEVELS.items()):
        levels[level].append(fault)
    out = [
        f"\n## NPU fault codes and MindCluster's levels ({len(catalog.FAULT_LEVELS)})\n\n"
        "A fault code npu-smi reports gets MindCluster's handling level; a code not listed counts as "
        "`SeparateNPU`.\n\n"
    ]
    rows = [(code(level), str(len(faults)), " ".join(faults)) for level, faults in sorted(levels.items())]
    out.append(table(("level", "codes", "fault codes"), rows))
    out.append(
        f"\n## The runtime's reasons ({len(catalog.RT_REASONS)})\n\n"
        "The `reason=[...]` texts the runtime prints, and the ACL code each goes with.\n\n"
    )
    reasons = [(text(reason), code(number)) for reason, number in sorted(catalog.RT_REASONS.items())]
    out.append(table(("reason", "code"), reasons))
    return "".join(out)


def render_codes() -> str:
    from npulaunch.host.cann import catalog

    total = len(catalog.ECODES) + len(catalog.NUMERIC) + len(catalog.HCCL_RESULTS) + len(catalog.DRV_ERRORS)
    out = [
        header(
            "npulaunch/host/cann/ (catalog.py, generated by scripts/gen_cann_catalog.py; knowledge.py; phrases.py)",
            "Error codes and failure signatures",
        ),
        f"What npulaunch knows of the codes CANN prints ({total} codes, {len(catalog.FAULT_LEVELS)} NPU fault "
        "codes) and of the lines that name a failure without one. `npulaunch explain CODE` looks one up; "
        "`npulaunch diagnose PATH` reads any job's logs with the same knowledge.\n",
    ]
    parts: Tuple[Callable[[], str], ...] = (
        _sources_section,
        _classes,
        _known_codes,
        _phrases,
        _ecode_tables,
        _numeric_tables,
        _enum_tables,
        _faults_and_reasons,
    )
    out.extend(part() for part in parts)
    return "".join(out)


# -- the pages -------------------------------------------------------------------------------------

# -- torchrun.md -----------------------------------------------------------------------------------


def render_torchrun() -> str:
    from npulaunch.dropin import FLAGS, TORCHRUN

    out = [
        header("npulaunch/dropin.py (FLAGS)", "torchrun's flags"),
        f"Every flag of torchrun ({TORCHRUN}, `get_args_parser`), as `npulaunch run`, `plan`, `check` and "
        "`exec` read it: `npulaunch run --nproc-per-node 8 train.py --lr 0.1` is torchrun's command line. Dashes "
        "and underscores alike; a flag not given is read from its `PET_` variable in torchrun's form (a script "
        'or a command, no YAML), as torchrun reads it. A flag marked "no use" is accepted and named in the '
        "plan's notes and in `--debug`'s log, never an error. `tests/config/test_torchrun_meaning.py` checks this "
        "list against the installed torch's own parser, and each row's behaviour.\n\n",
    ]
    rows = []
    for flag in FLAGS:
        spellings = ", ".join(code(n) for n in flag.names)
        pet = code(flag.variable) if flag.pet else "(none)"
        rows.append((spellings, "switch" if flag.switch else "value", pet, prose(flag.meaning)))
    out.append(table(("flag", "takes", "variable", "what npulaunch does"), rows))
    out.append(
        "\nRestarts follow torchrun's meaning in torchrun's form: `--max-restarts N` restarts every rank after "
        "any failure, and each rank's `TORCHELASTIC_RESTART_COUNT` counts the restarts. A YAML keeps "
        "npulaunch's default, `job.restart_on: retryable`; `--restart-on` chooses either way. One difference "
        "stays on purpose: attempts that fail the same way without a step of progress stop as a crash loop "
        "(exit 93, `job.crash_loop_limit`, default 3 attempts) even when restarts remain.\n"
    )
    return "".join(out)


def render_msrun() -> str:
    from npulaunch.msrunflags import FLAGS, MSRUN

    out = [
        header("npulaunch/msrunflags.py (FLAGS)", "msrun's flags"),
        f"Every flag of msrun ({MSRUN}, `get_args`), as `npulaunch run`, `plan`, `check` and `exec` read it: "
        "`npulaunch run --worker_num 8 --local_worker_num 8 train.py` does what msrun does with it (framework "
        "mindspore, msrun's dynamic cluster, the scheduler started by node 0). `--master_addr`, `--master_port`, "
        "`--node_rank` and `--log_dir` are npulaunch's own flags of the same names (the [command line](cli.md)). "
        'A flag marked "no use" is accepted and named in the plan\'s notes, never an error. '
        "`tests/config/test_msrun_meaning.py` checks this list against the installed MindSpore's own parser, and "
        "each row's behaviour; `tests/launch/test_msrun_form.py` runs a job both ways.\n\n",
    ]
    rows = [(code(flag.name), prose(flag.meaning)) for flag in FLAGS]
    out.append(table(("flag", "what npulaunch does"), rows))
    out.append(
        "\nOn several nodes each node's npulaunch needs `--node_rank` (msrun lets MindSpore number the nodes "
        "when it is not given), `--master_addr` (node 0's address) and the same `--job-id` on every node (msrun "
        "has no job id).\n"
    )
    return "".join(out)


def render_timing() -> str:
    from npulaunch.host.timing import INTERVALS, VARIABLE

    out = [
        header("npulaunch/host/timing.py (INTERVALS)", "The launcher's intervals"),
        "How often npulaunch's agents and the launcher look, send and wait. Every one has a default that suits a "
        f"real job; `{VARIABLE}=name=seconds,name=seconds` in the launcher's environment sets any of them for a "
        "run (`npulaunch run` checks it before anything starts, and gives the values to every host's agent). "
        "The suite sets short ones instead of waiting on the defaults, and proves each default once "
        "(tests/host/test_timing.py). The job's own limits are the YAML's: `monitor.hang_timeout_s`, "
        "`monitor.startup_timeout_s`, `monitor.health_interval_s`, `job.grace_period_s`, "
        "`monitor.stragglers.exclude_after_s` ([the cluster YAML](yaml.md)); how long a silent host may be "
        "heard from is `NPULAUNCH_HEARTBEAT_TIMEOUT_S` (15 s over SSH, 5 s under srun and mpirun).\n\n",
    ]
    rows = [(code(i.name), "%g" % i.default, "%g to %g" % (i.low, i.high), prose(i.what)) for i in INTERVALS]
    out.append(table(("name", "default (s)", "allowed (s)", "what it is"), rows))
    out.append(f"\nFor example: `{VARIABLE}=pace_window_s=1,heartbeat_interval_s=0.5 npulaunch run job.yaml`.\n")
    return "".join(out)


PAGES: Dict[str, Callable[[], str]] = {
    "cli.md": render_cli,
    "yaml.md": render_yaml,
    "session-options.md": render_options,
    "env-vars.md": render_env_vars,
    "codes.md": render_codes,
    "torchrun.md": render_torchrun,
    "msrun.md": render_msrun,
    "timing.md": render_timing,
}


def stale_pages(root: Path = ROOT) -> List[str]:
    """The pages (paths relative to ``root``) whose file is not what the code renders now."""
    stale = []
    for name, render in PAGES.items():
        path = root / REFERENCE / name
        if not path.is_file() or path.read_text(encoding="utf-8") != render():
            stale.append(str(REFERENCE / name))
    return stale


def main(argv: Optional[Sequence[str]] = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--check", action="store_true", help="exit 1 when a page is stale; write nothing")
    args = parser.parse_args(argv)
    if args.check:
        stale = stale_pages()
        for page in stale:
            print(f"{page} is stale: run `{COMMAND}`", file=sys.stderr)
        return 1 if stale else 0
    (ROOT / REFERENCE).mkdir(parents=True, exist_ok=True)
    for name, render in PAGES.items():
        page = render()
        (ROOT / REFERENCE / name).write_text(page, encoding="utf-8")
        print(f"wrote {REFERENCE / name} ({len(page.encode('utf-8'))} bytes)")
    return 0


if __name__ == "__main__":
    sys.exit(main())
