# mypy: disable-error-code="arg-type,index,misc"
# (The reference is the seed's pseudo-code written plainly: a domain of a machine without the
# label is None and is tallied like any other, as the seed does; typed loosely on purpose.)
"""Phase 1, plainly (design §8): fill each need's deficit from idle machines, then speculative
ones, scanning the fleet per need (the fast engine's engine/phase1.py, over counts)."""

from __future__ import annotations

from collections import defaultdict

from ...models import MachineState
from ...needs import Need
from ..domains import (
    domain_of,
    pick_every_spread,
    pick_same_domain,
    pick_same_wait_domain,
    pick_spread_domain,
)
from ..ranking import supply_key
from .cycle import Cycle
from .fleet import Rec

S = MachineState


def assign_free_capacity(cycle: Cycle) -> None:
    """Each need short of its count, in table order, takes free machines that match it (IDLE
    ones, then SPECULATIVE ones, cheapest for it first; a `Same` need all in one domain, a
    spread need within its skew). A `Same` need that cannot be placed keeps the free machines
    of the domain it waits on (`cycle.reserved`, `cycle.kept`). Fills `cycle.chosen_of`,
    `.assigned`, `.configures` (IDLE) and `.creates` (SPECULATIVE), and the demand."""
    for need in cycle.needs:
        claimed = cycle.claims[need.key]
        deficit = need.count - len(claimed)
        if deficit <= 0:
            continue
        free = _free(cycle, need)
        chosen = _choose(cycle, need, claimed, free, deficit)
        if need.spec.same and not chosen:
            held = _reserve_same(cycle, need, claimed, free, deficit)
            cycle.reserved[need.key] = len(held)
            for m in held:
                cycle.taken.add(m.ordinal)
                cycle.kept.add(m.ordinal)
        for m in chosen:
            _assign(cycle, need, m)
        cycle.assigned[need.key] = len(chosen)
        cycle.chosen_of[need.key] = chosen


def _free(cycle: Cycle, need: Need) -> list[Rec]:
    """The free machines no one took that match the need: IDLE, then SPECULATIVE, each
    cheapest for it first (idle ones with the lowest reclamation value first on ties)."""
    sunk = cycle.sunk
    idle = [
        m
        for m in cycle.machines
        if m.state is S.IDLE and m.ordinal not in cycle.taken and cycle.matches(need, m)
    ]
    spec = [
        m
        for m in cycle.machines
        if m.state is S.SPECULATIVE and m.ordinal not in cycle.taken and cycle.matches(need, m)
    ]
    idle.sort(key=lambda m: (supply_key(need, m.profile, sunk), m.holder_reclamation, m.ordinal))
    spec.sort(key=lambda m: (supply_key(need, m.profile, sunk), m.ordinal))
    return idle + spec


def _assign(cycle: Cycle, need: Need, m: Rec) -> None:
    cycle.taken.add(m.ordinal)
    cycle.holder[m.ordinal] = need
    cycle.fleet.assigned[m.ordinal] = need
    cycle.demand[m.profile.name] += 1
    if m.state is S.IDLE:
        cycle.configures.append((need, m))
    else:
        cycle.creates[(m.profile.provider, need.key)].append(m)


def _choose(
    cycle: Cycle, need: Need, claimed: list[Rec], supply: list[Rec], deficit: int
) -> list[Rec]:
    """The free machines (of `supply`, in its order) the need takes for its deficit."""
    if need.spec.same:
        return _same(need, claimed, supply, deficit)
    if need.spread:
        return _spread(cycle, need, claimed, supply, deficit)
    return supply[:deficit]


def _same(need: Need, claimed: list[Rec], supply: list[Rec], deficit: int) -> list[Rec]:
    """A `Same` need's whole deficit from one domain (`pick_same_domain`), or nothing."""
    have: dict[str | None, int] = defaultdict(int)
    for m in claimed:
        have[domain_of(need, m.profile)] += 1
    free: dict[str | None, int] = defaultdict(int)
    for m in supply:
        free[domain_of(need, m.profile)] += 1
    home = pick_same_domain(need, have, free, deficit)
    if home is None:
        return []
    return [m for m in supply if domain_of(need, m.profile) == home][:deficit]


def _spread(
    cycle: Cycle, need: Need, claimed: list[Rec], supply: list[Rec], deficit: int
) -> list[Rec]:
    """A spread need's machines one at a time, each from the domain `pick_spread_domain`
    picks (several rules: `pick_every_spread`), until its deficit is met or no domain may
    take one more."""
    currents = spread_counts(need, claimed)
    return spread_take(need, currents, spread_eligible(cycle, need), supply, deficit)


def spread_counts(need: Need, machines: list[Rec]) -> list[dict[str, int]]:
    """Per spread rule, how many of `machines` are in each of its domains ("" without the
    key)."""
    currents = []
    for rule in need.spread:
        current: dict[str, int] = defaultdict(int)
        for m in machines:
            current[m.profile.label(rule.key) or ""] += 1
        currents.append(current)
    return currents


def spread_eligible(cycle: Cycle, need: Need) -> list[set[str]]:
    """Per spread rule, the domains the need could use: those of the live machines that
    match it."""
    live = [m for m in cycle.machines if m.state is not S.FAILED and cycle.matches(need, m)]
    return [
        {m.profile.label(r.key) for m in live if m.profile.label(r.key)} for r in need.spread
    ]


def spread_take(
    need: Need,
    currents: list[dict[str, int]],
    eligible: list[set[str]],
    supply: list[Rec],
    most: int,
) -> list[Rec]:
    """Up to `most` machines of `supply` (in its order within a domain), one at a time from
    the domain `pick_spread_domain` picks; each counted in `currents`. Several rules: those
    `pick_every_spread` takes, in `supply`'s order."""
    if len(need.spread) > 1:
        rules = [
            (c, e, r.max_skew) for c, e, r in zip(currents, eligible, need.spread, strict=True)
        ]
        domains = [tuple(m.profile.label(r.key) for r in need.spread) for m in supply]
        taken = pick_every_spread(rules, domains, [1] * len(supply), most)
        return [m for m, n in zip(supply, taken, strict=True) if n]
    key, current = need.spread[0].key, currents[0]
    pools: dict[str, list[Rec]] = defaultdict(list)
    for m in supply:
        label = m.profile.label(key)
        if label:
            pools[label].append(m)
    chosen: list[Rec] = []
    while len(chosen) < most:
        d = pick_spread_domain(
            current,
            {k: len(v) for k, v in pools.items()},
            eligible[0],
            need.spread[0].max_skew,
        )
        if d is None:
            break
        chosen.append(pools[d].pop(0))
        current[d] += 1
    return chosen


def _reserve_same(
    cycle: Cycle, need: Need, claimed: list[Rec], free: list[Rec], deficit: int
) -> list[Rec]:
    """A `Same` need that cannot be placed yet keeps the free machines of the domain it is
    waiting on (draining and excess machines will complete it), so lower priorities do not
    take them in the meantime."""
    coming: dict[str | None, int] = defaultdict(int)
    for m in free:
        coming[domain_of(need, m.profile)] += 1
    for m in cycle.machines:
        on_its_way = m.state is S.DRAINING or (
            m.state is S.CONFIGURED and m.ordinal not in cycle.holder
        )
        if on_its_way and cycle.matches(need, m):
            coming[domain_of(need, m.profile)] += 1
    home = pick_same_wait_domain(
        {domain_of(need, m.profile) for m in claimed}, coming, {}, deficit
    )
    return [m for m in free if domain_of(need, m.profile) == home][:deficit] if home else []
