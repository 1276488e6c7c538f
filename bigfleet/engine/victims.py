"""Victims of a cycle: configured machines drained for a need of higher priority (Phase 2's
preemptions, and backfill displaced for the fleet's cost), and the pool they are chosen from."""

from __future__ import annotations

from collections import Counter
from dataclasses import dataclass

import numpy as np

from ..cost import drain_grace_period, shard_pressure, victim_weights
from ..inventory import CODE, Inventory
from ..models import DrainAction, DrainReason, MachineState
from ..needs import Need
from .claims import CONFIGURED_SLOT
from .cycle import CycleState
from .decision import Preemption
from .ranking import victim_order

S = MachineState


def marked_configured(inv: Inventory) -> Counter[tuple[int, int]]:
    """CONFIGURED machines their cluster marked do-not-disrupt (the inventory's `kept`
    flags, set by the shard), per (cluster code, profile): from the marked rows alone."""
    rows = np.flatnonzero(inv.kept[: inv.rows_used])
    rows = rows[inv.state[rows] == CODE[S.CONFIGURED]]
    return Counter(zip(inv.cluster[rows].tolist(), inv.profile[rows].tolist(), strict=True))


@dataclass(slots=True)
class Victim:
    """`count` configured machines of `victim`'s claim on one profile, drained for `preemptor`."""

    victim: Need
    preemptor: Need
    profile: int
    offset: int
    count: int
    for_cost: bool = False
    # Held back by its preemptor, which asks the coordinator first (`DrainRoom.ask`): the
    # victim keeps them, nothing drains.
    asked: bool = False

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
            self.for_cost,
        )


class VictimPool:
    """Every configured claim as a would-be victim, as columns in best-victim-first order:
    design §8's four factors (weights shifted by how saturated the shard is), then the holder's
    priority and table order, then the profile's name. `left` and `used` change as Phase 2
    preempts."""

    def __init__(self, state: CycleState) -> None:
        inv, policy = state.inventory, state.policy
        counts = inv.counts
        free = int(counts[CODE[S.IDLE]].sum() + counts[CODE[S.SPECULATIVE]].sum())
        usable = int(counts.sum() - counts[CODE[S.FAILED]].sum())
        weights = victim_weights(shard_pressure(free, usable))
        self.size = len(inv.profiles)
        index: dict[str, int] = {}
        self.needs: list[Need] = []
        holder, profile, offset, count = [], [], [], []
        for cc in state.claims.values():
            for taken in cc.claims.values():
                for c in taken:
                    if c.slot != CONFIGURED_SLOT:
                        continue
                    i = index.get(c.need.key)
                    if i is None:
                        i = index[c.need.key] = len(self.needs)
                        self.needs.append(c.need)
                    holder.append(i)
                    profile.append(c.profile)
                    offset.append(c.offset)
                    count.append(c.count)
        keys = [victim_order(weights, h, policy) for h in self.needs]
        need_rank = np.empty(len(keys), dtype=np.int64)
        need_rank[sorted(range(len(keys)), key=keys.__getitem__)] = np.arange(len(keys))
        holders = np.array(holder, dtype=np.int64)
        profiles = np.array(profile, dtype=np.int64)
        names = state.supply.name_order()
        # (A need holds one configured claim per profile: no two entries tie.)
        order = np.lexsort((names[profiles], need_rank[holders])) if len(holders) else holders
        self.holder = holders[order]
        self.profile = profiles[order]
        self.priority = np.array([n.priority for n in self.needs], dtype=np.int64)[self.holder]
        self.offset = np.array(offset, dtype=np.int64)[order]
        self.left = np.array(count, dtype=np.int64)[order]
        self.used = np.zeros(len(order), dtype=np.int64)
        self.from_end = state.memory.victims_from_end
        # Per entry: how many of its claim's machines its cluster marked do-not-disrupt (at
        # its start: rows.py puts them first; victims come off the end). Counted only where
        # moves respect the marks (`DrainRoom`).
        self.marked = np.zeros(len(order), dtype=np.int64)
        if state.memory.cost_moves_bounded and len(order):
            staying = marked_configured(inv)
            if staying:
                clusters = [inv.clusters.get(n.cluster) for n in self.needs]
                marks = [
                    staying.get((clusters[h], p), 0)
                    for h, p in zip(self.holder.tolist(), self.profile.tolist(), strict=True)
                ]
                whole = np.array(count, dtype=np.int64)[order]
                self.marked = np.clip(np.array(marks, dtype=np.int64) - self.offset, 0, whole)

    def unmarked(self, i: int) -> int:
        """Machines entry `i` still has that its cluster did not mark (they come off first)."""
        return max(0, int(self.left[i] - self.marked[i]))

    def tail(self, i: int, n: int) -> int:
        """Where the last `n` machines entry `i` still has begin, in its claim's rows: victims
        come off the end of a claim, as excess comes off the end of a cluster's rows, where
        machines its cluster marked do-not-disrupt are not (rows.py puts them first)."""
        if not self.from_end:  # (as shards decided before marks steered the engine)
            return int(self.offset[i] + self.used[i])
        return int(self.offset[i] + self.left[i] - n)

    def candidates(self, priority: int, pids: np.ndarray) -> np.ndarray:
        """Entries with machines left, held by needs below `priority`, on one of `pids`'
        profiles, best victim first."""
        wanted = np.zeros(self.size, dtype=bool)
        wanted[pids] = True
        return np.flatnonzero((self.left > 0) & (self.priority < priority) & wanted[self.profile])
