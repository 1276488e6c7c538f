"""Owned capacity goes where it saves the fleet the most (`Policy.fleet_cost`;
docs/decisions/0012): Phase 1's owned machines swapped with another need's purchases
(`fleet_cost.regret_swaps`), before Phase 2 reads what Phase 1 assigned."""

from __future__ import annotations

from collections.abc import Hashable
from typing import cast

from ..cost import ELASTIC, OWNED
from ..models import MachineState
from ..needs import Need
from .cycle import CycleState
from .fleet_cost import regret_swaps
from .phase1 import Assignment
from .ranking import supply_key

S = MachineState


def swap_owned(state: CycleState, assignments: list[Assignment]) -> int:
    """Apply `regret_swaps` to the cycle's assignments (profiles by id): the giver's IDLE
    owned assignment goes to the taker, the taker's purchase goes back to the free pool, the
    giver buys its option instead. Returns the machines swapped."""
    profiles = state.inventory.profiles.profiles

    def plain(need: Need) -> bool:
        return not (need.spec.same or need.spread)

    given = [
        (a.need, a.profile, a.count)
        for a in assignments
        if a.state is S.IDLE and profiles[a.profile].capacity_type in OWNED and plain(a.need)
    ]
    buys = [
        (a.need, a.profile, a.count)
        for a in assignments
        if a.state is S.SPECULATIVE
        and profiles[a.profile].capacity_type in ELASTIC
        and plain(a.need)
    ]
    if not given or not buys:
        return 0
    known: dict[str, list[int]] = {}

    def options(need: Need) -> list[int]:
        if need.key not in known:
            ranked = state.supply.ranked(need).tolist()
            known[need.key] = [p for p in ranked if profiles[p].capacity_type in ELASTIC]
        return known[need.key]

    def fits(need: Need, p: Hashable) -> bool:
        return p in state.supply.matching(need)

    def cost(need: Need, p: Hashable) -> float:
        return supply_key(need, profiles[cast(int, p)])[0]

    swaps = regret_swaps(given, buys, state.spec_left, options, fits, cost)
    for s in swaps:
        owned, instead, bought = cast(int, s.owned), cast(int, s.instead), cast(int, s.bought)
        _take(assignments, s.giver, S.IDLE, owned, s.count)
        _take(assignments, s.taker, S.SPECULATIVE, bought, s.count)
        assignments.append(Assignment(s.taker, S.IDLE, owned, s.count))
        assignments.append(Assignment(s.giver, S.SPECULATIVE, instead, s.count))
        state.spec_left[instead] -= s.count
        state.spec_left[bought] += s.count
        state.demand[profiles[instead].name] += s.count
        state.demand[profiles[bought].name] -= s.count
    if swaps:
        assignments[:] = [a for a in assignments if a.count > 0]
    return sum(s.count for s in swaps)


def _take(assignments: list[Assignment], need: Need, state: S, p: int, n: int) -> None:
    """`n` machines off `need`'s assignments of profile `p` in `state`."""
    for a in assignments:
        if n and a.need is need and a.state is state and a.profile == p:
            k = min(n, a.count)
            a.count -= k
            n -= k
