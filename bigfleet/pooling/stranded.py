"""Elastic machines one shard runs while free owned machines that would stand in for them sit in
another (issue 45, "Visible"): what pooling across shards has not fixed yet, per profile of the
free machines. The coordinator exports it (`bigfleet_elastic_beside_idle_owned{profile}`, alert
`BigFleetElasticBesideIdleOwned`) and `bigfleet status` shows it.

From the shards' last reports alone: every elastic group (`ShardReport.elastic`, settled or
not), the dearest per machine first (then the higher priority, the larger group, the lower
shard, the cluster's name), takes free machines of other shards that would stand in for its own
(`for_cost.stands_in`: they fit its need for less), shards in order, idle before speculative,
each free machine at most once. A pair counts whether or not the coordinator may move the
machine (a donor keeps one it would use itself, a move is under way, the receiver's shard has
not settled the need yet): it measures what is left, not what is planned. Reports carry bounded
samples of free machines and the dearest needs only, so the count is a lower bound."""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass

from ..models import Machine
from ..profiles import Profile
from ..reports import ElasticGroup, ShardReport
from .fits import free_offers
from .for_cost import stands_in


@dataclass
class _Free:
    """Free machines of one profile in one shard's report, `left` not yet paired."""

    shard: int
    machine: Machine
    profile: str
    left: int


def _dearest_first(reports: Mapping[int, ShardReport]) -> list[tuple[int, ElasticGroup]]:
    pairs = [(s, g) for s in sorted(reports) for g in reports[s].elastic]
    return sorted(
        pairs, key=lambda p: (-p[1].cost_per_hour, -p[1].priority, -p[1].count, p[0], p[1].cluster)
    )


def stranded(reports: Mapping[int, ShardReport]) -> dict[str, int]:
    """Per profile (`Profile.short_name` of the free machine), the elastic machines one shard
    runs while a free machine of that profile in another shard would stand in for them (see
    the module); profiles in name order, none at 0."""
    free = [
        _Free(shard, m, Profile.of(m).short_name, len(ids))
        for shard in sorted(reports)
        for _kind, m, ids in free_offers(reports[shard], set())
    ]
    found: dict[str, int] = {}
    for shard, group in _dearest_first(reports):
        want = group.count
        for f in free:
            if want == 0:
                break
            if f.left == 0 or f.shard == shard or not stands_in(group, f.machine):
                continue
            n = min(want, f.left)
            f.left -= n
            want -= n
            found[f.profile] = found.get(f.profile, 0) + n
    return dict(sorted(found.items()))
