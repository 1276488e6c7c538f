"""Which profiles a need can use, in the order it prefers them, and the free supply per profile.

Every phase asks these questions; they live here (not on the engine) so that claims and the
three phases depend on this module and never on the engine that runs them.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import dataclass, replace
from typing import cast

import numpy as np

from ..inventory import CODE, Inventory
from ..labels import MACHINE_KEYS
from ..models import MachineState, NodeSelectorRequirement, Resources
from ..needs import Need
from ..profiles import Profile, ProfileTable
from ..requirements import requirement_matches


@dataclass(frozen=True, slots=True)
class Components:
    """A set of needs split into groups no two of which can use a common profile: group `g`'s
    needs claim only profiles `of_pid == g` (-1: a profile none of the needs can use), so
    each group's claims depend on its own needs and those profiles' tallies alone."""

    of_signature: dict[str, int]
    of_pid: list[int]
    count: int
    # Per group, the profiles its needs can use, as bits of a Python integer (bit p: profile
    # p): overlaps are one `&` each, without numpy's fixed cost per call.
    masks: list[int]
    # What they were worked out for: the profile table's size and the needs' signatures.
    key: tuple[int, frozenset[str]]
    # When grown from the `previous` components passed to `SupplyIndex.components` (and only
    # then): which of these groups are exactly one of those (same signatures, same profiles),
    # group -> its group there. (No reference to them: a cluster's components would chain
    # back through every arrival.)
    renamed: dict[int, int] | None = None


def _components(
    of_signature: dict[str, int], masks: list[int], key: tuple[int, frozenset[str]]
) -> Components:
    """Components from each signature's group and each group's profiles (a profile is in at
    most one group's mask)."""
    n_profiles, count = key[0], len(masks)
    width = -(-n_profiles // 8)
    raw = np.frombuffer(b"".join(m.to_bytes(width, "little") for m in masks), dtype=np.uint8)
    bits = np.unpackbits(raw, bitorder="little").reshape(count, width * 8)[:, :n_profiles]
    label = (np.arange(count) + 1).astype(np.int8 if count < 127 else np.int32)[:, None]
    of_pid = np.multiply(bits.view(np.int8), label).max(axis=0, initial=0) - 1
    return Components(of_signature, of_pid.tolist(), count, masks, key)


# Entries a cache may gain beyond twice what it kept last time before it drops what no need in
# the table has any more.
RETAIN_SLACK = 256


class SupplyIndex:
    """A need's matching profiles and its preference order over them (docs/engine.md, Terms),
    cached per need signature until the profile table grows."""

    def __init__(self, inventory: Inventory, sunk: bool = True) -> None:
        self.inventory = inventory
        # Owned capacity ranks at its marginal price (`supply_key`'s `sunk`).
        self._sunk = sunk
        self._match: dict[str, tuple[int, frozenset[int], np.ndarray, int]] = {}
        self._rank: dict[str, tuple[int, np.ndarray]] = {}
        self._rank_of: dict[str, tuple[int, dict[int, int]]] = {}
        self._retained = 0  # entries kept at the last `retain` that dropped any
        self._columns = _MatchColumns(inventory.profiles)
        self._names = np.zeros(0, dtype=np.int64)

    def retain(self, needs: Sequence[Need]) -> None:
        """Forget what was worked out for needs no longer in the table, once what is kept
        has doubled since the last time (amortised over the cycles): a need's signature and
        its requirements are its sender's choice, and every roll-up may bring new ones."""
        kept = len(self._match) + len(self._rank) + len(self._rank_of)
        if kept > 2 * self._retained + RETAIN_SLACK:
            present = {n.signature for n in needs}
            for cache in (self._match, self._rank, self._rank_of):
                for signature in [k for k in cache if k not in present]:
                    del cache[signature]
            self._retained = len(self._match) + len(self._rank) + len(self._rank_of)
        self._columns.retain(needs)

    @property
    def sunk(self) -> bool:
        return self._sunk

    @sunk.setter
    def sunk(self, value: bool) -> None:
        if value != self._sunk:
            self._sunk = value
            self._rank.clear()
            self._rank_of.clear()

    def matching(self, need: Need) -> frozenset[int]:
        """Profiles whose machines satisfy the need's requirements and resources (and carry
        its `same` key, for a `Same` need)."""
        return self._matched(need)[1]

    def _matched(self, need: Need) -> tuple[int, frozenset[int], np.ndarray, int]:
        """`matching` as a set, as an ascending array and as bits of an integer (bit p:
        profile p)."""
        table = self.inventory.profiles
        cached = self._match.get(need.signature)
        if cached is not None and cached[0] == len(table):
            return cached
        pids = self._columns.matching(need.requirements, need.spec.resources)
        if need.spec.same:  # (`need_matches`: a `Same` need also needs its key's label)
            labels = table.labels(need.spec.same)
            pids = pids[[labels[p] is not None for p in pids.tolist()]]
        mask = np.zeros(-(-len(table) // 8) * 8, dtype=bool)
        mask[pids] = True
        bits = int.from_bytes(np.packbits(mask, bitorder="little").tobytes(), "little")
        found = (len(table), frozenset(pids.tolist()), pids, bits)
        self._match[need.signature] = found
        return found

    def components(self, needs: Sequence[Need], previous: Components | None = None) -> Components:
        """The needs' `Components`: `previous` (the same cluster's last ones) itself while the
        needs' signatures and the profile table are the same, grown from it when the needs
        only add signatures (a cluster asking for new needs), else grown from nothing. Kept
        by the caller, one per cluster, not here: nothing grows with the signatures ever
        seen."""
        key = (len(self.inventory.profiles), frozenset(n.signature for n in needs))
        if previous is not None and previous.key == key:
            return previous
        if (
            previous is not None
            and previous.key[0] == key[0]
            and previous.of_signature.keys() <= key[1]
        ):
            return self._grow(previous, needs, key)
        return self._grow(None, needs, key)

    def _grow(
        self, previous: Components | None, needs: Sequence[Need], key: tuple[int, frozenset[str]]
    ) -> Components:
        """`previous` (None: no group yet) with the needs' new signatures added, in signature
        order: each joins (and joins together) the groups whose profiles it shares, or makes
        a group of its own (a signature no profile matches too). Groups end numbered by their
        first signature, whichever way they were built."""
        known = previous.of_signature if previous is not None else {}
        one = {n.signature: n for n in needs if n.signature not in known}
        masks: list[int | None] = list(previous.masks) if previous is not None else []
        of_signature = dict(known)
        joined: set[int] = set()  # previous groups a new signature joined
        for signature in sorted(one):
            bits = self._matched(one[signature])[3]
            hit = [g for g, m in enumerate(masks) if m is not None and m & bits]
            if not hit:
                of_signature[signature] = len(masks)
                masks.append(bits)
                continue
            joined.update(hit)
            for g in hit[1:]:
                bits |= cast(int, masks[g])
                masks[g] = None
            masks[hit[0]] = bits | cast(int, masks[hit[0]])
            if len(hit) > 1:
                gone = set(hit[1:])
                of_signature = {s: hit[0] if g in gone else g for s, g in of_signature.items()}
            of_signature[signature] = hit[0]
        number: dict[int, int] = {}
        for signature in sorted(of_signature):
            number.setdefault(of_signature[signature], len(number))
        grown = _components(
            {s: number[g] for s, g in of_signature.items()},
            [cast(int, masks[g]) for g in number],
            key,
        )
        if previous is None:
            return grown
        renamed = {number[g]: g for g in range(previous.count) if g not in joined}
        return replace(grown, renamed=renamed)

    def supply_rank(self, need: Need) -> dict[int, int]:
        """Matching profiles in the order the need prefers them (cheapest effective cost, then
        name), as profile -> rank; dicts keep that order for iteration too."""
        size = len(self.inventory.profiles)
        cached = self._rank_of.get(need.signature)
        if cached is None or cached[0] != size:
            order = self.ranked(need).tolist()
            cached = self._rank_of[need.signature] = (size, {p: i for i, p in enumerate(order)})
        return cached[1]

    def ranked(self, need: Need) -> np.ndarray:
        """`supply_rank`'s profiles as an array, best first."""
        table = self.inventory.profiles
        cached = self._rank.get(need.signature)
        if cached is not None and cached[0] == len(table):
            return cached[1]
        # `supply_key` by column: effective cost at the marginal price (the same float
        # arithmetic), then the list price, then the name.
        pids = self._matched(need)[2]
        price = table.marginal if self._sunk else table.price
        cost = price[pids] + table.interruption[pids] * need.spec.interruption_penalty
        order = pids[np.lexsort((self.name_order()[pids], table.price[pids], cost))]
        self._rank[need.signature] = (len(table), order)
        return order

    def offered(self, pool: dict[int, int], need: Need) -> list[int]:
        """`by_supply(pool, supply_rank(need))`: the need's matching profiles with machines
        left in `pool`, cheapest first (by column when `pool` is a `Pool`)."""
        if isinstance(pool, Pool):
            ranked = self.ranked(need)
            return ranked[pool.column[ranked] > 0].tolist()
        return by_supply(pool, self.supply_rank(need))

    def name_order(self) -> np.ndarray:
        """Each profile's position in name order (the tie-break of equal costs)."""
        profiles = self.inventory.profiles.profiles
        if len(self._names) != len(profiles):
            order = sorted(range(len(profiles)), key=lambda p: profiles[p].name)
            self._names = np.empty(len(profiles), dtype=np.int64)
            self._names[order] = np.arange(len(profiles))
        return self._names


class _MatchColumns:
    """`ProfileTable.matching` by column: one boolean per profile for each distinct requirement
    and resource floor, kept across needs (many needs share a requirement) and extended only
    over profiles interned since, so a new need costs one AND per requirement."""

    def __init__(self, table: ProfileTable) -> None:
        self.table = table
        self._masks: dict[tuple, np.ndarray] = {}
        self._retained = 0  # masks kept at the last `retain` that dropped any

    def retain(self, needs: Sequence[Need]) -> None:
        """Forget the masks of requirements no need in the table has, once the masks have
        doubled since the last time (`SupplyIndex.retain`)."""
        if len(self._masks) <= 2 * self._retained + RETAIN_SLACK:
            return
        present: set[tuple] = {
            ("requirement", r.key, r.operator, tuple(r.values))
            for n in needs
            for r in n.requirements
        }
        present |= {
            ("resources", n.spec.resources.cpu, n.spec.resources.memory_gib, n.spec.resources.gpu)
            for n in needs
        }
        self._masks = {k: v for k, v in self._masks.items() if k in present}
        self._retained = len(self._masks)

    def matching(
        self, requirements: tuple[NodeSelectorRequirement, ...], resources: Resources
    ) -> np.ndarray:
        floor = ("resources", resources.cpu, resources.memory_gib, resources.gpu)
        mask = self._mask(floor, lambda p: p.resources.covers(resources)).copy()
        for r in requirements:
            mask &= self._mask(("requirement", r.key, r.operator, tuple(r.values)), _fits(r))
        return np.flatnonzero(mask)

    def _mask(self, key: tuple, test: Callable[[Profile], bool]) -> np.ndarray:
        profiles = self.table.profiles
        mask = self._masks.get(key, np.zeros(0, dtype=bool))
        if len(mask) < len(profiles):
            fresh = np.fromiter((test(p) for p in profiles[len(mask) :]), dtype=bool)
            mask = np.concatenate([mask, fresh])
            self._masks[key] = mask
        return mask


def _fits(r: NodeSelectorRequirement) -> Callable[[Profile], bool]:
    """One requirement as `all_match` applies it: a key the machine neither carries nor owns
    (`MACHINE_KEYS`) is left to the operator."""

    def fits(p: Profile) -> bool:
        labels = p.label_map
        return (r.key not in labels and r.key not in MACHINE_KEYS) or requirement_matches(r, labels)

    return fits


class Pool(dict[int, int]):
    """Machines per profile (profile -> count) that the phases take from, with the same counts
    as a column over profile ids kept in step by every item write (`pool[p] -= n`, the only
    way the phases change a pool; `update` or `pop` would leave the column behind), so the
    profiles a need may take from, in its supply order, are one gather (`SupplyIndex.offered`)
    instead of a dict lookup per matching profile."""

    def __init__(self, counts: dict[int, int], size: int) -> None:
        super().__init__(counts)
        self.column = np.zeros(max(size, max(counts, default=-1) + 1), dtype=np.int64)
        if counts:
            self.column[list(counts)] = list(counts.values())

    def __setitem__(self, p: int, n: int) -> None:
        super().__setitem__(p, n)
        self.column[p] = n


def free_pool(counts: np.ndarray, state: MachineState, size: int = 0) -> Pool:
    """Machines per profile in `state` (profile -> count, profiles with none left out); `size`
    is how many profiles the column covers at least."""
    row = counts[CODE[state]]
    some = np.flatnonzero(row)
    return Pool(dict(zip(some.tolist(), row[some].tolist(), strict=True)), size)


def pool_column(pool: dict[int, int], size: int) -> np.ndarray:
    """A free pool as a column over at least `size` profile ids (a `Pool` keeps one; any
    other dict is read into one)."""
    column = getattr(pool, "column", None)
    if column is None or len(column) < size:
        column = np.zeros(max(size, max(pool, default=-1) + 1), dtype=np.int64)
        if pool:
            column[list(pool)] = list(pool.values())
    return column


def by_supply(pool: dict[int, int], rank: dict[int, int]) -> list[int]:
    """Matching profiles (those `rank`ed) with supply left in `pool`, cheapest first."""
    if len(pool) < len(rank):
        return sorted((p for p, n in pool.items() if n > 0 and p in rank), key=rank.__getitem__)
    return [p for p in rank if pool.get(p, 0) > 0]
