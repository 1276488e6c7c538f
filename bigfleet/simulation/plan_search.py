"""The search behind `bigfleet plan` and `--equal-service`: the cheapest fleet of owned machines
meeting service objectives, within a budget of simulations.

A candidate fleet holds N machines of each *kind* (a bare-metal provider's racks of one instance
type): the kind's racks as the scenario lists them, whole, and the last one trimmed to the
machines left (past the end of the list it repeats, the copies named `RACK+1`, `RACK+2`, ...).
With `by="rack"` only whole racks are candidates. Cloud quotas stay as the scenario gives them.

Cost is the run's whole bill (`summary["cost_total"]`): owned machines at their rack's amortised
`price_per_hour` for the whole run, plus the cloud machines the run bought. So on a line where
only kind K changes, cost(n) = owned_K(n) + rest(n), owned_K known without a run.

Assumptions, each about one kind's count n with the other kinds fixed, make the search short:

- *service grows with capacity*: if n machines meet the objectives, so do more. The first
  time a kind is searched its bottom is run, and its top only when the fleet it starts from
  misses the objectives (the top missing them too means nothing on the line meets them); the
  fewest meeting them is found by steps doubling down from where it is until they bracket it
  (the first line: bottom and start bracket it), then by regula falsi on the objectives'
  margin, bisecting when a guess did not halve the bracket. A later line first runs a machine
  fewer and a machine more than where it is: if both cost more or miss, nothing on the line is
  cheaper (by both assumptions). The search for the fewest stops once the bounds below (second
  assumption) say no count under the fewest met so far can cost less than the cheapest run. A
  bigger fleet that served worse is still reported (`bigger_served_worse`), so a reader sees
  where the assumption did not hold.
- *more owned machines never raise the rest of the bill, and each saves no more of it than the
  one before* (rest(n) falls, and less and less: the bill is convex). Between two fleets run, a
  and c, no count j can cost less than owned_K(j) + rest(c), nor less than the lines through
  a and the fleet run before it, or c and the one after it, reach at j. A gap whose bound is
  not below the cheapest fleet found is skipped; the others are run at their lowest bound
  (branch and bound). Only fleets that meet the objectives draw those lines: one that misses
  leaves demand unserved, which costs nothing, and its bill bends the other way.

Kind by kind (most expensive first) the search moves to the cheapest fleet on the line, and
repeats while a line moves (a line whose other kinds have not changed since it was searched is
not searched again). Every fleet is run at most once (`Search.trial` keeps them). When the
budget of runs is spent the search says so, with the ranges it had not settled: its best fleet
is then an upper bound on the cheapest, not the answer.
"""

from __future__ import annotations

import math
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

from .objectives import Objective
from .plan_kinds import By, Kind, kinds_of, with_machines
from .scenario import Scenario

__all__ = ["By", "Kind", "Search", "bigger_served_worse", "cheapest_fleet", "kinds_of",
           "with_machines"]
# Costs closer than this are equal (the bill is rounded to cents).
CENT = 0.005


class BudgetSpent(Exception):
    """The search ran out of simulations."""


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
    _entries: dict[tuple[int, ...], dict[str, Any]] = field(default_factory=dict)

    @property
    def hours(self) -> float:
        return self.scenario.duration_seconds / 3600

    def key(self, counts: dict[str, int]) -> tuple[int, ...]:
        return tuple(counts[k.name] for k in self.kinds)

    def seed(self, counts: dict[str, int], summary: dict[str, Any]) -> None:
        """A fleet already simulated elsewhere (the comparison's own baseline run)."""
        self._record(counts, summary, runs=0)

    def trial(self, counts: dict[str, int]) -> dict[str, Any]:
        """The fleet's entry in `tried`, simulated if it was not yet; BudgetSpent when it
        would take a run more than `max_runs`."""
        k = self.key(counts)
        if k in self._entries:
            return self._entries[k]
        if self.runs >= self.max_runs:
            raise BudgetSpent
        summary = self.evaluate(with_machines(self.scenario, self.kinds, counts))["summary"]
        return self._record(counts, summary, runs=1)

    @property
    def runs(self) -> int:
        return sum(t["simulated"] for t in self.tried)

    def _record(self, counts: dict[str, int], summary: dict[str, Any], runs: int) -> dict[str, Any]:
        self.summaries[self.key(counts)] = summary
        entry = {
            "machines": {k.name: counts[k.name] for k in self.kinds},
            "racks": {k.name: len(k.layout(counts[k.name])) for k in self.kinds},
            "owned_per_hour": round(sum(k.hourly(counts[k.name]) for k in self.kinds), 2),
            "cost": summary["cost_total"],
            "met": all(o.met(summary) for o in self.objectives),
            "miss": round(sum(o.miss(summary) for o in self.objectives), 4),
            "served": {b: v["served_fraction"] for b, v in summary["bands"].items()},
            "simulated": runs,
        }
        self.tried.append(entry)
        self._entries[self.key(counts)] = entry
        return entry


def rank(entry: dict[str, Any]) -> tuple[bool, float, float, int]:
    """Better first: meets the objectives, then misses them by less, then cheaper, then fewer
    machines."""
    return (not entry["met"], entry["miss"], entry["cost"], sum(entry["machines"].values()))


@dataclass
class Line:
    """One kind's counts with the other kinds fixed at `at`."""

    search: Search
    kind: Kind
    at: dict[str, int]
    counts: list[int]  # the candidates, ascending
    # Index ranges (inclusive) not settled yet: (first, last, why).
    open: list[tuple[int, int, str]] = field(default_factory=list)
    fewest: int | None = None  # the fewest meeting the objectives, once found

    def run(self, i: int) -> dict[str, Any]:
        return self.search.trial({**self.at, self.kind.name: self.counts[i]})

    def known(self) -> dict[int, dict[str, Any]]:
        """The candidates already run (by this line or any before)."""
        out = {}
        for i, n in enumerate(self.counts):
            key = self.search.key({**self.at, self.kind.name: n})
            if key in self.search._entries:
                out[i] = self.search._entries[key]
        return out

    def best(self, first: bool) -> dict[str, Any]:
        """The best fleet on the line (BudgetSpent with `open` set when the budget runs out).
        The first time a kind's line is searched its bottom (none of the kind) is run; its top
        only when the fleet it is at misses the objectives (the top missing them too means
        nothing on the line meets them). The search steps away from the fleet it is at."""
        last = len(self.counts) - 1
        start = self.counts.index(self.at[self.kind.name])
        self.open = [(0, last, "not searched")]
        if first:
            self.run(0)
        if not self.run(start)["met"] and not self.run(last)["met"]:
            self.open = []
            return min(self.known().values(), key=rank)
        if not first and self._cheapest_nearby(start):
            self.open = []
            return self.known()[start]
        self.fewest = self._fewest_meeting(start)
        self._cheapest_from(self.fewest)
        self.open = []
        return min(self.known().values(), key=rank)

    def _cheapest_nearby(self, start: int) -> bool:
        """Whether `start` meets the objectives and a machine more or less costs more or misses
        them: then nothing on the line is cheaper (fewer machines miss them too, and the bill
        is convex where they are met)."""
        here = self.run(start)
        for i in (start - 1, start + 1):
            if 0 <= i < len(self.counts):
                near = self.run(i)
                if near["met"] and near["cost"] < here["cost"] - CENT:
                    return False
                if not near["met"] and i > start:
                    return False
        return bool(here["met"])

    def _fewest_meeting(self, start: int) -> int:
        """The fewest meeting the objectives, or the fewest that can matter: steps doubling
        away from `start` until they bracket it, then regula falsi (`_interpolate`), or
        bisection after a guess that did not halve the bracket. It stops early once no count
        below the fewest met so far can cost less than the cheapest run (the bounds of
        `_bound`): then how many fewer would still meet the objectives does not change the
        answer."""
        known = self.known()
        down, step = self.run(start)["met"], 1
        bracketed = 0 in known  # the bottom run (the first line of a kind): bisection at once
        width, guessed = len(self.counts), False
        while True:
            known = self.known()
            hi = min(i for i, e in known.items() if e["met"])
            lo = max((i for i, e in known.items() if not e["met"] and i < hi), default=-1)
            if hi - lo <= 1 or self._nothing_cheaper_below(lo, hi, known):
                return hi
            self.open = [(lo + 1, len(self.counts) - 1, "the fewest meeting the objectives "
                          f"lies from here to {self.counts[hi]} machines; the cheapest above")]
            # A guess from the margins that did not halve the bracket: bisection next.
            guess = bracketed and not (guessed and 2 * (hi - lo) > width)
            width, guessed = hi - lo, guess and lo >= 0
            if guessed:
                probe = self._interpolate(lo, hi)
            elif bracketed:
                probe = (lo + hi) // 2
            elif down:
                probe = max(lo + 1, hi - step)
            else:
                probe = min(hi - 1, lo + step)
            step *= 2
            turned = self.run(probe)["met"] != down
            bracketed = bracketed or turned

    def _interpolate(self, lo: int, hi: int) -> int:
        """Where the margin inside the objectives (`Objective.margin`, the tightest) crosses 0
        on the straight line between `lo` (missing them) and `hi` (meeting them), rounded down
        into the bracket (regula falsi)."""
        x = self.counts

        def margin(i: int) -> float:
            summary = self.search.summaries[self.search.key({**self.at, self.kind.name: x[i]})]
            return min(o.margin(summary) for o in self.search.objectives)

        below, above = margin(lo), margin(hi)
        if not (math.isfinite(below) and math.isfinite(above)) or above - below <= 0:
            return (lo + hi) // 2
        at = x[lo] + (x[hi] - x[lo]) * -below / (above - below)
        inside = [i for i in range(lo + 1, hi) if x[i] <= at]
        return inside[-1] if inside else lo + 1

    def _nothing_cheaper_below(self, lo: int, hi: int, known: dict[int, dict[str, Any]]) -> bool:
        """Whether every count between `lo` (missing the objectives, or -1) and `hi` (the fewest
        met so far) that met them would cost at least the cheapest run that meets them."""
        met = sorted(i for i, e in known.items() if e["met"])
        cheapest = min(known[i]["cost"] for i in met)
        return all(
            self._bound(j, met, lo, hi, known) >= cheapest - CENT for j in range(lo + 1, hi)
        )

    def _cheapest_from(self, fewest: int) -> None:
        """Branch and bound over the counts from `fewest` up (all meeting the objectives):
        run the count with the lowest bound until no gap's bound is below the cheapest run.
        Above the highest count run, the bill's slope there says whether more can be cheaper;
        if so, steps double upward."""
        top = len(self.counts) - 1
        while True:
            known = self.known()
            points = sorted(known)
            cheapest = min(known[i]["cost"] for i in points if i >= fewest and known[i]["met"])
            gaps = []
            for a, c in zip(points, points[1:], strict=False):
                if a < fewest or c - a < 2:
                    continue
                met = [i for i in points if known[i]["met"]]
                bound, i = min(
                    (self._bound(j, met, a, c, known), abs(2 * j - a - c), j)
                    for j in range(a + 1, c)
                )[::2]
                if bound < cheapest - CENT:
                    gaps.append((bound, a, c, i))
            high = points[-1]
            if high < top and self._falling(points, known):
                below = points[-2] if len(points) > 1 else high - 1
                gaps.append((-math.inf, high, top + 1, min(top, high + max(1, 2 * (high - below)))))
            self.open = [(a + 1, c - 1, "a cheaper count may lie here") for _, a, c, _ in gaps]
            if not gaps:
                return
            self.run(min(gaps)[3])

    def _falling(self, points: list[int], known: dict[int, dict[str, Any]]) -> bool:
        """Whether the bill still falls at the highest count run (unknown: it may)."""
        if len(points) < 2:
            return True
        return bool(known[points[-1]]["cost"] < known[points[-2]]["cost"] - CENT)

    def _bound(
        self, j: int, points: list[int], a: int, c: int, known: dict[int, dict[str, Any]]
    ) -> float:
        """The least the bill can be at count j, between runs a and c: the owned machines at j
        plus the rest of c's bill (the rest does not grow with machines); and no less than the
        lines through a and the run before it, or c and the run after it, reach at j (the
        bill is convex: a machine more saves no more than the one before), of the runs in
        `met` (fleets missing the objectives leave demand unserved, which costs nothing)."""
        x = self.counts
        cost = {i: e["cost"] for i, e in known.items()}
        owned = self.search.hours * self.kind.hourly(x[j])
        bounds = [owned + cost[c] - self.search.hours * self.kind.hourly(x[c])]
        if a in points and (k := points.index(a)) > 0:
            b = points[k - 1]
            bounds.append(cost[a] + (x[j] - x[a]) * (cost[a] - cost[b]) / (x[a] - x[b]))
        if c in points and (k := points.index(c)) + 1 < len(points):
            d = points[k + 1]
            bounds.append(cost[c] - (x[c] - x[j]) * (cost[d] - cost[c]) / (x[d] - x[c]))
        return max(bounds)


def cheapest_fleet(search: Search, max_factor: float, by: By = "machine") -> dict[str, Any]:
    kinds = search.kinds
    upper = {k.name: max(1, math.ceil(len(k.racks) * max_factor)) for k in kinds}
    counts = {k.name: k.counts(upper[k.name], by) for k in kinds}
    current = {k.name: k.machines(min(upper[k.name], len(k.racks))) for k in kinds}
    order = sorted(kinds, key=lambda k: -k.hourly(k.machines(len(k.racks))))
    searched: dict[str, dict[str, int]] = {}  # kind -> the other kinds when its line was searched
    line: Line | None = None
    passes, cut, moved = 0, False, True
    try:
        here = search.trial(current)
        while moved:
            passes += 1
            moved = False
            for kind in order:
                if searched.get(kind.name) == _others(current, kind.name):
                    continue
                line = Line(search, kind, current, counts[kind.name])
                best = line.best(kind.name not in searched)
                searched[kind.name] = _others(current, kind.name)
                if rank(best) < rank(here):
                    here, moved = best, True
                    current = dict(best["machines"])
    except BudgetSpent:
        cut = True
    unsearched = []
    if cut:
        if line is not None:
            unsearched += [
                {"kind": line.kind.name, "from": line.counts[a], "to": line.counts[b],
                 "with": _others(line.at, line.kind.name), "why": why}
                for a, b, why in line.open
            ]
        unsearched += [
            {"kind": k.name, "from": counts[k.name][0], "to": counts[k.name][-1],
             "with": _others(current, k.name), "why": "not searched"}
            for k in order
            if (line is None or k != line.kind)
            and searched.get(k.name) != _others(current, k.name)
        ]
    met = [t for t in search.tried if t["met"]]
    best_met = min(met, key=rank) if met else None
    closest = best_met or (min(search.tried, key=rank) if search.tried else None)
    out: dict[str, Any] = {
        "met": best_met is not None,
        "complete": not cut,
        "by": by,
        "upper": upper,
        "upper_machines": {k: c[-1] for k, c in counts.items()},
        "runs": search.runs,
        "passes": passes,
        "budget_spent": cut,
        "unsearched": unsearched,
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
            summary=search.summaries[search.key(closest["machines"])],
        )
    return out


def bigger_served_worse(tried: list[dict[str, Any]], bands: set[str]) -> list[dict[str, Any]]:
    """Pairs of fleets tried where one has at least the machines of the other of every kind
    (and more of some) yet served one of `bands` a smaller fraction: band, both fleets and both
    fractions, the largest drop first."""
    out = []
    for small in tried:
        for big in tried:
            s, b = small["machines"], big["machines"]
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


def _others(fleet: dict[str, int], kind: str) -> dict[str, int]:
    return {k: n for k, n in fleet.items() if k != kind}
