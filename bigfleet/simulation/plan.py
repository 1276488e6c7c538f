"""`bigfleet plan`: the cheapest fixed fleet that meets service objectives, for BigFleet and
for the per-cluster baseline (design §3.1: the simulator is for "what if").

The fleet is counted in owned machines of each kind (a bare-metal provider's racks of one
instance type), by machine or, with `by="rack"`, by whole racks; cloud quotas stay as the
scenario gives them: the plan answers how much hardware to own when the cloud stays available
for bursts. Cost is the run's whole bill. The search and the assumptions that keep it short
are in `plan_search.py`; this module runs it for both run kinds, compares their answers, and
says when the budget of runs cut a search short: its best fleet is then an upper bound, and
no difference between the two is claimed.
"""

from __future__ import annotations

import multiprocessing
import os
from collections.abc import Callable
from concurrent.futures import ProcessPoolExecutor
from typing import Any

from .baseline import Split
from .compare import SERVICE_BANDS, free_note, summary_rows, table
from .objectives import Objective
from .per_cluster import RunCache, per_cluster_report
from .plan_search import (
    By,
    Kind,
    Search,
    bigger_served_worse,
    cheapest_fleet,
    kinds_of,
    with_machines,
)
from .run import Simulation
from .scenario import Scenario

__all__ = ["bigger_served_worse", "equal_service", "kinds_of", "plan", "render_plan",
           "with_machines"]


SIDES = ("bigfleet", "per_cluster")


def plan(
    scenario: Scenario,
    objectives: list[Objective],
    *,
    seed: int | None = None,
    split: Split = "peak",
    max_factor: float = 2.0,
    max_runs: int = 80,
    by: By = "machine",
    jobs: int = 1,
) -> dict[str, Any]:
    """With `jobs` > 1 (and more than one CPU) BigFleet's search and the per-cluster one run in
    two processes at once; each is the same search as run alone (the runs are deterministic),
    so the plan is the same."""
    kinds = kinds_of(scenario)
    result: dict[str, Any] = {
        "scenario": scenario.name,
        "objectives": [o.__dict__ for o in objectives],
        "kinds": {
            k.name: {
                "racks_in_scenario": len(k.racks),
                "machines_in_scenario": k.machines(len(k.racks)),
                "per_hour_per_rack": k.hourly(k.machines(1)),
            }
            for k in kinds
        },
        "split": split,
        "by": by,
        "max_factor": max_factor,
        "max_runs": max_runs,
        "free_kinds": free_kinds(kinds),
    }
    args = (scenario, objectives, seed, split, max_factor, max_runs, by)
    workers = min(jobs, len(SIDES), os.cpu_count() or 1)
    if workers > 1:
        spawn = multiprocessing.get_context("spawn")  # no forked copy of the caller's threads
        with ProcessPoolExecutor(workers, mp_context=spawn) as pool:
            futures = [pool.submit(search_side, label, *args) for label in SIDES]
            result.update(zip(SIDES, [f.result() for f in futures], strict=True))
    else:
        result.update((label, search_side(label, *args)) for label in SIDES)
    fleet, alone = result["bigfleet"], result["per_cluster"]
    if fleet["met"] and alone["met"]:
        # Only two finished searches give a difference; a cut one's fleet is only a bound.
        key = "difference" if fleet["complete"] and alone["complete"] else "difference_so_far"
        result[key] = {
            "machines_saved": sum(alone["machines"].values()) - sum(fleet["machines"].values()),
            "owned_per_hour_saved": round(alone["owned_per_hour"] - fleet["owned_per_hour"], 2),
            "cost_saved": round(alone["cost"] - fleet["cost"], 2),
        }
    return result


def search_side(
    label: str,
    scenario: Scenario,
    objectives: list[Objective],
    seed: int | None,
    split: Split,
    max_factor: float,
    max_runs: int,
    by: By,
) -> dict[str, Any]:
    """One side's search (`bigfleet` or `per_cluster`), as `plan` reports it."""
    clusters = RunCache()
    evaluate: Callable[[Scenario], dict[str, Any]]
    if label == "bigfleet":
        evaluate = lambda s: Simulation(s, seed).run()  # noqa: E731
    else:
        evaluate = lambda s: per_cluster_report(s, seed, split, runs=clusters)[0]  # noqa: E731
    search = Search(label, evaluate, objectives, scenario, kinds_of(scenario), max_runs)
    found = cheapest_fleet(search, max_factor, by)
    if label == "per_cluster":
        found["cluster_runs"] = clusters.simulated
    return found


def equal_service(
    scenario: Scenario,
    comparison: dict[str, Any],
    *,
    seed: int | None = None,
    split: Split = "peak",
    max_factor: float = 2.0,
    max_runs: int = 16,
) -> dict[str, Any]:
    """The per-cluster baseline priced at BigFleet's service: the cheapest per-cluster fleet
    (whole racks of the scenario's kinds, 0 to `max_factor` times the scenario's) whose served
    fraction in every band >= 500000 is at least BigFleet's in `comparison` (a `compare` result
    on the same scenario and seed). The scenario's own fleet is the comparison's baseline run:
    it is not simulated again."""

    served = comparison["bigfleet"]["summary"]["bands"]
    objectives = [
        Objective(b, served=served[b]["served_fraction"])
        for b in SERVICE_BANDS
        if (served.get(b) or {}).get("served_fraction") is not None
    ]
    kinds = kinds_of(scenario)
    clusters = RunCache()
    search = Search(
        "per_cluster",
        # (The same cloud quota rule as the comparison it prices.)
        lambda s: per_cluster_report(
            s, seed, split, cloud=comparison.get("cloud", "split"), runs=clusters
        )[0],
        objectives,
        scenario,
        kinds,
        max_runs,
    )
    search.seed(
        {k.name: k.machines(len(k.racks)) for k in kinds}, comparison["per_cluster"]["summary"]
    )
    found = cheapest_fleet(search, max_factor, "rack")
    cheapest = None
    if found["met"]:
        cheapest = {k: found[k] for k in ("racks", "machines", "owned_per_hour", "cost")}
    return {
        "objectives": [o.__dict__ for o in objectives],
        "max_factor": max_factor,
        "max_runs": max_runs,
        "free_kinds": free_kinds(kinds),
        "upper": found["upper"],
        "runs": found["runs"],
        "budget_spent": found["budget_spent"],
        "unsearched": found["unsearched"],
        "cheapest": cheapest,
        "against_bigfleet": (
            None
            if cheapest is None
            else round(cheapest["cost"] - comparison["bigfleet"]["summary"]["cost_total"], 2)
        ),
        "tried": found["tried"],
    }


def free_kinds(kinds: list[Kind]) -> list[str]:
    """Kinds whose racks have no `price_per_hour`: more of them costs nothing in the bill."""
    return [k.name for k in kinds if k.hourly(k.machines(len(k.racks))) == 0]


def _fleet(machines: dict[str, int]) -> str:
    return " + ".join(f"{n} x {k}" for k, n in machines.items()) or "no owned machines"


def _unsearched(gap: dict[str, Any]) -> str:
    where = f"{gap['kind']} {gap['from']} to {gap['to']} machines"
    if gap["with"]:
        where += f" with {_fleet(gap['with'])}"
    return f"{where}: {gap['why']}"


def render_plan(result: dict[str, Any]) -> str:
    out = [
        f"plan for {result['scenario']}: the cheapest fleet of owned machines (by the run's "
        "whole bill; counted by "
        f"{result.get('by', 'machine')}) that meets "
        + "; ".join(
            f"{o['band']}"
            + (f" served >= {o['served']:g}" if o["served"] is not None else "")
            + (f" p99 <= {o['p99_seconds']:g} s" if o["p99_seconds"] is not None else "")
            for o in result["objectives"]
        ),
        "",
    ]
    runs = [("BigFleet", result["bigfleet"]), ("per-cluster", result["per_cluster"])]
    for label, r in runs:
        out.append(f"{label}: {len(r['tried'])} fleets tried ({r['runs']} simulations):")
        for t in sorted(r["tried"], key=lambda t: t["cost"]):
            out.append(
                f"  {_fleet(t['machines'])}: cost ${t['cost']:,.2f}"
                + ("  meets the objectives" if t["met"] else f"  misses them (by {t['miss']:g})")
            )
        if r["budget_spent"]:
            out.append(
                f"  CUT SHORT: --max-runs {result['max_runs']} ran out before the search "
                "finished; not searched:"
            )
            out += [f"    {_unsearched(gap)}" for gap in r["unsearched"]]
        for w in r["bigger_served_worse"][:3]:
            out.append(
                f"  a bigger fleet served worse: {w['band']} {100 * w['bigger_served']:.2f} % "
                f"with {_fleet(w['bigger'])}, {100 * w['smaller_served']:.2f} % with "
                f"{_fleet(w['smaller'])}"
            )
        if len(r["bigger_served_worse"]) > 3:
            out.append(f"  ... {len(r['bigger_served_worse']) - 3} more such pairs in --json")
        out.append("")
    for label, r in runs:
        if r["met"] and r["complete"]:
            out.append(
                f"{label}: cheapest fleet meeting the objectives: {_fleet(r['machines'])} "
                f"(${r['owned_per_hour']:,.2f}/h owned), cost ${r['cost']:,.2f} over the run"
            )
        elif r["met"]:
            out.append(
                f"{label}: search cut short; the cheapest fleet found so far meeting the "
                f"objectives is {_fleet(r['machines'])} (${r['owned_per_hour']:,.2f}/h owned), "
                f"cost ${r['cost']:,.2f} over the run: an upper bound, not the answer"
            )
        else:
            out.append(
                f"{label}: no fleet tried meets the objectives (up to "
                + ", ".join(f"{n} machines of {k}" for k, n in r["upper_machines"].items())
                + ("; search cut short)" if r["budget_spent"] else ")")
            )
    if result["free_kinds"]:
        out.append(free_note(result["free_kinds"]))
    if all(r["met"] for _, r in runs):
        out += ["", "at those fleets:"]
        out += table([label for label, _ in runs], summary_rows([r["summary"] for _, r in runs]))
    if "difference" in result:
        d = result["difference"]
        fewer, saved = d["machines_saved"], d["cost_saved"]
        out += [
            "",
            f"BigFleet needs {abs(fewer)} {'fewer' if fewer >= 0 else 'more'} owned machines "
            f"(${abs(d['owned_per_hour_saved']):,.2f}/h of owned capacity) and costs "
            f"${abs(saved):,.2f} {'less' if saved >= 0 else 'more'} over the run",
        ]
    elif "difference_so_far" in result:
        d = result["difference_so_far"]
        out += [
            "",
            "no saving is claimed: a search was cut short by --max-runs, so either fleet may "
            f"shrink with more runs (the fleets found so far differ by {d['machines_saved']} "
            f"owned machines and ${d['cost_saved']:,.2f}, per-cluster minus BigFleet)",
        ]
    return "\n".join(out)
