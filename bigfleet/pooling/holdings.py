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


# A report's demand in bytes of requirements, at most, and one entry's (a need whose
# requirements are larger is left out): a report lands in the coordinator's history, and a
# sender's requirements are its own choice.
DEMAND_BYTES = 64_000
DEMAND_ENTRY_BYTES = 4_000


def demand(needs: Iterable[Need], limit: int = DEMANDS) -> list[Demand]:
    """The machines the needs ask for, per set of requirements (with the lowest of their
    interruption penalties), the most first, at most `limit` sets and `DEMAND_BYTES` (needs
    asking for none, or with requirements over `DEMAND_ENTRY_BYTES`, left out)."""
    asked: dict[object, tuple[Need, int, int, float]] = {}
    for need in needs:
        if need.count > 0:
            key = req_key(need.requirements)
            penalty = need.spec.interruption_penalty
            first, n, size, low = asked.get(key, (need, 0, -1, penalty))
            if size < 0:
                size = _bytes(need.requirements)
            asked[key] = (first, n + need.count, size, min(low, penalty))
    ranked = sorted(asked.values(), key=lambda t: (-t[1], t[0].order))
    out: list[Demand] = []
    room = DEMAND_BYTES
    for need, n, size, low in ranked:
        if size <= min(DEMAND_ENTRY_BYTES, room) and len(out) < limit:
            reqs = list(need.requirements)
            out.append(Demand(requirements=reqs, count=n, interruption_penalty=low))
            room -= size
    return out


def _bytes(requirements: Iterable[NodeSelectorRequirement]) -> int:
    """About the JSON size of the requirements."""
    return sum(len(r.key) + 40 + sum(len(v) + 3 for v in r.values) for r in requirements)


def fitting(reports: Mapping[int, ShardReport], wants: Wants, shards: Iterable[int]) -> set[int]:
    """Of `shards`, those holding owned machines that fit at least one of `wants` (a need's
    requirements each)."""
    return {
        s
        for s in shards
        if s in reports
        and any(all_match(reqs, h.labels) for h in reports[s].holds for reqs in wants)
    }
