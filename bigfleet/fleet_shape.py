"""Which shard splits and which two merge (design §16), from the member shards' last reports:
pure, for the coordinator (`Coordinator.membership_change`)."""

from __future__ import annotations

from collections.abc import Iterable, Mapping

from pydantic import Field

from .models import Wire
from .pooling.index import Round
from .reports import ShardReport


class MembershipThresholds(Wire):
    """Seed §16: split a shard over either split threshold; merge two shards under both merge
    thresholds (`merge_machines` 0: never merge on its own)."""

    split_machines: int = Field(default=400_000, ge=1)
    split_clusters: int = Field(default=2_000, ge=1)
    merge_machines: int = Field(default=0, ge=0)
    merge_clusters: int = Field(default=50, ge=0)


# Rounds in a row a shard is short while other shards report free machines its shortfalls fit
# before it is proposed for a split (issue 45): 10 rounds of 30 s, 5 minutes.
PROPOSE_AFTER = 10


def split_candidate(
    members: Mapping[int, ShardReport], max_machines: int, max_clusters: int
) -> int | None:
    """The shard most over a split threshold (machines or clusters), if any."""
    over = [
        (r.size / max_machines if max_machines else 0, len(r.clusters) / max_clusters, s)
        for s, r in members.items()
        if (max_machines and r.size > max_machines) or len(r.clusters) > max_clusters
    ]
    return max(over)[2] if over else None


def merge_candidate(
    members: Mapping[int, ShardReport], max_machines: int, max_clusters: int
) -> tuple[int, int] | None:
    """Two under-used shards (each under both thresholds): the smaller merges into the other.
    None if merging is off (`max_machines` 0) or no two qualify."""
    if not max_machines:
        return None
    under = sorted(
        (r.size, len(r.clusters), s)
        for s, r in members.items()
        if r.size < max_machines and len(r.clusters) < max_clusters
    )
    if len(under) < 2:
        return None
    return under[0][2], under[1][2]


def short_beside_free(
    reports: Mapping[int, ShardReport], moving: Iterable[str] = (), rnd: Round | None = None
) -> dict[int, int]:
    """Per shard short of machines (a shortfall a move could answer: not a held repair, not one
    no machine of any shard could serve), how many free machines (idle or speculative, not
    `moving`) other shards report that fit one of its shortfalls (the most for any one of
    them). A shard that stays so round after round is not being served by the coordinator's
    moves: the donors keep the machines for needs of their own, or its needs want more of one
    domain than any shard holds free. `rnd`: the round's index of the same reports, if made."""
    out: dict[int, int] = {}
    if not any(r.shortfalls for r in reports.values()):
        return out  # (the common case: no index to build)
    rnd = rnd if rnd is not None and rnd.reports is reports else Round(reports)
    busy = set(moving)
    free: dict[int, dict[int, int]] = {}  # requirements key → shard → free machines fitting

    def free_for(key: int, reqs: list) -> dict[int, int]:
        found = free.get(key)
        if found is None:
            found = free[key] = {}
            for shard, _, _, ids in rnd.fitting(key, reqs):
                n = len(ids) if busy.isdisjoint(ids) else sum(m not in busy for m in ids)
                found[shard] = found.get(shard, 0) + n
        return found

    for shard in rnd.shards:
        keys = {
            rnd.key(sf, sf.requirements): sf.requirements
            for sf in reports[shard].shortfalls
            if not sf.repair_held and not (sf.why and not sf.held_back)
        }
        most = 0
        for key, reqs in keys.items():
            by_shard = free_for(key, reqs)
            most = max(most, sum(by_shard.values()) - by_shard.get(shard, 0))
        if most:
            out[shard] = most
    return out


def short_rounds(
    before: Mapping[int, tuple[int, int]], found: Mapping[int, int], reporting: Iterable[int]
) -> dict[int, tuple[int, int]]:
    """Per shard (rounds in a row short beside free machines, how many free), after a round
    that `found` so (`short_beside_free`): one more round for those found, none for other
    shards that reported; a shard with no report (a new run waits for the next ones) keeps its
    count."""
    out = {s: (before.get(s, (0, 0))[0] + 1, n) for s, n in found.items()}
    heard = set(reporting)
    out.update({s: v for s, v in before.items() if s not in heard and s not in out})
    return dict(sorted(out.items()))
