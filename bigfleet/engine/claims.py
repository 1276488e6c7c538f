"""Claims: each need keeps the machines its cluster already has (or has on the way).

Worked over per-(cluster, profile, state) counts, cached per cluster until its roll-up or its
machines change, so a steady shard recomputes nothing here.
"""

from __future__ import annotations

from collections import defaultdict
from dataclasses import dataclass, field
from typing import cast

import numpy as np

from ..inventory import HELD_SLOT, Inventory
from ..needs import Need
from .common import CLAIM_ORDER
from .supply import SupplyIndex

CLAIM_SLOTS = tuple(HELD_SLOT[s] for s in CLAIM_ORDER)
CONFIGURED_SLOT = HELD_SLOT[CLAIM_ORDER[0]]
# A need that can use at most this many profiles walks them in Python; a wider one masks them.
NARROW = 8


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
    """One cluster's claims, per need key; `claimed` counts them. Configured machines left
    unclaimed are `excess`: Phase 3 drains them, Phase 2 earmarks them for needs still short."""

    claims: dict[str, list[Claim]] = field(default_factory=dict)
    claimed: dict[str, int] = field(default_factory=dict)
    # Configured machines no need claims: pid -> (first unclaimed position, count).
    excess: dict[int, tuple[int, int]] = field(default_factory=dict)
    # Profiles with configuring or creating machines no need claims: a consolidation's
    # replacement still coming up.
    pending: set[int] = field(default_factory=set)
    # Needs that hold their whole count with no unclaimed machine for them coming up, each with
    # its claims on CONFIGURED machines: what consolidation may move (unless preempted).
    settled: dict[str, list[Claim]] = field(default_factory=dict)
    _configured: tuple[np.ndarray, np.ndarray, np.ndarray] | None = None

    def configured(self) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
        """The claims on CONFIGURED machines as columns: profile, holder's priority, count
        (computed once: a cluster's claims are cached until its roll-up or machines change)."""
        if self._configured is None:
            taken = [c for cs in self.claims.values() for c in cs if c.slot == CONFIGURED_SLOT]
            self._configured = (
                np.array([c.profile for c in taken], dtype=np.int64),
                np.array([c.need.priority for c in taken], dtype=np.int64),
                np.array([c.count for c in taken], dtype=np.int64),
            )
        return self._configured


def claim_cluster(
    inventory: Inventory, cluster: str, needs: list[Need], supply: SupplyIndex
) -> ClusterClaims:
    """Claims (docs/engine.md, The cycle 1): each need, in table order, keeps machines its own
    cluster already has, CONFIGURED then CONFIGURING then CREATING, in its supply order; a
    `Same` need only in the domain where it has the most. What no need keeps is excess.

    A need wider than `NARROW` profiles walks only those its state's mask still marks (a
    profile leaves it with its last machine); `remaining` copies tallies on first use."""
    cidx = inventory.clusters.get(cluster)
    held = inventory.held.get(cidx, {}) if cidx is not None else {}
    open_by_slot = _open_profiles(held)
    masks = [_mask(len(inventory.profiles), pids) for pids in open_by_slot]
    live = [len(pids) for pids in open_by_slot]
    remaining: dict[int, list[int]] = {}
    out = ClusterClaims()
    on_configured: list[tuple[Need, list[Claim], int]] = []
    for need in needs:
        # The cluster's profiles this need can use, in its supply order.
        ranked = supply.ranked(need)
        if need.spec.same:
            ranked = _home_domain(inventory, need, ranked, masks, held, remaining)
        want = need.count
        taken: list[Claim] = []
        configured = 0
        for i, slot in enumerate(CLAIM_SLOTS):
            if want == 0:
                break
            if not live[i]:
                continue
            mask = masks[i]  # (a handful of profiles are cheaper to walk than to mask)
            walk = ranked.tolist() if len(ranked) <= NARROW else ranked[mask[ranked]].tolist()
            for p in walk:
                t = remaining.get(p)
                if t is None:
                    h = held.get(p)
                    if h is None:
                        continue
                    t = remaining[p] = h[:]
                left = t[slot]
                if left <= 0:
                    continue
                n = want if want < left else left
                taken.append(Claim(need, p, slot, n, held[p][slot] - left))
                t[slot] = left - n
                want -= n
                if n == left:
                    mask[p] = False
                    live[i] -= 1
                if want == 0:
                    break
            if i == 0:
                configured = len(taken)
        out.claims[need.key] = taken
        out.claimed[need.key] = need.count - want
        if want == 0 < need.count:
            on_configured.append((need, taken, configured))
    _leftovers(out, held, remaining, open_by_slot)
    _settle(out, on_configured, supply)
    return out


def _settle(
    out: ClusterClaims, whole: list[tuple[Need, list[Claim], int]], supply: SupplyIndex
) -> None:
    """`settled`: of the needs holding their whole count (each with its claims and how many
    of them, first in the list, are on CONFIGURED machines), those with no unclaimed machine
    of theirs coming up."""
    out.settled = {
        n.key: taken[:configured]
        for n, taken, configured in whole
        if not out.pending or out.pending.isdisjoint(supply.matching(n))
    }


def _open_profiles(held: dict[int, list[int]]) -> tuple[list[int], list[int], list[int]]:
    """The cluster's profiles with a machine in each claimed state, in `held` order."""
    c0, c1, c2 = CLAIM_SLOTS
    configured: list[int] = []
    configuring: list[int] = []
    creating: list[int] = []
    for p, t in held.items():
        if t[c0]:
            configured.append(p)
        if t[c1]:
            configuring.append(p)
        if t[c2]:
            creating.append(p)
    return configured, configuring, creating


def _mask(size: int, pids: list[int]) -> np.ndarray:
    mask = np.zeros(size, dtype=bool)
    if pids:
        mask[pids] = True
    return mask


def _leftovers(
    out: ClusterClaims,
    held: dict[int, list[int]],
    remaining: dict[int, list[int]],
    open_by_slot: tuple[list[int], list[int], list[int]],
) -> None:
    """What no need kept: configured machines are excess (from the first one left), profiles
    with machines still coming up are pending."""
    c0, c1, c2 = CLAIM_SLOTS
    configured, configuring, creating = open_by_slot
    for p in configured:
        t = remaining.get(p)
        if t is None:
            out.excess[p] = (0, held[p][c0])
        elif t[c0] > 0:
            out.excess[p] = (held[p][c0] - t[c0], t[c0])
    for slot, pids in ((c1, configuring), (c2, creating)):
        for p in pids:
            if remaining.get(p, held[p])[slot] > 0:
                out.pending.add(p)


def _home_domain(
    inventory: Inventory,
    need: Need,
    ranked: np.ndarray,
    masks: list[np.ndarray],
    held: dict[int, list[int]],
    remaining: dict[int, list[int]],
) -> np.ndarray:
    """A `Same` need keeps machines only in the domain where its cluster has the most
    claimable ones (ties by name); a machine without the label counts under None, as in the
    reference engine."""
    c0, c1, c2 = CLAIM_SLOTS
    labels = inventory.profiles.labels(cast(str, need.spec.same))  # (only `Same` needs)
    open_pids = ranked[masks[0][ranked] | masks[1][ranked] | masks[2][ranked]].tolist()
    per_domain: dict[str | None, int] = defaultdict(int)
    for p in open_pids:
        t = remaining.get(p, held[p])
        per_domain[labels[p]] += t[c0] + t[c1] + t[c2]
    per_domain = {d: n for d, n in per_domain.items() if n}
    if not per_domain:
        return ranked
    home = max(sorted(per_domain), key=lambda d: per_domain[d])  # type: ignore[type-var]
    return np.array([p for p in open_pids if labels[p] == home], dtype=ranked.dtype)


def excess_by_profile(claims: dict[str, ClusterClaims]) -> dict[int, int]:
    """Excess configured machines per profile, over every cluster (a fresh dict to consume)."""
    out: dict[int, int] = defaultdict(int)
    for cc in claims.values():
        for p, (_, n) in cc.excess.items():
            out[p] += n
    return out
