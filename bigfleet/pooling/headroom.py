"""Spare quota follows demand (issue 45: "speculative quota follows demand the same way").

Cloud quota is dealt to shards slot by slot, so a shard running all of its slots of a kind has
none left to replace an interrupted or failed machine: the need waits for a coordinator round
to bring one from another shard, where one shard would have created it at once. So a shard
that pays for elastic machines of a need and holds no free quota that could serve it at the
same effective cost or less gets a few slots (a tenth of the need's machines, at least one,
at most `SPARE_MAX`) from a shard that holds more than one: spare slots go where they are
used."""

from __future__ import annotations

from collections.abc import Iterator, Mapping

from ..cost import effective_cost
from ..models import Machine
from ..profiles import Profile
from ..reports import ElasticGroup, MoveKind, ShardReport
from .fits import fits, free_offers

SPARE_MAX = 4


def serves(group: ElasticGroup, m: Machine) -> bool:
    """`m` is quota (elastic: owned machines go for cost, `for_cost.py`) that fits `group`'s
    need at its effective cost or less: a replacement it would take."""
    p = Profile.of(m)
    cost = effective_cost(p.marginal_price, p.interruption_probability, group.interruption_penalty)
    return p.marginal_price > 0 and cost <= group.cost_per_hour and fits(group.requirements, m)


def spare_wanted(group: ElasticGroup) -> int:
    return min(SPARE_MAX, max(1, group.count // 10))


def spares(
    reports: Mapping[int, ShardReport], receiver: int, group: ElasticGroup, used: set[str]
) -> Iterator[tuple[MoveKind, int, str]]:
    """(kind, donor, machine id) of spare machines for `group` on `receiver`: none if it holds
    one free already; from donors holding more than one, one kept by each."""
    own = reports.get(receiver)
    if own is None or any(serves(group, m) for _, m, _ in free_offers(own, used)):
        return
    for donor in sorted(reports):
        if donor == receiver:
            continue
        free = [
            (kind, mid)
            for kind, m, ids in free_offers(reports[donor], used)
            if serves(group, m)
            for mid in ids
        ]
        for kind, mid in free[1:]:
            yield kind, donor, mid
