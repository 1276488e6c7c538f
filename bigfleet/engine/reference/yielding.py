"""Owned machines yield across cycles, plainly (the rule: engine/yielding.py; the fast engine's
engine/yield_moves.py, over counts): the yields a cycle starts, and the owned machines Phase 3
drains in place of a yield's replacement."""

from __future__ import annotations

from collections import defaultdict
from collections.abc import Hashable, Mapping
from typing import cast

from ...cost import ELASTIC, OWNED
from ...models import MachineState
from ...needs import Need
from ...profiles import Profile
from ..decision import Decision
from ..moves import consolidation_budget
from ..ranking import supply_key
from ..yielding import Holding, due, pick_yields, remember
from .actions import configure, create
from .consolidate import settled, spare_for
from .cycle import Cycle
from .fleet import Rec

S = MachineState


def yield_owned(cycle: Cycle, out: Decision, now: float, moved: Mapping[str, int]) -> None:
    """After consolidation (`moved`: its moves per need key): the cycle's yields among
    settled, stable plain needs no consolidation moved, within what is left of the
    consolidation budget; each giver's replacement configured (or created) for it."""
    memory, policy = cycle.fleet.memory, cycle.policy
    if not (memory.owned_yields and policy.fleet_cost):
        return
    configured = sum(1 for m in cycle.machines if m.state is S.CONFIGURED)
    budget = consolidation_budget(policy, configured) - sum(moved.values())
    if budget <= 0:
        return
    takers, givers = _holdings(cycle, moved, now)
    if not takers or not givers:
        return
    chosen: list[Rec] = []

    def replacement(need: Need) -> Profile | None:
        spare = spare_for(cycle, need)
        return spare[0].profile if spare else None

    def take(need: Need, profile: Hashable) -> None:
        m = next(m for m in spare_for(cycle, need) if m.profile == profile)
        chosen.append(m)
        cycle.taken.add(m.ordinal)
        cycle.holder[m.ordinal] = cycle.fleet.assigned[m.ordinal] = need

    def cost(need: Need, profile: Hashable) -> float:
        return supply_key(need, cast(Profile, profile), True)[0]

    def fits(need: Need, profile: Hashable) -> bool:
        return cycle.fleet.fits(need, cast(Profile, profile))

    yields = pick_yields(takers, givers, replacement, take, fits, cost, policy, budget)
    creates: dict[tuple[str, str], list[Rec]] = defaultdict(list)
    for y, m in zip(yields, chosen, strict=True):
        giver = y.giver
        out.consolidations[giver.key] = out.consolidations.get(giver.key, 0) + 1
        cycle.demand[m.profile.name] += 1
        cycle.room.drained(giver.cluster, 1)
        if m.state is S.IDLE:
            out.actions.append(configure(giver, m))
        else:
            creates[(m.profile.provider, giver.key)].append(m)
    create(creates, cycle.holder, policy, out)
    remember(memory, yields, lambda p: cast(Profile, p).name, now)


def _holdings(
    cycle: Cycle, moved: Mapping[str, int], now: float
) -> tuple[list[Holding], list[Holding]]:
    """(takers, givers): settled plain needs' configured elastic machines per profile, and
    their configured owned ones that may drain now (unmarked, within the cluster's budget for
    moves for cost), each need's in its claim order, the needs in table order."""
    memory, policy = cycle.fleet.memory, cycle.policy
    takers: list[Holding] = []
    givers: list[Holding] = []
    for need in cycle.needs:
        if need.key in moved or need.spec.same or need.spread:
            continue
        if need.cluster in memory.frozen or not settled(cycle, need):
            continue
        if not memory.stable(need, policy, now):
            continue
        held: dict[Profile, int] = {}
        for m in cycle.claims[need.key]:
            if m.state is S.CONFIGURED:
                held[m.profile] = held.get(m.profile, 0) + 1
        for profile, count in held.items():
            if profile.capacity_type in ELASTIC:
                takers.append((need, profile, count))
            elif profile.capacity_type in OWNED and need.key not in memory.yielded:
                mine = [
                    m
                    for m in cycle.machines
                    if m.state is S.CONFIGURED
                    and m.cluster == need.cluster
                    and m.profile == profile
                    and not (m.kept and memory.marks_steer_moves)
                ]
                free = cycle.room.for_cost(need.cluster, min(count, len(mine)))
                if free > 0:
                    givers.append((need, profile, free))
    return takers, givers


def yield_drains(cycle: Cycle, excess: list[Rec]) -> None:
    """Phase 3's part (engine/yielding.py, step 2), on its list of `excess` machines: for
    each yield whose replacement is excess and whose need still holds a configured machine of
    the owned profile, the last of those drains instead of the first excess replacement (in
    claim order), unless it is marked do-not-disrupt. Not for a need preempted this cycle."""
    memory = cycle.fleet.memory
    if not (memory.yielded and memory.owned_yields):
        return
    by_key = {n.key: n for n in cycle.needs}
    for key, y in due(memory):
        need = by_key.get(key)
        if need is None or any(m.ordinal in cycle.preempted for m in cycle.claims.get(key, [])):
            continue
        owned = [
            m
            for m in cycle.claims.get(key, [])
            if m.state is S.CONFIGURED and m.profile.name == y.owned
        ]
        spare = [m for m in excess if m.cluster == need.cluster and m.profile.name == y.instead]
        if not owned or not spare or (owned[-1].kept and memory.cost_moves_bounded):
            continue
        excess.remove(min(spare, key=lambda m: (not m.kept, -m.holder_reclamation, m.ordinal)))
        excess.append(owned[-1])
        y.drained = True
