"""Claims: each need keeps the machines its cluster already has (or has on the way).

Worked over per-(cluster, profile, state) counts, cached per cluster until its roll-up or its
machines change, so a steady shard recomputes nothing here.
"""

from __future__ import annotations

from collections import defaultdict
from collections.abc import Iterable
from dataclasses import dataclass, field
from operator import is_

import numpy as np

from ..held import HELD_SLOT
from ..inventory import Inventory
from ..needs import Need
from .ranking import CLAIM_ORDER
from .supply import Components, SupplyIndex

CLAIM_SLOTS = tuple(HELD_SLOT[s] for s in CLAIM_ORDER)
CONFIGURED_SLOT = HELD_SLOT[CLAIM_ORDER[0]]
# (A tally's first three slots are the claimable ones: claims copy just those.)
assert CLAIM_SLOTS == (0, 1, 2)


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
    # `settled_of`'s answers so far, per need key.
    _settled: dict[str, list[Claim] | None] = field(default_factory=dict)
    # How the cluster's needs split into groups, and each group's claims (the cluster's next
    # claims keep those of groups whose needs and profiles are unchanged).
    components: Components | None = None
    parts: dict[int, _Part] = field(default_factory=dict)

    def settled_of(self, need: Need, supply: SupplyIndex) -> list[Claim] | None:
        """The need's claims on CONFIGURED machines if it is settled — it holds its whole
        count and its cluster has no unclaimed machine it could use still coming up — else
        None: what consolidation may move (unless preempted). Worked out when first asked:
        consolidation asks only about needs whose count has been stable long enough."""
        key = need.key
        if key in self._settled:
            return self._settled[key]
        found = None
        if 0 < need.count == self.claimed.get(key, -1) and (
            not self.pending or self.pending.isdisjoint(supply.matching(need))
        ):
            found = [c for c in self.claims[key] if c.slot == CONFIGURED_SLOT]
        self._settled[key] = found
        return found


class OpenProfiles:
    """Which of a cluster's profiles each need signature can claim from, in its supply order.

    It depends only on which profiles the cluster has a claimable machine of (and the
    profile table), not on how many: a cluster re-claimed because counts moved, the common
    case, reuses the lists it made last time instead of filtering every need's ranked
    profiles again."""

    __slots__ = ("by_signature", "key", "_mine")

    def __init__(self, key: tuple) -> None:
        self.key = key
        self.by_signature: dict[str, list[int]] = {}
        self._mine: np.ndarray | None = None

    def of(self, need: Need, supply: SupplyIndex) -> list[int]:
        found = self.by_signature.get(need.signature)
        if found is None:
            n_profiles, pids = self.key
            if self._mine is None:
                self._mine = np.zeros(n_profiles, dtype=bool)
                self._mine[list(pids)] = True
            ranked = supply.ranked(need)
            found = self.by_signature[need.signature] = ranked[self._mine[ranked]].tolist()
        return found


@dataclass(slots=True)
class _Part:
    """The claims of one group of a cluster's needs (`Components`): its needs, the cluster's
    profiles of the group with a claimable machine (ascending), and what claiming gave."""

    needs: list[Need]
    pids: list[int]
    claims: dict[str, list[Claim]]
    claimed: dict[str, int]
    excess: dict[int, tuple[int, int]]
    pending: set[int]
    opened: OpenProfiles
    # Its profiles' claimable machines per state before any claim (as `_walk` reads them).
    start_live: tuple[dict[int, int], ...]
    # Its claims on CONFIGURED machines as the rows of `configured_columns`, once asked.
    configured: np.ndarray | None = None


def configured_columns(claims: Iterable[ClusterClaims]) -> np.ndarray:
    """Every claim on CONFIGURED machines as three rows: profile, holder's priority, count.

    Kept per group of needs (a group's claims are kept until its needs or machines change),
    so a cycle makes only the new groups' pieces, all in one conversion, and joins them."""
    parts = [part for cc in claims for part in cc.parts.values()]
    fresh = [part for part in parts if part.configured is None]
    if fresh:
        taken = [
            [c for cs in part.claims.values() for c in cs if c.slot == CONFIGURED_SLOT]
            for part in fresh
        ]
        flat = [c for cs in taken for c in cs]
        made = np.array(
            [[c.profile for c in flat], [c.need.priority for c in flat], [c.count for c in flat]],
            dtype=np.int64,
        ).reshape(3, len(flat))
        at = 0
        for part, cs in zip(fresh, taken, strict=True):
            # (A copy: a view would keep the whole cycle's array alive with the part.)
            part.configured = made[:, at : at + len(cs)].copy()
            at += len(cs)
    if not parts:
        return np.zeros((3, 0), dtype=np.int64)
    return np.concatenate([part.configured for part in parts], axis=1)  # type: ignore[misc]


def claim_cluster(
    inventory: Inventory,
    cluster: str,
    needs: list[Need],
    supply: SupplyIndex,
    previous: ClusterClaims | None = None,
    touched: set[int] | None = None,
) -> ClusterClaims:
    """Claims (docs/engine.md, The cycle 1): each need, in table order, keeps machines its own
    cluster already has, CONFIGURED then CONFIGURING then CREATING, in its supply order; a
    `Same` need only in the domain where it has the most. What no need keeps is excess.

    Needs that can use no common profile claim independently, so the work is done per group
    (`SupplyIndex.components`): given the cluster's `previous` claims and the profiles whose
    tallies changed since (`touched`), only groups whose needs or profiles changed are
    claimed again; the others keep their claims."""
    cidx = inventory.clusters.get(cluster)
    held = inventory.held.get(cidx, {}) if cidx is not None else {}
    groups = supply.components(needs, previous.components if previous is not None else None)
    grouped: dict[int, list[Need]] = {g: [] for g in range(-1, groups.count)}
    for need in needs:
        grouped[groups.of_signature[need.signature]].append(need)
    before = previous.parts if previous is not None else {}
    if touched is not None and previous is not None and previous.components is groups:
        kept = dict(before)
        pids_of, unmoved = _changed_groups(held, groups, grouped, kept, touched)
    elif touched is not None and groups.renamed is not None:
        # Grown from the previous groups (just now: `renamed` says how): new needs joined
        # some groups, the others are the groups they were.
        kept = {g: before[old] for g, old in groups.renamed.items()}
        renamed = set(groups.renamed.values())
        loose = {p for old, part in before.items() if old not in renamed for p in part.pids}
        pids_of, unmoved = _changed_groups(held, groups, grouped, kept, touched, loose)
    else:  # (no previous claims, or what changed since is not known, or groups split afresh)
        kept, pids_of, unmoved = {}, _claimable_by_group(held, groups), set()
    # A group's open profiles are reused whenever its claimable profiles are the same.
    opened = {part.opened.key: part.opened for part in before.values()}
    n_profiles = len(inventory.profiles)
    for g, pids in pids_of.items():
        # A group re-claimed only because its needs changed (its profiles' tallies did not)
        # keeps the claims of its needs before the first changed one.
        same = kept.get(g) if g in unmoved else None
        reuse = opened.get((n_profiles, frozenset(pids)))
        kept[g] = _claim_part(inventory, held, grouped[g], pids, supply, reuse, same)
    out = ClusterClaims(components=groups, parts=kept)
    # (Every need is in exactly one group, whose part has its claims: merged a part at a
    # time, in group order, not need by need.)
    for part in kept.values():
        out.claims.update(part.claims)
        out.claimed.update(part.claimed)
        out.excess.update(part.excess)
        out.pending.update(part.pending)
    return out


def same_needs(a: list[Need], b: list[Need]) -> bool:
    """The very same need objects, in the same order (compared in C: `map` of `is_`)."""
    return len(a) == len(b) and all(map(is_, a, b))


def _claimable_by_group(held: dict[int, list[int]], groups: Components) -> dict[int, list[int]]:
    """The cluster's profiles with a claimable machine, per group (-1: profiles no need can
    use), every group listed."""
    out: dict[int, list[int]] = {g: [] for g in range(-1, groups.count)}
    of_pid = groups.of_pid
    for p, t in held.items():
        if t[0] or t[1] or t[2]:
            out[of_pid[p]].append(p)
    for pids in out.values():
        pids.sort()
    return out


def _claimable(tally: list[int] | None) -> bool:
    return tally is not None and bool(tally[0] or tally[1] or tally[2])


def _changed_groups(
    held: dict[int, list[int]],
    groups: Components,
    grouped: dict[int, list[Need]],
    before: dict[int, _Part],
    touched: set[int],
    loose: set[int] | None = None,
) -> tuple[dict[int, list[int]], set[int]]:
    """The groups to claim again — those without a part `before`, those whose needs changed
    or whose profiles' tallies did (`touched`) — each with its claimable profiles now, and
    which of them only their needs changed. A group without a part finds its profiles among
    `touched` and `loose` (the profiles of the previous groups no part in `before` comes
    from)."""
    moved: dict[int, set[int]] = {}
    of_pid = groups.of_pid
    for p in touched.union(loose) if loose else touched:
        moved.setdefault(of_pid[p], set()).add(p)
    out, unmoved = {}, set()
    for g, needs in grouped.items():
        part = before.get(g)
        changed = moved.get(g)
        if part is None:
            out[g] = sorted(p for p in changed or () if _claimable(held.get(p)))
        elif changed:
            came = {p for p in changed if _claimable(held.get(p))}
            out[g] = sorted(set(part.pids).difference(changed).union(came))
        elif not same_needs(part.needs, needs):
            out[g] = part.pids
            unmoved.add(g)
    return out, unmoved


def _claim_part(
    inventory: Inventory,
    held: dict[int, list[int]],
    needs: list[Need],
    pids: list[int],
    supply: SupplyIndex,
    opened: OpenProfiles | None,
    same: _Part | None = None,
) -> _Part:
    """One group's claims: its needs (in table order) over its profiles `pids`. `same` is
    the group's previous part when its profiles' tallies have not changed since: the needs
    before the first that differs from its needs claim what they claimed then."""
    c0, c1, c2 = CLAIM_SLOTS
    key = (len(inventory.profiles), frozenset(pids))
    if opened is None or opened.key != key:
        opened = OpenProfiles(key)
    if same is not None and same.opened.key != key:
        same = None
    # What no need has kept yet, per claimable state: profile -> machines left (only > 0);
    # read from the tallies, or `same`'s (its profiles' tallies have not changed since).
    if same is not None:
        start_live = same.start_live
    else:
        start_live = ({}, {}, {})
        for p in pids:
            t = held[p]
            if t[c0] > 0:
                start_live[c0][p] = t[c0]
            if t[c1] > 0:
                start_live[c1][p] = t[c1]
            if t[c2] > 0:
                start_live[c2][p] = t[c2]
    live = (start_live[0].copy(), start_live[1].copy(), start_live[2].copy())
    part = _Part(needs, pids, {}, {}, {}, set(), opened, start_live)
    start = 0
    if same is not None:
        while start < min(len(needs), len(same.needs)) and needs[start] is same.needs[start]:
            k = needs[start].key
            part.claims[k] = taken = same.claims[k]
            part.claimed[k] = same.claimed[k]
            for c in taken:
                _take(live[c.slot], c.profile, c.count)
            start += 1
    for need in needs[start:]:
        # The cluster's profiles this need can use, in its supply order.
        open_pids = opened.of(need, supply)
        if need.spec.same:
            labels = inventory.profiles.labels(need.spec.same)
            open_pids = _home_domain(labels, open_pids, live)
        taken, want = _walk(need, open_pids, live, held)
        part.claims[need.key] = taken
        part.claimed[need.key] = need.count - want
    for p, left in live[c0].items():
        part.excess[p] = (held[p][c0] - left, left)
    part.pending.update(live[c1], live[c2])
    return part


def _take(live: dict[int, int], p: int, n: int) -> None:
    left = live[p] - n
    if left:
        live[p] = left
    else:
        del live[p]


def _walk(
    need: Need, open_pids: list[int], live: tuple[dict[int, int], ...], held: dict[int, list[int]]
) -> tuple[list[Claim], int]:
    """One need's claims over `open_pids` (its supply order), CONFIGURED then CONFIGURING
    then CREATING, taken from `live` (what is left per state: only profiles with some);
    returns them and how many it still wants."""
    want = need.count
    taken: list[Claim] = []
    for slot in CLAIM_SLOTS:
        left_of = live[slot]
        if want == 0:
            break
        if not left_of:
            continue
        # (Profiles with nothing left skipped in C: most of a need's profiles, in a big group.)
        for p in filter(left_of.__contains__, open_pids):
            left = left_of[p]
            if want < left:
                taken.append(Claim(need, p, slot, want, held[p][slot] - left))
                left_of[p] = left - want
                want = 0
                break
            taken.append(Claim(need, p, slot, left, held[p][slot] - left))
            del left_of[p]
            want -= left
            if want == 0:
                break
    return taken, want


def _home_domain(
    labels: list[str | None], open_pids: list[int], live: tuple[dict[int, int], ...]
) -> list[int]:
    """A `Same` need keeps machines only in the domain where its cluster has the most
    claimable ones (ties by name); a machine without the label counts under None, as in the
    reference engine."""
    l0, l1, l2 = (live[s] for s in CLAIM_SLOTS)
    per_domain: dict[str | None, int] = defaultdict(int)
    for p in open_pids:
        per_domain[labels[p]] += l0.get(p, 0) + l1.get(p, 0) + l2.get(p, 0)
    per_domain = {d: n for d, n in per_domain.items() if n}
    if not per_domain:
        return open_pids
    home = max(sorted(per_domain), key=lambda d: per_domain[d])  # type: ignore[type-var]
    return [p for p in open_pids if labels[p] == home]


def excess_by_profile(claims: dict[str, ClusterClaims]) -> dict[int, int]:
    """Excess configured machines per profile, over every cluster (a fresh dict to consume)."""
    out: dict[int, int] = defaultdict(int)
    for cc in claims.values():
        for p, (_, n) in cc.excess.items():
            out[p] += n
    return out
