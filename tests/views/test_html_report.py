"""The HTML report (issue 17): written as report.html at the end of every job and by ``report --html``,
self-contained, and drawn by a real headless Chromium: one timeline row per rank, the failure marker
on the failing rank's row, the page's script run without errors."""

from __future__ import annotations

import json
import math
import re
import shutil
import subprocess
import sys
import time
from pathlib import Path

import pytest
from helpers import require, run_cli

from npulaunch.diagnose.summary import JobSummary
from npulaunch.host.spec import HELPER_RANK
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


# issue 34: the scheduler's row, the header of a restarted job, the axes' ticks
SCHEDULED = (
    "import os, sys, time\nif os.environ.get('MS_ROLE') == 'MS_SCHED':\n    time.sleep(30)\n"
    "r = int(os.environ['RANK_ID'])\nfor s in range(1, 20):\n    print('step %d/100' % s, flush=True)\n"
    "    time.sleep(0.03)\n    if r == 1 and s == 10:\n        sys.exit(3)\ntime.sleep(30)"
)
RETRIED = (  # rank 0 of the first attempt fails as CANN's HCCP does when the last job still runs (retryable)
    "import os, sys, time\nfor s in range(1, 15):\n    print('step %d/14' % s, flush=True)\n    time.sleep(0.05)\n"
    "    if os.environ['NPULAUNCH_RESTART_COUNT'] == '0' and os.environ['RANK_ID'] == '0' and s == 5:\n"
    "        print('EJ0001: Failed to initialize the HCCP process. Reason: Maybe the last training process "
    "is running.', flush=True)\n        sys.exit(1)"
)


def run_job(root: Path, job_id: str, code: str, extra: str, returncode: int) -> Path:
    """``npulaunch run`` of 4 ranks of ``code``; ``extra``: YAML lines at the top level."""
    config = root / f"{job_id}.yaml"
    config.write_text(
        f"version: 1\njob:\n  command: [{sys.executable}, -c, {json.dumps(code)}]\n  log_dir: {root / 'logs'}\n"
        f"  grace_period_s: 1\n  max_restarts: 1\nhosts: [{{host: localhost, devices: 4}}]\n{extra}"
    )
    result = run_cli("run", str(config), "--job-id", job_id, "--no-live", timeout=120)
    assert result.returncode == returncode, result.stderr
    return root / "logs" / job_id


@pytest.fixture(scope="module")
def scheduled_job(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """A job of framework: mindspore (msrun's mode): npulaunch starts the scheduler beside the 4 ranks."""
    return run_job(tmp_path_factory.mktemp("sched"), "sched", SCHEDULED, "framework: mindspore\n", 1)


@pytest.fixture(scope="module")
def restarted_job(tmp_path_factory: pytest.TempPathFactory) -> Path:
    return run_job(tmp_path_factory.mktemp("again"), "again", RETRIED, "rank_table: none\n", 0)


def summary_of(job: Path) -> JobSummary:
    return JobSummary.from_json(json.loads((job / "summary.json").read_text()))


def test_the_scheduler_row_is_named_as_what_it_is(scheduled_job: Path) -> None:
    summary = summary_of(scheduled_job)
    assert HELPER_RANK in {r.result.rank for r in summary.ranks} and summary.job.world_size == 4
    page = (scheduled_job / "report.html").read_text()
    labels = re.findall(r"class='label'>([^<]*)</text>", page)
    assert labels == [f"r{n} d{n} localhost" for n in range(4)] + ["scheduler localhost"]  # the ranks, then it
    assert "r-1" not in page and "d-1" not in page and "device -1" not in page
    assert "<title>the scheduler on localhost (not a rank: it holds no NPU): stopped (SIGTERM)</title>" in page
    assert "<g class='rank helper' data-rank='-1'" in page
    assert "<td>4 on 1 host, and the scheduler</td>" in page
    # the text report and the console name it the same way
    assert "ranks 0, 2-3 and the scheduler: stopped by npulaunch" in run_cli("report", str(scheduled_job)).stdout


def test_the_header_of_a_restarted_job_shows_the_whole_job(restarted_job: Path) -> None:
    summary = summary_of(restarted_job)
    assert summary.attempts is not None and len(summary.attempts) == 2
    first, last = summary.attempts
    start, end = summary.span
    assert start == first.start_time and end == last.end_time == summary.job.end_time
    assert start < summary.job.start_time  # summary.json's job holds the last attempt's times
    page = (restarted_job / "report.html").read_text()
    started = time.strftime("%Y-%m-%d %H:%M:%S", time.localtime(start))
    assert f"<th>started</th><td>{started}</td>" in page
    duration = f"{end - start:.1f} s, 2 attempts (the last {summary.job.duration_s:.1f} s)"
    assert f"<th>duration</th><td>{duration}</td>" in page
    assert "attempt 2, the last: seconds since it began" in page  # what the timeline's axis measures


def axis_labels(svg: str) -> list:
    return [float(v) for v in re.findall(r"class='axis' text-anchor='[a-z]+'>([\d.]+) s</text>", svg)]


@pytest.mark.parametrize("job", ["failed_job", "scheduled_job", "restarted_job"])
def test_both_time_axes_tick_on_round_values(job: str, request: pytest.FixtureRequest) -> None:
    page = (request.getfixturevalue(job) / "report.html").read_text()
    svgs = re.findall(r"<svg .*?</svg>", page, re.S)
    assert len(svgs) == (2 if job == "restarted_job" else 1)  # the attempts' bars, then the timeline
    for svg in svgs:
        values = axis_labels(svg)
        assert len(values) >= 3 and values[0] == 0, svg[:300]
        steps = {round(b - a, 9) for a, b in zip(values, values[1:])}
        assert len(steps) == 1, values
        (step,) = steps
        assert round(step / 10 ** math.floor(math.log10(step)), 6) in (1, 2, 5), values


# issue 36: the step-time chart of a real job whose rank 2 works twice as long a step as the others
PACED = (
    "import os, time\nfrom npulaunch.host.pace import step\nslow = os.environ['RANK_ID'] == '2'\n"
    "end = time.time() + 16\nwhile time.time() < end:\n    time.sleep(0.04 if slow else 0.02)\n    step()\n"
)


@pytest.fixture(scope="module")
def paced_job(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """Each rank marks its steps (as ``npulaunch.session.step()`` does); the agent sends rank_pace windows."""
    extra = "rank_table: none\nmonitor: {health_interval_s: 0}\n"
    return run_job(tmp_path_factory.mktemp("paced"), "paced", PACED, extra, 0)


def test_a_real_job_s_chart_draws_every_window_and_marks_the_slow_rank(paced_job: Path) -> None:
    records = [json.loads(line) for line in (paced_job / "attempt-1" / "events.jsonl").read_text().splitlines()]
    windows = [r for r in records if r["kind"] == "rank_pace"]
    assert len(windows) >= 3 and any(r["kind"] == "rank_slow" and r["rank"] == 2 for r in records)
    page = (paced_job / "report.html").read_text()
    section = re.search(r"<section class='pace'>.*?</section>", page, re.S)
    assert section is not None
    # one line per rank, with a point for each window that rank reported in (events.jsonl's, all of them)
    for rank in range(4):
        group = re.search(
            rf"<g class='pace-rank[ a-z]*' data-rank='{rank}' data-panel='busy'>.*?</g>", section.group(0), re.S
        )
        assert group is not None
        drawn = sum(len(p.split()) for p in re.findall(r"points='([^']*)'", group.group(0)))
        drawn += group.group(0).count("<circle")
        assert drawn == sum(1 for w in windows if str(rank) in w["ranks"]), rank
    assert re.search(r"class='slow-label' data-rank='2'[^>]*>rank 2: \d\.\d× slower since step \d+</text>", page)
    assert "data-panel='wait'" not in section.group(0)  # session steps without timed collectives: no wait known
    # Chromium runs the page's script: four lines, one of them marked slow, no band
    dom = browse("--dump-dom", (paced_job / "report.html").as_uri())
    assert dom.returncode == 0, dom.stderr[-2000:]
    assert 'data-pace-lines="4"' in dom.stdout and 'data-pace-slow="1"' in dom.stdout
    assert 'data-pace-bands="0"' in dom.stdout and "Uncaught" not in dom.stderr
