"""Backfill yields before the fleet buys (`Policy.fleet_cost`; docs/decisions/0012).

Run inside Phase 2's walk, need by need in table order, so a need takes what is drained for it
before any need below it can: the needs above it have had their turn, the needs below it see
what is left."""

from __future__ import annotations

from collections import defaultdict
from typing import Protocol

import numpy as np

from ..cost import ELASTIC, OWNED
from ..models import MachineState
from ..needs import Need
from .common import supply_key
from .cycle import CycleState
from .fleet_cost import worth_displacing
from .phase1 import Assignment
from .victims import Victim, VictimPool

S = MachineState


class Supply(Protocol):
    """What Phase 2's short supply lends this step: its waiting pools (DRAINING first), its
    victim pool, and how each is consumed."""

    waiting: list

    @property
    def held(self) -> VictimPool: ...

    def take(self, pool: dict[int, int], p: int, n: int) -> None: ...

    def preempt(self, i: int, n: int) -> None: ...


def purchases(state: CycleState, assignments: list[Assignment]) -> dict[str, list[Assignment]]:
    """Phase 1's purchases per need key: its SPECULATIVE assignments of elastic capacity."""
    profiles = state.inventory.profiles.profiles
    out: dict[str, list[Assignment]] = defaultdict(list)
    for a in assignments:
        if a.state is S.SPECULATIVE and profiles[a.profile].capacity_type in ELASTIC:
            out[a.need.key].append(a)
    return out


def yield_for_cost(
    state: CycleState,
    need: Need,
    supply: Supply,
    bought: list[Assignment],
    owned: np.ndarray,
    victims: list[Victim],
    lost: dict[str, int],
) -> tuple[int, int]:
    """Backfill yields before the fleet buys (`Policy.fleet_cost`; docs/decisions/0012): a
    plain need (not `Same`, no spread) about to buy elastic capacity takes owned machines
    instead, first DRAINING ones nobody waits for (those displaced for it in an earlier
    cycle), then CONFIGURED ones of needs at least `displace_gap` below it (`displaceable`),
    best victim first, where `worth_displacing` against its cheapest purchase. Its purchases
    shrink by as many, dearest first, and the slots go back to the free pool. Returns (waited
    for, displaced)."""
    policy, profiles = state.policy, state.inventory.profiles.profiles
    want, ranked = sum(a.count for a in bought), state.supply.ranked(need)
    mine = ranked[owned[ranked]]
    took = 0
    draining = supply.waiting[0]
    for p in mine.tolist():
        n = min(want - took, draining.get(p, 0))
        if n > 0:
            supply.take(draining, p, n)
            took += n
    hit = 0
    if took < want:
        cheapest = min(supply_key(need, profiles[a.profile])[0] for a in bought)
        held = supply.held
        instead: dict[str, float] = {}
        for i in held.candidates(need.priority - policy.displace_gap + 1, mine).tolist():
            victim = held.needs[int(held.holder[i])]
            if victim.key not in instead:
                instead[victim.key] = _cheapest_elastic(state, victim)
            if not worth_displacing(victim, policy, cheapest, instead[victim.key]):
                continue
            p = int(held.profile[i])
            n = min(want - took - hit, int(held.left[i]))
            offset = int(held.offset[i] + held.used[i])
            victims.append(Victim(victim, need, p, offset, n))
            supply.preempt(i, n)
            lost[victim.key] += n
            hit += n
            if took + hit == want:
                break
    give = took + hit
    for a in sorted(bought, key=lambda a: -state.supply.supply_rank(need)[a.profile]):
        n = min(give, a.count)
        a.count -= n
        state.spec_left[a.profile] += n
        state.demand[profiles[a.profile].name] -= n
        give -= n
    return took, hit


def owned_column(state: CycleState) -> np.ndarray:
    """Per profile id: is it owned or committed capacity (`cost.OWNED`)?"""
    profiles = state.inventory.profiles.profiles
    return np.array([p.capacity_type in OWNED for p in profiles], dtype=bool)


def _cheapest_elastic(state: CycleState, need: Need) -> float:
    """The effective cost of the cheapest elastic profile the shard has that `need` could
    run on (0: none, it would wait)."""
    profiles, present = state.inventory.profiles.profiles, state.present()
    for p in state.supply.ranked(need).tolist():
        if p < len(present) and present[p] and profiles[p].capacity_type in ELASTIC:
            return supply_key(need, profiles[p])[0]
    return 0.0
