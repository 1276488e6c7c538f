"""Consolidation toward cheaper capacity (docs/engine.md, The cycle 5): a need whose machines are
all configured moves its dearest ones onto free cheaper machines when the saving is worth it.

A move is only the replacement's configure (or create, then configure), as for any short need.
Once the replacement is configured the need's claims keep it (cheapest first) and the dearest
machine is left over: excess, drained by Phase 3.
"""

from __future__ import annotations

from collections import Counter
from typing import cast

import numpy as np

from ..held import HELD_SLOT
from ..inventory import CODE
from ..models import MachineState
from ..needs import Need
from .claims import Claim
from .cycle import CycleState
from .decision import Decision
from .domains import move_domain
from .moves import consolidation_budget, worth_moving
from .phase1 import Assignment
from .phase2 import Victim
from .ranking import supply_key
from .victims import marked_configured
from .yielding import blocks

S = MachineState


def consolidate(
    state: CycleState, victims: list[Victim], out: Decision, now: float
) -> list[Assignment]:
    """Walks `state.needs` in table order after Phase 2, over the free machines Phases 1 and 2
    left (`state.idle_left`, `state.spec_left`, which shrink by what it takes).

    A need is *settled* when it holds its whole count, none lost to a preemption this cycle,
    its cluster has no unclaimed machine for it still coming up (an earlier move's
    replacement), and its count has been the same for `consolidation_stable_seconds`. A
    settled need pairs its CONFIGURED machines, dearest effective cost first, each with the
    cheapest free machine that fits it in the same `same` and spread domains, while the pair
    is `worth_moving`; at most `consolidation_budget` moves a cycle.
    Every move counts in `state.demand` and, per need key, in `out.consolidations`.

    Returns the moves as Phase 1 assignments (IDLE → Configure, SPECULATIVE → Create).
    """
    inv = state.inventory
    budget = consolidation_budget(state.policy, int(inv.counts[CODE[S.CONFIGURED]].sum()))
    free = sorted({p for pool in (state.idle_left, state.spec_left) for p, n in pool.items() if n})
    if budget == 0 or not free:
        return []
    settled = settled_needs(state, victims, now)
    moves: list[Assignment] = []
    staying = _staying(state)
    for need in _worth_a_look(state, settled, free):
        budget = _moves(state, need, budget, moves, staying)
        if budget == 0:
            break
    for move in moves:
        key = move.need.key
        out.consolidations[key] = out.consolidations.get(key, 0) + move.count
    return moves


def settled_needs(state: CycleState, victims: list[Victim], now: float) -> list[Need]:
    """The needs consolidation may move, in table order: settled (`ClusterClaims.settled_of`),
    stable, none of their machines preempted this cycle, their cluster not frozen."""
    lost = {v.victim.key for v in victims}
    memory, policy, claims, supply = state.memory, state.policy, state.claims, state.supply
    return [
        n
        for n in state.needs
        if n.key not in lost
        and n.cluster not in memory.frozen
        and memory.stable(n, policy, now)
        and claims[n.cluster].settled_of(n, supply) is not None
    ]


def _worth_a_look(state: CycleState, needs: list[Need], free: list[int]) -> list[Need]:
    """The needs whose dearest machine against the cheapest free machine of any profile would
    be worth moving: by column over needs × free prices, so the exact pairing (per need, per
    matching profile) runs only where a move is possible. An upper bound on every pair's
    saving, computed with the same float operations as `effective_cost`: it never drops a need
    the exact rule would move."""
    if not needs:
        return []
    table = state.inventory.profiles
    policy = state.policy
    penalty = np.array([n.spec.interruption_penalty for n in needs], dtype=np.float64)
    configured = [_settled(state, n) for n in needs]
    owner = np.array([i for i, cs in enumerate(configured) for _ in cs], dtype=np.int64)
    held = np.array([c.profile for cs in configured for c in cs], dtype=np.int64)
    dearest = np.full(len(needs), -np.inf)
    price = table.marginal if policy.fleet_cost else table.price
    np.maximum.at(dearest, owner, price[held] + table.interruption[held] * penalty[owner])
    # Free profiles differ mostly by labels: one column per distinct (price, probability).
    prices = zip(price[free].tolist(), table.interruption[free].tolist(), strict=True)
    offers = np.array(sorted(set(prices)))
    cheapest = (offers[None, :, 0] + offers[None, :, 1] * penalty[:, None]).min(axis=1)
    gain = dearest - cheapest
    reclamation = np.array([n.spec.reclamation_penalty for n in needs], dtype=np.float64)
    keep = (gain >= policy.consolidation_min_saving_per_hour) & (
        gain * policy.consolidation_horizon_hours > reclamation
    )
    return [needs[i] for i in np.flatnonzero(keep).tolist()]


def _staying(state: CycleState) -> Counter[tuple[int, int]] | None:
    """Configured machines per (cluster code, profile) that cannot be moved away: those their
    cluster marked do-not-disrupt (the excess drain takes marked machines last, `rows.py`, and
    holds them), and, as `_moves` counts them in, those already moved this cycle. From the
    marked rows alone, which are few. None: no machine is marked (or a shard's run begun
    before marks steered consolidation), every machine can move."""
    if not state.memory.marks_steer_moves:
        return None
    return marked_configured(state.inventory) or None


def _moves(
    state: CycleState,
    need: Need,
    budget: int,
    out: list[Assignment],
    staying: Counter[tuple[int, int]] | None = None,
) -> int:
    """One settled need's moves, appended to `out`; returns the budget left. `staying`: the
    configured machines of each (cluster, profile) that cannot be moved away (`_staying`),
    each move counted in."""
    profiles = state.inventory.profiles.profiles
    rank = state.supply.supply_rank(need)
    offers = sorted(
        [(rank[p], 0, p) for p in state.supply.offered(state.idle_left, need)]
        + [(rank[p], 1, p) for p in state.supply.offered(state.spec_left, need)]
    )
    if state.memory.yielded:  # (not back onto an owned profile it yielded: yielding.py)
        offers = [o for o in offers if not blocks(state.memory, need, profiles[o[2]].name)]
    pools = (state.idle_left, state.spec_left)

    def cost(p: int) -> float:
        return supply_key(need, profiles[p], state.policy.fleet_cost)[0]

    configured = _settled(state, need)
    held = sorted(configured, key=lambda c: (-cost(c.profile), profiles[c.profile].name))
    code = state.inventory.clusters.get(need.cluster)
    code = -1 if code is None else code
    for claim in held:
        home = move_domain(need, profiles[claim.profile])
        left = claim.count
        if staying is not None:
            tally = state.inventory.held.get(code, {}).get(claim.profile)
            there = tally[HELD_SLOT[S.CONFIGURED]] if tally else 0
            left = min(left, max(0, there - staying[(code, claim.profile)]))
        while left and budget:
            to = next(
                (
                    (kind, p)
                    for _, kind, p in offers
                    if pools[kind][p] > 0 and move_domain(need, profiles[p]) == home
                ),
                None,
            )
            if to is None:
                break
            kind, p = to
            if not worth_moving(need, state.policy, cost(claim.profile) - cost(p)):
                break
            n = min(left, pools[kind][p], budget)
            if staying is not None:
                staying[(code, claim.profile)] += n
            pools[kind][p] -= n
            left -= n
            budget -= n
            state.demand[profiles[p].name] += n
            out.append(Assignment(need, S.IDLE if kind == 0 else S.SPECULATIVE, p, n))
    return budget


def _settled(state: CycleState, need: Need) -> list[Claim]:
    """A settled need's claims on CONFIGURED machines (only settled needs are asked about)."""
    return cast(list[Claim], state.claims[need.cluster].settled_of(need, state.supply))
