"""Phase 1 (seed §8): fill each need's deficit from idle machines, then speculative ones."""

from __future__ import annotations

from collections import defaultdict
from dataclasses import dataclass
from typing import TYPE_CHECKING

import numpy as np

from ..inventory import CODE
from ..models import ConfigureAction, MachineState
from ..needs import Need
from .claims import ClusterClaims
from .common import pick_same_domain, pick_same_wait_domain, pick_spread_domain

if TYPE_CHECKING:
    from .fast import FastEngine

S = MachineState


@dataclass(slots=True)
class Assignment:
    need: Need
    state: MachineState  # IDLE (configure it) or SPECULATIVE (create it, then configure)
    profile: int
    count: int

    def configure(self, provider: str, machine_id: str) -> ConfigureAction:
        return ConfigureAction(
            provider=provider,
            machine_id=machine_id,
            cluster=self.need.cluster,
            need=self.need.key,
            requirements=list(self.need.requirements),
            priority=self.need.priority,
        )


def free_pool(counts: np.ndarray, state: MachineState) -> dict[int, int]:
    row = counts[CODE[state]]
    return {int(p): int(row[p]) for p in np.flatnonzero(row)}


def by_supply(pool: dict[int, int], rank: dict[int, int]) -> list[int]:
    """Matching profiles (those `rank`ed) with supply left in `pool`, cheapest first."""
    if len(pool) < len(rank):
        return sorted((p for p, n in pool.items() if n > 0 and p in rank), key=rank.__getitem__)
    return [p for p in rank if pool.get(p, 0) > 0]


def assign_free_capacity(
    engine: FastEngine,
    needs: list[Need],
    claims: dict[str, ClusterClaims],
    demand: dict[str, int],
) -> list[Assignment]:
    inv = engine.inventory
    profiles = inv.profiles.profiles
    engine.idle_left = idle = free_pool(inv.counts, S.IDLE)
    engine.spec_left = spec = free_pool(inv.counts, S.SPECULATIVE)
    out: list[Assignment] = []
    engine.reserved = {}
    excess: dict[int, int] | None = None
    for need in needs:
        cc = claims[need.cluster]
        deficit = need.count - cc.claimed[need.key]
        if deficit <= 0 or not (idle or spec):
            continue
        rank = engine.supply_rank(need)
        supply = [(S.IDLE, p, idle) for p in by_supply(idle, rank)] + [
            (S.SPECULATIVE, p, spec) for p in by_supply(spec, rank)
        ]
        if not supply:
            continue
        if need.spec.same:
            picks = _same(need, cc, supply, deficit, profiles)
            if not picks:
                if excess is None:
                    excess = _excess_by_profile(claims)
                kept = _reserve_same(engine, need, cc, supply, deficit, excess)
                for _, p, pool, n in kept:
                    pool[p] -= n
                engine.reserved[need.key] = sum(n for *_, n in kept)
                continue
        elif need.spec.spread:
            picks = _spread(engine, need, cc, supply, deficit, profiles)
        else:
            picks = _plain(supply, deficit)
        for state, p, pool, n in picks:
            pool[p] -= n
            demand[profiles[p].name] += n
            out.append(Assignment(need, state, p, n))
    return out


def _plain(supply: list, deficit: int) -> list:
    picks = []
    for state, p, pool in supply:
        n = min(deficit, pool[p])
        if n > 0:
            picks.append((state, p, pool, n))
            deficit -= n
        if deficit == 0:
            break
    return picks


def _same(need: Need, cc: ClusterClaims, supply: list, deficit: int, profiles: list) -> list:
    key = need.spec.same
    have: dict[str, int] = defaultdict(int)
    for c in cc.claims[need.key]:
        have[profiles[c.profile].label(key)] += c.count
    free: dict[str, int] = defaultdict(int)
    for _, p, pool in supply:
        free[profiles[p].label(key)] += pool[p]
    home = pick_same_domain(need, have, free, deficit)
    if home is None:
        return []
    return _plain([s for s in supply if profiles[s[1]].label(key) == home], deficit)


def _excess_by_profile(claims: dict[str, ClusterClaims]) -> dict[int, int]:
    out: dict[int, int] = defaultdict(int)
    for cc in claims.values():
        for p, (_, n) in cc.excess.items():
            out[p] += n
    return out


def _reserve_same(
    engine: FastEngine,
    need: Need,
    cc: ClusterClaims,
    supply: list,
    deficit: int,
    excess: dict[int, int],
) -> list:
    """A `Same` need that cannot be placed yet keeps the free machines of the domain it waits
    on (draining and excess machines will complete it), away from lower priorities."""
    key = need.spec.same
    profiles = engine.inventory.profiles.profiles
    draining = engine.inventory.counts[CODE[S.DRAINING]]
    coming: dict[str, int] = defaultdict(int)
    for _, p, pool in supply:
        coming[profiles[p].label(key)] += pool[p]
    for p in engine.supply_rank(need):
        on_its_way = int(draining[p]) + excess.get(p, 0) if p < len(draining) else 0
        if on_its_way:
            coming[profiles[p].label(key)] += on_its_way
    claimed = {profiles[c.profile].label(key) for c in cc.claims[need.key]}
    home = pick_same_wait_domain(claimed, coming, {}, deficit)
    if home is None:
        return []
    return _plain([s for s in supply if profiles[s[1]].label(key) == home], deficit)


def _spread(
    engine: FastEngine, need: Need, cc: ClusterClaims, supply: list, deficit: int, profiles: list
) -> list:
    rule = need.spec.spread[0]
    key = rule.key
    counts = engine.inventory.counts
    failed = CODE[S.FAILED]
    live = counts.sum(axis=0) - counts[failed]
    current: dict[str, int] = defaultdict(int)
    for c in cc.claims[need.key]:
        current[profiles[c.profile].label(key) or ""] += c.count
    eligible = {
        profiles[p].label(key)
        for p in engine.matching(need)
        if p < len(live) and live[p] > 0 and profiles[p].label(key)
    }
    pools: dict[str, list[list]] = defaultdict(list)
    for state, p, pool in supply:
        d = profiles[p].label(key)
        if d:
            pools[d].append([state, p, pool, pool[p]])
    taken: dict[tuple, int] = defaultdict(int)
    for _ in range(deficit):
        d = pick_spread_domain(
            current, {k: sum(e[3] for e in v) for k, v in pools.items()}, eligible, rule.max_skew
        )
        if d is None:
            break
        entry = next(e for e in pools[d] if e[3] > 0)
        entry[3] -= 1
        taken[(entry[0], entry[1])] += 1
        current[d] += 1
    return [
        (state, p, pool, taken[(state, p)])
        for state, p, pool in supply
        if taken.get((state, p), 0) > 0
    ]
