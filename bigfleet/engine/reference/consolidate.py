"""Consolidation toward cheaper capacity, plainly (docs/engine.md, The cycle 5): a settled need
moves its dearest machines onto free cheaper ones that fit it in the same domains, while the
saving is worth the move (the fast engine's engine/consolidate.py, over counts)."""

from __future__ import annotations

from collections import defaultdict

from ...models import MachineState
from ...needs import Need
from ..decision import Decision
from ..domains import move_domain
from ..moves import consolidation_budget, worth_moving
from ..ranking import supply_key
from ..yielding import blocks
from .actions import configure, create
from .cycle import Cycle
from .fleet import Rec

S = MachineState


def consolidate(cycle: Cycle, out: Decision, now: float) -> None:
    """Walks the needs in table order after Phase 2. A need settled (`_settled`) and stable
    (its count unchanged for `consolidation_stable_seconds`) pairs its CONFIGURED machines,
    dearest first, each with the cheapest free machine no one took that fits it in the same
    `same` and spread domains, while the pair is `worth_moving`; at most
    `consolidation_budget` moves a cycle. A move is the replacement's configure (or create),
    counted per need key in `out.consolidations` and in the demand."""
    budget = consolidation_budget(
        cycle.policy, sum(1 for m in cycle.machines if m.state is S.CONFIGURED)
    )
    creates: dict[tuple[str, str], list[Rec]] = defaultdict(list)
    for need in cycle.needs:
        if (
            budget == 0
            or not settled(cycle, need)
            or not cycle.fleet.memory.stable(need, cycle.policy, now)
        ):
            continue
        budget = _moves(cycle, need, budget, creates, out)
    create(creates, cycle.holder, cycle.policy, out)


def _moves(
    cycle: Cycle,
    need: Need,
    budget: int,
    creates: dict[tuple[str, str], list[Rec]],
    out: Decision,
) -> int:
    """The need's moves, dearest machine first, while the budget lasts; returns what is left."""
    sunk = cycle.sunk
    spare = spare_for(cycle, need)
    dearest_first = sorted(
        (m for m in cycle.claims[need.key] if m.state is S.CONFIGURED),
        key=lambda m: (-supply_key(need, m.profile, sunk)[0], m.profile.name, m.ordinal),
    )
    for old in dearest_first:
        domains = move_domain(need, old.profile)
        new = next(
            (
                m
                for m in spare
                if m.ordinal not in cycle.taken and move_domain(need, m.profile) == domains
            ),
            None,
        )
        saving = supply_key(need, old.profile, sunk)[0] - (
            supply_key(need, new.profile, sunk)[0] if new else 0.0
        )
        if budget == 0 or new is None or not worth_moving(need, cycle.policy, saving):
            continue
        budget -= 1
        out.consolidations[need.key] = out.consolidations.get(need.key, 0) + 1
        cycle.taken.add(new.ordinal)
        cycle.holder[new.ordinal] = cycle.fleet.assigned[new.ordinal] = need
        cycle.demand[new.profile.name] += 1
        if new.state is S.IDLE:
            out.actions.append(configure(need, new))
        else:
            creates[(new.profile.provider, need.key)].append(new)
    return budget


def spare_for(cycle: Cycle, need: Need) -> list[Rec]:
    """Free machines no one took or waits for that match the need (not of an owned profile it
    yielded: engine/yielding.py): cheapest for it first, idle before speculative, lowest
    reclamation value first."""
    memory = cycle.fleet.memory
    spare = [
        m
        for m in cycle.machines
        if m.state in (S.IDLE, S.SPECULATIVE)
        and m.ordinal not in cycle.taken
        and m.ordinal not in cycle.earmarked
        and cycle.matches(need, m)
        and not blocks(memory, need, m.profile.name)
    ]
    spare.sort(
        key=lambda m: (
            supply_key(need, m.profile, cycle.sunk),
            m.state is S.SPECULATIVE,
            m.holder_reclamation if m.state is S.IDLE else 0.0,
            m.ordinal,
        )
    )
    return spare


def settled(cycle: Cycle, need: Need) -> bool:
    """Whole count held, none preempted this cycle, and no unclaimed machine of its
    cluster that could serve it still coming up (a move's replacement)."""
    claimed = cycle.claims[need.key]
    if need.count == 0 or len(claimed) < need.count:
        return False
    if any(m.ordinal in cycle.preempted for m in claimed):
        return False
    return not any(
        m.state in (S.CONFIGURING, S.CREATING)
        and m.cluster == need.cluster
        and m.ordinal not in cycle.holder
        and cycle.matches(need, m)
        for m in cycle.machines
    )
