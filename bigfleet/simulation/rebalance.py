"""The coordinator in the simulator: the same planning as the `Coordinator` workflow (design §6,
§9, §16), its moves carried out in process — release then adopt, and for cross-shard preemption
a drain on the donor first; splits and merges through the same shard methods the membership
saga calls; decommissions shared out the same way — so fleet-scale what-ifs run in virtual
time."""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

from ..coordinator import Coordinator, Move
from ..decommission import DecommissionRequest, decommission_plan
from ..models import DeleteAction, DeleteReason, DrainAction, DrainReason
from ..pooling.ask_first import summaries, tell
from ..pooling.stranded import stranded
from ..reports import REPORT_SECONDS, MoveKind

if TYPE_CHECKING:
    from .run import Simulation


@dataclass
class Rebalancer:
    sim: Simulation
    next_round: float = REPORT_SECONDS
    draining: list[Move] = field(default_factory=list)
    log: list[dict[str, Any]] = field(default_factory=list)
    # A merge in progress (donor, into): repeated each round until the donor is empty.
    merging: tuple[int, int] | None = None
    # Decommissioned machines draining on their shard before they leave: (shard, ids).
    leaving: list[tuple[int, list[str]]] = field(default_factory=list)
    # Moves handed over since the receiver last reported: its report does not show their
    # effect yet, so they still count as on their way (as the workflow keeps a finished saga
    # until the receiver's next report) — else the machines would look idle there and be
    # sent back, round after round.
    settling: list[tuple[Move, float]] = field(default_factory=list)
    # Retired shard → the shard it merged into (which takes its share of new capacity).
    merged_into: dict[int, int] = field(default_factory=dict)

    @property
    def coordinator(self) -> Coordinator:
        return self.sim.coordinator

    def first_reports(self, now: float) -> None:
        """Before the coordinator's first round, what it has when it first assigns a cluster:
        every shard's report (their holdings: `pooling/holdings.py`), once."""
        if not self.coordinator.reports and len(self.sim.shards) > 1:
            for shard in self.sim.shards:
                self.coordinator.receive(shard.report(now), now)

    def step(self, now: float) -> None:
        self._finish_drained(now)
        if now < self.next_round:
            return
        self.next_round = now + REPORT_SECONDS
        # One shard has nobody to give machines to or take them from: its offers would go
        # unread (the coordinator never moves machines within a shard), so it sends none.
        alone = len(self.sim.shards) == 1
        for shard in self.sim.shards:
            report = shard.report(now, sample=0) if alone else shard.report(now)
            self.coordinator.receive(report, now)
        if not alone:  # (what the coordinator's gauge shows, from these reports)
            self.sim.recorder.beside = sum(stranded(self.coordinator.reports).values())
        # Handed over before the receiver's cycle that this round's reports reflect: settled.
        self.settling = [(m, t) for m, t in self.settling if t >= now]
        on_the_way = self.draining + [m for m, _ in self.settling]
        busy = [mid for move in on_the_way for mid in move.machine_ids]
        pending: dict[tuple[int, str, int], int] = {}
        for move in on_the_way:
            key = (move.receiver, move.cluster, move.priority)
            pending[key] = pending.get(key, 0) + len(move.machine_ids)
        self._membership(now)
        if len(self.sim.shards) == 1:
            # Every move is between two shards, and there is nothing elsewhere to tell of: a
            # round of one shard plans nothing (a tenth of a one-shard run's time, skipped).
            tell(self.sim.shards[0], None, now)
            return
        moves = self.coordinator.plan(busy=busy, pending=pending)
        # Each shard learns what the others hold free, less what this round moves (issue 45).
        busy += [mid for move in moves for mid in move.machine_ids]
        shards = range(len(self.sim.shards))
        c = self.coordinator
        told = summaries(c.reports, shards, 0, now, busy, c.follows_use, c.cheapest_first)
        for i, summary in told.items():
            tell(self.sim.shards[i], summary, now)
        for move in moves:
            self.log.append(
                {
                    "t": now,
                    "kind": move.kind.value,
                    "donor": move.donor,
                    "receiver": move.receiver,
                    "cluster": move.cluster,
                    "machines": len(move.machine_ids),
                    "machine_ids": move.machine_ids,
                    "grace_seconds": move.grace_seconds,
                    "reason": move.reason,
                }
            )
            if move.kind is MoveKind.PREEMPT:
                self._drain(move, now)
            else:
                self._hand_over(move, now)

    def _drain(self, move: Move, now: float) -> None:
        self._drain_out(
            move.donor,
            move.machine_ids,
            now,
            grace_seconds=move.grace_seconds,
            reason=DrainReason.TRANSFER,
            preemptor_cluster=move.cluster,
            preemptor_priority=move.priority,
        )
        self.draining.append(move)

    def _drain_out(self, shard: int, ids: list[str], now: float, **drain: Any) -> None:
        """Drain configured machines that are to leave `shard` (to another shard, or the
        fleet); once drained they wait in its handoff."""
        inv = self.sim.shards[shard].inventory
        clusters = {mid: inv.cluster_of(inv.row(mid)) or "" for mid in ids}
        self.sim.shards[shard].drain_for_transfer(ids, now)
        for mid in ids:
            provider = inv.profile_of(inv.row(mid)).provider
            self.sim.executors[shard].start(
                DrainAction(provider=provider, machine_id=mid, cluster=clusters[mid], **drain),
                now,
            )

    # ---- membership (design §16) ---------------------------------------------------------------

    def _membership(self, now: float) -> None:
        if self.merging is not None:
            self._split(*self.merging, 1.0, now)
            return
        change = self.coordinator.membership_change(self.sim.scenario.membership)
        if change is None:
            return
        kind, donor, into = change
        if kind == "split":
            self.sim.add_shard()
            self.coordinator.add_shard(into)
            self._split(donor, into, 0.5, now)
        else:
            self.coordinator.retiring.add(donor)
            self.merging = (donor, into)
            self._split(donor, into, 1.0, now)

    def _split(self, donor: int, into: int, fraction: float, now: float) -> None:
        """What the membership saga does, in one step: split_out, hand_out, take_in."""
        giver, taker = self.sim.shards[donor], self.sim.shards[into]
        clusters, ids = giver.membership.split_plan(fraction)
        needs = giver.membership.split_out(clusters, ids, into)
        machines = giver.membership.hand_out(len(giver.leaving))
        taker.membership.take_in(needs, machines, now)
        for m in machines:
            self.sim.owner[m.id] = into
        self.coordinator.moved(clusters, into)
        kind = "merge" if fraction >= 1 else "split"
        self.log.append(
            {
                "t": now,
                "kind": kind,
                "donor": donor,
                "receiver": into,
                "clusters": clusters,
                "machines": len(machines),
            }
        )
        if kind == "merge" and not sum(giver.machines_by_state().values()):
            self.coordinator.remove_shard(donor)  # retired: its cycles have nothing to do
            self.merged_into[donor] = into
            self.merging = None

    # ---- decommission (design §16) ------------------------------------------------------------

    def decommission(self, req: DecommissionRequest, now: float) -> None:
        """Each shard gives its proportional share: free machines leave at once, configured
        ones are drained first; cloud machines are deleted, bare metal is left to its
        provider."""
        found = {
            i: s.membership.matching(req.where(), req.count) for i, s in enumerate(self.sim.shards)
        }
        shares, picks = decommission_plan(found, req.count)
        for i, (free, configured) in picks.items():
            self._leave(i, free, now)
            self._drain_out(
                i, configured, now, grace_seconds=req.grace_seconds, reason=DrainReason.DECOMMISSION
            )
            self.leaving.append((i, configured))
        self.log.append(
            {
                "t": now,
                "kind": "decommission",
                "provider": req.provider,
                "shares": {str(s): n for s, n in shares.items()},
            }
        )

    def _leave(self, shard: int, ids: list[str], now: float) -> None:
        s = self.sim.shards[shard]
        s.cancel_transfer([mid for mid in ids if mid in s.handoff], now)  # drained: back first
        for mid in ids:
            row = s.inventory.row(mid)
            profile = s.inventory.profile_of(row)
            if s.inventory.state_of(row).value == "IDLE" and profile.capacity_type.value != (
                "bare-metal"
            ):
                self.sim.executors[shard].start(
                    DeleteAction(
                        provider=profile.provider, machine_id=mid, reason=DeleteReason.DECOMMISSION
                    ),
                    now,
                )
        s.release(ids)
        for mid in ids:
            self.sim.owner.pop(mid, None)
            self.sim.executors[shard].in_flight.pop(mid, None)

    def _finish_drained(self, now: float) -> None:
        for shard, ids in list(self.leaving):
            if all(mid in self.sim.shards[shard].handoff for mid in ids):
                self.leaving.remove((shard, ids))
                self._leave(shard, ids, now)
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
        self.settling.append((move, now))
