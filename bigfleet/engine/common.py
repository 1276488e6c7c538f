"""What both engines share: the decision record, cross-cycle memory and the tie-break rules.

Both engines implement the same rules (docs/engine.md); the fast one over profile counts and
numpy columns, the reference one over a plain list of machine objects. The rules that are pure
arithmetic over a few numbers live here so the two cannot drift apart.
"""

from __future__ import annotations

import time
from collections import defaultdict
from collections.abc import Iterable, Iterator, Mapping, Sequence
from dataclasses import dataclass, field
from math import inf
from typing import Any, overload

import numpy as np

from ..cost import VictimWeights, effective_cost, victim_merit
from ..models import Action, MachineState, NodeSelectorRequirement, Shortfall, stamper
from ..needs import Need
from ..policy import Policy
from ..profiles import Profile
from ..requirements import describe as describe_requirement

# Claimable states of a cluster's own machines, in the order a need claims them.
CLAIM_ORDER = (MachineState.CONFIGURED, MachineState.CONFIGURING, MachineState.CREATING)


@dataclass(frozen=True, slots=True)
class Preemption:
    machine_id: str
    victim_cluster: str
    victim_priority: int
    preemptor_cluster: str
    preemptor_priority: int
    grace_seconds: float


class Actions(Sequence[Action]):
    """A decision's actions, in order. Most of a moving cycle's actions come in runs that
    differ only in the machine they name (a need's configures on one profile, a victim's
    drains): the engine adds such a run as its first validated action and the other machines'
    ids (`stamp`), and each further action is made only when someone reads it, one at a time,
    so a cycle that names 30 000 machines builds no 30 000 objects inside the decision (nor
    makes the cyclic collector walk them). Reading gives exactly the actions appended one by
    one would."""

    def __init__(self, actions: Iterable[Action] = ()) -> None:
        # (first action, the field the rest change, the rest's values of it, whether the
        # first is itself an action or only the template of the rest)
        self._runs: list[tuple[Action, str, Sequence[Any], bool]] = []
        self._len = 0
        self.extend(actions)

    def append(self, action: Action) -> None:
        self._runs.append((action, "", [], True))
        self._len += 1

    def extend(self, actions: Iterable[Action]) -> None:
        for action in actions:
            self.append(action)

    def stamp(self, first: Action, field: str, values: Sequence[Any]) -> None:
        """`first`, then a copy of it for each of `values` with `field` set to the value."""
        self._runs.append((first, field, values, True))
        self._len += 1 + len(values)

    def stamp_all(self, template: Action, field: str, values: Sequence[Any]) -> None:
        """A copy of `template` for each of `values` with `field` set to the value (the
        template itself is not one of the actions)."""
        if values:
            self._runs.append((template, field, values, False))
            self._len += len(values)

    def kinds(self) -> set[str]:
        """The kinds of action present (without making any)."""
        return {first.kind for first, *_ in self._runs}

    def __len__(self) -> int:
        return self._len

    def __iter__(self) -> Iterator[Action]:
        for first, name, values, itself in self._runs:
            if itself:
                yield first
            if values:
                yield from map(stamper(first, name), values)

    @overload
    def __getitem__(self, index: int) -> Action: ...
    @overload
    def __getitem__(self, index: slice) -> list[Action]: ...
    def __getitem__(self, index: int | slice) -> Action | list[Action]:
        return list(self)[index]

    def __eq__(self, other: object) -> bool:
        if isinstance(other, Sequence) and not isinstance(other, str):
            return len(self) == len(other) and list(self) == list(other)
        return NotImplemented

    __hash__ = None  # type: ignore[assignment]

    def __repr__(self) -> str:
        return f"Actions({list(self)!r})"


class PhaseClock:
    """Milliseconds spent per part of a decision cycle, summed until `take`: what
    `bigfleet bench engine --phases` prints. Off unless `on` is set (a workflow never sets it:
    the clock is read only when on), so an engine pays one attribute test per part."""

    def __init__(self) -> None:
        self.on = False
        self.spent: dict[str, float] = defaultdict(float)
        self._last = 0.0

    def start(self) -> None:
        if self.on:
            self._last = time.perf_counter()

    def lap(self, part: str) -> None:
        """Counts the time since `start` or the last lap toward `part`."""
        if self.on:
            now = time.perf_counter()
            self.spent[part] += (now - self._last) * 1000
            self._last = now

    def take(self) -> dict[str, float]:
        """The times counted so far, per part, and a fresh start."""
        spent, self.spent = dict(self.spent), defaultdict(float)
        return spent

# The error of a machine the engine failed for its transition's time (`Decision.timed_out`).
TIMED_OUT = "transition timed out"


@dataclass
class Decision:
    """One cycle's output. `satisfied` counts, per need key, the machines it holds or has on the
    way (claimed plus newly assigned); `earmarked` counts supply it waits for (draining or excess
    machines, preemption victims). A consolidation's replacement is in neither."""

    actions: Actions = field(default_factory=Actions)
    shortfalls: list[Shortfall] = field(default_factory=list)
    satisfied: dict[str, int] = field(default_factory=dict)
    earmarked: dict[str, int] = field(default_factory=dict)
    preemptions: list[Preemption] = field(default_factory=list)
    timed_out: list[str] = field(default_factory=list)
    # Replacements started this cycle toward cheaper capacity, per need key (their configures
    # and creates are among `actions`; the machines they replace drain once they are up).
    consolidations: dict[str, int] = field(default_factory=dict)
    # Machines moved for the fleet's cost this cycle, per need key: owned machines a need
    # takes from backfill at least `Policy.displace_gap` below it instead of buying elastic
    # capacity (their drains are among `preemptions`).
    cost_moves: dict[str, int] = field(default_factory=dict)

    def __post_init__(self) -> None:
        if not isinstance(self.actions, Actions):
            self.actions = Actions(self.actions)

    def count(self, kind: str) -> int:
        return sum(
            len(a.machine_ids) if a.kind == "create" else 1 for a in self.actions if a.kind == kind
        )


@dataclass
class EngineMemory:
    """What a shard remembers between cycles: shortfall ages and the demand forecast."""

    shortfall_age: dict[str, int] = field(default_factory=dict)
    forecast: dict[str, float] = field(default_factory=dict)
    # Per need key: its count and since when it has had it (consolidation waits for stability).
    # Not in the shard's snapshot: after a restore every need counts as just changed.
    count_since: dict[str, tuple[int, float]] = field(default_factory=dict)
    # Clusters whose disruption budget allows no consolidation move now (bigfleet/disruption.py;
    # set by the shard before each cycle, not in its snapshot).
    frozen: frozenset[str] = frozenset()

    def observe_counts(self, needs: list[Need], now: float) -> None:
        seen = self.count_since
        for n in needs:
            had = seen.get(n.key)
            if had is None or had[0] != n.count:
                seen[n.key] = (n.count, now)
        if len(seen) > len(needs):
            present = {n.key for n in needs}
            self.count_since = {k: v for k, v in seen.items() if k in present}

    def stable(self, need: Need, policy: Policy, now: float) -> bool:
        """The need's count has not changed for `consolidation_stable_seconds`."""
        since = self.count_since.get(need.key, (need.count, now))[1]
        return now - since >= policy.consolidation_stable_seconds

    def next_stable(self, policy: Policy, now: float) -> float:
        """When the next need not yet stable becomes so (infinity: all are)."""
        wait = policy.consolidation_stable_seconds
        return min((t + wait for _, t in self.count_since.values() if t + wait > now), default=inf)

    def wants_soon(self, profile: Profile, policy: Policy) -> bool:
        return self.forecast.get(profile.name, 0.0) >= policy.forecast_hold

    def observe_demand(self, demand: Mapping[str, int], policy: Policy) -> None:
        """Decayed average of machines wanted per profile per cycle."""
        decay = policy.forecast_decay
        for name in set(self.forecast) | set(demand):
            value = decay * self.forecast.get(name, 0.0) + (1 - decay) * demand.get(name, 0)
            if value < 1e-3:
                self.forecast.pop(name, None)
            else:
                self.forecast[name] = value


def supply_key(need: Need, profile: Profile, sunk: bool = True) -> tuple[float, float, str]:
    """How a need ranks machines of a profile, for keeping its own and for taking idle,
    speculative, draining and excess ones: cheapest effective cost for the fleet (owned and
    committed capacity at its marginal price, 0: `cost.marginal_price`; at its list price when
    not `sunk`, as before `Policy.fleet_cost`), then the lower list price, then by name."""
    price = profile.marginal_price if sunk else profile.price_per_hour
    return (
        effective_cost(price, profile.interruption_probability, need.spec.interruption_penalty),
        profile.price_per_hour,
        profile.name,
    )


def victim_order(weights: VictimWeights, holder: Need, policy: Policy) -> tuple:
    """How a configured machine held by `holder` ranks as a preemption victim, best first
    (before the profile-name and row tie-breaks): the seed's four-factor merit, then the
    holder's priority and table order."""
    merit = victim_merit(
        weights,
        holder.priority,
        holder.spec.drain_seconds or policy.default_drain_seconds,
        holder.spec.interruption_penalty,
        holder.spec.reclamation_penalty,
    )
    return (-merit, holder.priority, holder.sort_key())


def need_matches(need: Need, profile: Profile, matches: bool) -> bool:
    """`matches` is requirement and resource matching; a `Same` need also needs the key."""
    return matches and (need.spec.same is None or profile.label(need.spec.same) is not None)


def domain_of(need: Need, profile: Profile) -> str | None:
    return profile.label(need.spec.same) if need.spec.same else None


def pick_same_domain(
    need: Need, claimed: Mapping[str, int], supply: Mapping[str, int], deficit: int
) -> str | None:
    """The one domain a `Same` need grows in: where it already is, else the one with the most
    free supply that can hold the whole deficit (ties by name). None: no domain can."""
    if claimed:
        home = max(sorted(claimed), key=lambda d: claimed[d])
        return home if supply.get(home, 0) >= deficit else None
    fits = [d for d in sorted(supply) if supply[d] >= deficit]
    return max(fits, key=lambda d: supply[d]) if fits else None


def pick_same_wait_domain(
    claimed_domains: Iterable[str],
    incoming: Mapping[str, int],
    victims: Mapping[str, int],
    deficit: int,
) -> str | None:
    """Where a `Same` need that Phase 1 could not place waits or preempts: its own domain if it
    has one, else the domain needing the fewest victims (ties by name). None: no domain can."""
    domains = sorted(set(claimed_domains)) or sorted(set(incoming) | set(victims))
    best: tuple[int, str] | None = None
    for d in domains:
        have, take = incoming.get(d, 0), victims.get(d, 0)
        if have + take >= deficit and (best is None or max(0, deficit - have) < best[0]):
            best = (max(0, deficit - have), d)
    return best[1] if best else None


def domain_tallies(
    values: list[str], claimed: set[int], deficit: int, *columns: np.ndarray
) -> list[dict[str, int]]:
    """Per-domain columns as the dicts `pick_same_domain` and `pick_same_wait_domain` read,
    cut to the domains they can pick (a rack label has thousands): the need's own domains if
    it has any, else those whose columns together can complete its `deficit`."""
    keep = sorted(claimed) if claimed else np.flatnonzero(sum(columns) >= deficit).tolist()
    return [{values[d]: int(column[d]) for d in keep} for column in columns]


def pick_spread_domain(
    current: Mapping[str, int], supply: Mapping[str, int], eligible: Iterable[str], max_skew: int
) -> str | None:
    """Next domain for a spread need: the least-filled one with supply, unless that would put
    it more than `max_skew` above the least-filled eligible domain."""
    open_domains = [d for d in sorted(supply) if supply[d] > 0]
    if not open_domains:
        return None
    best = min(open_domains, key=lambda d: current.get(d, 0))
    floor = min((current.get(d, 0) for d in eligible), default=0)
    if current.get(best, 0) + 1 - floor > max_skew:
        return None
    return best


def consolidation_budget(policy: Policy, configured: int) -> int:
    """Moves toward cheaper capacity a cycle may start: `consolidation_max_fraction` of the
    shard's configured machines, at least one (none when the fraction is 0 or none is
    configured)."""
    if policy.consolidation_max_fraction <= 0 or configured <= 0:
        return 0
    return max(1, int(policy.consolidation_max_fraction * configured))


def worth_moving(need: Need, policy: Policy, saving_per_hour: float) -> bool:
    """A move saving `saving_per_hour` of effective cost is worth its disruption: at least
    the policy's minimum saving, and the saving over the horizon exceeds what the need loses
    by leaving its machine (its reclamation penalty)."""
    return (
        saving_per_hour >= policy.consolidation_min_saving_per_hour
        and saving_per_hour * policy.consolidation_horizon_hours > need.spec.reclamation_penalty
    )


def move_domain(need: Need, profile: Profile) -> tuple[str | None, ...]:
    """The domains a replacement must share with the machine it replaces: the need's `same`
    key and its spread keys (so a move never breaks a `Same` placement nor changes a spread)."""
    keys = ([need.spec.same] if need.spec.same else []) + [r.key for r in need.spec.spread]
    return tuple(profile.label(k) for k in keys)


def describe(requirements: Iterable[NodeSelectorRequirement]) -> str:
    return "; ".join(describe_requirement(r) for r in requirements) or "any machine"


def age_shortfalls(
    memory: EngineMemory,
    policy: Policy,
    unmet: list[tuple[Need, int, str]],
) -> list[Shortfall]:
    """Turn this cycle's unmet needs (table order) into aged, bounded shortfalls (seed §9)."""
    ages: dict[str, int] = {}
    out: list[Shortfall] = []
    for need, deficit, profile in unmet:
        ident = f"{need.key}|{need.arrival}"
        age = memory.shortfall_age.get(ident, 0) + 1
        ages[ident] = age
        if len(out) < policy.max_shortfalls:
            out.append(
                Shortfall(
                    cluster=need.cluster,
                    profile=profile,
                    requirements=list(need.requirements),
                    priority=need.priority,
                    count=deficit,
                    age=age,
                    interruption_penalty=need.spec.interruption_penalty,
                    escalated=age > policy.escalate_after_cycles,
                    same=need.spec.same,
                )
            )
    memory.shortfall_age = ages
    return out
