"""``npulaunch status`` in columns (issue 34): each column as wide as its content; on a narrow terminal
(80 columns off one) long host names, states and last lines are cut with an ellipsis, never a rank or a
count, and every row stays in line with the heading."""

from __future__ import annotations

import json
import shutil
import sys
from pathlib import Path
from typing import Any, Dict, List

import pytest
from helpers import run_cli

from npulaunch.views.columns import ELLIPSIS, Column, fit_table
from npulaunch.views.jobview import STATUS_COLUMNS, status_table, status_text

CODE = (
    "import os, sys, time\nr = int(os.environ['RANK_ID'])\nfor s in range(1, 12):\n"
    "    print('step %d/100 loss=0.5 ' % s + 'lr=0.001 ' * 12, flush=True)\n    time.sleep(0.03)\n"
    "    if r == 2 and s == 6:\n"
    "        print('[ERROR] RUNTIME EZ9999: Inner Error! aicore error at op Conv2D', flush=True)\n"
    "        sys.exit(1)\ntime.sleep(30)"
)
HOSTS = ("node-0001.rack-17.training-cluster.example.internal", "node-0002.rack-17.training-cluster.example.internal")


@pytest.fixture(scope="module")
def long_hosts_job(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """A real failed 4-rank job, its events told again as if ranks 0-1 and 2-3 ran on two hosts with long
    names (a real run on such hosts needs them; the events, logs and columns are otherwise the run's own)."""
    root = tmp_path_factory.mktemp("status")
    config = root / "job.yaml"
    config.write_text(
        f"version: 1\njob:\n  command: [{sys.executable}, -c, {json.dumps(CODE)}]\n  log_dir: {root / 'logs'}\n"
        "hosts: [{host: localhost, devices: 4}]\nrank_table: none\n"
    )
    result = run_cli("run", str(config), "--job-id", "st", "--no-live")
    assert result.returncode == 1, result.stderr
    job = root / "logs" / "st"
    copy = root / "two-hosts"
    shutil.copytree(job, copy)
    lines = []
    for line in (copy / "events.jsonl").read_text().splitlines():
        event = json.loads(line)
        if isinstance(event.get("rank"), int):
            event["host"] = HOSTS[event["rank"] // 2]
        lines.append(json.dumps(event))
    (copy / "events.jsonl").write_text("\n".join(lines) + "\n")
    return copy


def table_of(text: str) -> List[str]:
    lines = text.splitlines()
    start = next(i for i, line in enumerate(lines) if line.lstrip().startswith("rank  host"))
    return lines[start : start + 5]  # the heading and the 4 ranks


def assert_aligned(table: List[str], columns: List[Column]) -> None:
    """Each cell starts (left-aligned) or ends (right-aligned) where its column's title does."""
    heading, rows = table[0], table[1:]
    at = 0
    for column in columns:
        at = heading.index(column.title, at)
        end = at + len(column.title)
        for row in rows:
            if column.right:
                assert row[end - 1] != " " and row[end : end + 1] in ("", " "), (column.title, row)
            elif len(row) > at:
                assert row[at] != " " and row[at - 1 : at] in ("", " "), (column.title, row)
        at = end


def test_at_80_columns_long_host_names_are_cut_and_the_columns_stay_in_line(long_hosts_job: Path) -> None:
    done = run_cli("status", str(long_hosts_job))  # a pipe: 80 columns
    assert done.returncode == 0, done.stderr
    table = table_of(done.stdout)
    assert all(len(line) <= 80 for line in table), table
    assert_aligned(table, list(STATUS_COLUMNS))
    rows = {line.split()[0]: line for line in table[1:]}
    assert set(rows) == {"0", "1", "2", "3"}  # ranks are never cut
    assert all("node-000" in row and ELLIPSIS in row for row in rows.values())  # hosts cut, not dropped
    assert "failed (1) EZ9999" in rows["2"] and "stopped (SIGTERM)" in rows["0"]


def test_a_wide_terminal_shows_every_cell_whole(long_hosts_job: Path) -> None:
    table = table_of(status_text(str(long_hosts_job), width=250))
    assert_aligned(table, list(STATUS_COLUMNS))
    assert ELLIPSIS not in "\n".join(table)
    assert sum(HOSTS[0] in row for row in table) == 2 and sum(HOSTS[1] in row for row in table) == 2
    assert all("lr=0.001 lr=0.001" in row or "EZ9999" in row for row in table[1:])


def synthetic_rows(count: int) -> List[Dict[str, Any]]:
    """Rows as status_rows gives them, with every kind of long value: six-digit ranks, long hosts,
    states carrying several signatures, long last lines, large line counts."""
    return [
        {
            "rank": 131064 + i,
            "host": HOSTS[i % 2] + "-" * (i * 3),
            "device_id": i % 8,
            "state": "failed" if i == 3 else "stopped",
            "exit": "SIGKILL" if i != 3 else 1,
            "signatures": ["EI0002", "EZ9999", "hccl-listen-fail"] if i == 3 else [],
            "lines": 10**i * 123,
            "silent_s": 12345.6,
            "last_line": "\tstep 4/100\rstep 5/100 " + "x" * 300,
        }
        for i in range(count)
    ]


@pytest.mark.parametrize("width", [60, 80, 100, 140, 400])
def test_any_width_and_many_ranks(width: int) -> None:
    table = status_table(synthetic_rows(8), width)
    minimal = sum(len(c.title) if not c.min_width else c.min_width for c in STATUS_COLUMNS) + 2 * 6 + 12
    assert all(len(line) <= max(width, minimal) for line in table), table
    assert_aligned(table, list(STATUS_COLUMNS))
    for i, row in enumerate(table[1:]):
        cells = row.split()
        assert cells[0] == str(131064 + i)  # whole
        assert str(10**i * 123) in row and "12345.6s" in row
        assert "\t" not in row and "\r" not in row  # a tab or a carriage return would break the line up
    if width < 200:
        assert ELLIPSIS in table[4]  # the long state of rank 131067 is cut, not wrapped
    else:
        assert "failed (1) EI0002,EZ9999,hccl-listen-fail" in table[4]


def test_a_table_too_narrow_for_its_columns_stays_aligned() -> None:
    columns = [Column("n", right=True), Column("name", min_width=6), Column("text", min_width=4)]
    rows = [("1", "a-very-long-name", "some text here"), ("100000", "b", "t")]
    table = fit_table(columns, rows, 10)  # narrower than the numbers and the minimums: they win
    assert table == ["     n  name    text", "     1  a-ver…  som…", "100000  b       t"]
