"""Taking machines out of the fleet (design §16): the request, what each shard could give, and
each shard's proportional share of it."""

from __future__ import annotations

from collections.abc import Mapping

from pydantic import Field

from .models import Count, Wire


class DecommissionRequest(Wire):
    """Take `count` machines out of the fleet, proportionally across shards (design §16):
    those of `provider`, optionally only in `zone` / of `instance_type` / on `rack`."""

    provider: str
    count: int = Field(gt=0)
    zone: str | None = None
    instance_type: str | None = None
    rack: str | None = None
    grace_seconds: float = Field(default=600.0, ge=0)

    def where(self) -> dict[str, str]:
        """The machine fields a decommissioned machine must match."""
        fields = {"provider", "zone", "instance_type", "rack"}
        return {k: v for k, v in self.model_dump(include=fields).items() if v is not None}


class Matching(Wire):
    """A shard's machines a decommission could take: how many, and the first ids of each kind
    (at most the decommission's count: a shard never gives more)."""

    free: list[str] = Field(default_factory=list)
    configured: list[str] = Field(default_factory=list)
    free_count: Count = 0
    configured_count: Count = 0


def proportional(available: Mapping[int, int], total: int) -> dict[int, int]:
    """Split `total` across shards in proportion to what each has (largest remainder), never
    more than a shard has: a decommission takes each shard's share (design §16)."""
    have = sum(available.values())
    total = min(total, have)
    if total <= 0:
        return {s: 0 for s in available}
    exact = {s: n * total / have for s, n in available.items()}
    share = {s: int(x) for s, x in exact.items()}
    by_remainder = sorted(available, key=lambda s: (-(exact[s] - share[s]), s))
    for s in by_remainder[: total - sum(share.values())]:
        share[s] += 1
    return share


def decommission_plan(
    found: Mapping[int, Matching], count: int
) -> tuple[dict[int, int], dict[int, tuple[list[str], list[str]]]]:
    """Each shard's share of `count` (proportional to its matching machines) and the machines
    that make it up, free ones first: {shard: (free ids, configured ids to drain)}."""
    shares = proportional(
        {s: f.free_count + f.configured_count for s, f in found.items()}, count
    )
    picks = {}
    for shard, share in shares.items():
        free = found[shard].free[:share]
        configured = found[shard].configured[: share - len(free)]
        if share:
            picks[shard] = (free, configured)
    return shares, picks
