"""The printed reports read as a person reads them: durations in seconds, minutes, hours and
days (the JSON keeps seconds), and priority bands highest first."""

from __future__ import annotations

from html import escape
from typing import Any

import pytest

from bigfleet.simulation.compare import comparison, render_comparison
from bigfleet.simulation.html import render_html
from bigfleet.simulation.report import render_text
from bigfleet.simulation.run import run_scenario
from bigfleet.simulation.scenario import load
from bigfleet.simulation.units import duration

from .scenarios import EXAMPLES

TOP, MID = ">=900000", "500000-899999"


@pytest.mark.parametrize(
    "seconds, reads",
    [
        (0, "0 s"),
        (4.5, "4.5 s"),  # one decimal below 10 s, as the p50 of a quick band
        (9.96, "10 s"),
        (42, "42 s"),
        (59, "59 s"),
        (59.7, "1 min"),  # rounds up into the next unit, and is written in it
        (60, "1 min"),
        (725, "12 min 5 s"),
        (720, "12 min"),
        (3599, "59 min 59 s"),
        (3599.7, "1 h"),
        (3600, "1 h"),
        (38090, "10 h 35 min"),  # 10 h 34 min 50 s, to the minute
        (86399, "1 d"),
        (2 * 86400, "2 d"),
        (2 * 86400 + 3 * 3600 + 20 * 60, "2 d 3 h"),
        (604740, "7 d"),  # a week's longest wait, 60 s short of the week
        (None, "-"),
    ],
)
def test_a_duration_reads_in_two_units_at_most(seconds: float | None, reads: str) -> None:
    assert duration(seconds) == reads


@pytest.fixture(scope="module")
def walkthrough() -> dict[str, Any]:
    """b (1 000 000) takes a's (500 000) machines: two bands, both asked in."""
    return run_scenario(load(EXAMPLES / "preemption-walkthrough.yaml"))


def lines_of(text: str, *starts: str) -> list[int]:
    """The number of the first line that starts with each of `starts` (after spaces)."""
    lines = [line.strip() for line in text.splitlines()]
    return [next(i for i, line in enumerate(lines) if line.startswith(s)) for s in starts]


def test_the_simulate_report_lists_bands_highest_first_with_durations(walkthrough) -> None:
    text = render_text(walkthrough)
    top, mid = lines_of(text, f"{TOP}: p50", f"{MID}: p50")
    assert top < mid
    p = walkthrough["time_to_capacity_by_priority_band"][TOP]
    line = text.splitlines()[top]
    assert f"p99 {duration(p['p99'])}" in line and p["p99"] >= 60  # minutes, not "273.0 s"
    assert text.splitlines()[0].endswith("15 min simulated, 1 shard(s)")


def test_the_comparison_lists_bands_highest_first_and_says_its_verdict_first(
    walkthrough,
) -> None:
    """The same report as both runs: only the layout is under test here."""
    text = render_comparison(comparison(walkthrough, walkthrough, "w"))
    assert text.splitlines()[0].startswith("BigFleet pooled: $960/h against $960/h")
    top, mid = lines_of(text, f"{TOP}: served", f"{MID}: served")
    assert top < mid
    row = text.splitlines()[lines_of(text, f"{TOP}: p99")[0]]
    p99 = duration(walkthrough["summary"]["bands"][TOP]["p99_s"])
    cells = [c.strip() for c in row.split("  ") if c.strip()]
    assert "min" in p99 and cells[-2:] == [p99, p99]


def test_the_page_lists_bands_highest_first_in_minutes_under_its_verdict(walkthrough) -> None:
    page = render_html(
        [("BigFleet", walkthrough)], title="w", verdict=["the headline", "the verdict"]
    )
    assert page.index('<p class="verdict">the headline</p>') < page.index("<h2>Summary</h2>")
    top, mid = escape(TOP), escape(MID)
    assert page.index(f"priority band {top}") < page.index(f"priority band {mid}")
    assert page.index(f'data-chart="demand-{top}"') < page.index(f'data-chart="demand-{mid}"')
    p99 = walkthrough["summary"]["bands"][TOP]["p99_s"]
    top_row = page.split(f"priority band {top}", 1)[1].split("time to capacity p99</td>", 1)[1]
    assert top_row.startswith(f"<td>{duration(p99)}</td>") and "min" in duration(p99)
    assert "15 min simulated" in page
