"""`bigfleet plan`: the cheapest fixed fleet that meets service objectives, for BigFleet and
for the per-cluster baseline (design §3.1: the simulator is for "what if").

The fixed fleet is counted in racks of each *kind* (a bare-metal provider's racks of one
instance type). A candidate fleet takes the first N racks of the kind as the scenario lists
them, and past the end repeats the list (the copies are named `RACK+1`, `RACK+2`, ...). Cloud
quotas stay as the scenario gives them: the plan answers how much hardware to own when the
cloud stays available for bursts.

Cost is the run's whole bill (`summary["cost_total"]`): owned racks at their amortised
`price_per_hour` for the whole run, in every state, plus the cloud machines the run bought.
The search, per run kind (BigFleet, per-cluster), is a coordinate descent that assumes
nothing about monotonicity: from the scenario's racks, kind by kind (most expensive first), it
runs every count from 0 to `max_factor` times the scenario's racks (nearest first) with the
other kinds where they are, and moves to the best fleet on that line (one that meets the
objectives before one that misses them; then the smaller miss; then the lower cost); passes
repeat until one moves nothing or `max_runs` simulations are spent. The answer is the cheapest
fleet tried that meets the objectives. Every fleet tried is kept with its cost.
"""

from __future__ import annotations

import json
import math
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

from .baseline import Split
from .compare import SERVICE_BANDS, free_note, per_cluster_report, summary_rows, table
from .objectives import Objective
from .run import Simulation
from .scenario import BareMetalProviderSpec, Scenario


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
    """One run kind's search: how a fleet is evaluated, and every fleet it tried."""

    label: str
    evaluate: Callable[[Scenario], dict[str, Any]]
    objectives: list[Objective]
    scenario: Scenario
    kinds: list[Kind]
    max_runs: int
    tried: list[dict[str, Any]] = field(default_factory=list)
    summaries: dict[tuple[int, ...], dict[str, Any]] = field(default_factory=dict)

    def key(self, counts: dict[str, int]) -> tuple[int, ...]:
        return tuple(counts[k.name] for k in self.kinds)

    def seed(self, counts: dict[str, int], summary: dict[str, Any]) -> None:
        """A fleet already simulated elsewhere (the comparison's own baseline run)."""
        self._record(counts, summary, runs=0)

    def trial(self, counts: dict[str, int]) -> dict[str, Any] | None:
        """The fleet's entry in `tried`, simulated if it was not yet; None when the budget is
        spent."""
        k = self.key(counts)
        if k in self.summaries:
            return next(t for t in self.tried if self.key(t["racks"]) == k)
        if self.runs >= self.max_runs:
            return None
        summary = self.evaluate(with_racks(self.scenario, self.kinds, counts))["summary"]
        return self._record(counts, summary, runs=1)

    @property
    def runs(self) -> int:
        return sum(t["simulated"] for t in self.tried)

    def _record(self, counts: dict[str, int], summary: dict[str, Any], runs: int) -> dict[str, Any]:
        self.summaries[self.key(counts)] = summary
        entry = {
            "racks": dict(counts),
            "machines": {k.name: k.machines(counts[k.name]) for k in self.kinds},
            "owned_per_hour": _owned(self.kinds, counts),
            "cost": summary["cost_total"],
            "met": all(o.met(summary) for o in self.objectives),
            "miss": round(sum(o.miss(summary) for o in self.objectives), 4),
            "served": {
                b: v["served_fraction"] for b, v in summary["bands"].items()
            },
            "simulated": runs,
        }
        self.tried.append(entry)
        return entry


def _owned(kinds: list[Kind], counts: dict[str, int]) -> float:
    """The fleet's owned capacity in $/h."""
    return round(float(sum(k.hourly(counts[k.name]) for k in kinds)), 2)


def _rank(entry: dict[str, Any]) -> tuple[bool, float, float, int]:
    """Better first: meets the objectives, then misses them by less, then cheaper, then fewer
    machines."""
    return (not entry["met"], entry["miss"], entry["cost"], sum(entry["machines"].values()))


def cheapest_fleet(search: Search, max_factor: float) -> dict[str, Any]:
    kinds = search.kinds
    upper = {k.name: max(1, math.ceil(len(k.racks) * max_factor)) for k in kinds}
    current = {k.name: min(upper[k.name], len(k.racks)) for k in kinds}
    here = search.trial(current)
    passes, exhausted = 0, here is None
    while here is not None and not exhausted:
        passes += 1
        moved = False
        for kind in sorted(kinds, key=lambda k: -k.hourly(len(k.racks))):
            at = current[kind.name]
            line = sorted(range(upper[kind.name] + 1), key=lambda n: (abs(n - at), n))
            for n in line:
                entry = search.trial({**current, kind.name: n})
                if entry is None:
                    exhausted = True
                    break
                if _rank(entry) < _rank(here):
                    here, moved = entry, True
            current = dict(here["racks"])
            if exhausted:
                break
        if not moved:
            break
    met = [t for t in search.tried if t["met"]]
    best = min(met, key=_rank) if met else None
    closest = best or (min(search.tried, key=_rank) if search.tried else None)
    out: dict[str, Any] = {
        "met": best is not None,
        "upper": upper,
        "runs": search.runs,
        "passes": passes,
        "budget_spent": exhausted,
        "tried": search.tried,
        "bigger_served_worse": bigger_served_worse(
            search.tried, {o.band for o in search.objectives}
        ),
    }
    if closest is not None:
        out.update(
            racks=closest["racks"],
            machines=closest["machines"],
            owned_per_hour=closest["owned_per_hour"],
            cost=closest["cost"],
            summary=search.summaries[search.key(closest["racks"])],
        )
    return out


def bigger_served_worse(tried: list[dict[str, Any]], bands: set[str]) -> list[dict[str, Any]]:
    """Pairs of fleets tried where one has at least the racks of the other of every kind (and
    more of some) yet served one of `bands` a smaller fraction: band, both fleets and both
    fractions, the largest drop first."""
    out = []
    for small in tried:
        for big in tried:
            s, b = small["racks"], big["racks"]
            if s == b or any(b[k] < s[k] for k in s):
                continue
            for band_name, was in small["served"].items():
                if band_name not in bands:
                    continue
                now = big["served"].get(band_name)
                if was is not None and now is not None and now < was:
                    out.append(
                        {
                            "band": band_name,
                            "smaller": s,
                            "smaller_served": was,
                            "bigger": b,
                            "bigger_served": now,
                        }
                    )
    return sorted(out, key=lambda d: d["bigger_served"] - d["smaller_served"])


def plan(
    scenario: Scenario,
    objectives: list[Objective],
    *,
    seed: int | None = None,
    split: Split = "peak",
    max_factor: float = 2.0,
    max_runs: int = 24,
) -> dict[str, Any]:
    kinds = kinds_of(scenario)
    evaluators: list[tuple[str, Callable[[Scenario], dict[str, Any]]]] = [
        ("bigfleet", lambda s: Simulation(s, seed).run()),
        ("per_cluster", lambda s: per_cluster_report(s, seed, split)[0]),
    ]
    result: dict[str, Any] = {
        "scenario": scenario.name,
        "objectives": [o.__dict__ for o in objectives],
        "kinds": {
            k.name: {"racks_in_scenario": len(k.racks), "per_hour_per_rack": k.hourly(1)}
            for k in kinds
        },
        "split": split,
        "max_factor": max_factor,
        "max_runs": max_runs,
        "free_kinds": free_kinds(kinds),
    }
    for label, evaluate in evaluators:
        search = Search(label, evaluate, objectives, scenario, kinds, max_runs)
        result[label] = cheapest_fleet(search, max_factor)
    fleet, alone = result["bigfleet"], result["per_cluster"]
    if fleet["met"] and alone["met"]:
        result["difference"] = {
            "machines_saved": sum(alone["machines"].values()) - sum(fleet["machines"].values()),
            "owned_per_hour_saved": round(alone["owned_per_hour"] - fleet["owned_per_hour"], 2),
            "cost_saved": round(alone["cost"] - fleet["cost"], 2),
        }
    return result


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
    (racks of the scenario's kinds, 0 to `max_factor` times the scenario's) whose served fraction
    in every band >= 500000 is at least BigFleet's in `comparison` (a `compare` result on the
    same scenario and seed). The scenario's own fleet is the comparison's baseline run: it is
    not simulated again."""

    served = comparison["bigfleet"]["summary"]["bands"]
    objectives = [
        Objective(b, served=served[b]["served_fraction"])
        for b in SERVICE_BANDS
        if (served.get(b) or {}).get("served_fraction") is not None
    ]
    kinds = kinds_of(scenario)
    search = Search(
        "per_cluster",
        # (The same cloud quota rule as the comparison it prices.)
        lambda s: per_cluster_report(s, seed, split, cloud=comparison.get("cloud", "split"))[0],
        objectives,
        scenario,
        kinds,
        max_runs,
    )
    search.seed({k.name: len(k.racks) for k in kinds}, comparison["per_cluster"]["summary"])
    found = cheapest_fleet(search, max_factor)
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
    return [k.name for k in kinds if k.hourly(len(k.racks)) == 0]


def _racks(racks: dict[str, int]) -> str:
    return " + ".join(f"{n} x {k}" for k, n in racks.items()) or "no racks"


def render_plan(result: dict[str, Any]) -> str:
    out = [
        f"plan for {result['scenario']}: the cheapest fleet of racks (by the run's whole bill) "
        "that meets "
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
                f"  {_racks(t['racks'])}: cost ${t['cost']:,.2f}"
                + ("  meets the objectives" if t["met"] else f"  misses them (by {t['miss']:g})")
            )
        if r["budget_spent"]:
            out.append(
                f"  (stopped at --max-runs {result['max_runs']}: a longer search may find a "
                "cheaper fleet)"
            )
        for w in r["bigger_served_worse"][:3]:
            out.append(
                f"  a bigger fleet served worse: {w['band']} {100 * w['bigger_served']:.2f} % "
                f"with {_racks(w['bigger'])}, {100 * w['smaller_served']:.2f} % with "
                f"{_racks(w['smaller'])}"
            )
        if len(r["bigger_served_worse"]) > 3:
            out.append(f"  ... {len(r['bigger_served_worse']) - 3} more such pairs in --json")
        out.append("")
    for label, r in runs:
        if r["met"]:
            out.append(
                f"{label}: cheapest fleet meeting the objectives: {_racks(r['racks'])} "
                f"(${r['owned_per_hour']:,.2f}/h owned), cost ${r['cost']:,.2f} over the run"
            )
        else:
            out.append(
                f"{label}: no fleet tried meets the objectives (up to "
                + ", ".join(f"{n} racks of {k}" for k, n in r["upper"].items())
                + ")"
            )
    if result["free_kinds"]:
        out.append(free_note(result["free_kinds"]))
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
    return "\n".join(out)
