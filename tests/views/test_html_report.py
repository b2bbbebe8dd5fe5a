"""The HTML report (issue 17): written as report.html at the end of every job and by ``report --html``,
self-contained, and drawn by a real headless Chromium: one timeline row per rank, the failure marker
on the failing rank's row, the page's script run without errors."""

from __future__ import annotations

import json
import re
import shutil
import subprocess
import sys
from pathlib import Path

import pytest
from helpers import require, run_cli

from npulaunch.views import htmlreport

CODE = (
    "import os, sys, time\nr = int(os.environ['RANK_ID'])\nfor s in range(1, 40):\n"
    "    print('step %d/100 loss=0.5' % s, flush=True)\n    time.sleep(0.03)\n"
    "    if r == 2 and s == 20:\n"
    "        print('[ERROR] RUNTIME EZ9999: Inner Error! aicore error at op Conv2D', flush=True)\n"
    "        sys.exit(1)\ntime.sleep(30)"
)


@pytest.fixture(scope="module")
def failed_job(tmp_path_factory: pytest.TempPathFactory) -> Path:
    root = tmp_path_factory.mktemp("html")
    config = root / "job.yaml"
    config.write_text(
        f"version: 1\njob:\n  command: [{sys.executable}, -c, {json.dumps(CODE)}]\n  log_dir: {root / 'logs'}\n"
        "hosts: [{host: localhost, devices: 4}]\nrank_table: none\n"
    )
    result = run_cli("run", str(config), "--job-id", "html", "--no-live")
    assert result.returncode == 1, result.stderr
    return root / "logs" / "html"


def chromium() -> str:
    found = shutil.which("chromium") or shutil.which("chromium-browser")
    require(found is not None, "chromium (apt-get install chromium)")
    assert found is not None
    return found


def browse(*args: str) -> subprocess.CompletedProcess:
    flags = ["--headless", "--no-sandbox", "--disable-gpu", "--hide-scrollbars", "--enable-logging=stderr", "--v=0"]
    return subprocess.run([chromium(), *flags, *args], capture_output=True, text=True, timeout=120)


def test_report_html_is_written_and_is_the_same_as_report_dash_html(failed_job: Path) -> None:
    written = (failed_job / "report.html").read_text()
    assert oct((failed_job / "report.html").stat().st_mode & 0o777) == "0o600"
    printed = run_cli("report", str(failed_job), "--html")
    assert printed.returncode == 0 and printed.stdout == written
    # self-contained: nothing is fetched (the SVG namespace is a name, not a fetch)
    assert not re.search(r"(?:src|href)\s*=", written) and "<link" not in written and "@import" not in written
    # the cause: rank 2 (it exits right after the line, or is stopped first when the fatal line is read first)
    assert re.search(r"rank 2 (?:exited with code 1|reported EZ9999)", written) and "EZ9999" in written


def test_chromium_draws_a_row_per_rank_and_the_failure_on_the_failing_rank(failed_job: Path, tmp_path: Path) -> None:
    from PIL import Image

    page = failed_job / "report.html"
    dom = browse("--dump-dom", page.as_uri())
    assert dom.returncode == 0, dom.stderr[-2000:]
    # the page's one script ran (it counts what was drawn) and raised nothing
    assert 'data-ranks-drawn="4"' in dom.stdout and 'data-failure-markers="1"' in dom.stdout
    assert "Uncaught" not in dom.stderr
    # the timeline alone, at its own pixel size: row i spans TOP + ROW * i .. TOP + ROW * (i + 1)
    svg = re.search(r"<svg .*?</svg>", page.read_text(), re.S)
    assert svg is not None
    (tmp_path / "timeline.svg").write_text(svg.group(0))
    width, height = re.search(r"width='(\d+)' height='(\d+)'", svg.group(0)).groups()  # type: ignore[union-attr]
    shot = tmp_path / "timeline.png"
    done = browse(f"--window-size={width},{height}", f"--screenshot={shot}", (tmp_path / "timeline.svg").as_uri())
    assert done.returncode == 0 and shot.exists(), done.stderr[-2000:]
    image = Image.open(shot).convert("RGB")
    pixels = image.load()
    red_rows, drawn_rows = set(), set()
    for row in range(4):
        top = htmlreport.TOP + htmlreport.ROW * row
        for y in range(top, top + htmlreport.ROW):
            for x in range(htmlreport.LEFT, htmlreport.LEFT + htmlreport.WIDTH, 2):
                r, g, b = pixels[x, y]
                if (r, g, b) != (255, 255, 255):
                    drawn_rows.add(row)
                if r > 230 and g < 40 and b < 40:  # the failure marker's pure red
                    red_rows.add(row)
    assert drawn_rows == {0, 1, 2, 3}  # a bar on every rank's row
    assert red_rows == {2}  # the failure marker on the failing rank's row only


def test_a_big_job_draws_the_ranks_that_matter_and_counts_the_rest() -> None:
    from npulaunch.diagnose.summary import JobInfo, JobStatus, JobSummary, RankSummary
    from npulaunch.host.events import Event, EventKind
    from npulaunch.host.records import RankResult, RankState

    count = 1000
    ranks = tuple(
        RankSummary(
            RankResult(r, "h", r % 8, 100 + r, RankState.FAILED if r == 777 else RankState.STOPPED, 1.0, 5.0, 1, None),
            "o",
            "e",
            (),
            (),
        )
        for r in range(count)
    )
    job = JobInfo("big", "big", JobStatus.FAILED, 1, 777, count, ("h",), "/j", 0.0, 6.0, None, (), None)
    hang = Event(EventKind.HANG_DETECTED, "big", "h", None, {"ranks": [900]}, time=4.0)
    page = htmlreport.render_html(JobSummary(job, None, ranks), [hang])
    drawn = re.findall(r"<g class='rank' data-rank='(\d+)'", page)
    assert len(drawn) == htmlreport.MAX_ROWS
    assert "777" in drawn and "900" in drawn  # the failure and the hang are drawn whatever their place
    assert f"{count - htmlreport.MAX_ROWS} more ranks are not drawn" in page
