"""The coordinator in the simulator: the same planning as the `Coordinator` workflow (seed §6,
§9), its moves carried out in process — release then adopt, and for cross-shard preemption a
drain on the donor first — so fleet-scale what-ifs run in virtual time."""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

from ..coordinator import REPORT_SECONDS, Coordinator, Move, MoveKind
from ..models import DrainAction, DrainReason

if TYPE_CHECKING:
    from .run import Simulation


@dataclass
class Rebalancer:
    sim: Simulation
    next_round: float = REPORT_SECONDS
    draining: list[Move] = field(default_factory=list)
    log: list[dict[str, Any]] = field(default_factory=list)

    @property
    def coordinator(self) -> Coordinator:
        return self.sim.coordinator

    def step(self, now: float) -> None:
        self._finish_drained(now)
        if now < self.next_round:
            return
        self.next_round = now + REPORT_SECONDS
        for shard in self.sim.shards:
            self.coordinator.receive(shard.report(now), now)
        busy = [mid for move in self.draining for mid in move.machine_ids]
        pending: dict[tuple[int, str, int], int] = {}
        for move in self.draining:
            key = (move.receiver, move.cluster, move.priority)
            pending[key] = pending.get(key, 0) + len(move.machine_ids)
        for move in self.coordinator.plan(busy=busy, pending=pending):
            self.log.append(
                {
                    "t": now,
                    "kind": move.kind.value,
                    "donor": move.donor,
                    "receiver": move.receiver,
                    "cluster": move.cluster,
                    "machines": len(move.machine_ids),
                    "grace_seconds": move.grace_seconds,
                }
            )
            if move.kind is MoveKind.PREEMPT:
                self._drain(move, now)
            else:
                self._hand_over(move, now)

    def _drain(self, move: Move, now: float) -> None:
        donor = self.sim.shards[move.donor]
        inv = donor.inventory
        clusters = {mid: inv.cluster_of(inv.row(mid)) or "" for mid in move.machine_ids}
        donor.drain_for_transfer(move.machine_ids, now)
        executor = self.sim.executors[move.donor]
        for mid in move.machine_ids:
            executor.start(
                DrainAction(
                    provider=inv.profile_of(inv.row(mid)).provider,
                    machine_id=mid,
                    cluster=clusters[mid],
                    grace_seconds=move.grace_seconds,
                    reason=DrainReason.TRANSFER,
                    preemptor_cluster=move.cluster,
                    preemptor_priority=move.priority,
                ),
                now,
            )
        self.draining.append(move)

    def _finish_drained(self, now: float) -> None:
        for move in list(self.draining):
            donor = self.sim.shards[move.donor]
            if all(mid in donor.handoff for mid in move.machine_ids):
                self.draining.remove(move)
                self._hand_over(move, now)

    def _hand_over(self, move: Move, now: float) -> None:
        machines = self.sim.shards[move.donor].release(move.machine_ids)
        self.sim.shards[move.receiver].adopt(machines, now)
        for m in machines:
            self.sim.owner[m.id] = move.receiver
