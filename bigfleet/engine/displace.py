"""Backfill yields before the fleet buys (`Policy.fleet_cost`; docs/decisions/0012).

Run inside Phase 2's walk, need by need in table order, so a need takes what is drained for it
before any need below it can: the needs above it have had their turn, the needs below it see
what is left."""

from __future__ import annotations

from collections import defaultdict
from dataclasses import dataclass, field
from typing import Protocol

import numpy as np

from ..cost import ELASTIC
from ..inventory import CODE
from ..models import MachineState
from ..needs import Need
from .cycle import CycleState
from .fleet_cost import (
    SpreadRoom,
    displace_budget,
    displace_floor,
    displaceable,
    worth_displacing,
)
from .phase1 import Assignment
from .ranking import supply_key
from .victims import Victim, VictimPool

S = MachineState


class Supply(Protocol):
    """What Phase 2's short supply lends this step: its waiting pools (DRAINING first), its
    victim pool, and how each is consumed."""

    waiting: list

    @property
    def held(self) -> VictimPool: ...

    def take(self, pool: dict[int, int], p: int, n: int) -> None: ...

    def give(self, pool: dict[int, int], p: int, n: int) -> None: ...

    def preempt(self, i: int, n: int) -> None: ...


def purchases(state: CycleState, assignments: list[Assignment]) -> dict[str, list[Assignment]]:
    """Phase 1's purchases per need key: its SPECULATIVE assignments of elastic capacity."""
    profiles = state.inventory.profiles.profiles
    out: dict[str, list[Assignment]] = defaultdict(list)
    for a in assignments:
        if a.state is S.SPECULATIVE and profiles[a.profile].capacity_type in ELASTIC:
            out[a.need.key].append(a)
    return out


@dataclass(slots=True)
class _Yield:
    """One need's yield: how many of its purchases it wants to replace, from which owned
    profiles (its matching ones, in its order), within what spread room, against what price."""

    need: Need
    want: int
    mine: np.ndarray
    room: SpreadRoom
    cheapest: float
    got: int = 0
    instead: dict[str, float] = field(default_factory=dict)

    def worth(self, state: CycleState, holder: Need) -> bool:
        if holder.key not in self.instead:
            self.instead[holder.key] = _cheapest_elastic(state, holder)
        return worth_displacing(holder, state.policy, self.cheapest, self.instead[holder.key])


def yield_for_cost(
    state: CycleState,
    need: Need,
    supply: Supply,
    bought: list[Assignment],
    owned: np.ndarray,
    cycle: tuple[list[Assignment], dict[str, int], dict[str, int]],
    victims: list[Victim],
    lost: dict[str, int],
) -> tuple[int, int, int]:
    """Backfill yields before the fleet buys (`Policy.fleet_cost`; docs/decisions/0012): a
    need (not `Same`) about to buy elastic capacity takes owned machines instead: IDLE ones
    Phase 1 gave to needs at least `displace_gap` below it (`displaceable`), then DRAINING
    ones nobody waits for (those displaced for it in an earlier cycle), then CONFIGURED ones
    of needs `displaceable` for it, best victim first; each where `worth_displacing` against
    its cheapest purchase, a spread need within its `SpreadRoom`. Its purchases shrink by as
    many, dearest first, and the slots go back to the free pool. `cycle`: the cycle's
    assignments, machines assigned per need key, each need's table position. Returns
    (reassigned, waited for, displaced)."""
    profiles = state.inventory.profiles.profiles
    assignments = cycle[0]
    ranked = state.supply.ranked(need)
    if not owned[ranked].any():  # (no owned machine could ever serve it)
        return 0, 0, 0
    y = _Yield(
        need,
        sum(a.count for a in bought),
        ranked[owned[ranked]],
        SpreadRoom(need, _held(state, need, assignments)),
        min(supply_key(need, profiles[a.profile])[0] for a in bought),
    )
    given = _take_assigned(state, y, *cycle)
    took = _take_draining(state, y, supply)
    hit = _displace(state, y, supply, victims, lost)
    give = given + took + hit
    for a in sorted(bought, key=lambda a: -state.supply.supply_rank(need)[a.profile]):
        n = min(give, a.count)
        a.count -= n
        supply.give(state.spec_left, a.profile, n)  # (free again, for the needs after it)
        state.demand[profiles[a.profile].name] -= n
        give -= n
    return given, took, hit


def _take_assigned(
    state: CycleState,
    y: _Yield,
    assignments: list[Assignment],
    assigned: dict[str, int],
    position: dict[str, int],
) -> int:
    """IDLE owned machines Phase 1 gave to needs `displaceable` for `y.need` (not `Same`
    ones: they hold a domain whole), in its profile order, lowest need first: they are
    configured for it instead, nothing drains."""
    profiles, rank = state.inventory.profiles.profiles, state.supply.supply_rank(y.need)
    mine = set(y.mine.tolist())
    found = sorted(
        (
            a
            for a in assignments
            if a.state is S.IDLE
            and a.count > 0
            and a.profile in mine
            and not a.need.spec.same
            and displaceable(a.need, y.need, state.policy)
        ),
        key=lambda a: (rank[a.profile], -position[a.need.key]),
    )
    total = 0
    for a in found:
        if y.got == y.want:
            break
        if not y.worth(state, a.need):
            continue
        n = int(min(y.want - y.got, a.count, y.room.room(profiles[a.profile])))
        if n <= 0:
            continue
        y.room.add(profiles[a.profile], n)
        a.count -= n
        assigned[a.need.key] -= n
        assignments.append(Assignment(y.need, S.IDLE, a.profile, n))
        y.got += n
        total += n
    return total


def _take_draining(state: CycleState, y: _Yield, supply: Supply) -> int:
    """DRAINING owned machines nobody waits for, in `y.need`'s profile order."""
    profiles, draining, total = state.inventory.profiles.profiles, supply.waiting[0], 0
    for p in y.mine.tolist():
        n = int(min(y.want - y.got, draining.get(p, 0), y.room.room(profiles[p])))
        if n > 0:
            supply.take(draining, p, n)
            y.room.add(profiles[p], n)
            y.got += n
            total += n
    return total


def _displace(
    state: CycleState, y: _Yield, supply: Supply, victims: list[Victim], lost: dict[str, int]
) -> int:
    """CONFIGURED owned machines of needs `displaceable` for `y.need`, best victim first,
    never one its cluster marked do-not-disrupt nor past its budget (`DrainRoom`): then the
    need keeps its purchases."""
    if state.displace_left is None:
        configured = int(state.inventory.counts[CODE[S.CONFIGURED]].sum())
        state.displace_left = displace_budget(state.policy, configured)
    if y.got == y.want or state.displace_left <= 0:
        return 0
    profiles, held, total = state.inventory.profiles.profiles, supply.held, 0
    bounds = state.room()
    for i in held.candidates(displace_floor(y.need, state.policy), y.mine).tolist():
        victim = held.needs[int(held.holder[i])]
        p = int(held.profile[i])
        if not y.worth(state, victim):
            continue
        free = bounds.for_cost(victim.cluster, held.unmarked(i))
        n = int(min(y.want - y.got, free, y.room.room(profiles[p]), state.displace_left))
        if n <= 0:
            continue
        y.room.add(profiles[p], n)
        state.displace_left -= n
        bounds.drained(victim.cluster, n)
        victims.append(Victim(victim, y.need, p, held.tail(i, n), n, for_cost=True))
        supply.preempt(i, n)
        lost[victim.key] += n
        y.got += n
        total += n
        if y.got == y.want or state.displace_left == 0:
            break
    return total


def _held(state: CycleState, need: Need, given: list[Assignment]) -> list:
    """A spread need's machines by profile: its claims and this cycle's assignments."""
    if not need.spread:
        return []
    profiles = state.inventory.profiles.profiles
    claims = state.claims[need.cluster].claims[need.key]
    return [(profiles[c.profile], c.count) for c in claims] + [
        (profiles[a.profile], a.count) for a in given if a.need is need
    ]


def _cheapest_elastic(state: CycleState, need: Need) -> float:
    """The effective cost of the cheapest elastic profile the shard has that `need` could
    run on (0: none, it would wait)."""
    profiles, present = state.inventory.profiles.profiles, state.present()
    for p in state.supply.ranked(need).tolist():
        if p < len(present) and present[p] and profiles[p].capacity_type in ELASTIC:
            return supply_key(need, profiles[p])[0]
    return 0.0
