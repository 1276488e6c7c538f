"""`bigfleet simulate --compare per-cluster`: BigFleet against every cluster autoscaling alone,
on the same demand, engine and cost model (the baseline is described in `baseline.py`)."""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from .baseline import Split, cluster_scenario, shares
from .measures import BANDS
from .report import Run, report_of
from .run import Simulation
from .scenario import Scenario


def per_cluster_report(
    scenario: Scenario,
    seed: int | None = None,
    split: Split = "peak",
    quotas: Mapping[str, Mapping[str, int]] | None = None,
) -> tuple[dict[str, Any], dict[str, dict[str, int]]]:
    """The baseline run's report, and the split of the fixed capacity it used."""
    seed = scenario.seed if seed is None else seed
    split_of = shares(scenario, split, quotas)
    runs = []
    for cluster in scenario.clusters:
        sim = Simulation(cluster_scenario(scenario, cluster.name, split_of[cluster.name]), seed)
        sim.run()
        runs.append(Run.of(sim))
    return report_of(Run.merged(scenario, seed, runs)), split_of


def compare(
    scenario: Scenario,
    seed: int | None = None,
    split: Split = "peak",
    quotas: Mapping[str, Mapping[str, int]] | None = None,
) -> dict[str, Any]:
    fleet = Simulation(scenario, seed).run()
    baseline, split_of = per_cluster_report(scenario, seed, split, quotas)
    return {
        "scenario": scenario.name,
        "seed": fleet["seed"],
        "split": split,
        "shares": split_of,
        "bigfleet": fleet,
        "per_cluster": baseline,
        "difference": difference(fleet["summary"], baseline["summary"]),
    }


def difference(fleet: dict[str, Any], alone: dict[str, Any]) -> dict[str, Any]:
    """What BigFleet saves against the baseline (positive: BigFleet is better)."""

    def minus(a: float | None, b: float | None) -> float | None:
        return None if a is None or b is None else round(b - a, 4)

    return {
        "cost_saved": minus(fleet["cost_total"], alone["cost_total"]),
        "cost_saved_fraction": (
            round(1 - fleet["cost_total"] / alone["cost_total"], 4) if alone["cost_total"] else None
        ),
        "cost_per_useful_machine_hour_saved": minus(
            fleet["cost_per_useful_machine_hour"], alone["cost_per_useful_machine_hour"]
        ),
        "idle_machine_hours_saved": minus(fleet["idle_machine_hours"], alone["idle_machine_hours"]),
    }


def _dollars(v: float | None) -> str:
    return "-" if v is None else f"${v:,.2f}"


def _seconds(v: float | None) -> str:
    return "-" if v is None else f"{v:,.0f} s"


def _fraction(v: float | None) -> str:
    return "-" if v is None else f"{100 * v:.2f} %"


def summary_rows(summaries: list[dict[str, Any]]) -> list[tuple[str, list[str]]]:
    """The lines of a side-by-side table: (what, one cell per run)."""
    rows = [
        ("cost", [_dollars(s["cost_total"]) for s in summaries]),
        (
            "cost per useful machine-hour",
            [_dollars(s["cost_per_useful_machine_hour"]) for s in summaries],
        ),
        ("useful machine-hours", [f"{s['useful_machine_hours']:,.1f}" for s in summaries]),
        ("idle machine-hours", [f"{s['idle_machine_hours']:,.1f}" for s in summaries]),
        ("machines taken from work", [str(s["preemptions"]) for s in summaries]),
    ]
    for band in reversed(BANDS):
        cells = [s["bands"].get(band) for s in summaries]
        if not any(cells):
            continue
        rows += [
            (f"{band}: served", [_fraction(c and c["served_fraction"]) for c in cells]),
            (f"{band}: p50 to capacity", [_seconds(c and c["p50_s"]) for c in cells]),
            (f"{band}: p99 to capacity", [_seconds(c and c["p99_s"]) for c in cells]),
            (f"{band}: still waiting", [str(c["waiting"]) if c else "-" for c in cells]),
        ]
    return rows


def table(headers: list[str], rows: list[tuple[str, list[str]]]) -> list[str]:
    width = max(len(r[0]) for r in rows)
    cols = [max(len(h), *(len(r[1][i]) for r in rows)) for i, h in enumerate(headers)]
    line = [" " * width + "  " + "  ".join(h.rjust(w) for h, w in zip(headers, cols, strict=True))]
    for what, cells in rows:
        line.append(
            what.ljust(width)
            + "  "
            + "  ".join(c.rjust(w) for c, w in zip(cells, cols, strict=True))
        )
    return line


def render_comparison(result: dict[str, Any]) -> str:
    fleet, alone = result["bigfleet"], result["per_cluster"]
    out = [
        f"scenario {result['scenario']} (seed {result['seed']}): "
        f"{fleet['duration_seconds']:g} s simulated; BigFleet ({fleet['shards']} shard(s)) "
        f"against {alone['shards']} clusters autoscaling alone "
        f"(fixed capacity split by {result['split']})",
        "",
        *table(["BigFleet", "per-cluster"], summary_rows([fleet["summary"], alone["summary"]])),
        "",
    ]
    d = result["difference"]
    if d["cost_saved"] is not None:
        frac = d["cost_saved_fraction"]
        out.append(
            f"BigFleet saves {_dollars(d['cost_saved'])}"
            + ("" if frac is None else f" ({100 * frac:.1f} %)")
            + f"; idle machine-hours saved {d['idle_machine_hours_saved']:,.1f}"
        )
    out.append("fixed capacity per cluster in the per-cluster run:")
    for cluster, parts in result["shares"].items():
        held = ", ".join(f"{k} {n}" for k, n in parts.items() if n) or "none"
        out.append(f"  {cluster}: {held}")
    return "\n".join(out)
