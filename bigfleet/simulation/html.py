"""The simulation report as one self-contained HTML page: charts drawn here as inline SVG, plain
CSS, no script, no external file. One run, or two side by side (BigFleet and a baseline) on
shared axes, so that a taller line means more in either column."""

from __future__ import annotations

import math
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from html import escape
from typing import Any

from .recorder import BANDS, CAPACITY_TYPES
from .units import duration

LabelledReport = tuple[str, dict[str, Any]]

# Chart geometry, in viewBox units; the SVG scales to its column's width.
WIDTH, HEIGHT = 640, 210
LEFT, RIGHT, TOP, BOTTOM = 64, 16, 30, 40
DEMAND, SERVED = "#9ca3af", "#2563eb"
CAPACITY_COLOURS = {
    "bare-metal": "#6b7280",
    "reserved": "#7c3aed",
    "on-demand": "#f59e0b",
    "spot": "#10b981",
}
UTILISATION = "#dc2626"

CSS = """
body { font: 15px/1.4 system-ui, sans-serif; color: #111827; margin: 0 auto; padding: 16px 24px;
       max-width: 1500px; }
h1 { font-size: 22px; margin: 0 0 4px; } h2 { font-size: 18px; margin: 28px 0 4px; }
h3 { font-size: 15px; margin: 12px 0 2px; }
p.note { color: #4b5563; margin: 0 0 8px; }
.runs { display: grid; gap: 24px; }
.run-label { font-weight: 600; color: #374151; }
svg.chart { width: 100%; height: auto; display: block; background: #fff; }
svg text { font: 12px system-ui, sans-serif; fill: #374151; }
table { border-collapse: collapse; margin-top: 8px; }
th, td { padding: 4px 14px; border-bottom: 1px solid #e5e7eb; text-align: right; }
th:first-child, td:first-child { text-align: left; }
tr.band td { font-weight: 600; padding-top: 12px; text-align: left; }
p.verdict { font-size: 16px; font-weight: 600; margin: 8px 0; }
"""


@dataclass
class Line:
    """One data series of a chart; `below` makes it the top edge of a filled (stacked) band."""

    name: str
    values: Sequence[float]
    colour: str
    dashed: bool = False
    below: Sequence[float] | None = None


@dataclass
class Axes:
    x_max: float  # hours
    y_max: float
    y_label: str


def render_html(runs: list[LabelledReport], title: str, verdict: Sequence[str] = ()) -> str:
    """The page for one run, or two compared; `runs` holds (label, report) pairs. `verdict`:
    lines said first, under the title (a comparison's headline, then its verdict)."""
    if not 1 <= len(runs) <= 2:
        raise ValueError(
            f"render_html: runs: expected 1 or 2 (label, report) pairs, got {len(runs)}"
        )
    body = [
        f"<h1>{escape(title)}</h1>",
        *(
            f'<p class="{"verdict" if i == 0 else "note"}">{escape(line)}</p>'
            for i, line in enumerate(verdict)
        ),
        _what_ran(runs),
        _summary(runs),
        *_demand_sections(runs),
        _cost_section(runs),
        _utilisation_section(runs),
    ]
    return (
        '<!DOCTYPE html>\n<html lang="en"><head><meta charset="utf-8">'
        '<meta name="viewport" content="width=device-width, initial-scale=1">'
        f"<title>{escape(title)}</title><style>{CSS}</style></head>\n<body>\n"
        + "\n".join(body)
        + "\n</body></html>\n"
    )


# ---- text ---------------------------------------------------------------------------------------


def _what_ran(runs: list[LabelledReport]) -> str:
    parts = []
    for label, report in runs:
        seconds = _get(report, "duration_seconds")
        parts.append(
            f"<b>{escape(label)}</b>: scenario {escape(str(report.get('scenario', '-')))}, "
            f"seed {escape(str(report.get('seed', '-')))}, "
            f"{_fmt(seconds, duration)} simulated"
        )
    return '<p class="note">' + "; ".join(parts) + "</p>"


def _summary(runs: list[LabelledReport]) -> str:
    rows: list[tuple[str, list[str]]] = []

    def row(
        name: str, path: tuple[str, ...], spec: str | Callable[[float], str], scale: float = 1.0
    ) -> None:
        cells = []
        for _, report in runs:
            v = _get(report, *path)
            cells.append(_fmt(v if v is None or scale == 1 else v * scale, spec))
        rows.append((name, cells))

    row("total cost ($)", ("summary", "cost_total"), "{:,.2f}")
    row("cost per useful machine-hour ($)", ("summary", "cost_per_useful_machine_hour"), "{:,.2f}")
    row("useful machine-hours", ("summary", "useful_machine_hours"), "{:,.1f}")
    row("idle machine-hours", ("summary", "idle_machine_hours"), "{:,.1f}")
    row("machines taken from work by preemption", ("summary", "preemptions"), "{:,}")
    bands = [b for b in reversed(BANDS) if any(_get(r, "summary", "bands", b) for _, r in runs)]
    for b in bands:  # highest priority first
        rows.append((f"priority band {b}", []))
        row(
            "served (% of demanded machine-time)",
            ("summary", "bands", b, "served_fraction"),
            "{:.1f}",
            100.0,
        )
        row("time to capacity p50", ("summary", "bands", b, "p50_s"), duration)
        row("time to capacity p99", ("summary", "bands", b, "p99_s"), duration)
        row("machines still waiting at the end", ("summary", "bands", b, "waiting"), "{:,}")
    head = "".join(f"<th>{escape(label)}</th>" for label, _ in runs)
    lines = []
    for name, cells in rows:
        if not cells:
            lines.append(f'<tr class="band"><td colspan="{len(runs) + 1}">{escape(name)}</td></tr>')
        else:
            lines.append(
                f"<tr><td>{escape(name)}</td>" + "".join(f"<td>{c}</td>" for c in cells) + "</tr>"
            )
    return (
        '<h2>Summary</h2><table class="summary"><thead><tr><th></th>'
        + head
        + "</tr></thead><tbody>"
        + "".join(lines)
        + "</tbody></table>"
    )


def _get(report: dict[str, Any], *path: str) -> Any:
    node: Any = report
    for key in path:
        if not isinstance(node, dict) or key not in node:
            return None
        node = node[key]
    return node


def _fmt(value: Any, spec: str | Callable[[float], str]) -> str:
    """A number by a format string or a function (`units.duration`); "-" for anything else."""
    if value is None or isinstance(value, bool) or not isinstance(value, (int, float)):
        return "-"
    return escape(spec.format(value) if isinstance(spec, str) else spec(value))


# ---- sections -----------------------------------------------------------------------------------


def _section(heading: str, note: str, runs: list[LabelledReport], charts: list[str]) -> str:
    """A chart per run, side by side; a top-level section when it has a note, else one band's."""
    head = (
        f'<h2>{escape(heading)}</h2><p class="note">{escape(note)}</p>'
        if note
        else f"<h3>{escape(heading)}</h3>"
    )
    cells = "".join(
        f'<div class="run"><div class="run-label">{escape(label)}</div>{chart}</div>'
        for (label, _), chart in zip(runs, charts, strict=True)
    )
    columns = f"grid-template-columns: repeat({len(runs)}, minmax(0, 720px))"
    return f'{head}<div class="runs" style="{columns}">{cells}</div>'


def _series(report: dict[str, Any]) -> dict[str, Any]:
    series = report.get("series")
    return series if isinstance(series, dict) else {}


def _hours(report: dict[str, Any]) -> list[float]:
    return [t / 3600 for t in _series(report).get("t", [])]


def _x_max(runs: list[LabelledReport]) -> float:
    ends = [(_get(r, "duration_seconds") or 0) / 3600 for _, r in runs]
    ends += [h[-1] for _, r in runs if (h := _hours(r))]
    return max(ends, default=0.0)


def _by(report: dict[str, Any], key: str, name: str) -> list[float]:
    return list(_series(report).get(key, {}).get(name, []))


def _demand_sections(runs: list[LabelledReport]) -> list[str]:
    bands = [b for b in reversed(BANDS) if any(any(_by(r, "demand_by_band", b)) for _, r in runs)]
    out = [
        '<h2>Demand and served, per priority band</h2><p class="note">Machines asked for by '
        "the needs of each band (dashed) and machines configured for them (solid).</p>"
    ]
    if not bands:
        out.append('<p class="note">No demand in the time series of this report.</p>')
    x_max = _x_max(runs)
    for b in bands:
        top = max(
            max(_by(r, k, b), default=0)
            for _, r in runs
            for k in ("demand_by_band", "served_by_band")
        )
        axes = Axes(x_max, top, "machines")
        charts = [
            _chart(
                f"demand-{b}",
                label,
                _hours(r),
                axes,
                [
                    # Demand dashed over served: where they meet, both stay visible.
                    Line("served", _by(r, "served_by_band", b), SERVED),
                    Line("demand", _by(r, "demand_by_band", b), DEMAND, dashed=True),
                ],
            )
            for label, r in runs
        ]
        out.append(_section(f"priority band {b}", "", runs, charts))
    return out


def _cost_section(runs: list[LabelledReport]) -> str:
    types = [
        c
        for c in CAPACITY_TYPES
        if any(any(_by(r, "cost_per_hour_by_capacity_type", c)) for _, r in runs)
    ]
    edges = [
        _stack(len(_hours(r)), [_by(r, "cost_per_hour_by_capacity_type", c) for c in types])
        for _, r in runs
    ]
    axes = Axes(_x_max(runs), max(max(e[-1], default=0.0) for e in edges), "$ per hour")
    charts = [
        _chart(
            "cost",
            label,
            _hours(r),
            axes,
            [
                Line(c, edge[i + 1], CAPACITY_COLOURS.get(c, "#000"), below=edge[i])
                for i, c in enumerate(types)
            ],
        )
        for (label, r), edge in zip(runs, edges, strict=True)
    ]
    note = (
        "Cost per hour of the machines billed at each moment, stacked by capacity type "
        "(the top edge is the total)."
    )
    if not types:
        note += " No machine cost anything in this report."
    return _section("Cost by capacity type", note, runs, charts)


def _stack(samples: int, layers: list[list[float]]) -> list[list[float]]:
    """The edges of stacked layers: zero, then each running total."""
    out = [[0.0] * samples]
    for layer in layers:
        out.append([a + float(b) for a, b in zip(out[-1], layer, strict=True)])
    return out


def _utilisation_section(runs: list[LabelledReport]) -> str:
    axes = Axes(_x_max(runs), 100.0, "% of machines owned")
    charts = []
    for label, r in runs:
        s = _series(r)
        busy, owned = s.get("machines_busy", []), s.get("machines_owned", [])
        util = [100.0 * b / o if o else 0.0 for b, o in zip(busy, owned, strict=True)]
        charts.append(
            _chart("utilisation", label, _hours(r), axes, [Line("busy / owned", util, UTILISATION)])
        )
    note = (
        "Configured machines as a share of the machines billed at each moment "
        "(0 when none is billed)."
    )
    return _section("Utilisation", note, runs, charts)


# ---- the chart ----------------------------------------------------------------------------------


def _chart(kind: str, run: str, hours: list[float], axes: Axes, lines: list[Line]) -> str:
    x_top, x_ticks = _ticks(axes.x_max)
    y_top, y_ticks = _ticks(axes.y_max)
    right, bottom = WIDTH - RIGHT, HEIGHT - BOTTOM

    def x(h: float) -> float:
        return LEFT + (right - LEFT) * h / x_top

    def y(v: float) -> float:
        return bottom - (bottom - TOP) * float(v) / y_top

    out = [
        f'<svg class="chart" data-chart="{escape(kind)}" data-run="{escape(run)}" '
        f'viewBox="0 0 {WIDTH} {HEIGHT}" role="img" aria-label="{escape(kind)}, {escape(run)}">'
    ]
    for v in y_ticks:
        out.append(
            f'<line x1="{LEFT}" x2="{right}" y1="{y(v):.1f}" y2="{y(v):.1f}" stroke="#e5e7eb"/>'
        )
        out.append(f'<text x="{LEFT - 6}" y="{y(v) + 4:.1f}" text-anchor="end">{_tick(v)}</text>')
    for h in x_ticks:
        out.append(f'<text x="{x(h):.1f}" y="{bottom + 16}" text-anchor="middle">{_tick(h)}</text>')
    out.append(f'<line x1="{LEFT}" x2="{right}" y1="{bottom}" y2="{bottom}" stroke="#6b7280"/>')
    out.append(f'<line x1="{LEFT}" x2="{LEFT}" y1="{TOP}" y2="{bottom}" stroke="#6b7280"/>')
    out.append(
        f'<text x="{(LEFT + right) / 2}" y="{HEIGHT - 4}" text-anchor="middle">'
        "simulated time (hours)</text>"
    )
    out.append(
        f'<text transform="translate(14 {(TOP + bottom) / 2}) rotate(-90)" '
        f'text-anchor="middle">{escape(axes.y_label)}</text>'
    )

    def points(values: Sequence[float]) -> list[tuple[float, float]]:
        return [(x(h), y(v)) for h, v in zip(hours, values, strict=True)]

    # Every area first, then every line over them, so no fill veils a line.
    for line in lines:
        if line.below is not None:
            outline = points(line.values) + points(line.below)[::-1]
            out.append(
                f'<polygon class="area" points="{_points(outline)}" '
                f'fill="{line.colour}" fill-opacity="0.3" stroke="none"/>'
            )
    for line in lines:
        dash = ' stroke-dasharray="6 4"' if line.dashed else ""
        out.append(
            f'<polyline class="series" data-series="{escape(line.name)}" '
            f'points="{_points(points(line.values))}" fill="none" stroke="{line.colour}" '
            f'stroke-width="2"{dash}/>'
        )
    out.append(_legend(lines))
    out.append("</svg>")
    return "".join(out)


def _legend(lines: list[Line]) -> str:
    out, x = [], float(LEFT)
    for line in lines:
        dash = ' stroke-dasharray="6 4"' if line.dashed else ""
        out.append(
            f'<line x1="{x:.0f}" x2="{x + 22:.0f}" y1="14" y2="14" stroke="{line.colour}" '
            f'stroke-width="3"{dash}/><text x="{x + 28:.0f}" y="18">{escape(line.name)}</text>'
        )
        x += 40 + 7.5 * len(line.name)
    return f'<g class="legend">{"".join(out)}</g>'


def _points(points: list[tuple[float, float]]) -> str:
    return " ".join(f"{px:.1f},{py:.1f}" for px, py in points)


def _ticks(top: float, count: int = 5) -> tuple[float, list[float]]:
    """A round axis end at or above `top`, and the round ticks up to it."""
    if top <= 0 or not math.isfinite(top):
        return 1.0, [0.0, 1.0]
    raw = top / count
    mag = 10 ** math.floor(math.log10(raw))
    step = next(m * mag for m in (1, 2, 2.5, 5, 10) if m * mag >= raw)
    n = math.ceil(top / step - 1e-9)
    return n * step, [i * step for i in range(n + 1)]


def _tick(v: float) -> str:
    return f"{v:,.0f}" if abs(v) >= 1000 else f"{v:g}"
