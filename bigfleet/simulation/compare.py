"""`bigfleet simulate --compare per-cluster`: BigFleet against every cluster autoscaling alone,
on the same demand, engine and cost model (the baseline is described in `baseline.py`)."""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from .baseline import Cloud, Split
from .measures import BANDS
from .per_cluster import owned_pools, per_cluster_report
from .run import Simulation
from .scenario import Scenario
from .units import duration


def compare(
    scenario: Scenario,
    seed: int | None = None,
    split: Split = "peak",
    quotas: Mapping[str, Mapping[str, int]] | None = None,
    cloud: Cloud = "split",
) -> dict[str, Any]:
    fleet = Simulation(scenario, seed).run()
    baseline, split_of = per_cluster_report(scenario, seed, split, quotas, cloud)
    out = comparison(fleet, baseline, scenario.name, split, cloud, split_of)
    out["owned_pools"] = owned_pools(scenario, split_of)
    return out


def comparison(
    fleet: dict[str, Any],
    baseline: dict[str, Any],
    scenario: str,
    split: Split = "peak",
    cloud: Cloud = "split",
    split_of: dict[str, dict[str, int]] | None = None,
) -> dict[str, Any]:
    """The comparison of two runs' reports, as `compare` returns it."""
    return {
        "scenario": scenario,
        "seed": fleet.get("seed"),
        "split": split,
        "cloud": cloud if split != "quotas" else "each",
        "shares": split_of or {},
        "bigfleet": fleet,
        "per_cluster": baseline,
        "difference": difference(fleet["summary"], baseline["summary"]),
        "verdict": verdict(fleet["summary"], baseline["summary"]),
        "headline": headline(fleet, baseline),
    }


# The bands a verdict weighs: the service a fleet is bought for (priority 500000 and up).
SERVICE_BANDS = tuple(b for b in BANDS if b in (">=900000", "500000-899999"))
LABELS = {"bigfleet": "BigFleet", "per_cluster": "per-cluster"}


def served_worse(worse: dict[str, Any], than: dict[str, Any]) -> dict[str, dict[str, float]]:
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
        head, subject = (
            f"BigFleet and per-cluster cost the same ({_dollars(costs[who])})",
            (", {} BigFleet serves"),
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


def headline(fleet: dict[str, Any], alone: dict[str, Any]) -> dict[str, Any]:
    """The comparison in one line, from the two runs' reports: cost per hour, the fraction of
    the machine-hours asked at priority >= 500000 that was served (the verdict's bands,
    pooled), and the p99 time to capacity of the highest band anyone asked in. Each clause
    says which way it goes for BigFleet, so a dearer or worse pool reads as one."""
    hours = (fleet.get("duration_seconds") or 0) / 3600
    runs = {"bigfleet": fleet, "per_cluster": alone}
    per_hour = {
        k: round(r["summary"]["cost_total"] / hours, 2) if hours else None for k, r in runs.items()
    }
    served = {k: _served_fraction(r, SERVICE_BANDS) for k, r in runs.items()}
    top = next(
        (b for b in reversed(BANDS) if any(b in r["summary"]["bands"] for r in runs.values())),
        None,
    )
    p99 = {k: (r["summary"]["bands"].get(top) or {}).get("p99_s") for k, r in runs.items()}
    costs = fleet["summary"]["cost_total"], alone["summary"]["cost_total"]
    clauses = [_cost_clause(per_hour, *costs, _saved_fraction(*costs))]
    if served["bigfleet"] is None and served["per_cluster"] is None:
        clauses.append("nobody asked for capacity at priority >= 500000")
    else:
        a, b = _percents(served["bigfleet"], served["per_cluster"])
        way = _which_way(served["bigfleet"], served["per_cluster"], ("more", "less", "as much"))
        clauses.append(
            f"served{way} of the machine-hours asked at priority >= 500000: {a} against {b}"
        )
    if top is not None:
        a, b = duration(p99["bigfleet"]), duration(p99["per_cluster"])
        # Said as printed: two waits that read the same are "as long".
        way = (
            " as long"
            if a == b
            else _which_way(p99["bigfleet"], p99["per_cluster"], ("longer", "less", "as long"))
        )
        clauses.append(f"the highest band ({top}) waited{way}: p99 {a} against {b}")
    return {
        "cost_per_hour": per_hour,
        "served_fraction_at_500000_and_up": served,
        "highest_band": top,
        "highest_band_p99_s": p99,
        "text": "BigFleet pooled: " + "; ".join(clauses) + ".",
    }


def _served_fraction(report: dict[str, Any], bands: tuple[str, ...]) -> float | None:
    """Served over asked machine-hours, summed over `bands`; None when none was asked."""
    per_band = report.get("time_to_capacity_by_priority_band") or {}
    asked = sum(per_band.get(b, {}).get("asked_machine_hours") or 0 for b in bands)
    got = sum(per_band.get(b, {}).get("served_machine_hours") or 0 for b in bands)
    return round(got / asked, 4) if asked else None


def _cost_clause(
    per_hour: dict[str, float | None], fleet: float, alone: float, saved: float | None
) -> str:
    if per_hour["bigfleet"] is None or per_hour["per_cluster"] is None:
        costs = f"{_dollars(fleet)} against {_dollars(alone)}"
    else:
        costs = f"{_per_hour(per_hour['bigfleet'])} against {_per_hour(per_hour['per_cluster'])}"
    if fleet == alone:
        how = "the same cost"
    elif saved is None:  # every cluster alone cost nothing
        how = "dearer"
    else:
        pct = f"{100 * abs(saved):.1f} %" if round(100 * abs(saved), 1) else "under 0.1 %"
        how = f"{pct} {'cheaper' if fleet < alone else 'dearer'}"
    return f"{costs} for every cluster alone ({how})"


def _per_hour(v: float) -> str:
    return f"${v:,.0f}/h" if v >= 100 else f"${v:,.2f}/h"


def _percents(a: float | None, b: float | None) -> tuple[str, str]:
    """Two fractions as percentages, with a second decimal when one would print them alike."""

    def pct(v: float | None, digits: int) -> str:
        return "-" if v is None else f"{100 * v:.{digits}f} %"

    digits = 1 if pct(a, 1) != pct(b, 1) or a == b else 2
    return pct(a, digits), pct(b, digits)


def _which_way(mine: float | None, theirs: float | None, words: tuple[str, str, str]) -> str:
    """ " " + words[0] when mine is greater, [1] smaller, [2] equal; "" when either is missing."""
    if mine is None or theirs is None:
        return ""
    return " " + (words[0] if mine > theirs else words[1] if mine < theirs else words[2])


def free_note(names: list[str]) -> str:
    """What a comparison or a plan says when some racks have no price (more is free)."""
    return (
        f"note: racks of {', '.join(names)} have no price_per_hour in the scenario, so more of "
        "them costs nothing here; give them their amortised price for a fair answer"
    )


def _equal_service_lines(eq: dict[str, Any]) -> list[str]:
    """The baseline priced at BigFleet's service (`plan.equal_service`)."""
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
    if eq["budget_spent"]:
        out.append(
            "  cut short by --equal-service-runs (a longer search may find a cheaper fleet); "
            "not searched: "
            + "; ".join(f"{g['kind']} {g['from']} to {g['to']} machines" for g in eq["unsearched"])
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
        "cost_saved_fraction": _saved_fraction(fleet["cost_total"], alone["cost_total"]),
        "cost_per_useful_machine_hour_saved": minus(
            fleet["cost_per_useful_machine_hour"], alone["cost_per_useful_machine_hour"]
        ),
        "idle_machine_hours_saved": minus(fleet["idle_machine_hours"], alone["idle_machine_hours"]),
    }


def _saved_fraction(fleet: float, alone: float) -> float | None:
    """1 - BigFleet's cost over the baseline's (negative: BigFleet is dearer)."""
    return round(1 - fleet / alone, 4) if alone else None


def _dollars(v: float | None) -> str:
    return "-" if v is None else f"${v:,.2f}"


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
            (f"{band}: p50 to capacity", [duration(c and c["p50_s"]) for c in cells]),
            (f"{band}: p99 to capacity", [duration(c and c["p99_s"]) for c in cells]),
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
        result["headline"]["text"],
        "",
        f"scenario {result['scenario']} (seed {result['seed']}): "
        f"{duration(fleet['duration_seconds'])} simulated; BigFleet ({fleet['shards']} shard(s)) "
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
    if result.get("owned_pools"):
        out += ["", "owned pools in the per-cluster run: each cluster's share / its peak demand"]
        for kind, pool in result["owned_pools"].items():
            held = ", ".join(
                f"{c} {h['share']}/{h['peak']}" for c, h in pool["clusters"].items() if h["share"]
            )
            spare = pool["unallocated"]
            out.append(
                f"  {kind} ({pool['machines']}): {held or 'none'}"
                + (f"; unallocated {spare} (paid, idle)" if spare else "")
            )
    out.append("")
    out.append("capacity per cluster in the per-cluster run (quota lines not named: whole):")
    for cluster, parts in result["shares"].items():
        held = ", ".join(f"{k} {n}" for k, n in parts.items() if n) or "none"
        out.append(f"  {cluster}: {held}")
    return "\n".join(out)
