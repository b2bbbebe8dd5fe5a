"""The held-out corpus (tests/data/diagnosis_corpus/): real failure lines from public issues, collected
without reading the parser and never read while it was written. Each case's lines go through the agent's
monitor and the root cause's choice, as a job's output would, and the failure report's ``code`` must be
the case's code for at least 95 % of the cases; a sample goes through a real ``npulaunch run``."""

from __future__ import annotations

import json
import sys
import time
from pathlib import Path
from typing import Any, Dict, List, Tuple
from urllib.parse import urlparse

import pytest
from helpers import host_plan, run_local

from npulaunch.diagnose.rootcause import pick
from npulaunch.host.agent.monitor import Monitor
from npulaunch.host.events import Event, EventKind
from npulaunch.host.records import RankResult, RankState

CORPUS = Path(__file__).resolve().parent.parent / "data" / "diagnosis_corpus"
CASES: List[Dict[str, Any]] = [
    json.loads(line) for path in sorted(CORPUS.glob("*.jsonl")) for line in path.read_text("utf-8").splitlines()
]
GOAL = 0.95

# a rank that prints a case's lines as the program in the issue did (stdout, or a plog file) and fails
PRINTER = """
import json, os, sys
case = json.load(open(sys.argv[1]))
text = "".join(line + "\\n" for line in case["lines"])
if case["stream"] == "plog":
    folder = os.path.join(os.environ["ASCEND_PROCESS_LOG_PATH"], "plog")
    os.makedirs(folder, exist_ok=True)
    with open(os.path.join(folder, "plog-%d_20250101000000000.log" % os.getpid()), "w") as f:
        f.write(text)
else:
    sys.stdout.write(text)
sys.exit(1)
"""


def code_of(tmp_path: Path, case: Dict[str, Any]) -> Tuple[str, str]:
    """(code, class) of the failure report a rank printing the case's lines and failing gets."""
    plan = host_plan(tmp_path, "m", ranks=1)
    events: List[Event] = []
    monitor = Monitor(
        plan, lambda kind, rank=None, **data: events.append(Event(kind, "t", "h", rank, data)), time.monotonic
    )
    text = "".join(line + "\n" for line in case["lines"])
    if case["stream"] == "plog":
        folder = tmp_path / "rank-0" / "ascend" / "plog"
        folder.mkdir(parents=True)
        (folder / "plog-100_20250101000000000.log").write_text(text, encoding="utf-8")
    else:
        monitor.lines(0, "stdout", text.encode())
    monitor.close()
    result = RankResult(0, "localhost", 0, 100, RankState.FAILED, 1.0, 2.0, 1, None)
    root = pick([result], [e for e in events if e.kind is EventKind.SIGNATURE_MATCHED])
    return (root.code, root.cls) if root is not None else ("", "")


def test_the_corpus_is_real_and_big_enough() -> None:
    assert len(CASES) >= 80
    assert len({case["id"] for case in CASES}) == len(CASES)
    assert len({case["repo"] for case in CASES}) >= 20
    excluded = {line.strip() for line in (CORPUS / "EXCLUDED.txt").read_text().splitlines() if "#" in line[1:]}
    for case in CASES:
        on_github = case["url"].startswith(f"https://github.com/{case['repo']}/")
        assert on_github or urlparse(case["url"]).netloc == case["repo"], case["id"]  # a page: its site
        assert f"{case['repo']}#{case['url'].rstrip('/').rsplit('/', 1)[-1]}" not in excluded, case["id"]
        assert case["code"] in case["codes"] and case["lines"] and case["stream"] in ("stdout", "plog")


def test_at_least_95_percent_of_the_cases_get_their_code(tmp_path: Path) -> None:
    wrong = []
    for index, case in enumerate(CASES):
        found = code_of(tmp_path / str(index), case)
        if found[0] != case["code"]:
            wrong.append(f"{case['id']}: {found[0] or 'no code'} ({found[1]}), the case's code is {case['code']}")
    held = len(CASES) - len(wrong)
    print(f"corpus: {held} of {len(CASES)} cases ({held / len(CASES):.1%}) give the case's code")
    print("\n".join(wrong))
    assert held / len(CASES) >= GOAL, "\n".join(wrong)


@pytest.mark.parametrize("case", CASES[::16], ids=lambda case: case["id"])
def test_a_real_run_reports_what_the_monitor_found(log_dir: Path, marker: str, tmp_path: Path, case: Dict[str, Any]):
    """The in-process path above is the real one: a rank that prints the case and fails gets the same
    code in failure.json."""
    case_file = tmp_path / "case.json"
    case_file.write_text(json.dumps(case), encoding="utf-8")
    printer = tmp_path / "printer.py"
    printer.write_text(PRINTER)
    result = run_local(log_dir, marker, "--", sys.executable, str(printer), str(case_file), nproc=1)
    assert result.returncode == 1, result.stderr
    failure = json.loads((log_dir / "m" / "failure.json").read_text())
    assert failure["code"] == code_of(tmp_path / "inproc", case)[0]
