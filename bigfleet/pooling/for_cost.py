"""Idle owned capacity goes where the fleet would otherwise pay for elastic machines (issue 45;
decision 0012 applied across shards).

A shard that can buy on-demand or spot never has a shortfall, so design §9's order alone never
learns that an owned machine idle in another shard would have served it. Shards report the
elastic machines of each need their consolidation would move onto a free owned machine
(`ShardReport.elastic`); here each is matched, dearest first, with idle (or speculative)
machines of other shards that fit the need at a lower effective cost (owned: nothing at the
margin). The move is a hand-over (no drain); the receiving shard's own consolidation then brings
the need onto the cheaper machine and returns the elastic one, make-before-break, by the rules
it already has. A need whose count still changes (not settled: a batch queue, a ramp) draws
them too: its shard's consolidation waits for it to settle, but its next machine is the free
one instead of another bought one, and one shard would have given it that one first.

When no free machine is left anywhere, an owned machine another shard's backfill holds (a
priority below the need's `displace_below`) is drained for it, when the need's saving over
`horizon_hours` is more than the backfill's reclamation penalty: what the need's own shard does
inside itself (bigfleet/engine/fleet_cost.py), across shards (`cost_victims`).

Not moved, so that a machine never goes back and forth:
- to a shard that already holds a free machine standing in for the need at least as cheaply:
  its engine has not used it yet (the need is not settled, or the move is under way), and
  another would wait the same way (a cheaper one does move: the need's next machine, or its
  consolidation, takes the cheapest free one);
- from a shard that would use it itself: short of such a machine for a need at the same
  priority or above (`short_of`), or paying more for one of its own needs it fits (`saves`).
"""

from __future__ import annotations

from collections.abc import Callable, Iterator, Mapping
from math import inf
from typing import Protocol

from ..cost import drain_grace_period, effective_cost
from ..models import Machine
from ..profiles import Profile
from ..reports import ElasticGroup, MoveKind, ShardReport
from .fits import fits
from .index import Round
from .pace import Pace

# Groups of elastic machines a round looks at, at most (the dearest), so that a round's plan
# stays short (it runs in steps, each a workflow task within the SDK's 2 s deadlock bound:
# `pace.py`, `bigfleet bench coordinator`, docs/benchmarks.md). The rest wait for a later round.
COST_GROUPS = 500


def spend_order(
    reports: Mapping[int, ShardReport], limit: int = COST_GROUPS, settled_only: bool = True
) -> list[tuple[int, ElasticGroup]]:
    """(shard, group) of the reports' elastic machines, the dearest per machine first, then
    the higher priority, then the larger group; the first `limit`. With `settled_only`
    (coordinator runs begun before unsettled needs drew machines) only settled needs'."""
    pairs = [(s, g) for s, r in reports.items() for g in r.elastic if g.settled or not settled_only]
    order = sorted(
        pairs, key=lambda p: (-p[1].cost_per_hour, -p[1].priority, -p[1].count, p[0], p[1].cluster)
    )
    return order[:limit]


def stands_in(group: ElasticGroup, m: Machine) -> bool:
    """Whether machine `m` fits `group`'s need at a lower effective cost than its elastic
    machines (`Round.stands_in`, for one machine record)."""
    p = Profile.of(m)
    cost = effective_cost(p.marginal_price, p.interruption_probability, group.interruption_penalty)
    return cost < group.cost_per_hour and fits(group.requirements, m)


def at_home(rnd: Round, receiver: int, group: ElasticGroup, used: set[str]) -> float:
    """The lowest effective cost for `group`'s need of a free machine `receiver` holds that
    would stand in for its elastic ones (infinity: none; minus infinity: the receiver has not
    reported). Only a machine cheaper than that is moved to it for the group (see the
    module)."""
    if receiver not in rnd.reports:
        return -inf
    penalty = group.interruption_penalty
    found = rnd.free(receiver, used, lambda p: rnd.stands_in(group, receiver, p))
    return min((rnd.cost(receiver, p, penalty) for _, p, _ in found), default=inf)


def cost_offers(
    rnd: Round,
    receiver: int,
    group: ElasticGroup,
    used: set[str],
    below: float = inf,
    cheapest: bool = False,
) -> Iterator[tuple[MoveKind, int, str]]:
    """(kind, donor, machine id) that could stand in for `group`'s elastic machines on
    `receiver` for less than `below` (`at_home`), idle before speculative, each kind the
    cheapest first with `cheapest` (`Round.cheapest`), then donors in shard order (see the
    module for what is left out)."""
    key = rnd.key(group, group.requirements)
    if cheapest:
        found = rnd.cheapest(key, group.requirements, group.interruption_penalty)
    else:
        found = rnd.fitting(key, group.requirements)
    for donor, kind, p, ids in found:
        if (
            donor != receiver
            and rnd.stands_in(group, donor, p)
            and rnd.cost(donor, p, group.interruption_penalty) < below
            and not rnd.short_of(donor, p, group.priority)
            and not rnd.saves(donor, p)
        ):
            yield from ((kind, donor, mid) for mid in ids if mid not in used)


def cost_victims(
    rnd: Round, receiver: int, group: ElasticGroup, used: set[str]
) -> list[tuple[int, str, int]]:
    """(donor, machine id, holder's priority) of owned machines other shards' backfill holds
    that `group`'s shard would displace for it (see the module), lowest priority first."""
    if not group.settled:
        return []
    worth = group.cost_per_hour * group.horizon_hours
    found = [
        (g.priority, donor, mid)
        for donor in rnd.shards
        if donor != receiver
        for g in rnd.victims(donor)
        if g.priority < group.displace_below
        and worth > g.reclamation_penalty
        and rnd.stands_in(group, donor, g.profile)
        and not rnd.short_of(donor, g.profile, group.priority)
        for mid in g.ids
        if mid not in used
    ]
    return [(donor, mid, priority) for priority, donor, mid in sorted(found)]


class Asker(Protocol):
    """What a move is made for: a shortfall, an elastic group, or (`quota.py`) no one need."""

    @property
    def cluster(self) -> str: ...

    @property
    def priority(self) -> int: ...


# The coordinator's bookkeeping for one round (`Coordinator.plan`): machines still wanted for
# (receiver, cluster, priority, count) less those on their way; take one machine (False: the
# donor's bound for the kind is spent).
Wanted = Callable[[int, str, int, int], int]
Take = Callable[[MoveKind, int, int, Asker, str, float, str], bool]


def cost_moves(
    rnd: Round,
    used: set[str],
    wanted: Wanted,
    take: Take,
    pace: Pace,
    settled_only: bool = False,
    cheapest: bool = False,
) -> Iterator[None]:
    """This round's moves for cost, through `take`: for each need paying for elastic
    machines, the dearest first, free machines of other shards that would stand in for them,
    then, for a settled need, other shards' backfill that its shard would displace (see the
    module). With `settled_only`, settled needs only (coordinator runs begun before); with
    `cheapest`, the cheapest free machines first (`cost_offers`)."""
    for receiver, group in spend_order(rnd.reports, settled_only=settled_only):
        if pace.tick():
            yield  # (a step of the round's plan: `pooling/pace.py`)
        want = wanted(receiver, group.cluster, group.priority, group.count)
        home = at_home(rnd, receiver, group, used)
        # (Runs begun before: any free stand-in at home waits, however dear.)
        if want == 0 or home == -inf or (settled_only and home < inf):
            continue
        for kind, donor, mid in cost_offers(rnd, receiver, group, used, home, cheapest):
            if want == 0:
                break
            want -= take(kind, donor, receiver, group, mid, 0.0, "cost")
        if home < inf:
            continue  # a drain elsewhere only when nothing free stands in at home
        for donor, mid, holder in cost_victims(rnd, receiver, group, used):
            if want == 0:
                break
            grace = drain_grace_period(group.priority, holder)
            want -= take(MoveKind.PREEMPT, donor, receiver, group, mid, grace, "cost")
