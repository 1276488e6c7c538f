"""Phase 1 (design §8): fill each need's deficit from idle machines, then speculative ones."""

from __future__ import annotations

from collections import Counter, defaultdict
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from heapq import heapify, heappop, heapreplace
from itertools import islice
from typing import cast

import numpy as np

from ..inventory import CODE
from ..models import ConfigureAction, MachineState
from ..needs import Need
from .claims import ClusterClaims, excess_by_profile
from .cycle import CycleState
from .domains import (
    domain_tallies,
    pick_every_spread,
    pick_same_domain,
    pick_same_wait_domain,
    pick_spread_domain,
)
from .supply import pool_column

S = MachineState


@dataclass(slots=True)
class Assignment:
    """`count` free machines of one profile in one state, assigned to `need` this cycle."""

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


def assign_free_capacity(state: CycleState) -> list[Assignment]:
    """Phase 1 of design §8 ("why idle before speculative"; docs/engine.md, The cycle 2).

    Walks `state.needs` in table order; each need short of its count after its claims takes
    free machines from `state.idle_left` before `state.spec_left`, each in its supply order
    (cheapest effective cost, then name), and the pools shrink by what it takes. A `Same` need
    takes all of its deficit in one domain or nothing; one that must wait keeps its domain's
    free machines in `state.reserved`. A spread need fills domains one machine at a time
    within `max_skew`. Every assigned machine counts in `state.demand`.

    Returns the assignments, one per (need, state, profile): IDLE ones become Configure
    actions, SPECULATIVE ones Create actions, once rows are picked.
    """
    table = state.inventory.profiles
    profiles = table.profiles
    idle, spec, claims = state.idle_left, state.spec_left, state.claims
    offered, demand = state.supply.offered, state.demand
    out: list[Assignment] = []
    on_its_way: np.ndarray | None = None
    for need in state.needs:
        cc = claims[need.cluster]
        deficit = need.count - cc.claimed[need.key]
        if deficit <= 0 or not (idle or spec):
            continue
        if not (need.spec.same or need.spread):
            picks = _first_free(need, deficit, ((S.IDLE, idle), (S.SPECULATIVE, spec)), offered)
        elif need.spec.same:
            free = _free_by_domain(state, need)
            if not free.any():
                continue
            picks = _same(state, need, cc, free, deficit)
            if not picks:
                if on_its_way is None:
                    on_its_way = _on_its_way(state)
                kept = _reserve_same(state, need, cc, free, deficit, on_its_way)
                for free_state, p, pool, n in kept:
                    pool[p] -= n
                    if free_state is S.IDLE:
                        state.kept_idle[p] = state.kept_idle.get(p, 0) + n
                state.reserved[need.key] = sum(n for *_, n in kept)
                continue
        else:
            supply = _offer(state, need)
            if not supply:
                continue
            picks = _spread(state, need, cc, supply, deficit)
        for free_state, p, pool, n in picks:
            pool[p] -= n
            demand[profiles[p].name] += n
            out.append(Assignment(need, free_state, p, n))
    return out


def _first_free(
    need: Need,
    deficit: int,
    pools: tuple[tuple[S, dict[int, int]], ...],
    offered: Callable[[dict[int, int], Need], list[int]],
) -> list:
    """`_plain` over each pool's offer in turn (idle, then speculative), reading a pool's
    offer only when the pools before it fell short."""
    picks = []
    for free_state, pool in pools:
        for p in offered(pool, need):
            n = min(deficit, pool[p])
            if n > 0:
                picks.append((free_state, p, pool, n))
                deficit -= n
            if deficit == 0:
                return picks
    return picks


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


def _same(state: CycleState, need: Need, cc: ClusterClaims, free: np.ndarray, deficit: int) -> list:
    """A `Same` need's picks: all of its deficit in one domain (`free`: its free machines per
    domain, by label code), or none."""
    same = cast(str, need.spec.same)  # (only `Same` needs)
    labels = state.inventory.profiles.labels(same)
    codes, values = state.inventory.profiles.label_codes(same)
    have: dict[str, int] = defaultdict(int)
    for c in cc.claims[need.key]:
        have[cast(str, labels[c.profile])] += c.count
    claimed = {int(codes[c.profile]) for c in cc.claims[need.key]}
    (tally,) = domain_tallies(values, claimed, deficit, free)
    home = pick_same_domain(need, have, tally, deficit)
    if home is None:
        return []
    return _plain(_offer(state, need, codes == values.index(home)), deficit)


def _offer(state: CycleState, need: Need, keep: np.ndarray | None = None) -> list:
    """The need's free supply as (state, profile, pool): idle machines, then speculative ones,
    each in its supply order; with `keep`, only the profiles it marks (a domain)."""
    ranked = state.supply.ranked(need)
    if keep is not None:
        ranked = ranked[keep[ranked]]
    size = len(state.inventory.profiles)
    out: list = []
    for free_state, pool in ((S.IDLE, state.idle_left), (S.SPECULATIVE, state.spec_left)):
        out += [(free_state, p, pool) for p in ranked[pool_column(pool, size)[ranked] > 0].tolist()]
    return out


def _free_by_domain(state: CycleState, need: Need) -> np.ndarray:
    """Free machines (idle and speculative) per domain of a `Same` need, by label code; its
    profiles all carry the need's key, so every code is a domain."""
    codes, values = state.inventory.profiles.label_codes(cast(str, need.spec.same))
    ranked = state.supply.ranked(need)
    size = len(state.inventory.profiles)
    free = pool_column(state.idle_left, size)[ranked] + pool_column(state.spec_left, size)[ranked]
    return np.bincount(codes[ranked], free, minlength=len(values)).astype(np.int64)


def _reserve_same(
    state: CycleState,
    need: Need,
    cc: ClusterClaims,
    free: np.ndarray,
    deficit: int,
    on_its_way: np.ndarray,
) -> list:
    """A `Same` need that cannot be placed yet keeps the free machines of the domain it waits
    on (draining and excess machines will complete it), away from lower priorities.
    `on_its_way` is, per profile id, its draining machines plus its excess configured ones;
    `free` its free machines per domain."""
    same = cast(str, need.spec.same)  # (only `Same` needs)
    codes, values = state.inventory.profiles.label_codes(same)
    ranked = state.supply.ranked(need)
    # (A `Same` need matches only profiles carrying its key: every code here is a domain.)
    coming = np.bincount(codes[ranked], on_its_way[ranked], minlength=len(values)) + free
    claimed = {int(codes[c.profile]) for c in cc.claims[need.key]}
    (tally,) = domain_tallies(values, claimed, deficit, coming)
    home = pick_same_wait_domain({values[d] for d in claimed}, tally, {}, deficit)
    if home is None:
        return []
    return _plain(_offer(state, need, codes == values.index(home)), deficit)


def _on_its_way(state: CycleState) -> np.ndarray:
    """Per profile id: DRAINING machines plus excess CONFIGURED ones (what a waiting `Same`
    need can count on besides free machines)."""
    size = len(state.inventory.profiles)
    out = np.zeros(size, dtype=np.int64)
    draining = state.inventory.counts[CODE[S.DRAINING]]
    out[: min(size, len(draining))] = draining[:size]
    excess = excess_by_profile(state.claims)
    if excess:
        out[list(excess)] += list(excess.values())
    return out


Frame = tuple[list[str | None], dict[str, int], set[str]]


def spread_frames(state: CycleState, need: Need, cc: ClusterClaims) -> list[Frame]:
    """A spread need's view of each rule's domains: each profile's domain (by id), how many
    machines it claims in each, and the domains it could use (those of matching profiles
    with a live machine). Only its first rule's when the shard's run began before placement
    kept to every rule (`EngineMemory.every_spread_rule`)."""
    counts = state.inventory.counts
    failed = CODE[S.FAILED]
    live = counts.sum(axis=0) - counts[failed]
    pids = state.supply.ranked(need)
    pids = pids[pids < len(live)]
    frames = []
    for rule in need.spread if state.memory.every_spread_rule else need.spread[:1]:
        labels = state.inventory.profiles.labels(rule.key)
        current: dict[str, int] = defaultdict(int)
        for c in cc.claims[need.key]:
            current[labels[c.profile] or ""] += c.count
        # The domains of matching profiles with a live machine, by column.
        codes, values = state.inventory.profiles.label_codes(rule.key)
        found = np.unique(codes[pids[live[pids] > 0]]).tolist()
        eligible = {values[d] for d in found if d >= 0 and values[d]}
        frames.append((labels, current, eligible))
    return frames


def spread_take(
    need: Need, frames: list[Frame], candidates: list[tuple[int, int]], most: int
) -> list[int]:
    """How many machines of each candidate (profile, machines it has), in order, a spread
    need takes, at most `most`, each counted in `frames`. One rule: one machine at a time
    into the domain `_spread_domains` picks, each domain's from its candidates in order.
    Several rules: `pick_every_spread`, every rule kept. A candidate without a rule's key is
    never taken."""
    if len(frames) > 1:
        rules = [(f[1], f[2], r.max_skew) for f, r in zip(frames, need.spread, strict=True)]
        domains = [tuple(f[0][p] for f in frames) for p, _ in candidates]
        return pick_every_spread(rules, domains, [n for _, n in candidates], most)
    labels, current, eligible = frames[0]
    free: dict[str, int] = defaultdict(int)
    for p, n in candidates:
        if d := labels[p]:
            free[d] += n
    room = Counter(islice(_spread_domains(current, free, eligible, need.spread[0].max_skew), most))
    out = []
    for p, n in candidates:
        d = labels[p]
        k = min(room[d], n) if d else 0
        if k > 0:
            room[cast(str, d)] -= k
        out.append(max(k, 0))
    return out


def _spread(state: CycleState, need: Need, cc: ClusterClaims, supply: list, deficit: int) -> list:
    frames = spread_frames(state, need, cc)
    taken = spread_take(need, frames, [(p, pool[p]) for _, p, pool in supply], deficit)
    return [
        (free_state, p, pool, n)
        for (free_state, p, pool), n in zip(supply, taken, strict=True)
        if n > 0
    ]


def _spread_domains(
    current: dict[str, int], free: dict[str, int], eligible: set[str], max_skew: int
) -> Iterator[str]:
    """`pick_spread_domain`'s picks one machine at a time, each counted in `current` and
    taken from `free` before it is given: the least-filled domain with supply (ties by
    name) while it stays within `max_skew` of the least-filled eligible one. Kept in a heap
    of the open domains, not found by sorting them for every machine; the floor is the
    lower of the open domains' least and the closed eligible ones' (which never move)."""
    open_domains = sorted(d for d, n in free.items() if n > 0)
    if not eligible.issuperset(open_domains):
        # (Never so from `_spread`, whose open domains all have a live machine; exact anyway.)
        while (d := pick_spread_domain(current, free, eligible, max_skew)) is not None:
            free[d] -= 1
            current[d] += 1
            yield d
        return
    closed = min((current.get(d, 0) for d in eligible if free.get(d, 0) <= 0), default=None)
    heap = [(current.get(d, 0), d) for d in open_domains]
    heapify(heap)
    while heap:
        n, d = heap[0]
        if n + 1 - (n if closed is None else min(n, closed)) > max_skew:
            return
        free[d] -= 1
        current[d] = n + 1
        if free[d] > 0:
            heapreplace(heap, (n + 1, d))
        else:
            heappop(heap)
            closed = n + 1 if closed is None else min(closed, n + 1)
        yield d
