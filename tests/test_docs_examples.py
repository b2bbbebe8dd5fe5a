"""The documentation's examples work: every cluster YAML in README.md and docs/ (docs/reference/ is
generated and tested apart) is a complete config that ``npulaunch plan`` accepts, and every command of
the README's five-minute tour runs, with the exit code the README shows."""

from __future__ import annotations

import json
import os
import re
import shlex
import subprocess
import sys
from pathlib import Path
from typing import Iterator, List, NamedTuple, Optional, Tuple

import pytest
from helpers import ROOT, base_env, run_cli

PARTIAL = "<!-- not a complete config -->"  # written right before a ```yaml block that is only a snippet
TOUR_HEADING = "## A five-minute tour"
FENCE = re.compile(r"^(`{3,}|~{3,})\s*([\w+-]*)")


class Block(NamedTuple):
    """One fenced code block of a Markdown file."""

    path: Path
    line: int  # of the opening fence, 1-based
    lang: str
    text: str
    partial: bool  # marked PARTIAL on the last non-blank line before it

    @property
    def where(self) -> str:
        return f"{self.path.relative_to(ROOT)}:{self.line}"


def code_blocks(path: Path, text: Optional[str] = None) -> Iterator[Block]:
    lines = (path.read_text(encoding="utf-8") if text is None else text).split("\n")
    i = 0
    while i < len(lines):
        opening = FENCE.match(lines[i])
        if not opening:
            i += 1
            continue
        fence, lang = opening.groups()
        before = [line for line in lines[:i] if line.strip()]
        body: List[str] = []
        j = i + 1
        while j < len(lines) and not lines[j].startswith(fence):
            body.append(lines[j])
            j += 1
        yield Block(path, i + 1, lang.lower(), "\n".join(body) + "\n", bool(before) and before[-1].strip() == PARTIAL)
        i = j + 1


def doc_files() -> List[Path]:
    reference = ROOT / "docs" / "reference"
    docs = [p for p in sorted((ROOT / "docs").rglob("*.md")) if reference not in p.parents]
    return [ROOT / "README.md", *docs]


def yaml_blocks() -> List[Block]:
    return [b for path in doc_files() for b in code_blocks(path) if b.lang in ("yaml", "yml")]


def is_config(block: Block) -> bool:
    return re.search(r"^job:", block.text, re.MULTILINE) is not None


def test_the_docs_have_yaml_examples() -> None:
    configs = [b for b in yaml_blocks() if is_config(b)]
    assert any(b.path.name == "README.md" for b in configs), "the README's tour shows a cluster YAML"
    assert len(configs) >= 2, [b.where for b in configs]


@pytest.mark.parametrize("block", yaml_blocks(), ids=lambda b: b.where)
def test_yaml_example_is_a_config_or_marked_partial(block: Block) -> None:
    """A YAML example without ``job:`` cannot be planned: it must say it is a snippet."""
    assert is_config(block) or block.partial, (
        f"{block.where}: a ```yaml block without a top-level job: key; make it a complete cluster YAML, "
        f"or write {PARTIAL} on the line before it"
    )


@pytest.mark.parametrize("block", [b for b in yaml_blocks() if is_config(b)], ids=lambda b: b.where)
def test_yaml_example_plans(block: Block, tmp_path: Path) -> None:
    # The file sits in a directory of its own: its relative paths (workdir: ., log_dir) start there.
    config = tmp_path / "cluster.yaml"
    config.write_text(block.text, encoding="utf-8")
    result = run_cli("plan", str(config), "--json")
    assert result.returncode == 0, (
        f"{block.where}: npulaunch plan refused the example (its line N is line {block.line} + N of the "
        f"Markdown file):\n{result.stderr}"
    )
    plan = json.loads(result.stdout)
    assert plan["world_size"] == len(plan["ranks"]) > 0


# --- the README's five-minute tour


class Step(NamedTuple):
    command: str  # as the README writes it, after "$ "
    expected_rc: int  # from a following "$ echo $?" and its output line; 0 otherwise
    where: str


def parse_tour(readme_text: str) -> List[Step]:
    """The commands of the tour's ```console blocks: lines starting with "$ "; "$ echo $?" followed by
    a number is the exit code the command before it must give."""
    start = readme_text.index(TOUR_HEADING)
    end = readme_text.find("\n## ", start + len(TOUR_HEADING))
    offset = readme_text.count("\n", 0, start)
    section = readme_text[start : end if end != -1 else len(readme_text)]
    steps: List[Step] = []
    for block in code_blocks(ROOT / "README.md", section):
        if block.lang != "console":
            continue
        lines = block.text.split("\n")
        for k, line in enumerate(lines):
            if not line.startswith("$ "):
                continue
            command = line[2:].strip()
            where = f"README.md:{offset + block.line + k + 1}"
            if command == "echo $?":
                assert steps and k + 1 < len(lines), f"{where}: echo $? without a command before or a code after"
                steps[-1] = steps[-1]._replace(expected_rc=int(lines[k + 1].strip()))
            else:
                steps.append(Step(command, 0, where))
    return steps


def tour_steps() -> List[Step]:
    return parse_tour((ROOT / "README.md").read_text(encoding="utf-8"))


def localised(command: str, log_dir: Path) -> str:
    """The command with the job directories in ``log_dir``: ``--log-dir`` after ``npulaunch run``, and
    the README's ``npulaunch-logs/`` paths pointing there."""
    command = re.sub(r"^npulaunch run\b", f"npulaunch run --log-dir {shlex.quote(str(log_dir))}", command)
    return command.replace("npulaunch-logs/", f"{log_dir}/")


def run_step(command: str, bin_dir: Path) -> subprocess.CompletedProcess:
    env = base_env({"PATH": f"{bin_dir}{os.pathsep}{os.environ.get('PATH', '')}"})
    return subprocess.run(["bash", "-c", command], cwd=str(ROOT), env=env, capture_output=True, text=True, timeout=120)


@pytest.fixture
def npulaunch_bin(tmp_path: Path) -> Path:
    """A directory with an ``npulaunch`` that is this checkout's, run by this Python."""
    bin_dir = tmp_path / "bin"
    bin_dir.mkdir()
    script = bin_dir / "npulaunch"
    script.write_text(f'#!/bin/sh\nexec {shlex.quote(sys.executable)} -m npulaunch "$@"\n')
    script.chmod(0o755)
    return bin_dir


def test_tour_covers_one_host_check_a_failure_and_several_hosts() -> None:
    words: List[Tuple[str, int]] = [(shlex.split(s.command)[1], s.expected_rc) for s in tour_steps()]
    for needed in (("run", 0), ("plan", 0), ("check", 0), ("run", 1), ("report", 0)):
        assert needed in words, f"the tour has no `npulaunch {needed[0]}` exiting {needed[1]}: {words}"


def test_every_tour_command_runs(tmp_path: Path, npulaunch_bin: Path) -> None:
    steps = tour_steps()
    log_dir = tmp_path / "logs"
    for step in steps:
        assert step.command.startswith("npulaunch "), f"{step.where}: not an npulaunch command: {step.command}"
        command = localised(step.command, log_dir)
        result = run_step(command, npulaunch_bin)
        assert result.returncode == step.expected_rc, (
            f"{step.where}: `{step.command}` exited {result.returncode}, the README shows "
            f"{step.expected_rc}\n(ran: {command})\nstdout:\n{result.stdout[-2000:]}\nstderr:\n{result.stderr[-2000:]}"
        )
    # every job the tour started wrote its directory under log_dir, none in the repository's
    runs = [s for s in steps if s.command.startswith("npulaunch run ")]
    assert len([p for p in log_dir.iterdir() if p.is_dir()]) == len(runs)


# --- the README's map of the docs


def readme_links() -> List[str]:
    text = (ROOT / "README.md").read_text(encoding="utf-8")
    return [target for target in re.findall(r"\]\(([^)\s]+)\)", text) if "://" not in target]


def test_readme_links_every_guide_page() -> None:
    linked = {target.partition("#")[0] for target in readme_links()}
    guide = {str(p.relative_to(ROOT)) for p in (ROOT / "docs" / "guide").glob("*.md")}
    assert guide and guide <= linked, f"guide pages the README's map does not link: {sorted(guide - linked)}"


def test_readme_links_resolve() -> None:
    broken = [t for t in readme_links() if not (ROOT / t.partition("#")[0]).exists()]
    assert not broken, f"README links to files that do not exist: {broken}"
