# mypy: disable-error-code="arg-type,index,misc"
# (The reference is the seed's pseudo-code written plainly: a domain of a machine without the
# label is None and is tallied like any other, as the seed does; typed loosely on purpose.)
"""Phase 2, plainly (design §8): unsatisfied needs wait for supply on its way, then preempt
strictly lower priorities, best victim first; what is still missing becomes a shortfall (the
fast engine's engine/phase2.py, over counts)."""

from __future__ import annotations

from collections import defaultdict

from ...cost import shard_pressure, victim_weights
from ...models import MachineState
from ...needs import Need
from ..decision import Decision
from ..domains import domain_of, pick_same_wait_domain
from ..fleet_cost import displace_budget
from ..ranking import supply_key, victim_order
from ..shortfalls import Unmet, describe
from .actions import preempt
from .cycle import Cycle
from .displace import yield_for_cost
from .fleet import Rec
from .phase1 import spread_counts, spread_eligible, spread_take
from .regret import swap_owned

S = MachineState


def resolve_inversions(cycle: Cycle, out: Decision) -> None:
    """Walks the needs in table order with what Phase 1 gave them and kept for them. A need
    still short first earmarks supply on its way (DRAINING machines, then excess CONFIGURED
    ones; a `Same` need also the free machines Phase 1 left), then preempts CONFIGURED
    machines held by needs of strictly lower priority, best victim first; what is still
    missing is unmet (`cycle.unmet`, and demand under the cheapest matching profile). Then
    (`Policy.fleet_cost`) the need yields for cost (`yield_for_cost`). Records per need key
    `out.satisfied` (claimed + assigned) and `out.earmarked` (kept + waited for + preempted
    for). Owned machines are first swapped where they save the fleet the most (`swap_owned`).
    """
    if cycle.policy.fleet_cost:
        swap_owned(cycle)
    _begin(cycle)
    for need in cycle.needs:
        claimed, reserved = cycle.claims[need.key], cycle.reserved
        gone = cycle.preempted - cycle.kept_by_bounds
        have = len(claimed) - sum(1 for m in claimed if m.ordinal in gone)
        deficit = need.count - have - cycle.assigned.get(need.key, 0) - reserved[need.key]
        out.satisfied[need.key] = have + cycle.assigned.get(need.key, 0)
        if reserved[need.key]:
            out.earmarked[need.key] = reserved[need.key]
        if deficit > 0:
            _wait_or_preempt(cycle, need, deficit, out)
        took, hits = yield_for_cost(cycle, need, out)
        if took or hits:
            out.satisfied[need.key] -= took + hits
            out.earmarked[need.key] = out.earmarked.get(need.key, 0) + took + hits
        if hits:
            out.cost_moves[need.key] = hits
    cycle.room.settle()


def _begin(cycle: Cycle) -> None:
    """Phase 2's start: the victim weights of the shard's pressure, what Phase 1 kept counted
    as earmarked, and the budget of machines to displace for the fleet's cost."""
    machines = cycle.machines
    free = sum(1 for m in machines if m.state in (S.IDLE, S.SPECULATIVE))
    usable = sum(1 for m in machines if m.state is not S.FAILED)
    cycle.weights = victim_weights(shard_pressure(free, usable))
    cycle.earmarked = set(cycle.kept)
    configured = sum(1 for m in machines if m.state is S.CONFIGURED)
    cycle.displace_left = displace_budget(cycle.policy, configured)


def _wait_or_preempt(cycle: Cycle, need: Need, deficit: int, out: Decision) -> None:
    """A short need earmarks supply on its way, then preempts; the rest is unmet."""
    incoming = _open_supply(cycle, need, S.DRAINING) + _open_supply(cycle, need, S.CONFIGURED)
    if need.spec.same:
        incoming = [
            m
            for m in _open_supply(cycle, need, S.IDLE) + _open_supply(cycle, need, S.SPECULATIVE)
            if m.ordinal not in cycle.taken
        ] + incoming
    victims = _victims(cycle, need)
    if need.spec.same:
        incoming, victims = _same_supply(cycle, need, incoming, victims, deficit)
    elif need.spread:
        incoming, victims = _spread_supply(cycle, need, incoming, victims, deficit)
    took = incoming[:deficit]
    for m in took:
        cycle.earmarked.add(m.ordinal)
    deficit -= len(took)
    hits = victims[:deficit] if not need.spec.same or len(victims) >= deficit else []
    for m in hits:
        h = cycle.holder[m.ordinal]
        if cycle.room.ask(need, 1):  # (asked of the coordinator first: nothing drains)
            cycle.kept_by_bounds.add(m.ordinal)
            cycle.preempted.add(m.ordinal)
            continue
        if cycle.room.preempted(h, need, 1, 0 if cycle.marked(m) else 1):
            cycle.kept_by_bounds.add(m.ordinal)  # (held back: `h` keeps it)
        preempt(m, h, need, cycle.preempted, out)
    deficit -= len(hits)
    out.earmarked[need.key] = cycle.reserved[need.key] + len(took) + len(hits)
    held, why = cycle.room.waiting(need)
    if deficit > 0 or held:
        _unmet(cycle, need, deficit, held, why)


def _open_supply(cycle: Cycle, need: Need, state: S) -> list[Rec]:
    """Machines in `state` that match the need and no one waits for, preempted or (when
    CONFIGURED) holds: cheapest for it first."""
    rows = [
        m
        for m in cycle.machines
        if m.state is state
        and m.ordinal not in cycle.earmarked
        and m.ordinal not in cycle.preempted
        and (state is not S.CONFIGURED or m.ordinal not in cycle.holder)
        and cycle.matches(need, m)
    ]
    return sorted(rows, key=lambda m: (supply_key(need, m.profile, cycle.sunk), m.ordinal))


def _victims(cycle: Cycle, need: Need) -> list[Rec]:
    """CONFIGURED machines held by needs of strictly lower priority that match the need, not
    yet preempted: best victim first (`victim_order`, then profile name and ordinal)."""
    holder, policy, weights = cycle.holder, cycle.policy, cycle.weights
    victims = [
        m
        for m in cycle.machines
        if m.state is S.CONFIGURED
        and m.ordinal in holder
        and m.ordinal not in cycle.preempted
        and holder[m.ordinal].priority < need.priority
        and cycle.matches(need, m)
    ]
    victims.sort(
        key=lambda m: (
            *victim_order(weights, holder[m.ordinal], policy),
            m.profile.name,
            m.kept,  # (a claim's marked machines last, as the fast engine's tail)
            m.ordinal,
        )
    )
    return victims


def _same_supply(
    cycle: Cycle, need: Need, incoming: list[Rec], victims: list[Rec], deficit: int
) -> tuple[list[Rec], list[Rec]]:
    """A `Same` need waits or preempts only inside the one domain that can hold it whole."""

    def tally(recs: list[Rec]) -> dict[str | None, int]:
        out: dict[str | None, int] = defaultdict(int)
        for m in recs:
            out[domain_of(need, m.profile)] += 1
        return out

    claimed = cycle.claims[need.key]
    home = pick_same_wait_domain(
        {domain_of(need, m.profile) for m in claimed},
        tally(incoming),
        tally(victims),
        deficit,
    )
    return (
        [m for m in incoming if domain_of(need, m.profile) == home],
        [m for m in victims if domain_of(need, m.profile) == home],
    )


def _spread_supply(
    cycle: Cycle, need: Need, incoming: list[Rec], victims: list[Rec], deficit: int
) -> tuple[list[Rec], list[Rec]]:
    """A spread need waits, then preempts, one machine at a time in the domain Phase 1 would
    pick, counting the machines it claims and those Phase 1 gave it: what it may wait for
    first, then victims (each list in its own order)."""
    mine = cycle.claims[need.key] + cycle.chosen_of.get(need.key, [])
    currents = spread_counts(need, mine)
    eligible = spread_eligible(cycle, need)
    took = {m.ordinal for m in spread_take(need, currents, eligible, incoming, deficit)}
    left = deficit - len(took)
    hits = {m.ordinal for m in spread_take(need, currents, eligible, victims, left)}
    return (
        [m for m in incoming if m.ordinal in took],
        [m for m in victims if m.ordinal in hits],
    )


def _unmet(cycle: Cycle, need: Need, deficit: int, held: int = 0, why: str = "") -> None:
    """The need's missing machines: a shortfall under the cheapest matching profile's name
    (its requirements when none matches), counted in that profile's demand; with the `held`
    ones it waits on that their clusters hold back (`why`), not counted in demand."""
    matching = sorted(
        (m.profile for m in cycle.machines if cycle.matches(need, m)),
        key=lambda p: supply_key(need, p, cycle.sunk),
    )
    label = matching[0].short_name if matching else describe(need.requirements)
    cycle.unmet.append(Unmet(need, deficit + held, label, held, why))
    cycle.demand[matching[0].name if matching else label] += deficit
