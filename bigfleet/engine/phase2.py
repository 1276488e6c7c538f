"""Phase 2 (design §8): unsatisfied needs wait for supply on its way, then preempt strictly lower
priorities, best victim first; what is still missing becomes a shortfall."""

from __future__ import annotations

from bisect import bisect_left
from collections import defaultdict
from typing import cast

import numpy as np

from ..inventory import CODE
from ..models import MachineState
from ..needs import Need
from .claims import CONFIGURED_SLOT, configured_columns, excess_by_profile
from .cycle import CycleState
from .decision import Decision
from .displace import purchases, yield_for_cost
from .domains import domain_tallies, pick_same_wait_domain
from .phase1 import Assignment, Frame, spread_frames, spread_take
from .regret import swap_owned
from .rows import RowPicker
from .shortfalls import Unmet, describe
from .supply import Pool, free_pool, pool_column
from .victims import Victim, VictimPool

S = MachineState


def resolve_inversions(
    state: CycleState, assignments: list[Assignment], out: Decision
) -> tuple[list[Victim], list[Unmet]]:
    """Phase 2 of design §8 ("resolving priority inversions"; docs/engine.md, The cycle 3-4).

    Walks `state.needs` in table order with what Phase 1 `assignments` gave them and what it
    kept for them (`state.reserved`). A need still short first earmarks supply on its way
    (DRAINING machines, then excess CONFIGURED ones; a `Same` need also the free machines
    Phase 1 left in its domain), then preempts CONFIGURED machines claimed by needs of
    strictly lower priority, best victim first (`VictimPool`); a preempted need loses those
    machines before its own turn. Records per need key `out.satisfied` (claimed + assigned)
    and `out.earmarked` (kept + waited for + preempted for). Missing machines count in
    `state.demand` under the cheapest matching profile the shard knows.

    Returns the victims (configured machines to drain, per claim segment) and the unmet needs
    (`Unmet`: need, missing count, profile label, ...), in table order, for `age_shortfalls`: a
    need waiting on victims their clusters' bounds will hold back (`DrainRoom`) counts them
    as missing, and says so.
    """
    if state.policy.fleet_cost:
        swap_owned(state, assignments)
    assigned, gifts = _given(assignments)
    supply = _ShortSupply(state)
    lost: dict[str, int] = defaultdict(int)
    victims: list[Victim] = []
    unmet = []
    claims, reserved, satisfied = state.claims, state.reserved, out.satisfied
    bought = purchases(state, assignments) if state.policy.fleet_cost else {}
    owned = state.inventory.profiles.owned
    position = {n.key: i for i, n in enumerate(state.needs)} if bought else {}
    for need in state.needs:
        key = need.key
        have = claims[need.cluster].claimed[key] - lost.get(key, 0)
        kept = reserved.get(key, 0)
        given = assigned.get(key, 0)
        deficit = need.count - have - given - kept
        satisfied[key] = have + given
        if kept:
            out.earmarked[key] = kept
        if deficit > 0:
            took, hit = _wait_or_preempt(state, need, supply, (deficit, gifts[key]), victims, lost)
            deficit -= took + hit
            out.earmarked[key] = kept + took + hit
            held, why = state.room().waiting(need) if hit else (0, "")
            if deficit > 0 or held:
                unmet.append(_unmet(state, need, deficit, held, why))
        if key in bought and not need.spec.same:
            cycle = (assignments, assigned, position)
            _, took, hit = yield_for_cost(
                state, need, supply, bought[key], owned, cycle, victims, lost
            )
            if took + hit:
                satisfied[key] -= took + hit
                out.earmarked[key] = out.earmarked.get(key, 0) + took + hit
            if hit:
                out.cost_moves[key] = hit
    if bought:
        assignments[:] = [a for a in assignments if a.count > 0]
    _end_waits(state)
    return victims, unmet


def _end_waits(state: CycleState) -> None:
    """After the walk: the waiting clocks of needs that did not come to preempt end
    (`DrainRoom.settle`; none came at all: every clock ends)."""
    if state.drain_room is not None:
        state.drain_room.settle()
    elif state.memory.asked_since:
        state.memory.asked_since = {}


def _given(
    assignments: list[Assignment],
) -> tuple[dict[str, int], dict[str, list[tuple[int, int]]]]:
    """What Phase 1 gave each need: how many machines, and a spread need's by profile."""
    assigned: dict[str, int] = defaultdict(int)
    gifts: dict[str, list[tuple[int, int]]] = defaultdict(list)
    for a in assignments:
        assigned[a.need.key] += a.count
        if a.need.spread:
            gifts[a.need.key].append((a.profile, a.count))
    return assigned, gifts


class _ShortSupply:
    """What Phase 2 gives needs still short: machines on their way (the `waiting` pools:
    DRAINING, then excess CONFIGURED; a `Same` need also the free pools Phase 1 left) and
    preemptible claims (`held`), both built on first use and consumed need by need.

    A `Same` need weighs every domain before it takes anything, so the same supply is also
    kept as columns over profile ids (`incoming`, and `below`: victims per profile under
    each priority level), each built on first use and kept in step with every take: weighing
    the domains is then a few numpy passes, not a loop over each matching profile and each
    candidate victim. `below` is built from every configured claim in the shard, so a need
    first checks whether its domains could be completed at all (`may_complete`)."""

    def __init__(self, state: CycleState) -> None:
        self.state = state
        counts = state.inventory.counts
        self.size = size = len(state.inventory.profiles)
        excess = Pool(excess_by_profile(state.claims), size)
        # Configured machines some need claims, per profile (what is not excess).
        self.claimed = -excess.column[:size]
        configured = counts[CODE[S.CONFIGURED]][:size]
        self.claimed[: len(configured)] += configured
        self.waiting = [free_pool(counts, S.DRAINING, size), excess]
        self.pools = [state.idle_left, state.spec_left, *self.waiting]
        self._held: VictimPool | None = None
        self.incoming: np.ndarray | None = None
        self.levels: dict[int, int] = {}
        self.below: np.ndarray | None = None

    @property
    def held(self) -> VictimPool:
        if self._held is None:
            self._held = VictimPool(self.state)
        return self._held

    def incoming_column(self) -> np.ndarray:
        """`incoming` (building it on first use)."""
        if self.incoming is None:
            self.incoming = np.zeros(self.size, dtype=np.int64)
            for pool in self.pools:
                self.incoming += pool_column(pool, self.size)[: self.size]
        return self.incoming

    def victims_below(self, priority: int, pids: np.ndarray) -> np.ndarray:
        """Preemptible machines per profile of `pids` held by needs of lower priority."""
        if self.below is None:
            if self._held is None:  # nothing preempted yet: the claims as they are
                profile, priority_of, left = configured_columns(self.state.claims.values())
            else:
                held = self._held
                profile, priority_of, left = held.profile, held.priority, held.left
            levels = np.unique(priority_of)
            self.levels = {q: i for i, q in enumerate(levels.tolist())}
            # Victims per (profile, level above theirs), summed by one bincount of the flat index.
            width = len(levels) + 1
            flat = profile * width + np.searchsorted(levels, priority_of) + 1
            below = np.bincount(flat, left, minlength=self.size * width).astype(np.int64)
            self.below = np.cumsum(below.reshape(self.size, width), axis=1)
        return self.below[pids, bisect_left(list(self.levels), priority)]

    def may_complete(
        self,
        need: Need,
        ranked: np.ndarray,
        domain: np.ndarray,
        incoming: np.ndarray,
        claimed: set[int],
        deficit: int,
    ) -> bool:
        """Whether a domain might complete the need (its own domains if it has any, else any:
        `pick_same_wait_domain`), by an upper bound of what it could preempt there: the
        configured machines some need claims, less its cluster's own claims of its priority
        or above (never its victims). False: none can, and `victims_below` need not be built
        for it."""
        own = sorted(claimed) if claimed else slice(None)

        def could(most: np.ndarray) -> bool:
            return bool((incoming[own] + most[own] >= deficit).any())

        n = len(incoming)
        if not could(np.bincount(domain, self.claimed[ranked], minlength=n)):
            return False
        mine = np.zeros(self.size, dtype=np.int64)
        for taken in self.state.claims[need.cluster].claims.values():
            for c in taken:
                if c.slot == CONFIGURED_SLOT and c.need.priority >= need.priority:
                    mine[c.profile] += c.count
        return could(np.bincount(domain, (self.claimed - mine)[ranked], minlength=n))

    def take(self, pool: dict[int, int], p: int, n: int) -> None:
        pool[p] -= n
        if self.incoming is not None:
            self.incoming[p] -= n

    def give(self, pool: dict[int, int], p: int, n: int) -> None:
        """`n` machines of profile `p` back in `pool` (a purchase undone), in step with
        `incoming` as `take` is: a `Same` need after it counts them."""
        pool[p] = pool.get(p, 0) + n
        if self.incoming is not None:
            self.incoming[p] += n

    def preempt(self, i: int, n: int) -> None:
        """`n` machines of the victim pool's entry `i` preempted."""
        held = self.held
        held.used[i] += n
        held.left[i] -= n
        if self.below is not None:
            self.below[held.profile[i], self.levels[int(held.priority[i])] + 1 :] -= n


def _wait_or_preempt(
    state: CycleState,
    need: Need,
    supply: _ShortSupply,
    short: tuple[int, list[tuple[int, int]]],
    victims: list[Victim],
    lost: dict[str, int],
) -> tuple[int, int]:
    """One short need (`short`: its deficit, and the machines Phase 1 gave it by profile, a
    spread need's only): machines it waits for (taken from the waiting pools), then machines
    it preempts (appended to `victims`, counted in `lost` for their needs). Returns both."""
    if need.spread and not need.spec.same and state.memory.spread_in_phase_2:
        return _spread_wait_or_preempt(state, need, supply, short, victims, lost)
    deficit = short[0]
    if need.spec.same:
        home = _same_home(state, need, supply, deficit)
        if home is None:
            return 0, 0
        pids = home
        incoming = [(pool, p) for pool in supply.pools for p in home.tolist() if pool.get(p, 0) > 0]
    else:
        pids = state.supply.ranked(need)
        offered = state.supply.offered
        incoming = [(pool, p) for pool in supply.waiting for p in offered(pool, need)]
    took = 0
    for pool, p in incoming:
        n = min(deficit - took, pool[p])
        supply.take(pool, p, n)
        took += n
        if took == deficit:
            break
    deficit -= took
    hit = 0
    if deficit <= 0:
        return took, hit
    held = supply.held
    found = held.candidates(need.priority, pids)
    if not need.spec.same or int(held.left[found].sum()) >= deficit:
        for i in found.tolist():
            n = min(deficit - hit, int(held.left[i]))
            if n <= 0:
                break
            hit += _preempt(supply, need, i, n, victims, lost)
    return took, hit


def _preempt(
    supply: _ShortSupply, need: Need, i: int, n: int, victims: list[Victim], lost: dict[str, int]
) -> int:
    """`n` machines of the victim pool's entry `i` preempted for `need`; returns `n`."""
    held = supply.held
    victim, profile = held.needs[int(held.holder[i])], int(held.profile[i])
    room, tail = supply.state.room(), held.tail(i, n)
    # Asked of the coordinator first (the best of them: unmarked first, off the end of the
    # claim): no drain, the victim keeps them.
    asked = room.ask(need, n)
    if asked:
        victims.append(Victim(victim, need, profile, tail + n - asked, asked, asked=True))
    kept = 0
    if n > asked:
        unmarked = max(0, min(n, held.unmarked(i)) - asked)
        kept = room.preempted(victim, need, n - asked, unmarked)  # (held back: it keeps them)
        victims.append(Victim(victim, need, profile, tail, n - asked))
    supply.preempt(i, n)
    lost[victim.key] += n - asked - kept
    return n


def _spread_wait_or_preempt(
    state: CycleState,
    need: Need,
    supply: _ShortSupply,
    short: tuple[int, list[tuple[int, int]]],
    victims: list[Victim],
    lost: dict[str, int],
) -> tuple[int, int]:
    """A short spread need (`short`: its deficit, and the machines Phase 1 gave it by
    profile) waits, then preempts, by its rules as Phase 1 places it (`spread_take`: one
    machine at a time in the least-filled domain that has one, never more than `max_skew`
    above the least-filled domain it could use), counting what it claims and what Phase 1
    gave it. Everything on its way that the rules allow comes before any victim. Without the
    rules here, a need Phase 1 held back for its skew preempted in the very domain it was
    held back from."""
    deficit, given = short
    frames: list[Frame] = []

    def take(candidates: list[tuple[int, int]], most: int) -> list[int]:
        if not frames:  # (worked out once there is something to take)
            frames.extend(spread_frames(state, need, state.claims[need.cluster]))
            for labels, current, _ in frames:
                for p, n in given:
                    current[labels[p] or ""] += n
        return spread_take(need, frames, candidates, most)

    offered = state.supply.offered
    incoming = [(pool, p) for pool in supply.waiting for p in offered(pool, need)]
    took = 0
    if incoming:
        counts = take([(p, pool[p]) for pool, p in incoming], deficit)
        for (pool, p), n in zip(incoming, counts, strict=True):
            if n > 0:
                supply.take(pool, p, n)
                took += n
    if took >= deficit:
        return took, 0  # (the victim pool is built on first use: not for nothing)
    held = supply.held
    found = held.candidates(need.priority, state.supply.ranked(need)).tolist()
    if not found:
        return took, 0
    offer = [(int(held.profile[i]), int(held.left[i])) for i in found]
    hit = 0
    for i, n in zip(found, take(offer, deficit - took), strict=True):
        if n > 0:
            hit += _preempt(supply, need, i, n, victims, lost)
    return took, hit


def _same_home(
    state: CycleState, need: Need, supply: _ShortSupply, deficit: int
) -> np.ndarray | None:
    """The domain a short `Same` need waits in or preempts in (`pick_same_wait_domain` over
    per-domain totals of what is on its way and of lower-priority victims), as its matching
    profiles there in supply order; None when no domain can complete it."""
    codes, values = state.inventory.profiles.label_codes(cast(str, need.spec.same))
    ranked = state.supply.ranked(need)
    # (A `Same` need matches only profiles carrying its key: every code here is a domain.)
    domain = codes[ranked]
    incoming = np.bincount(domain, supply.incoming_column()[ranked], minlength=len(values))
    claimed = {int(codes[c.profile]) for c in state.claims[need.cluster].claims[need.key]}
    if not supply.may_complete(need, ranked, domain, incoming, claimed, deficit):
        return None
    below = np.bincount(domain, supply.victims_below(need.priority, ranked), minlength=len(values))
    coming, preemptible = domain_tallies(values, claimed, deficit, incoming, below)
    home = pick_same_wait_domain({values[d] for d in claimed}, coming, preemptible, deficit)
    return None if home is None else ranked[domain == values.index(home)]


def _unmet(state: CycleState, need: Need, deficit: int, held: int = 0, why: str = "") -> Unmet:
    """A shortfall's raw form, named by the cheapest matching profile the shard has machines
    of (else by the requirements); the missing machines count as demand for that profile.
    `held`: machines it waits on that their clusters hold back (`DrainRoom.waiting`, `why`),
    short too, though drains are asked for them (so no more demand)."""
    inv = state.inventory
    profiles = inv.profiles.profiles
    present = state.present()
    # (The supply rank orders the matching profiles by `supply_key`: the first present is best.)
    rank = state.supply.supply_rank(need)
    best = next((p for p in rank if p < len(present) and present[p]), None)
    label = profiles[best].short_name if best is not None else describe(need.requirements)
    state.demand[profiles[best].name if best is not None else label] += deficit
    return Unmet(need, deficit + held, label, held, why)


def emit_preemptions(
    state: CycleState, picker: RowPicker, victims: list[Victim], out: Decision
) -> None:
    """Phase 2's victims as actions: one preemption drain (and `Preemption`) per machine,
    the rows taken from each victim claim's segment of its cluster's configured machines."""
    profiles = state.inventory.profiles.profiles
    for v in victims:
        if v.asked:
            continue  # (asked of the coordinator first: nothing drains)
        rows = picker.configured(v.cluster, v.profile, v.offset, v.count)
        provider = profiles[v.profile].provider
        ids = state.names(rows)
        if not ids:
            continue
        state.moves.append((S.DRAINING, None, rows))
        first = v.drain(provider, ids[0])
        out.actions.stamp(first, "machine_id", ids[1:])
        out.preemptions.extend(v.preemption(mid) for mid in ids)
