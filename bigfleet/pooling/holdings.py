"""Where owned capacity lives, and where a new cluster goes (issue 45: "assignment follows
demand"; design §16 assigns on first contact).

Each shard reports the owned machines it holds by kind (`holdings`: provider, instance type,
zone and capacity type, with one profile's labels). A new cluster goes to its home (the hash
of its name, where a fleet started over running machines adopted the cluster's machines) when
its home holds owned machines that fit one of its needs, or when no shard does; otherwise to
the least-loaded shard that holds some (`fitting`). A cluster that goes where its capacity is
never waits for a coordinator round to bring it, and never buys while it waits."""

from __future__ import annotations

from collections.abc import Iterable, Mapping, Sequence

from ..cost import OWNED
from ..inventory import Inventory
from ..models import NodeSelectorRequirement
from ..needs import Need
from ..reports import DEMANDS, HOLDINGS, Demand, Holding, ShardReport
from ..requirements import all_match
from .index import req_key

Wants = Sequence[Sequence[NodeSelectorRequirement]]


def holdings(inventory: Inventory, limit: int = HOLDINGS) -> list[Holding]:
    """The shard's owned machines by kind, the most first, at most `limit` kinds."""
    counts = inventory.counts.sum(axis=0).tolist()
    kinds: dict[str, tuple[dict[str, str], int]] = {}
    for p, profile in enumerate(inventory.profiles.profiles):
        n = int(counts[p]) if p < len(counts) else 0
        if n <= 0 or profile.capacity_type not in OWNED:
            continue
        labels, held = kinds.get(profile.short_name, (profile.label_map, 0))
        kinds[profile.short_name] = (labels, held + n)
    ranked = sorted(kinds.items(), key=lambda kv: (-kv[1][1], kv[0]))[:limit]
    return [Holding(labels=dict(labels), owned=n) for _, (labels, n) in ranked]


def demand(needs: Iterable[Need], limit: int = DEMANDS) -> list[Demand]:
    """The machines the needs ask for, per set of requirements, the most first, at most
    `limit` sets (needs asking for none left out)."""
    asked: dict[object, tuple[Need, int]] = {}
    for need in needs:
        if need.count > 0:
            key = req_key(need.requirements)
            first, n = asked.get(key, (need, 0))
            asked[key] = (first, n + need.count)
    ranked = sorted(asked.values(), key=lambda t: (-t[1], t[0].order))[:limit]
    return [Demand(requirements=list(need.requirements), count=n) for need, n in ranked]


def fitting(reports: Mapping[int, ShardReport], wants: Wants, shards: Iterable[int]) -> set[int]:
    """Of `shards`, those holding owned machines that fit at least one of `wants` (a need's
    requirements each)."""
    return {
        s
        for s in shards
        if s in reports
        and any(all_match(reqs, h.labels) for h in reports[s].holds for reqs in wants)
    }
