"""`bigfleet simulate --compare per-cluster`: BigFleet against every cluster autoscaling alone,
on the same demand, engine and cost model (the baseline is described in `baseline.py`)."""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from .baseline import Cloud, Split, cluster_scenario, shares
from .measures import BANDS
from .report import Run, report_of
from .run import Simulation
from .scenario import Scenario


def per_cluster_report(
    scenario: Scenario,
    seed: int | None = None,
    split: Split = "peak",
    quotas: Mapping[str, Mapping[str, int]] | None = None,
    cloud: Cloud = "split",
) -> tuple[dict[str, Any], dict[str, dict[str, int]]]:
    """The baseline run's report, and the split of the capacity it used."""
    seed = scenario.seed if seed is None else seed
    split_of = shares(scenario, split, quotas, cloud)
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
    cloud: Cloud = "split",
) -> dict[str, Any]:
    fleet = Simulation(scenario, seed).run()
    baseline, split_of = per_cluster_report(scenario, seed, split, quotas, cloud)
    return {
        "scenario": scenario.name,
        "seed": fleet["seed"],
        "split": split,
        "cloud": cloud if split != "quotas" else "each",
        "shares": split_of,
        "bigfleet": fleet,
        "per_cluster": baseline,
        "difference": difference(fleet["summary"], baseline["summary"]),
        "verdict": verdict(fleet["summary"], baseline["summary"]),
    }


# The bands a verdict weighs: the service a fleet is bought for (priority 500000 and up).
SERVICE_BANDS = tuple(b for b in BANDS if b in (">=900000", "500000-899999"))
LABELS = {"bigfleet": "BigFleet", "per_cluster": "per-cluster"}


def served_worse(
    worse: dict[str, Any], than: dict[str, Any]
) -> dict[str, dict[str, float]]:
    """The service bands in which the run of summary `worse` served a smaller fraction of what
    was asked than the run of summary `than`: band -> {"served": ..., "against": ...}."""
    out = {}
    for b in SERVICE_BANDS:
        mine = (worse["bands"].get(b) or {}).get("served_fraction")
        theirs = (than["bands"].get(b) or {}).get("served_fraction")
        if mine is not None and theirs is not None and mine < theirs:
            out[b] = {"served": mine, "against": theirs}
    return out


def verdict(fleet: dict[str, Any], alone: dict[str, Any]) -> dict[str, Any]:
    """Cost and service together: which run is cheaper, by how much (`cost_difference` >= 0; its
    fraction of the dearer run's cost), and in which bands of priority >= 500000 each run
    serves a smaller fraction of what was asked than the other (exactly as reported, no
    tolerance): band -> {"served": its fraction, "against": the other run's}."""
    costs = {"bigfleet": fleet["cost_total"], "per_cluster": alone["cost_total"]}
    gap = round(costs["per_cluster"] - costs["bigfleet"], 2)
    cheaper = "bigfleet" if gap > 0 else "per_cluster" if gap < 0 else "equal"
    dearer = max(costs.values())
    fraction = round(abs(gap) / dearer, 4) if dearer and gap else 0.0
    worse = {
        "bigfleet": served_worse(fleet, alone),
        "per_cluster": served_worse(alone, fleet),
    }
    asked = any(
        (fleet["bands"].get(b) or {}).get("served_fraction") is not None for b in SERVICE_BANDS
    )
    return {
        "cheaper": cheaper,
        "cost_difference": abs(gap),
        "cost_difference_fraction": fraction,
        "bands_served_worse_by_bigfleet": worse["bigfleet"],
        "bands_served_worse_by_per_cluster": worse["per_cluster"],
        "text": _verdict_text(cheaper, abs(gap), fraction, costs, worse, asked),
    }


def _verdict_text(
    cheaper: str,
    gap: float,
    fraction: float,
    costs: dict[str, float],
    worse: dict[str, dict[str, dict[str, float]]],
    asked: bool,
) -> str:
    # Said of the cheaper run (of BigFleet when both cost the same).
    who = "bigfleet" if cheaper == "equal" else cheaper
    other = "per_cluster" if who == "bigfleet" else "bigfleet"
    if cheaper == "equal":
        head, subject = f"BigFleet and per-cluster cost the same ({_dollars(costs[who])})", (
            ", {} BigFleet serves"
        )
    else:
        head = (
            f"{LABELS[who]} costs {_dollars(gap)} less ({100 * fraction:.1f} % of "
            f"{LABELS[other]}'s {_dollars(costs[other])})"
        )
        subject = " {} serves"

    def served(bands: dict[str, dict[str, float]]) -> str:
        return " and ".join(
            f"{b} {_fraction(v['served'])} of its demand against {_fraction(v['against'])}"
            for b, v in bands.items()
        )

    if not asked:
        return head + " (nobody asked for capacity at priority >= 500000)"
    if worse[who]:
        text = head + subject.format("but") + " " + served(worse[who])
    else:
        text = head + subject.format("and") + " every band >= 500000 at least as well"
    if worse[other]:
        text += f"; {LABELS[other]} serves {served(worse[other])}"
    return text


def _equal_service_lines(eq: dict[str, Any]) -> list[str]:
    """The baseline priced at BigFleet's service (`plan.equal_service`)."""
    from .plan import free_note

    wanted = ", ".join(f"{o['band']} >= {_fraction(o['served'])}" for o in eq["objectives"])
    out = [f"per-cluster at BigFleet's service ({wanted or 'no band >= 500000 asked for'}):"]
    best, d = eq["cheapest"], eq["against_bigfleet"]
    if best is None:
        bound = ", ".join(f"{n} racks of {k}" for k, n in eq["upper"].items())
        out.append(
            f"  no per-cluster fleet tried meets it ({eq['runs']} simulations, up to "
            f"{bound or 'the scenario: no racks to add'})"
        )
    else:
        racks = ", ".join(f"{n} racks of {k}" for k, n in best["racks"].items()) or "no racks"
        out.append(
            f"  cheapest found: {racks}, cost {_dollars(best['cost'])} ({eq['runs']} simulations)"
        )
        out.append(
            f"  BigFleet costs {_dollars(abs(d))} {'less' if d >= 0 else 'more'} than per-cluster "
            "at the same service"
            if d
            else "  BigFleet costs the same as per-cluster at the same service"
        )
    if eq["free_kinds"]:
        out.append("  " + free_note(eq["free_kinds"]))
    return out


def difference(fleet: dict[str, Any], alone: dict[str, Any]) -> dict[str, Any]:
    """The baseline's figures minus BigFleet's, signed (positive: BigFleet spends or idles
    less). `verdict` says the same in words, with service."""

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
        ("machines moved to cheaper capacity", [str(s["consolidations"]) for s in summaries]),
        ("machines moved for the fleet's cost", [str(s["cost_moves"]) for s in summaries]),
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
        f"(capacity split by {result['split']}; cloud quota "
        f"{'split too' if result.get('cloud') == 'split' else 'whole to each cluster'})",
        "",
        *table(["BigFleet", "per-cluster"], summary_rows([fleet["summary"], alone["summary"]])),
        "",
    ]
    out.append(result["verdict"]["text"])
    if "equal_service" in result:
        out += ["", *_equal_service_lines(result["equal_service"])]
    out.append("")
    out.append("capacity per cluster in the per-cluster run (quota lines not named: whole):")
    for cluster, parts in result["shares"].items():
        held = ", ".join(f"{k} {n}" for k, n in parts.items() if n) or "none"
        out.append(f"  {cluster}: {held}")
    return "\n".join(out)
