# mypy: disable-error-code="arg-type,index,misc"
# (The reference is the seed's pseudo-code written plainly: a domain of a machine without the
# label is None and is tallied like any other, as the seed does; typed loosely on purpose.)
"""Owned capacity goes where it saves the fleet the most, plainly (`Policy.fleet_cost`;
docs/decisions/0012): Phase 1's owned machines swapped with another need's purchases
(`fleet_cost.regret_swaps`), before Phase 2 reads what Phase 1 assigned (the fast engine's
engine/regret.py, over counts)."""

from __future__ import annotations

from collections import defaultdict
from collections.abc import Iterable

from ...cost import ELASTIC, OWNED
from ...models import MachineState
from ...needs import Need
from ...profiles import Profile
from ..fleet_cost import Swap, regret_swaps
from ..ranking import supply_key
from .cycle import Cycle
from .fleet import Rec

S = MachineState


def swap_owned(cycle: Cycle) -> None:
    """`regret_swaps` over Phase 1's choices: the giver's owned machines are configured
    for the taker, the taker's purchases go back, the giver buys its option instead."""
    needs = cycle.needs
    given = _grouped(
        needs,
        ((n, m) for n, m in cycle.configures if m.profile.capacity_type in OWNED and _plain(n)),
    )
    buys = _grouped(
        needs,
        (
            (n, m)
            for n in needs
            if _plain(n)
            for m in cycle.chosen_of.get(n.key, [])
            if m.state is S.SPECULATIVE and m.profile.capacity_type in ELASTIC
        ),
    )
    if not given or not buys:
        return
    spare: dict[Profile, int] = defaultdict(int)
    sample: dict[Profile, Rec] = {}
    for m in cycle.machines:
        sample.setdefault(m.profile, m)
        if m.state is S.SPECULATIVE and m.ordinal not in cycle.taken:
            spare[m.profile] += 1

    def options(need: Need) -> list[Profile]:
        mine = {m.profile for m in cycle.machines if cycle.matches(need, m)}
        elastic = [p for p in mine if p.capacity_type in ELASTIC]
        return sorted(elastic, key=lambda p: supply_key(need, p))

    def fits(need: Need, profile: Profile) -> bool:
        return cycle.matches(need, sample[profile])

    def cost(need: Need, profile: Profile) -> float:
        return supply_key(need, profile)[0]

    for sw in regret_swaps(given, buys, dict(spare), options, fits, cost):
        _hand_over(cycle, sw)
        _give_back(cycle, sw)
        _buy_instead(cycle, sw)
        cycle.demand[sw.instead.name] += sw.count
        cycle.demand[sw.bought.name] -= sw.count


def _plain(need: Need) -> bool:
    return not (need.spec.same or need.spread)


def _grouped(
    needs: list[Need], pairs: Iterable[tuple[Need, Rec]]
) -> list[tuple[Need, Profile, int]]:
    """(need, profile, machines) per need and profile of `pairs`, in first-seen order."""
    counts: dict[tuple[str, Profile], int] = {}
    for need, m in pairs:
        counts[(need.key, m.profile)] = counts.get((need.key, m.profile), 0) + 1
    by_key = {n.key: n for n in needs}
    return [(by_key[k], p, c) for (k, p), c in counts.items()]


def _hand_over(cycle: Cycle, sw: Swap) -> None:
    """The giver's configures of the owned profile go to the taker."""
    moving = [
        i
        for i, (n, m) in enumerate(cycle.configures)
        if n is sw.giver and m.profile == sw.owned
    ][: sw.count]
    for i in moving:
        m = cycle.configures[i][1]
        cycle.configures[i] = (sw.taker, m)
        cycle.holder[m.ordinal] = cycle.fleet.assigned[m.ordinal] = sw.taker
        cycle.chosen_of[sw.giver.key].remove(m)
        cycle.chosen_of.setdefault(sw.taker.key, []).append(m)


def _give_back(cycle: Cycle, sw: Swap) -> None:
    """The taker's purchases of the bought profile go back to the free pool."""
    line = cycle.creates[(sw.bought.provider, sw.taker.key)]
    for m in [m for m in line if m.profile == sw.bought][: sw.count]:
        line.remove(m)
        cycle.taken.discard(m.ordinal)
        del cycle.holder[m.ordinal]
        cycle.fleet.assigned.pop(m.ordinal, None)
        cycle.chosen_of[sw.taker.key].remove(m)


def _buy_instead(cycle: Cycle, sw: Swap) -> None:
    """The giver buys as many free machines of its option instead."""
    fresh = [
        m
        for m in cycle.machines
        if m.state is S.SPECULATIVE and m.ordinal not in cycle.taken and m.profile == sw.instead
    ][: sw.count]
    for m in fresh:
        cycle.creates[(m.profile.provider, sw.giver.key)].append(m)
        cycle.taken.add(m.ordinal)
        cycle.holder[m.ordinal] = cycle.fleet.assigned[m.ordinal] = sw.giver
        cycle.chosen_of[sw.giver.key].append(m)
