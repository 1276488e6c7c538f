"""Which profiles a need can use, in the order it prefers them, and the free supply per profile.

Every phase asks these questions; they live here (not on the engine) so that claims and the
three phases depend on this module and never on the engine that runs them.
"""

from __future__ import annotations

import numpy as np

from ..inventory import CODE, Inventory
from ..models import MachineState
from ..needs import Need
from .common import need_matches, supply_key


class SupplyIndex:
    """A need's matching profiles and its preference order over them (docs/engine.md, Terms),
    cached per need signature until the profile table grows."""

    def __init__(self, inventory: Inventory) -> None:
        self.inventory = inventory
        self._match: dict[str, tuple[int, frozenset[int]]] = {}
        self._rank: dict[str, tuple[int, dict[int, int]]] = {}

    def matching(self, need: Need) -> frozenset[int]:
        """Profiles whose machines satisfy the need's requirements and resources (and carry
        its `same` key, for a `Same` need)."""
        table = self.inventory.profiles
        cached = self._match.get(need.signature)
        if cached is not None and cached[0] == len(table):
            return cached[1]
        pids = table.matching(need.signature, need.requirements, need.spec.resources)
        found = frozenset(
            p for p in pids.tolist() if need_matches(need, table.profiles[p], True)
        )
        self._match[need.signature] = (len(table), found)
        return found

    def supply_rank(self, need: Need) -> dict[int, int]:
        """Matching profiles in the order the need prefers them (cheapest effective cost, then
        name), as profile -> rank; dicts keep that order for iteration too."""
        table = self.inventory.profiles
        cached = self._rank.get(need.signature)
        if cached is not None and cached[0] == len(table):
            return cached[1]
        order = sorted(self.matching(need), key=lambda p: supply_key(need, table.profiles[p]))
        rank = {p: i for i, p in enumerate(order)}
        self._rank[need.signature] = (len(table), rank)
        return rank


def free_pool(counts: np.ndarray, state: MachineState) -> dict[int, int]:
    """Machines per profile in `state` (profile -> count, profiles with none left out)."""
    row = counts[CODE[state]]
    return {int(p): int(row[p]) for p in np.flatnonzero(row)}


def by_supply(pool: dict[int, int], rank: dict[int, int]) -> list[int]:
    """Matching profiles (those `rank`ed) with supply left in `pool`, cheapest first."""
    if len(pool) < len(rank):
        return sorted((p for p, n in pool.items() if n > 0 and p in rank), key=rank.__getitem__)
    return [p for p in rank if pool.get(p, 0) > 0]
