"""Apportioning machines: whole machines in proportion to weights (largest remainder), under
caps, and laid onto the units (racks, quota lines) of one kind. Plain arithmetic for the
per-cluster baseline's split (baseline.py)."""

from __future__ import annotations

import math


def split_counts(count: int, weights: list[float]) -> list[int]:
    """`count` machines in proportion to `weights` (evenly if all are zero), by largest
    remainder so the parts add up to `count`; ties go to the earlier entry."""
    if not weights:
        return []
    total = sum(weights)
    exact = (
        [count * w / total for w in weights] if total > 0 else [count / len(weights)] * len(weights)
    )
    parts = [math.floor(x) for x in exact]
    order = sorted(range(len(weights)), key=lambda i: (-(exact[i] - parts[i]), i))
    for i in order[: count - sum(parts)]:
        parts[i] += 1
    return parts


def capped_split(count: int, weights: list[float], caps: list[int]) -> list[int]:
    """At most `count` machines in proportion to `weights` (`split_counts`), none past its cap:
    what a capped entry cannot take is split again over the others; what nobody can take is
    left over."""
    parts = [0] * len(weights)
    active = [i for i, cap in enumerate(caps) if cap > 0]
    while active and count - sum(parts) > 0:
        before = sum(parts)
        for i, x in zip(
            active, split_counts(count - before, [weights[i] for i in active]), strict=True
        ):
            parts[i] += min(x, caps[i] - parts[i])
        active = [i for i in active if parts[i] < caps[i]]
        if sum(parts) == before:
            break
    return parts


def lay_out(rooms: list[int], wants: list[tuple[int, list[int], bool]]) -> list[list[int]]:
    """Lay each cluster's share of a kind onto the kind's units. `rooms`: every unit's machines;
    `wants`: per cluster, (its share, the units its needs can use, whether it has a need confined
    to one rack). Returns per cluster its machines on every unit; each unit's column adds up to
    its count.

    Clusters with a one-rack need go first, then those that can use fewer units, then larger
    shares, then the scenario's order. Each takes, while its share lasts: the unit it can use
    with the least room that still holds the rest of its share (one unit if one can), else the
    one it can use with the most room left; when the units it can use are full, the unit with
    the most room left (so the shares always add up). Deterministic."""
    room = list(rooms)
    out = [[0] * len(rooms) for _ in wants]
    order = sorted(
        range(len(wants)),
        key=lambda i: (not wants[i][2], len(wants[i][1]), -wants[i][0], i),
    )
    for i in order:
        left, usable, _ = wants[i]
        while left > 0:
            pool = [u for u in usable if room[u] > 0] or [u for u in range(len(room)) if room[u]]
            holds = [u for u in pool if room[u] >= left]
            u = (
                min(holds, key=lambda u: (room[u], u))
                if holds
                else max(pool, key=lambda u: (room[u], -u))
            )
            take = min(left, room[u])
            room[u] -= take
            out[i][u] += take
            left -= take
    return out
