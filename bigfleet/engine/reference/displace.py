# mypy: disable-error-code="arg-type,index,misc"
# (The reference is the seed's pseudo-code written plainly: a domain of a machine without the
# label is None and is tallied like any other, as the seed does; typed loosely on purpose.)
"""Backfill yields before the fleet buys, plainly (`Policy.fleet_cost`; docs/decisions/0012):
run inside Phase 2's walk, need by need in table order (the fast engine's engine/displace.py,
over counts)."""

from __future__ import annotations

from dataclasses import dataclass

from ...cost import ELASTIC, OWNED
from ...models import MachineState
from ...needs import Need
from ..decision import Decision
from ..fleet_cost import SpreadRoom, displaceable, worth_displacing
from ..ranking import supply_key, victim_order
from .actions import preempt
from .cycle import Cycle
from .fleet import Rec

S = MachineState


@dataclass
class _Yield:
    """One need's yield: its elastic purchases (`bought`), the spread room it has, the price
    of its cheapest purchase, and how many of them have been replaced so far."""

    need: Need
    bought: list[Rec]
    room: SpreadRoom
    cheapest: float
    got: int = 0

    @property
    def want(self) -> int:
        return len(self.bought)


def yield_for_cost(cycle: Cycle, need: Need, out: Decision) -> tuple[int, int]:
    """Backfill yields before the fleet buys (docs/decisions/0012): a need (not `Same`)
    Phase 1 gave speculative elastic machines takes owned ones instead: idle ones Phase 1
    gave to needs `displaceable` for it (configured for it instead), DRAINING ones nobody
    waits for, then configured ones of needs `displaceable` for it, best victim first;
    each where `worth_displacing`, a spread need within its `SpreadRoom`. As many of its
    purchases, dearest first, go back. Returns (machines waited for, machines displaced)."""
    bought = [
        m
        for m in cycle.chosen_of.get(need.key, [])
        if m.state is S.SPECULATIVE and m.profile.capacity_type in ELASTIC
    ]
    if not cycle.policy.fleet_cost or not bought or need.spec.same:
        return 0, 0
    mine = cycle.claims[need.key] + cycle.chosen_of.get(need.key, [])
    y = _Yield(
        need,
        bought,
        SpreadRoom(need, [(m.profile, 1) for m in mine]),
        min(supply_key(need, m.profile)[0] for m in bought),
    )
    _take_assigned(cycle, y)
    took = _take_draining(cycle, y)
    hits = _displace(cycle, y, out)
    _give_back(cycle, y)
    return took, hits


def _worth(cycle: Cycle, y: _Yield, h: Need) -> bool:
    return worth_displacing(h, cycle.policy, y.cheapest, _cheapest_elastic(cycle, h))


def _fits(cycle: Cycle, need: Need, m: Rec) -> bool:
    return m.profile.capacity_type in OWNED and cycle.matches(need, m)


def _take_assigned(cycle: Cycle, y: _Yield) -> None:
    """Idle owned machines Phase 1 gave to needs displaceable for it are configured for the
    need instead."""
    need, configures, policy = y.need, cycle.configures, cycle.policy
    handed = sorted(
        (
            i
            for i, (h, m) in enumerate(configures)
            if _fits(cycle, need, m) and not h.spec.same and displaceable(h, need, policy)
        ),
        key=lambda i: (
            supply_key(need, configures[i][1].profile),
            -cycle.position[configures[i][0].key],
            configures[i][1].ordinal,
        ),
    )
    for i in handed:
        h, m = configures[i]
        if y.got < y.want and y.room.room(m.profile) >= 1 and _worth(cycle, y, h):
            y.room.add(m.profile, 1)
            configures[i] = (need, m)
            cycle.holder[m.ordinal] = cycle.fleet.assigned[m.ordinal] = need
            cycle.assigned[h.key] -= 1
            y.got += 1


def _take_draining(cycle: Cycle, y: _Yield) -> int:
    """DRAINING owned machines nobody waits for are earmarked for the need."""
    draining = sorted(
        (
            m
            for m in cycle.machines
            if m.state is S.DRAINING
            and m.ordinal not in cycle.earmarked
            and _fits(cycle, y.need, m)
        ),
        key=lambda m: (supply_key(y.need, m.profile), m.ordinal),
    )
    took: list[Rec] = []
    for m in draining:
        if y.got < y.want and y.room.room(m.profile) >= 1:
            y.room.add(m.profile, 1)
            took.append(m)
            y.got += 1
    cycle.earmarked.update(m.ordinal for m in took)
    return len(took)


def _displace(cycle: Cycle, y: _Yield, out: Decision) -> int:
    """CONFIGURED owned machines of needs displaceable for it drain for the need, best
    victim first, within the cycle's displace budget, never one its cluster marked
    do-not-disrupt nor past its budget (`DrainRoom`)."""
    need, holder, policy = y.need, cycle.holder, cycle.policy
    victims = sorted(
        (
            m
            for m in cycle.machines
            if m.state is S.CONFIGURED
            and m.ordinal in holder
            and m.ordinal not in cycle.preempted
            and not cycle.marked(m)
            and displaceable(holder[m.ordinal], need, policy)
            and _fits(cycle, need, m)
        ),
        key=lambda m: (
            *victim_order(cycle.weights, holder[m.ordinal], policy),
            m.profile.name,
            m.ordinal,
        ),
    )
    hits = 0
    for m in victims:
        if y.got == y.want:
            break
        h = holder[m.ordinal]
        if (
            cycle.displace_left > 0
            and y.room.room(m.profile) >= 1
            and cycle.room.for_cost(h.cluster, 1) >= 1
            and _worth(cycle, y, h)
        ):
            cycle.displace_left -= 1
            cycle.room.drained(h.cluster, 1)
            y.room.add(m.profile, 1)
            hits += 1
            y.got += 1
            preempt(m, h, need, cycle.preempted, out, for_cost=True)
    return hits


def _give_back(cycle: Cycle, y: _Yield) -> None:
    """As many of the need's purchases as it got owned machines, dearest first, go back."""
    need = y.need
    back = sorted(y.bought, key=lambda m: (supply_key(need, m.profile), m.ordinal))
    for m in back[len(back) - y.got :]:
        cycle.creates[(m.profile.provider, need.key)].remove(m)
        cycle.taken.discard(m.ordinal)
        del cycle.holder[m.ordinal]
        cycle.fleet.assigned.pop(m.ordinal, None)
        cycle.demand[m.profile.name] -= 1


def _cheapest_elastic(cycle: Cycle, need: Need) -> float:
    """The effective cost of the cheapest elastic machine `need` could run on (0: none)."""
    costs = [
        supply_key(need, m.profile)[0]
        for m in cycle.machines
        if m.profile.capacity_type in ELASTIC and cycle.matches(need, m)
    ]
    return min(costs, default=0.0)
