"""Owned machines yield across cycles, in the fast engine (the rule: engine/yielding.py): the
yields a cycle starts, after consolidation, and the owned machines Phase 3 drains in place of
a yield's replacement once it is configured."""

from __future__ import annotations

from collections import Counter
from collections.abc import Hashable
from typing import cast

import numpy as np

from ..cost import ELASTIC, OWNED
from ..held import HELD_SLOT
from ..inventory import CODE
from ..models import MachineState
from ..needs import Need
from .claims import CONFIGURED_SLOT
from .consolidate import settled_needs
from .cycle import CycleState
from .decision import Decision
from .memory import Yielded
from .moves import consolidation_budget
from .phase1 import Assignment
from .phase2 import Victim
from .ranking import supply_key
from .rows import RowPicker
from .victims import marked_configured
from .yielding import Holding, due, pick_yields, remember

S = MachineState


def yield_owned(
    state: CycleState, victims: list[Victim], moved: list[Assignment], out: Decision, now: float
) -> list[Assignment]:
    """The cycle's yields (`pick_yields`) among settled plain needs (no `same` key, no
    spread: their domains would bind the swap) that no consolidation moved this cycle, within
    what is left of the consolidation budget; a giver's machines marked do-not-disrupt, or
    past its cluster's budget for moves for cost (`DrainRoom`), stay. Returns the givers'
    replacements as Phase 1 assignments, counted in `out.consolidations`."""
    memory, policy, inv = state.memory, state.policy, state.inventory
    if memory.yielded:
        state.preempted = frozenset(v.victim.key for v in victims if not v.asked)
    if not (memory.owned_yields and policy.fleet_cost):
        return []
    configured = int(inv.counts[CODE[S.CONFIGURED]].sum())
    budget = consolidation_budget(policy, configured) - sum(m.count for m in moved)
    if budget <= 0:
        return []
    takers, givers = _holdings(state, victims, {m.need.key for m in moved}, now)
    if not takers or not givers:
        return []
    profiles = inv.profiles.profiles
    pools = (state.idle_left, state.spec_left)
    rank_of: dict[str, dict[int, int]] = {}

    def replacement(need: Need) -> int | None:
        rank = rank_of.setdefault(need.key, state.supply.supply_rank(need))
        offers = [(rank[p], p) for pool in pools for p in state.supply.offered(pool, need)]
        return min(offers)[1] if offers else None

    def take(need: Need, p: Hashable) -> None:
        pool = pools[0] if pools[0].get(cast(int, p), 0) > 0 else pools[1]
        pool[cast(int, p)] -= 1

    def cost(need: Need, p: Hashable) -> float:
        return supply_key(need, profiles[cast(int, p)], True)[0]

    def fits(need: Need, p: Hashable) -> bool:
        return p in state.supply.matching(need)

    kinds: list[MachineState] = []

    def taking(need: Need, p: Hashable) -> None:
        kinds.append(S.IDLE if pools[0].get(cast(int, p), 0) > 0 else S.SPECULATIVE)
        take(need, p)

    yields = pick_yields(takers, givers, replacement, taking, fits, cost, policy, budget)
    room = state.room()
    moves = []
    for y, kind in zip(yields, kinds, strict=True):
        p = cast(int, y.instead)
        moves.append(Assignment(y.giver, kind, p, 1))
        state.demand[profiles[p].name] += 1
        out.consolidations[y.giver.key] = out.consolidations.get(y.giver.key, 0) + 1
        room.drained(y.giver.cluster, 1)
    remember(memory, yields, lambda p: profiles[cast(int, p)].name, now)
    return moves


def _holdings(
    state: CycleState, victims: list[Victim], moved: set[str], now: float
) -> tuple[list[Holding], list[Holding]]:
    """(takers, givers) for `pick_yields`: settled plain needs' configured elastic machines,
    and their configured owned machines that may drain now, in table order."""
    memory, inv = state.memory, state.inventory
    profiles = inv.profiles.profiles
    staying = marked_configured(inv) if memory.marks_steer_moves else Counter()
    room = state.room()
    takers: list[Holding] = []
    givers: list[Holding] = []
    for need in settled_needs(state, victims, now):
        if need.key in moved or need.spec.same or need.spread:
            continue
        claims = state.claims[need.cluster].settled_of(need, state.supply) or []
        code = inv.clusters.get(need.cluster)
        for c in claims:
            kind = profiles[c.profile].capacity_type
            if kind in ELASTIC:
                takers.append((need, c.profile, c.count))
            elif kind in OWNED and need.key not in memory.yielded and code is not None:
                tally = inv.held.get(code, {}).get(c.profile)
                there = tally[HELD_SLOT[S.CONFIGURED]] if tally else 0
                free = min(c.count, max(0, there - staying[(code, c.profile)]))
                free = room.for_cost(need.cluster, free)
                if free > 0:
                    givers.append((need, c.profile, free))
    return takers, givers


def yield_segments(state: CycleState) -> list[tuple[str, int]]:
    """The (cluster, owned profile) segments of the yields due a drain, for the cycle's
    `RowPicker`."""
    found = _due(state)
    return [(need.cluster, owned) for need, owned, _, _ in found]


def _due(state: CycleState) -> list[tuple[Need, int, int, Yielded]]:
    """The yields not yet drained whose need is in the table: (need, owned profile id,
    replacement profile id, its `Yielded`)."""
    memory = state.memory
    if not (memory.yielded and memory.owned_yields):
        return []
    pending = due(memory)
    if not pending:
        return []
    ids = {p.name: i for i, p in enumerate(state.inventory.profiles.profiles)}
    by_key = {n.key: n for n in state.needs}
    return [
        (by_key[k], ids[y.owned], ids[y.instead], y)
        for k, y in pending
        if k in by_key and y.owned in ids and y.instead in ids
    ]


def yield_drains(
    state: CycleState, picker: RowPicker
) -> tuple[Counter[tuple[str, int]], list[tuple[np.ndarray, str]]]:
    """Phase 3's part (yielding.py, step 2): for each yield whose replacement is now excess
    (configured, claimed by no need) and whose need still holds a configured machine of the
    owned profile, that machine drains instead: returns how many excess machines of each
    (cluster, profile) stay (the first of the segment), and the owned rows to drain (the last
    of the need's claim, unless marked do-not-disrupt). Not for a need preempted this
    cycle."""
    keep: Counter[tuple[str, int]] = Counter()
    drains: list[tuple[np.ndarray, str]] = []
    inv, marks = state.inventory, state.memory.cost_moves_bounded
    for need, owned, instead, y in _due(state):
        cc = state.claims.get(need.cluster)
        if cc is None or need.key in state.preempted:
            continue
        spare = cc.excess.get(instead, (0, 0))[1] - keep[(need.cluster, instead)]
        claim = next(
            (
                c
                for c in cc.claims.get(need.key, [])
                if c.slot == CONFIGURED_SLOT and c.profile == owned and c.count
            ),
            None,
        )
        if spare <= 0 or claim is None:
            continue
        rows = picker.configured(need.cluster, owned, claim.offset + claim.count - 1, 1)
        if not len(rows) or (marks and inv.kept[rows[0]]):
            continue
        keep[(need.cluster, instead)] += 1
        drains.append((rows, need.cluster))
        y.drained = True
    return keep, drains
