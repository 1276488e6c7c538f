"""Which shard splits and which two merge (design §16), from the member shards' last reports:
pure, for the coordinator (`Coordinator.membership_change`)."""

from __future__ import annotations

from collections.abc import Mapping

from .reports import ShardReport


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
