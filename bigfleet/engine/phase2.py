"""Phase 2 (seed §8): unsatisfied needs wait for supply on its way, then preempt strictly lower
priorities, best victim first; what is still missing becomes a shortfall."""

from __future__ import annotations

from collections import defaultdict
from dataclasses import dataclass
from typing import TYPE_CHECKING

from ..cost import drain_grace_period, shard_pressure, victim_merit, victim_weights
from ..inventory import CODE
from ..models import DrainAction, DrainReason, MachineState
from ..needs import Need
from .claims import CONFIGURED_SLOT, ClusterClaims
from .common import (
    Decision,
    Preemption,
    describe,
    pick_same_wait_domain,
    supply_key,
)
from .phase1 import Assignment, by_supply, free_pool

if TYPE_CHECKING:
    from .fast import FastEngine

S = MachineState


@dataclass(slots=True)
class Victim:
    """`count` configured machines of `victim`'s claim on one profile, drained for `preemptor`."""

    victim: Need
    preemptor: Need
    profile: int
    offset: int
    count: int

    @property
    def cluster(self) -> str:
        return self.victim.cluster

    @property
    def grace(self) -> float:
        return drain_grace_period(self.preemptor.priority, self.victim.priority)

    def drain(self, provider: str, machine_id: str) -> DrainAction:
        return DrainAction(
            provider=provider,
            machine_id=machine_id,
            cluster=self.victim.cluster,
            grace_seconds=self.grace,
            reason=DrainReason.PREEMPT,
            preemptor_cluster=self.preemptor.cluster,
            preemptor_priority=self.preemptor.priority,
            victim_priority=self.victim.priority,
        )

    def preemption(self, machine_id: str) -> Preemption:
        return Preemption(
            machine_id,
            self.victim.cluster,
            self.victim.priority,
            self.preemptor.cluster,
            self.preemptor.priority,
            self.grace,
        )

    @staticmethod
    def excess_drain(provider: str, machine_id: str, cluster: str, grace: float) -> DrainAction:
        return DrainAction(
            provider=provider,
            machine_id=machine_id,
            cluster=cluster,
            grace_seconds=grace,
            reason=DrainReason.EXCESS,
        )


@dataclass(slots=True)
class _Held:
    """A lower-priority need's configured claim on one profile: preemptible supply."""

    sort: tuple
    need: Need
    profile: int
    offset: int
    left: int
    used: int = 0


class _VictimPool:
    """Lower-priority configured claims, per profile, each list best victim first."""

    def __init__(self, entries: list[_Held]) -> None:
        entries.sort(key=lambda e: e.sort)
        self.by_profile: dict[int, list[_Held]] = defaultdict(list)
        for e in entries:
            self.by_profile[e.profile].append(e)
        self.floor = {p: min(e.need.priority for e in es) for p, es in self.by_profile.items()}

    def candidates(self, priority: int, matching: frozenset[int]) -> list[_Held]:
        pids = [p for p in self.by_profile if p in matching and self.floor[p] < priority]
        found = [
            e for p in pids for e in self.by_profile[p] if e.left > 0 and e.need.priority < priority
        ]
        if len(pids) > 1:
            found.sort(key=lambda e: e.sort)
        return found


def _victim_pool(engine: FastEngine, claims: dict[str, ClusterClaims]) -> _VictimPool:
    inv, policy = engine.inventory, engine.policy
    counts = inv.counts
    free = int(counts[CODE[S.IDLE]].sum() + counts[CODE[S.SPECULATIVE]].sum())
    usable = int(counts.sum() - counts[CODE[S.FAILED]].sum())
    weights = victim_weights(shard_pressure(free, usable))
    profiles = inv.profiles.profiles
    pool = []
    for cc in claims.values():
        for taken in cc.claims.values():
            for c in taken:
                if c.slot != CONFIGURED_SLOT:
                    continue
                h = c.need
                merit = victim_merit(
                    weights,
                    h.priority,
                    h.spec.drain_seconds or policy.default_drain_seconds,
                    h.spec.interruption_penalty,
                    h.spec.reclamation_penalty,
                )
                key = (-merit, h.priority, h.sort_key(), profiles[c.profile].name)
                pool.append(_Held(key, h, c.profile, c.offset, c.count))
    return _VictimPool(pool)


def resolve_inversions(
    engine: FastEngine,
    needs: list[Need],
    claims: dict[str, ClusterClaims],
    assignments: list[Assignment],
    out: Decision,
    demand: dict[str, int],
) -> tuple[list[Victim], list[tuple[Need, int, str]]]:
    inv = engine.inventory
    profiles = inv.profiles.profiles
    assigned: dict[str, int] = defaultdict(int)
    for a in assignments:
        assigned[a.need.key] += a.count
    draining = free_pool(inv.counts, S.DRAINING)
    excess: dict[int, int] = defaultdict(int)
    for cc in claims.values():
        for p, (_, n) in cc.excess.items():
            excess[p] += n
    held: _VictimPool | None = None
    lost: dict[str, int] = defaultdict(int)
    victims: list[Victim] = []
    unmet = []
    for need in needs:
        cc = claims[need.cluster]
        have = cc.claimed[need.key] - lost[need.key]
        kept = engine.reserved.get(need.key, 0)
        deficit = need.count - have - assigned[need.key] - kept
        out.satisfied[need.key] = have + assigned[need.key]
        if kept:
            out.earmarked[need.key] = kept
        if deficit <= 0:
            continue
        matching = engine.matching(need)
        pools = [draining, excess]
        if need.spec.same:
            pools = [engine.idle_left, engine.spec_left, *pools]
        rank = engine.supply_rank(need)
        incoming = [(pool, p) for pool in pools for p in by_supply(pool, rank)]
        if held is None:
            held = _victim_pool(engine, claims)
        candidates = held.candidates(need.priority, matching)
        if need.spec.same:
            incoming, candidates = _same_domain(need, cc, incoming, candidates, deficit, profiles)
        took = 0
        for pool, p in incoming:
            n = min(deficit - took, pool[p])
            pool[p] -= n
            took += n
            if took == deficit:
                break
        deficit -= took
        hit = 0
        if not need.spec.same or sum(e.left for e in candidates) >= deficit:
            for e in candidates:
                n = min(deficit - hit, e.left)
                if n <= 0:
                    break
                victims.append(Victim(e.need, need, e.profile, e.offset + e.used, n))
                e.used += n
                e.left -= n
                lost[e.need.key] += n
                hit += n
        deficit -= hit
        out.earmarked[need.key] = kept + took + hit
        if deficit > 0:
            known = [p for p in matching if p < inv.counts.shape[1] and inv.counts[:, p].sum() > 0]
            best = min(known, key=lambda p: supply_key(need, profiles[p]), default=None)
            label = profiles[best].short_name if best is not None else describe(need.requirements)
            unmet.append((need, deficit, label))
            demand[profiles[best].name if best is not None else label] += deficit
    return victims, unmet


def _same_domain(
    need: Need,
    cc: ClusterClaims,
    incoming: list[tuple[dict, int]],
    candidates: list[_Held],
    deficit: int,
    profiles: list,
) -> tuple[list[tuple[dict, int]], list[_Held]]:
    key = need.spec.same
    inc: dict[str, int] = defaultdict(int)
    for pool, p in incoming:
        inc[profiles[p].label(key)] += pool[p]
    vic: dict[str, int] = defaultdict(int)
    for e in candidates:
        vic[profiles[e.profile].label(key)] += e.left
    home = pick_same_wait_domain(
        {profiles[c.profile].label(key) for c in cc.claims[need.key]}, inc, vic, deficit
    )
    return (
        [(pool, p) for pool, p in incoming if profiles[p].label(key) == home],
        [e for e in candidates if profiles[e.profile].label(key) == home],
    )
