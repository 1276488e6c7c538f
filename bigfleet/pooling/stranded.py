"""Elastic machines one shard runs while free owned machines that would stand in for them sit in
another (issue 45, "Visible"): what pooling across shards has not fixed yet, per profile of the
free machines. The coordinator exports it (`bigfleet_elastic_beside_idle_owned{profile}`, alert
`BigFleetElasticBesideIdleOwned`) and `bigfleet status` shows it.

From the shards' last reports alone: every elastic group (`ShardReport.elastic`, settled or
not), the dearest per machine first (then the higher priority, the larger group, the lower
shard, the cluster's name), takes free (idle or speculative) owned machines (bare metal,
reserved: `cost.OWNED`) of other shards that would stand in for its own (`for_cost.stands_in`:
they fit its need for less; free cloud quota is not counted, however cheap), profiles in the
order the reports first name them, each profile's shards in order, each free machine at most
once. A pair counts whether or not the coordinator may move the machine (a donor keeps one it
would use itself, a move is under way, the receiver's shard has not settled the need yet): it
measures what is left, not what is planned. Reports carry bounded samples of free machines and
the dearest needs only, so the count is a lower bound."""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass

from ..cost import OWNED
from ..models import Machine
from ..profiles import Profile
from ..reports import ElasticGroup, ShardReport
from ..requirements import all_match
from .fits import free_offers
from .for_cost import stands_in


@dataclass
class _Free:
    """Free machines of one profile in one shard's report, `left` not yet paired."""

    shard: int
    left: int


@dataclass
class _Kind:
    """Free machines of one profile across the reports: a record of it, the profile, and its
    shards' machines in shard order (idle before speculative)."""

    machine: Machine
    profile: Profile
    free: list[_Free]


def _kinds(reports: Mapping[int, ShardReport]) -> list[_Kind]:
    kinds: dict[Profile, _Kind] = {}
    for shard in sorted(reports):
        for _kind, m, ids in free_offers(reports[shard], set()):
            p = Profile.of(m)
            if p.capacity_type not in OWNED:
                continue
            kinds.setdefault(p, _Kind(m, p, [])).free.append(_Free(shard, len(ids)))
    return list(kinds.values())


def _dearest_first(reports: Mapping[int, ShardReport]) -> list[tuple[int, ElasticGroup]]:
    pairs = [(s, g) for s in sorted(reports) for g in reports[s].elastic]
    return sorted(
        pairs, key=lambda p: (-p[1].cost_per_hour, -p[1].priority, -p[1].count, p[0], p[1].cluster)
    )


def stranded(reports: Mapping[int, ShardReport]) -> dict[str, int]:
    """Per profile (`Profile.short_name` of the free machine), the elastic machines one shard
    runs while a free machine of that profile in another shard would stand in for them (see
    the module); profiles in name order, none at 0."""
    kinds = _kinds(reports)
    left = [sum(f.left for f in k.free) for k in kinds]
    # Per requirements, the profiles they fit (`fits`, part of `stands_in`, on each profile's
    # labels computed once), those with free machines left: many needs ask for the same
    # machines, and most profiles fit none of them.
    fitting: dict[tuple[tuple[str, str, tuple[str, ...]], ...], list[int]] = {}
    found: dict[str, int] = {}
    for shard, group in _dearest_first(reports):
        want = group.count
        asked = tuple((r.key, str(r.operator), tuple(r.values)) for r in group.requirements)
        if asked not in fitting:
            reqs = group.requirements
            fitting[asked] = [
                i for i, k in enumerate(kinds) if left[i] and all_match(reqs, k.profile.label_map)
            ]
        fitting[asked] = [i for i in fitting[asked] if left[i]]
        for i in fitting[asked]:
            if want == 0:
                break
            if not stands_in(group, kinds[i].machine):
                continue
            for f in kinds[i].free:
                if f.shard == shard or f.left == 0:
                    continue
                n = min(want, f.left)
                f.left -= n
                left[i] -= n
                want -= n
                name = kinds[i].profile.short_name
                found[name] = found.get(name, 0) + n
                if want == 0:
                    break
    return dict(sorted(found.items()))
