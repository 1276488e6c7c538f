"""Speculative quota follows demand (issue 45: "speculative quota follows demand the same way").

A speculative cloud machine (on-demand, spot) is a quota slot, a permission to create one
machine of a kind: moving it between shards is bookkeeping and disrupts nothing. Dealt by a
hash of its zone, much of a kind's quota sits in shards none of whose needs it fits, while a
shard whose needs it fits buys a dearer kind each time a burst outgrows its own share: one
shard would have bought the cheaper kind first. So each round the free quota of a shard that
has no use for it goes to the shards that do, before their next burst rather than after.
(Owned machines not made ready yet stay: they are racks, and a rack is not cut up across
shards ahead of a need; the cost rule and the shortfall order move them when one asks.)

A shard *has use* for a kind when one of its needs (`ShardReport.demand`, all its needs by
requirements, whether on owned, elastic or no machines now) fits it. A shard with use keeps
every one of its own: which of two shards that both use a kind bursts next is not known, and
the cost rule (`for_cost.py`) and design §9's shortfall order move machines between them when
one pays more or goes short. A shard with no use gives its free ones to the shards with use
that would otherwise buy dearer: those holding a free machine for those needs at a higher
effective cost (an on-demand slot where the slot is spot, for needs whose interruption
penalty leaves spot the cheaper). Each gets up to its *room* (what its fitting
needs ask for, less the free machines it holds for them at no more than the slot's price: a
burst as large again as today's demand finds the cheaper kind at home), in proportion to room
(largest remainders); what no shard has room for stays. A shard with nothing dearer to buy
gets none: short, it is served by design §9's order (idle owned machines of other shards
first), which a slot at home would forestall. (Measured on 4 shards against one: dealing to
every shard with use made the week 1.0 % dearer and the rack failure 0.4 %; dealing also to
shards with nothing dearer when no cheaper machine was free elsewhere, the week 0.8 % and the
GPU replay 1.5 %; as here, -0.04 %, +1.1 % and +0.8 %.) Receivers then keep them: no
machine comes back by this rule, so none goes back and forth.

A shard that reports no demand but serves clusters (one built before the field) is not known
to have no use: it gives nothing by this rule; nor does one whose report shows a need the
kind fits running elastic machines or short of machines (its demand is bounded in bytes and
may leave a need out).
"""

from __future__ import annotations

from dataclasses import dataclass

from ..cost import ELASTIC
from ..models import Shortfall
from ..reports import Demand, ElasticGroup, MoveKind
from .for_cost import Take
from .index import Round


@dataclass(frozen=True)
class _Quota:
    """What a quota move is made for: no one need (no cluster, the lowest priority)."""

    cluster: str = ""
    priority: int = 0


QUOTA = _Quota()


def may_use(rnd: Round, shard: int, p: int) -> bool:
    """Whether `shard` has (or may have) use for profile `p` of its own report: one of its
    needs (`demand`) fits it, or it reports no demand while serving clusters (built before the
    field), or one of its elastic groups or shortfalls fits it (demand is bounded and may
    leave a need out)."""
    report = rnd.reports[shard]
    if not report.demand and report.clusters:
        return True
    wants: list[Demand | ElasticGroup | Shortfall] = [
        *(d for d in report.demand if d.count > 0),
        *report.elastic,
        *report.shortfalls,
    ]
    return any(rnd.fits(rnd.key(w, w.requirements), w.requirements, shard, p) for w in wants)


def room(rnd: Round, shard: int, donor: int, p: int, used: set[str]) -> int:
    """How many more machines like profile `p` of `donor`'s report `shard` could use: what its
    needs that `p` fits ask for, less the free machines it holds for them at no more than
    `p`'s price; none unless it also holds a free one for them at more (see the module)."""
    asked = _fitting(rnd, shard, donor, p)
    if not asked:
        return 0
    # At the effective cost for the needs most willing to be interrupted (a spot slot is no
    # cheaper than on-demand for a need whose penalty makes it dearer).
    penalty = min(d.interruption_penalty for d in asked)
    price = rnd.cost(donor, p, penalty)

    def fits_one(q: int) -> bool:
        return any(rnd.fits(rnd.key(d, d.requirements), d.requirements, shard, q) for d in asked)

    cheap = dear = 0
    for _, q, ids in rnd.free(shard, used, fits_one):
        if rnd.cost(shard, q, penalty) <= price:
            cheap += len(ids)
        else:
            dear += len(ids)
    return max(0, sum(d.count for d in asked) - cheap) if dear else 0


def _fitting(rnd: Round, shard: int, donor: int, p: int) -> list[Demand]:
    return [
        d
        for d in rnd.reports[shard].demand
        if d.count > 0 and rnd.fits(rnd.key(d, d.requirements), d.requirements, donor, p)
    ]


def shares(free: int, weights: list[int]) -> list[int]:
    """`free` machines dealt in proportion to `weights` (largest remainders, earlier first on
    ties); all of them when any weight is positive."""
    total = sum(weights)
    if total <= 0 or free <= 0:
        return [0] * len(weights)
    dealt = [free * w // total for w in weights]
    order = sorted(range(len(weights)), key=lambda i: (-(free * weights[i] % total), i))
    for i in order[: free - sum(dealt)]:
        dealt[i] += 1
    return dealt


def quota_moves(rnd: Round, used: set[str], take: Take) -> None:
    """This round's moves of speculative machines from shards with no use for their kind to
    the shards with use, through `take` (see the module)."""
    given: dict[int, int] = {}  # receiver → slots dealt it this round (its report predates them)
    for donor in rnd.shards:
        for kind, p, ids in list(rnd.free(donor, used)):
            if (
                kind is MoveKind.SPECULATIVE
                and rnd.profiles[donor][p].capacity_type in ELASTIC
                and not _deal(rnd, donor, p, ids, used, take, given)
            ):
                break  # the donor's bound for hand-overs is spent this round


def _deal(
    rnd: Round,
    donor: int,
    p: int,
    ids: list[str],
    used: set[str],
    take: Take,
    given: dict[int, int],
) -> bool:
    """Deals `donor`'s free speculative machines `ids` of profile `p` over the shards with room
    for them (less what this round dealt them already), unless the donor has use (or may
    have); False once `take` refuses."""
    if may_use(rnd, donor, p):
        return True
    rooms = [
        (s, n)
        for s in rnd.shards
        if s != donor and (n := room(rnd, s, donor, p, used) - given.get(s, 0)) > 0
    ]
    dealt = shares(min(len(ids), sum(n for _, n in rooms)), [n for _, n in rooms])
    free = iter(ids)
    for (receiver, _), n in zip(rooms, dealt, strict=True):
        for mid in [next(free) for _ in range(n)]:
            if not take(MoveKind.SPECULATIVE, donor, receiver, QUOTA, mid, 0.0, "quota"):
                return False
            given[receiver] = given.get(receiver, 0) + 1
    return True
