"""The HTML report's step-time chart (issue 36): every rank's busy time per step over the attempt from the
agents' rank_pace windows, the rank named slow in colour, labelled and shaded; a big job as a band; no
chart without windows. Rendered from synthetic events here; from a real job in test_html_report.py."""

from __future__ import annotations

import math
import re
import time
from typing import Dict, List, Optional, Sequence, Tuple

import pytest

from npulaunch.diagnose.summary import JobInfo, JobStatus, JobSummary, RankSummary
from npulaunch.host.events import Event, EventKind
from npulaunch.host.records import RankResult, RankState
from npulaunch.views import htmlpace, htmlreport

START = 1_000_000.0
WINDOW_S = 5.0
PER_HOST = 8
BUSY_S = 0.100  # a peer's busy time per step (plus 2 ms times rank % 5)
WAIT_S = 0.050


def summary_of(count: int, windows: int, stragglers: Sequence[dict] = ()) -> JobSummary:
    """A job of ``count`` ranks, 8 a host, that ran ``windows`` windows (and half a window more)."""
    end = START + WINDOW_S * (windows + 0.5)
    hosts = tuple(f"h{i}" for i in range(math.ceil(count / PER_HOST)))
    ranks = tuple(
        RankSummary(
            RankResult(r, f"h{r // PER_HOST}", r % PER_HOST, 100 + r, RankState.SUCCEEDED, START, end, 0, None),
            "o",
            "e",
            (),
            (),
        )
        for r in range(count)
    )
    job = JobInfo("pace", "pace", JobStatus.SUCCEEDED, 0, None, count, hosts, "/j", START, end, None, (), None)
    return JobSummary(job, None, ranks, stragglers=tuple(stragglers))


def pace_events(count: int, windows: int, slow: Dict[int, Tuple[int, float]], waits: bool = True) -> List[Event]:
    """Each host's rank_pace event every window, as host/agent/paces.py sends it; ``slow``: rank -> (the
    window it turns slow from, how many times slower its busy time is then; it waits little then)."""
    events = []
    for window in range(windows):
        for host in range(math.ceil(count / PER_HOST)):
            ranks = {}
            for rank in range(host * PER_HOST, min(count, (host + 1) * PER_HOST)):
                busy, wait = BUSY_S + 0.002 * (rank % 5), WAIT_S
                if rank in slow and window >= slow[rank][0]:
                    busy, wait = busy * slow[rank][1], 0.005
                ranks[str(rank)] = {
                    "steps": 40,
                    "step": 40 * (window + 1),
                    "busy_s": round(busy, 6),
                    "wait_s": wait if waits else None,
                }
            data = {"ranks": ranks, "window_s": WINDOW_S, "load1": 1.0, "cpus": 8}
            events.append(
                Event(EventKind.RANK_PACE, "pace", f"h{host}", None, data, time=START + WINDOW_S * (window + 1))
            )
    return events


def slow_record(rank: int, window: int, factor: float, until: Optional[float] = None, state: str = "slow") -> dict:
    """A rank_slow event's data (diagnose/stragglers.py): slow since the start of ``window``."""
    return {
        "state": state,
        "device": rank % PER_HOST,
        "factor": factor,
        "since_step": 40 * window + 1,
        "since": START + WINDOW_S * window,
        "until": until,
        "evidence": {"busy_s": 0.15, "peers_busy_s": 0.1, "wait_s": 0.005, "peers_wait_s": 0.05, "npu": []},
    }


def slow_event(record: dict) -> Event:
    rank = record["rank"] if "rank" in record else 2
    return Event(
        EventKind.RANK_SLOW, "pace", f"h{rank // PER_HOST}", rank, dict(record), time=record["since"] + 2 * WINDOW_S
    )


def pace_section(page: str) -> str:
    found = re.search(r"<section class='pace'>.*?</section>", page, re.S)
    assert found is not None, "no step-time section"
    return found.group(0)


def lines_of(section: str, panel: str = "busy") -> List[Tuple[int, bool]]:
    """The ranks drawn one line each in a panel, in drawing order, and whether each is marked slow."""
    found = re.findall(rf"<g class='pace-rank( slow)?' data-rank='(\d+)' data-panel='{panel}'>", section)
    return [(int(rank), bool(slow)) for slow, rank in found]


def points_of(section: str, rank: int, panel: str = "busy") -> List[Tuple[float, float]]:
    group = re.search(rf"data-rank='{rank}' data-panel='{panel}'>.*?</g>", section, re.S)
    assert group is not None
    return [
        (float(x), float(y))
        for points in re.findall(r"points='([^']*)'", group.group(0))
        for x, y in (pair.split(",") for pair in points.split())
    ]


def x_of(t: float, summary: JobSummary) -> float:
    job = summary.job
    return htmlpace.LEFT + htmlpace.WIDTH * (t - job.start_time) / (job.end_time - job.start_time)


def test_the_chart_shares_the_timeline_s_time_axis() -> None:
    assert (htmlpace.LEFT, htmlpace.WIDTH) == (htmlreport.LEFT, htmlreport.WIDTH)


def test_one_slow_rank_is_drawn_in_colour_labelled_and_shaded() -> None:
    summary = summary_of(4, 12)
    events = pace_events(4, 12, {2: (4, 1.5)}) + [slow_event(dict(slow_record(2, 4, 1.5), rank=2))]
    section = pace_section(htmlreport.render_html(summary, events))
    # the peers first, in grey; the slow rank last (on top), in colour, in both panels
    assert lines_of(section) == [(0, False), (1, False), (3, False), (2, True)]
    assert lines_of(section, "wait") == [(0, False), (1, False), (3, False), (2, True)]
    slow_group = re.search(r"<g class='pace-rank slow' data-rank='2' data-panel='busy'>.*?</g>", section, re.S)
    assert slow_group is not None and f"stroke='{htmlpace.SLOW_COLOURS[0]}'" in slow_group.group(0)
    assert section.count(f"stroke='{htmlpace.PEER_COLOUR}'") == 6  # three peers, two panels
    # labelled, and said above the chart
    labels = re.findall(r"<text class='slow-label' data-rank='(\d+)'[^>]*>([^<]*)</text>", section)
    assert labels == [("2", "rank 2: 1.5× slower since step 161")]
    assert "rank 2: 1.5× slower since step 161." in section
    # shaded in both panels from when it turned slow to the end
    spans = re.findall(
        r"<rect class='slow-span' data-rank='2' data-panel='(\w+)' x='([\d.]+)' y='[\d.]+' width='([\d.]+)'", section
    )
    assert [panel for panel, _, _ in spans] == ["busy", "wait"]
    for _, x, width in spans:
        assert float(x) == pytest.approx(x_of(START + 4 * WINDOW_S, summary), abs=0.1)
        assert float(x) + float(width) == pytest.approx(htmlpace.LEFT + htmlpace.WIDTH, abs=0.2)
    # each point at its window's middle; once slow, rank 2's busy line is above every peer's, its wait below
    slow_busy, slow_wait = points_of(section, 2), points_of(section, 2, "wait")
    assert len(slow_busy) == 12 and slow_busy[0][0] == pytest.approx(x_of(START + WINDOW_S / 2, summary), abs=0.1)
    for peer in (0, 1, 3):
        busy, wait = points_of(section, peer), points_of(section, peer, "wait")
        assert all(s[1] < p[1] for s, p in zip(slow_busy[4:], busy[4:]))  # SVG's y grows downwards
        assert all(s[1] > p[1] for s, p in zip(slow_wait[4:], wait[4:]))
    peers = [points_of(section, peer) for peer in (0, 1, 3)]
    for window in range(4):  # before, among the others
        ys = [line[window][1] for line in peers]
        assert min(ys) < slow_busy[window][1] < max(ys)


def test_no_slow_rank_marks_none() -> None:
    section = pace_section(htmlreport.render_html(summary_of(4, 12), pace_events(4, 12, {})))
    assert lines_of(section) == [(0, False), (1, False), (2, False), (3, False)]
    assert "slow-span" not in section and "slow-label" not in section
    assert "No rank was named slower than its peers." in section
    assert not any(colour in section for colour in htmlpace.SLOW_COLOURS)


def test_waits_unknown_draw_the_busy_panel_alone() -> None:
    """TensorFlow's and MindSpore's step hooks cannot see the wait: no wait panel, no word of it."""
    section = pace_section(htmlreport.render_html(summary_of(4, 6), pace_events(4, 6, {}, waits=False)))
    assert len(lines_of(section)) == 4 and lines_of(section, "wait") == []
    assert "wait:" not in section


def test_a_recovered_rank_is_shaded_until_it_recovered() -> None:
    until = START + 9 * WINDOW_S
    record = dict(slow_record(2, 4, 1.5, until=until, state="recovered"), rank=2)
    events = pace_events(4, 12, {2: (4, 1.5)}) + [slow_event(record)]
    summary = summary_of(4, 12)
    section = pace_section(htmlreport.render_html(summary, events))
    span = re.search(
        r"<rect class='slow-span' data-rank='2' data-panel='busy' x='([\d.]+)' y='[\d.]+' width='([\d.]+)'", section
    )
    assert span is not None
    assert float(span.group(1)) + float(span.group(2)) == pytest.approx(x_of(until, summary), abs=0.2)
    assert "rank 2: 1.5× slower since step 161, then recovered" in section


def test_a_straggler_of_the_summary_only_is_marked_and_one_of_an_earlier_attempt_is_not() -> None:
    """summary.json's stragglers (the job's keeps every attempt's, each with its number)."""
    this = dict(slow_record(1, 2, 1.4), rank=1, host="h0", attempt=1)
    section = pace_section(htmlreport.render_html(summary_of(4, 8, [this]), pace_events(4, 8, {1: (2, 1.4)})))
    assert lines_of(section)[-1] == (1, True)
    earlier = dict(this, attempt=0)
    section = pace_section(htmlreport.render_html(summary_of(4, 8, [earlier]), pace_events(4, 8, {})))
    assert not any(slow for _, slow in lines_of(section))


def test_a_missing_window_breaks_the_line() -> None:
    events = pace_events(4, 10, {})
    for event in events[4:6]:  # rank 3 reported no step in windows 5 and 6
        event.data["ranks"].pop("3")
    section = pace_section(htmlreport.render_html(summary_of(4, 10), events))
    group = re.search(r"data-rank='3' data-panel='busy'>.*?</g>", section, re.S)
    assert group is not None and group.group(0).count("<polyline") == 2
    assert len(points_of(section, 3)) == 8


def test_a_first_window_far_above_the_others_is_left_off_the_scale() -> None:
    """The first steps compile and warm up: the scale is the later windows', the first drawn on its top."""
    events = pace_events(4, 10, {})
    events[0].data["ranks"]["0"]["busy_s"] = 30.0
    section = pace_section(htmlreport.render_html(summary_of(4, 10), events))
    assert "↑ off the scale: up to 30.0 s (the first steps)" in section
    top = min(y for _, y in points_of(section, 0))
    assert top == pytest.approx(htmlpace.TOP, abs=0.1)
    labels = re.findall(r"text-anchor='end'>([\d.]+) ms</text>", section)
    assert labels and max(float(v) for v in labels) <= 200  # the busy panel's scale: ~110 ms, not 30 s


def big_job(count: int, windows: int) -> Tuple[JobSummary, List[Event]]:
    record = dict(slow_record(777, 100, 1.3), rank=777)
    return summary_of(count, windows), pace_events(count, windows, {777: (100, 1.3)}) + [slow_event(record)]


def test_a_big_job_draws_a_band_and_the_slow_rank_and_stays_small() -> None:
    """1024 ranks on 128 hosts, 720 windows (an hour at 5 s): the band of all ranks with their median, the
    slow rank alone; the page under 2 MB (it measured 0.15 MB: the timeline's 256 rows, and this chart's
    72 kB)."""
    summary, events = big_job(1024, 720)
    began = time.perf_counter()
    page = htmlreport.render_html(summary, events)
    took = time.perf_counter() - began
    section = pace_section(page)
    assert lines_of(section) == [(777, True)] and lines_of(section, "wait") == [(777, True)]
    bands = re.findall(r"<g class='pace-band' data-panel='(\w+)'>.*?</g>", section, re.S)
    assert bands == ["busy", "wait"]
    assert "of the 1024 ranks in each window" in section
    band = re.search(r"data-panel='busy'><title>[^<]*</title>\s*<polygon points='([^']*)'", section)
    assert band is not None
    outline = [tuple(map(float, pair.split(","))) for pair in band.group(1).split()]
    assert len(outline) == 2 * 720  # the slowest of every window, then the fastest back
    # the band's top is the slow rank from when it turned slow: the same points
    slow = points_of(section, 777)
    assert [p[1] for p in outline[100:720]] == pytest.approx([p[1] for p in slow[100:720]], abs=0.11)
    assert len(page.encode()) < 2_000_000 and len(section.encode()) < 200_000, (len(page), len(section))
    print(f"1024 ranks x 720 windows: page {len(page) / 1e6:.2f} MB, chart {len(section) / 1e3:.0f} kB, {took:.1f} s")


def test_more_ranks_than_lines_draws_the_band_even_when_none_is_slow() -> None:
    count = htmlpace.MAX_LINES + 1
    section = pace_section(htmlreport.render_html(summary_of(count, 6), pace_events(count, 6, {})))
    assert lines_of(section) == [] and section.count("<g class='pace-band'") == 2


def test_at_most_max_named_slow_ranks_are_drawn_and_the_rest_counted() -> None:
    slow = {rank: (2, 1.5) for rank in range(htmlpace.MAX_NAMED + 2)}
    events = pace_events(32, 8, slow) + [slow_event(dict(slow_record(r, 2, 1.5), rank=r)) for r in slow]
    section = pace_section(htmlreport.render_html(summary_of(32, 8), events))
    assert [rank for rank, _ in lines_of(section)] == list(range(htmlpace.MAX_NAMED))
    assert "(2 more named slow ranks are not drawn.)" in section


@pytest.mark.parametrize(
    "plan, said",
    [
        (None, None),
        ({"stragglers": None}, None),  # monitor.stragglers: off
        ({"stragglers": {"action": "warn", "factor": 1.2}}, "no rank reported a timed step"),
    ],
)
def test_no_pace_events_no_chart(plan: Optional[dict], said: Optional[str]) -> None:
    page = htmlreport.render_html(summary_of(4, 6), [], plan)
    assert "<svg xmlns='http://www.w3.org/2000/svg' class='pace'" not in page
    if said is None:
        assert "step time" not in page
    else:
        assert said in pace_section(page)


@pytest.mark.parametrize(
    "seconds, step, top, text",
    [
        (0.128, 0, 0, "128 ms"),  # a tooltip's value: its own unit
        (0.1, 0.02, 0.12, "100 ms"),  # an axis label: the unit of the panel's top
        (0.0004, 0.0001, 0.0005, "0.4 ms"),
        (0.5, 0.5, 2.0, "0.5 s"),
        (1.5, 0.5, 2.0, "1.5 s"),
        (0.0, 0.05, 0.2, "0 ms"),
        (2.5, 0, 0, "2.50 s"),
    ],
)
def test_value_text(seconds: float, step: float, top: float, text: str) -> None:
    assert htmlpace.value_text(seconds, step, top) == text


def test_a_damaged_window_is_left_out() -> None:
    events = pace_events(4, 6, {})
    events[2].data["ranks"]["1"] = {"steps": 3}  # no busy_s
    events[3].data["ranks"]["x"] = {"busy_s": 0.1}  # not a rank
    section = pace_section(htmlreport.render_html(summary_of(4, 6), events))
    assert len(points_of(section, 1)) == 5 and len(lines_of(section)) == 4
