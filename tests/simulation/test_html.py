"""The HTML report (`render_html`): built from real simulator runs, and checked as a browser shows
it — headless Chromium's DOM has every chart with the series and points the report holds, and its
screenshot has those series' colours painted on it."""

from __future__ import annotations

import copy
import struct
import subprocess
import zlib
from html.parser import HTMLParser
from pathlib import Path
from typing import Any

import numpy as np
import pytest

from bigfleet.simulation.compare import compare
from bigfleet.simulation.html import (
    CAPACITY_COLOURS,
    DEMAND,
    SERVED,
    UTILISATION,
    render_html,
)
from bigfleet.simulation.recorder import BANDS, CAPACITY_TYPES
from bigfleet.simulation.run import run_scenario
from bigfleet.simulation.scenario import load

from .scenarios import EXAMPLES

CHROMIUM = Path("/usr/bin/chromium")
needs_chromium = pytest.mark.skipif(
    not CHROMIUM.exists(),
    reason="no /usr/bin/chromium (Debian package `chromium`): the page cannot be rendered",
)
HOSTILE = '<script>alert("x")</script> & "quotes" <img src=x onerror=alert(1)>'


@pytest.fixture(scope="module")
def walkthrough() -> dict[str, Any]:
    return run_scenario(load(EXAMPLES / "preemption-walkthrough.yaml"))


@pytest.fixture(scope="module")
def spot() -> list[tuple[str, dict[str, Any]]]:
    """`bigfleet simulate examples/spot-vs-on-demand.yaml --compare per-cluster`, as runs."""
    result = compare(load(EXAMPLES / "spot-vs-on-demand.yaml"))
    return [("BigFleet", result["bigfleet"]), ("per-cluster", result["per_cluster"])]


# ---- what the page should hold, from the reports --------------------------------------------


def expected_charts(runs: list[tuple[str, dict[str, Any]]]) -> dict[tuple[str, str], list[str]]:
    """(chart, run label) -> the series it must draw: a demand chart per band with demand in any
    run, a cost layer per capacity type that cost anything in any run, one utilisation line."""
    series = [r["series"] for _, r in runs]
    bands = [b for b in BANDS if any(any(s["demand_by_band"][b]) for s in series)]
    types = [
        c
        for c in CAPACITY_TYPES
        if any(any(s["cost_per_hour_by_capacity_type"][c]) for s in series)
    ]
    out: dict[tuple[str, str], list[str]] = {}
    for label, _ in runs:
        for b in bands:
            out[(f"demand-{b}", label)] = ["served", "demand"]
        out[("cost", label)] = types
        out[("utilisation", label)] = ["busy / owned"]
    return out


class Charts(HTMLParser):
    """Every chart's SVG in a page: (chart, run) -> [(series name, number of points)]."""

    def __init__(self) -> None:
        super().__init__()
        self.charts: dict[tuple[str, str], list[tuple[str, int]]] = {}
        self.current: tuple[str, str] | None = None
        self.scripts = 0

    def handle_starttag(self, tag: str, attrs: list[tuple[str, str | None]]) -> None:
        a = dict(attrs)
        if tag == "script":
            self.scripts += 1
        if tag == "svg" and a.get("class") == "chart":
            self.current = (a["data-chart"] or "", a["data-run"] or "")
            self.charts[self.current] = []
        if tag == "polyline" and a.get("class") == "series" and self.current:
            points = (a.get("points") or "").split()
            self.charts[self.current].append((a["data-series"] or "", len(points)))

    def handle_endtag(self, tag: str) -> None:
        if tag == "svg":
            self.current = None


def charts_of(page: str) -> Charts:
    parser = Charts()
    parser.feed(page)
    return parser


def assert_all_charts(page: str, runs: list[tuple[str, dict[str, Any]]]) -> None:
    found = charts_of(page).charts
    expected = expected_charts(runs)
    assert set(found) == set(expected)
    points = {label: len(r["series"]["t"]) for label, r in runs}
    for (chart, label), names in expected.items():
        assert found[(chart, label)] == [(n, points[label]) for n in names], (chart, label)


# ---- pure: the page as written ----------------------------------------------------------------


def test_a_hostile_scenario_name_and_labels_are_escaped(walkthrough):
    report = copy.deepcopy(walkthrough)
    report["scenario"] = HOSTILE
    page = render_html([(HOSTILE, report)], title=HOSTILE)
    assert "<script" not in page and "<img" not in page
    assert "&lt;script&gt;alert(&quot;x&quot;)&lt;/script&gt; &amp; &quot;quotes&quot;" in page
    parsed = charts_of(page)
    assert parsed.scripts == 0
    assert all(run == HOSTILE for _, run in parsed.charts)  # attribute values survive intact


def test_a_page_has_every_chart_of_a_real_run(walkthrough):
    page = render_html([("BigFleet", walkthrough)], title="walkthrough")
    assert_all_charts(page, [("BigFleet", walkthrough)])
    # The walkthrough's two bands: the batch band preempted, the serving band served.
    assert {c for c, _ in charts_of(page).charts} == {
        "demand-500000-899999",
        "demand->=900000",
        "cost",
        "utilisation",
    }


def test_a_comparison_page_has_both_runs_side_by_side(spot):
    page = render_html(spot, title="spot vs on-demand")
    assert_all_charts(page, spot)
    head = page.split('<table class="summary">', 1)[1].split("</thead>", 1)[0]
    assert "<th>BigFleet</th><th>per-cluster</th>" in head
    # Both runs' totals in the one summary row.
    row = page.split("<td>total cost ($)</td>", 1)[1].split("</tr>", 1)[0]
    assert row == "".join(f"<td>{r['summary']['cost_total']:,.2f}</td>" for _, r in spot)


def test_the_page_is_self_contained(spot):
    page = render_html(spot, title="t").lower()
    for outside in ("http:", "https:", "src=", "url(", "@import", "<link", "<script"):
        assert outside not in page


def test_missing_optional_keys_render_as_a_dash():
    page = render_html([("bare", {"scenario": "bare"})], title="bare")
    row = page.split("<td>total cost ($)</td>", 1)[1].split("</tr>", 1)[0]
    assert row == "<td>-</td>"
    assert "No demand in the time series of this report." in page
    assert set(charts_of(page).charts) == {("cost", "bare"), ("utilisation", "bare")}


def test_one_or_two_runs_only(walkthrough):
    with pytest.raises(ValueError, match="runs: expected 1 or 2"):
        render_html([("a", walkthrough)] * 3, title="t")


# ---- rendered by Chromium -----------------------------------------------------------------------


def chromium(tmp_path: Path, page: Path, *args: str) -> str:
    done = subprocess.run(
        [
            str(CHROMIUM),
            "--headless",
            "--no-sandbox",
            "--disable-gpu",
            "--disable-quic",
            "--no-first-run",
            "--disable-background-networking",
            "--disable-component-update",
            "--disable-sync",
            f"--user-data-dir={tmp_path / 'profile'}",
            *args,
            page.as_uri(),
        ],
        capture_output=True,
        text=True,
        timeout=120,
        check=False,
    )
    assert done.returncode == 0, done.stderr[-2000:]
    return done.stdout


def read_png(path: Path) -> np.ndarray:
    """The RGB pixels of an 8-bit, non-interlaced PNG (what Chromium writes), rows x columns x 3."""
    data = path.read_bytes()
    assert data[:8] == b"\x89PNG\r\n\x1a\n", f"{path} is not a PNG"
    pos, idat = 8, b""
    while pos < len(data):
        (n,) = struct.unpack(">I", data[pos : pos + 4])
        kind, body = data[pos + 4 : pos + 8], data[pos + 8 : pos + 8 + n]
        pos += 12 + n
        if kind == b"IHDR":
            width, height, depth, colour, _, _, interlace = struct.unpack(">IIBBBBB", body)
        elif kind == b"IDAT":
            idat += body
    assert (depth, interlace, colour in (2, 6)) == (8, 0, True)
    bpp = 3 if colour == 2 else 4
    raw = np.frombuffer(zlib.decompress(idat), dtype=np.uint8).reshape(height, width * bpp + 1)
    rows = np.zeros((height + 1, width * bpp), dtype=np.uint8)  # row 0: zeros above the image
    for r in range(height):
        rows[r + 1] = unfilter(raw[r, 0], raw[r, 1:], rows[r], bpp)
    return rows[1:].reshape(height, width, bpp)[:, :, :3]


def unfilter(kind: int, line: np.ndarray, up: np.ndarray, bpp: int) -> np.ndarray:
    """Undo one row's PNG filter (None, Sub, Up, Average, Paeth)."""
    if kind == 0:
        return line
    if kind == 1:
        return np.cumsum(line.reshape(-1, bpp), axis=0, dtype=np.uint8).reshape(-1)
    if kind == 2:
        return line + up
    cur, filt, above = bytearray(len(line)), line.tolist(), up.tolist()
    for i, x in enumerate(filt):
        a = cur[i - bpp] if i >= bpp else 0
        b = above[i]
        if kind == 3:
            cur[i] = (x + ((a + b) >> 1)) & 255
            continue
        c = above[i - bpp] if i >= bpp else 0
        pa, pb, pc = abs(b - c), abs(a - c), abs(a + b - 2 * c)
        cur[i] = (x + (a if pa <= pb and pa <= pc else b if pb <= pc else c)) & 255
    return np.frombuffer(bytes(cur), dtype=np.uint8)


def pixels_of(image: np.ndarray, colour: str) -> int:
    rgb = [int(colour[i : i + 2], 16) for i in (1, 3, 5)]
    return int(np.all(image == rgb, axis=2).sum())


@needs_chromium
@pytest.mark.parametrize("which", ["one run", "comparison"])
def test_chromium_renders_every_chart(tmp_path, walkthrough, spot, which):
    runs = [("BigFleet", walkthrough)] if which == "one run" else spot
    page = tmp_path / "report.html"
    page.write_text(render_html(runs, title=f"{which} <b>&</b>"), encoding="utf-8")
    dom = chromium(tmp_path, page, "--dump-dom")
    assert "<title>" + f"{which} &lt;b&gt;&amp;&lt;/b&gt;" + "</title>" in dom
    assert_all_charts(dom, runs)


@needs_chromium
def test_the_screenshot_shows_the_charts(tmp_path, spot):
    page = tmp_path / "report.html"
    page.write_text(render_html(spot, title="spot vs on-demand"), encoding="utf-8")
    shot = tmp_path / "page.png"
    chromium(tmp_path, page, f"--screenshot={shot}", "--window-size=1400,2000")
    image = read_png(shot)
    assert image.shape == (2000, 1400, 3)
    ink = float(np.any(image < 240, axis=2).mean())
    assert ink > 0.02, f"only {ink:.2%} of the screenshot is not white"
    # Every series is painted in both runs' columns (the left and right half of the page): more
    # pixels of its exact colour than its legend swatch alone (22 x 3) would give.
    for colour in (DEMAND, SERVED, CAPACITY_COLOURS["spot"], CAPACITY_COLOURS["on-demand"]):
        for half in (image[:, :700], image[:, 700:]):
            assert pixels_of(half, colour) > 200, colour
    for half in (image[:, :700], image[:, 700:]):
        assert pixels_of(half, UTILISATION) > 200
