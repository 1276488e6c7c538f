"""The per-cluster baseline's run (`bigfleet simulate --compare per-cluster`, `bigfleet plan`):
every cluster autoscaling alone on its share of the capacity (baseline.py), run one cluster at a
time and merged into one report; owned machines no cluster could use still billed, idle; each
cluster's share of each owned pool for the report. Runs are kept (`RunCache`) so that a planner
changing one kind's racks runs again only the clusters whose share changed."""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from .baseline import Cloud, Split, cluster_scenario, demand_of, fixed_units, shares, unallocated
from .report import Run, report_of
from .run import Simulation
from .scenario import Scenario


def per_cluster_report(
    scenario: Scenario,
    seed: int | None = None,
    split: Split = "peak",
    quotas: Mapping[str, Mapping[str, int]] | None = None,
    cloud: Cloud = "split",
    runs: RunCache | None = None,
) -> tuple[dict[str, Any], dict[str, dict[str, int]]]:
    """The baseline run's report, and the split of the capacity it used. With `runs`, a
    cluster whose own scenario was run before (the planner changing another kind's racks) is
    not run again."""
    seed = scenario.seed if seed is None else seed
    split_of = shares(scenario, split, quotas, cloud)
    cache = runs if runs is not None else RunCache()
    merged = [
        cache.run(cluster_scenario(scenario, cluster.name, split_of[cluster.name]), seed)
        for cluster in scenario.clusters
    ]
    report = report_of(Run.merged(scenario, seed, merged))
    bill_unallocated(report, scenario, split_of)
    return report, split_of


class RunCache:
    """Each cluster's last few runs by their scenario and seed (a run is deterministic for
    them). A few per cluster: the planner's next fleet differs from a recent one in one kind,
    and a run's records take memory."""

    KEEP = 8

    def __init__(self) -> None:
        self.by_cluster: dict[str, dict[str, Run]] = {}
        self.simulated = 0

    def run(self, scenario: Scenario, seed: int) -> Run:
        key = f"{seed}:{scenario.model_dump_json()}"
        mine = self.by_cluster.setdefault(scenario.name, {})
        if key in mine:
            mine[key] = mine.pop(key)  # most recently used last
            return mine[key]
        sim = Simulation(scenario, seed)
        sim.run()
        self.simulated += 1
        mine[key] = Run.of(sim)
        while len(mine) > self.KEEP:
            del mine[next(iter(mine))]
        return mine[key]


def bill_unallocated(
    report: dict[str, Any], scenario: Scenario, split_of: Mapping[str, Mapping[str, int]]
) -> None:
    """Owned machines no cluster could use still cost the per-cluster run the whole run, idle
    (both runs pay for the same hardware)."""
    hours = scenario.duration_seconds / 3600.0
    summary, cost = report["summary"], report["cost"]
    for _, machines, price, capacity_type in unallocated(scenario, split_of):
        extra = machines * price * hours
        cost["by_capacity_type"][capacity_type] = round(
            cost["by_capacity_type"].get(capacity_type, 0.0) + extra, 2
        )
        cost["total"] = summary["cost_total"] = round(summary["cost_total"] + extra, 2)
        cost["idle_machine_hours"] = summary["idle_machine_hours"] = round(
            summary["idle_machine_hours"] + machines * hours, 2
        )
    useful = summary["useful_machine_hours"]
    summary["cost_per_useful_machine_hour"] = (
        round(summary["cost_total"] / useful, 4) if useful else None
    )


def owned_pools(
    scenario: Scenario, split_of: Mapping[str, Mapping[str, int]]
) -> dict[str, dict[str, Any]]:
    """Per owned pool (a provider's racks or reserved lines of one instance type): its
    machines, each cluster's share of it against its peak demand for it, and what no cluster
    was given."""
    units = [u for u in fixed_units(scenario) if u.owned]
    if not units:
        return {}
    peaks = demand_of(scenario, units, "peak").kind_peaks
    out: dict[str, dict[str, Any]] = {}
    for unit in units:
        pool = out.setdefault(unit.kind, {"machines": 0, "clusters": {}, "unallocated": 0})
        pool["machines"] += unit.count
        for cluster, parts in split_of.items():
            n = parts.get(unit.key, 0)
            peak = peaks.get(cluster, {}).get(unit.kind, 0.0)
            if n or peak:
                held = pool["clusters"].setdefault(cluster, {"share": 0, "peak": int(peak)})
                held["share"] += n
    for pool in out.values():
        pool["unallocated"] = pool["machines"] - sum(h["share"] for h in pool["clusters"].values())
    return out
