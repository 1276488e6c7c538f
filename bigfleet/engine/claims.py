"""Claims: each need keeps the machines its cluster already has (or has on the way).

Worked over per-(cluster, profile, state) counts, cached per cluster until its roll-up or its
machines change, so a steady shard recomputes nothing here.
"""

from __future__ import annotations

from collections import defaultdict
from dataclasses import dataclass, field
from typing import TYPE_CHECKING

from ..inventory import HELD_SLOT, Inventory
from ..needs import Need
from .common import CLAIM_ORDER

if TYPE_CHECKING:
    from .fast import FastEngine

CLAIM_SLOTS = tuple(HELD_SLOT[s] for s in CLAIM_ORDER)
CONFIGURED_SLOT = HELD_SLOT[CLAIM_ORDER[0]]


@dataclass(slots=True)
class Claim:
    """`count` machines of one profile in one state; `offset` is where this need's share starts
    among the cluster's machines of that profile and state (ordered by reclamation value)."""

    need: Need
    profile: int
    slot: int
    count: int
    offset: int


@dataclass
class ClusterClaims:
    claims: dict[str, list[Claim]] = field(default_factory=dict)
    claimed: dict[str, int] = field(default_factory=dict)
    # Configured machines no need claims: pid -> (first unclaimed position, count).
    excess: dict[int, tuple[int, int]] = field(default_factory=dict)


def claim_cluster(
    inventory: Inventory,
    cluster: str,
    needs: list[Need],
    engine: FastEngine,
) -> ClusterClaims:
    cidx = inventory.clusters.get(cluster)
    held = inventory.held.get(cidx, {}) if cidx is not None else {}
    profiles = inventory.profiles.profiles
    remaining = {pid: list(tally) for pid, tally in held.items()}
    out = ClusterClaims()
    for need in needs:
        rank = engine.supply_rank(need)
        open_pids = [p for p in remaining if p in rank]
        if need.spec.same:
            key = need.spec.same
            per_domain: dict[str, int] = defaultdict(int)
            for p in open_pids:
                per_domain[profiles[p].label(key)] += sum(remaining[p][s] for s in CLAIM_SLOTS)
            per_domain = {d: n for d, n in per_domain.items() if n}
            if per_domain:
                home = max(sorted(per_domain), key=lambda d: per_domain[d])
                open_pids = [p for p in open_pids if profiles[p].label(key) == home]
        want = need.count
        taken: list[Claim] = []
        for slot in CLAIM_SLOTS:
            if want == 0:
                break
            for p in sorted(
                (p for p in open_pids if remaining[p][slot] > 0), key=rank.__getitem__
            ):
                n = min(want, remaining[p][slot])
                taken.append(Claim(need, p, slot, n, held[p][slot] - remaining[p][slot]))
                remaining[p][slot] -= n
                want -= n
                if want == 0:
                    break
        out.claims[need.key] = taken
        out.claimed[need.key] = need.count - want
    for p, tally in remaining.items():
        if tally[CONFIGURED_SLOT] > 0:
            first = held[p][CONFIGURED_SLOT] - tally[CONFIGURED_SLOT]
            out.excess[p] = (first, tally[CONFIGURED_SLOT])
    return out
