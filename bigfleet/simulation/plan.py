"""`bigfleet plan`: the smallest fixed fleet that meets service objectives, for BigFleet and for
the per-cluster baseline (seed §3.1: the simulator is for "what if").

The fixed fleet is counted in racks of each *kind* (a bare-metal provider's racks of one
instance type). A candidate fleet takes the first N racks of the kind as the scenario lists
them, and past the end repeats the list (the copies are named `RACK+1`, `RACK+2`, ...). Cloud
quotas stay as the scenario gives them: the plan answers how much hardware to own when the
cloud stays available for bursts.

The search, per run kind (BigFleet, per-cluster): first the upper bound (every kind at
`max_factor` times its racks in the scenario) must meet the objectives, else the answer is "not
within bounds"; then, kind by kind (most expensive first), a binary search for the fewest racks
that still meet them with the other kinds where the search left them. Objectives are met or not
on one seeded run each: a simulation is deterministic for its seed, but the answer is not
guaranteed monotonic in the racks (a different fleet draws different random numbers), so the
result is the smallest the search found, re-checked by a final run.
"""

from __future__ import annotations

import json
import math
import re
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

from .baseline import Split
from .compare import per_cluster_report
from .measures import BANDS, band
from .run import Simulation
from .scenario import BareMetalProviderSpec, Scenario


class ObjectiveError(ValueError):
    """An --slo that cannot be read; the message says which and why."""


@dataclass(frozen=True)
class Objective:
    """What one priority band must get: a served fraction and a p99 time to capacity."""

    band: str
    served: float | None = None
    p99_seconds: float | None = None

    def met(self, summary: dict[str, Any]) -> bool:
        got = summary["bands"].get(self.band)
        if got is None:  # nothing asked for in this band
            return True
        if self.served is not None and (got["served_fraction"] or 0.0) < self.served:
            return False
        return self.p99_seconds is None or (
            got["p99_s"] is not None and got["p99_s"] <= self.p99_seconds
        )


def parse_objective(text: str) -> Objective:
    """`BAND:served=0.99,p99=600` where BAND is a band name (`>=900000`) or a priority
    (`900000`: its band)."""
    where, _, terms = text.partition(":")
    if where in BANDS:
        name = where
    elif re.fullmatch(r"-?\d+", where):
        name = band(int(where))
    else:
        raise ObjectiveError(
            f"--slo {text!r}: the band {where!r} is neither a priority nor one of "
            + ", ".join(BANDS)
        )
    values: dict[str, float] = {}
    for term in filter(None, terms.split(",")):
        key, _, value = term.partition("=")
        if key not in ("served", "p99"):
            raise ObjectiveError(f"--slo {text!r}: unknown objective {key!r} (served, p99)")
        try:
            values[key] = float(value)
        except ValueError:
            raise ObjectiveError(f"--slo {text!r}: {key} must be a number, not {value!r}") from None
        if not math.isfinite(values[key]) or values[key] < 0:
            raise ObjectiveError(f"--slo {text!r}: {key} must be a finite number >= 0")
    if "served" in values and values["served"] > 1:
        raise ObjectiveError(f"--slo {text!r}: served is a fraction between 0 and 1")
    if not values:
        raise ObjectiveError(f"--slo {text!r}: give served=FRACTION and/or p99=SECONDS")
    return Objective(name, values.get("served"), values.get("p99"))


@dataclass(frozen=True)
class Kind:
    provider: str
    instance_type: str
    racks: tuple[dict[str, Any], ...]  # the scenario's racks of this kind, as dumped

    @property
    def name(self) -> str:
        return f"{self.provider}/{self.instance_type}"

    def machines(self, n: int) -> int:
        return sum(self.rack(i)["count"] for i in range(n))

    def rack(self, i: int) -> dict[str, Any]:
        base = self.racks[i % len(self.racks)]
        copy = i // len(self.racks)
        return base if copy == 0 else {**base, "rack": f"{base['rack']}+{copy}"}

    def hourly(self, n: int) -> float:
        racks = [self.rack(i) for i in range(n)]
        return sum(r["count"] * r.get("price_per_hour", 0.0) for r in racks)


def kinds_of(scenario: Scenario) -> list[Kind]:
    raw = scenario.model_dump(mode="json", exclude_unset=True)
    found: dict[tuple[str, str], list[dict[str, Any]]] = {}
    for spec, dumped in zip(scenario.providers, raw["providers"], strict=True):
        if isinstance(spec, BareMetalProviderSpec):
            for r in dumped["racks"]:
                found.setdefault((spec.name, r["instance_type"]), []).append(r)
    return [Kind(p, t, tuple(racks)) for (p, t), racks in found.items()]


def with_racks(scenario: Scenario, kinds: list[Kind], counts: dict[str, int]) -> Scenario:
    """The scenario with `counts[kind]` racks of each kind (a provider left with none is
    dropped)."""
    raw = scenario.model_dump(mode="json", exclude_unset=True)
    providers = []
    for spec, dumped in zip(scenario.providers, raw["providers"], strict=True):
        if not isinstance(spec, BareMetalProviderSpec):
            providers.append(dumped)
            continue
        racks = [k.rack(i) for k in kinds if k.provider == spec.name for i in range(counts[k.name])]
        if racks:
            providers.append({**dumped, "racks": racks})
    raw["providers"] = providers
    return Scenario.model_validate_json(json.dumps(raw))


@dataclass
class Search:
    """One run kind's search: how it is evaluated and what it tried."""

    label: str
    evaluate: Callable[[Scenario], dict[str, Any]]
    objectives: list[Objective]
    tried: list[dict[str, Any]] = field(default_factory=list)

    def meets(self, scenario: Scenario, counts: dict[str, int]) -> bool:
        summary = self.evaluate(scenario)["summary"]
        ok = all(o.met(summary) for o in self.objectives)
        self.tried.append({"racks": dict(counts), "met": ok, "cost": summary["cost_total"]})
        return ok


def smallest_fleet(
    scenario: Scenario, kinds: list[Kind], search: Search, max_factor: float
) -> dict[str, Any]:
    upper = {k.name: max(1, math.ceil(len(k.racks) * max_factor)) for k in kinds}
    if not search.meets(with_racks(scenario, kinds, upper), upper):
        return {"met": False, "racks": upper, "tried": search.tried}
    counts = dict(upper)
    for kind in sorted(kinds, key=lambda k: -k.hourly(len(k.racks))):
        lo, hi = 0, counts[kind.name]  # hi meets the objectives
        while lo < hi:
            mid = (lo + hi) // 2
            trial = {**counts, kind.name: mid}
            if search.meets(with_racks(scenario, kinds, trial), trial):
                hi = mid
            else:
                lo = mid + 1
        counts[kind.name] = hi
    final = search.evaluate(with_racks(scenario, kinds, counts))
    return {
        "met": all(o.met(final["summary"]) for o in search.objectives),
        "racks": counts,
        "machines": {k.name: k.machines(counts[k.name]) for k in kinds},
        "owned_per_hour": round(sum(k.hourly(counts[k.name]) for k in kinds), 2),
        "summary": final["summary"],
        "tried": search.tried,
    }


def plan(
    scenario: Scenario,
    objectives: list[Objective],
    *,
    seed: int | None = None,
    split: Split = "peak",
    max_factor: float = 2.0,
) -> dict[str, Any]:
    kinds = kinds_of(scenario)
    searches = [
        Search("bigfleet", lambda s: Simulation(s, seed).run(), objectives),
        Search("per_cluster", lambda s: per_cluster_report(s, seed, split)[0], objectives),
    ]
    result: dict[str, Any] = {
        "scenario": scenario.name,
        "objectives": [o.__dict__ for o in objectives],
        "kinds": {k.name: {"racks_in_scenario": len(k.racks)} for k in kinds},
        "split": split,
    }
    for search in searches:
        result[search.label] = smallest_fleet(scenario, kinds, search, max_factor)
    fleet, alone = result["bigfleet"], result["per_cluster"]
    if fleet["met"] and alone["met"]:
        result["difference"] = {
            "machines_saved": sum(alone["machines"].values()) - sum(fleet["machines"].values()),
            "owned_per_hour_saved": round(alone["owned_per_hour"] - fleet["owned_per_hour"], 2),
            "cost_saved": round(
                alone["summary"]["cost_total"] - fleet["summary"]["cost_total"], 2
            ),
        }
    return result


def render_plan(result: dict[str, Any]) -> str:
    from .compare import summary_rows, table

    out = [
        f"plan for {result['scenario']}: the fewest racks of each kind that meet "
        + "; ".join(
            f"{o['band']}"
            + (f" served >= {o['served']:g}" if o["served"] is not None else "")
            + (f" p99 <= {o['p99_seconds']:g} s" if o["p99_seconds"] is not None else "")
            for o in result["objectives"]
        ),
        "",
    ]
    runs = [("BigFleet", result["bigfleet"]), ("per-cluster", result["per_cluster"])]
    rows = [
        (
            f"racks of {kind} (scenario: {info['racks_in_scenario']})",
            [str(r["racks"][kind]) if r["met"] else "not met" for _, r in runs],
        )
        for kind, info in result["kinds"].items()
    ]
    owned = [f"${r['owned_per_hour']:,.2f}" if r["met"] else "-" for _, r in runs]
    rows.append(("owned capacity $/h", owned))
    rows.append(("simulations run", [str(len(r["tried"])) for _, r in runs]))
    out += table([label for label, _ in runs], rows)
    if all(r["met"] for _, r in runs):
        out += ["", "at those fleets:"]
        out += table([label for label, _ in runs], summary_rows([r["summary"] for _, r in runs]))
        d = result["difference"]
        fewer, saved = d["machines_saved"], d["cost_saved"]
        out += [
            "",
            f"BigFleet needs {abs(fewer)} {'fewer' if fewer >= 0 else 'more'} owned machines "
            f"(${abs(d['owned_per_hour_saved']):,.2f}/h of owned capacity) and costs "
            f"${abs(saved):,.2f} {'less' if saved >= 0 else 'more'} over the run",
        ]
    else:
        for label, r in runs:
            if not r["met"]:
                out.append(
                    f"{label}: the objectives are not met even with "
                    + ", ".join(f"{n} racks of {k}" for k, n in r["racks"].items())
                )
    return "\n".join(out)
