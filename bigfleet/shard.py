"""A shard (design §5, §6 tier 2): its clusters' needs, its machines, its decision cycle.

Whatever executes the actions (the simulator's executor, Temporal transition workflows) reports
back what the providers say of each machine through `observe`; the shard folds that into its
inventory. Nothing here does I/O or knows about Temporal.
"""

# The shard's state and what changes it (roll-ups, observations, transfers, reports); what it
# tells is in shard_views.py, splits and merges in membership.py, deciding in engine/.

from __future__ import annotations

from collections import deque
from collections.abc import Iterable, Mapping
from typing import Any

import numpy as np
from pydantic import ValidationError

from .blocked import BlockedDrains
from .cluster_modes import ClusterModes, spare_unheard
from .disruption import DisruptionBook
from .engine import Decision, FastEngine
from .engine.decision import TIMED_OUT
from .fences import FenceBook
from .held import NONE16
from .inputs import clip, explain
from .inventory import CODE, Inventory, MachineNotFound
from .membership import Membership
from .models import (
    ClusterCapacityNeeds,
    FencingToken,
    Machine,
    MachineState,
    NodeHealth,
    Shortfall,
    from_wire,
    generation_ahead,
)
from .needs import NeedsTable
from .notices import NoticeBook
from .offers import Offers
from .policy import Policy
from .shadow_clusters import ShadowClusters
from .shard_views import ShardViews
from .states import LEGAL

S = MachineState
SERVING = (S.CONFIGURED, S.CONFIGURING)  # a cluster's machines, kept while it is unheard
# How long a need the operator refused to bootstrap waits before BigFleet tries again.
REFUSAL_BACKOFF_SECONDS = 300.0
MAX_REFUSAL_BACKOFF_SECONDS = 3600.0


class Shard(ShardViews):
    """One shard's state and what changes it: roll-ups, observations, transfers, the cycle,
    reports. What it tells people and operators is in `ShardViews` (shard_views.py)."""

    def __init__(
        self, shard_id: int, policy: Policy | None = None, epoch: int = 1, capacity: int = 1024
    ) -> None:
        self.id = shard_id
        self.epoch = epoch
        self.seq = 0
        self.policy = policy or Policy()
        self.needs = NeedsTable(self.policy.max_silence_seconds)
        self.shadows = ShadowClusters(self.policy.max_silence_seconds)  # (shadow clusters')
        self.inventory = Inventory(capacity)
        self.engine = FastEngine(self.inventory, self.policy)
        self.rejections: deque[str] = deque(maxlen=50)
        # A roll-up's generation far ahead of the clock is refused (a shard's run begun before:
        # as it ran; workflows/shard.py sets it from workflow.patched).
        self.generations_bounded = True
        self.refusals: dict[tuple[str, int], tuple[float, str]] = {}
        # Needs refused in a row (`refuse_again`): since when, and how many times.
        self.refused: dict[tuple[str, int], tuple[float, int]] = {}
        self.last: Decision = Decision()
        self.cycles = 0
        # Cross-shard preemption: machines draining to leave, and drained ones waiting to go.
        self.transfer_out: set[str] = set()
        self.handoff: dict[str, Machine] = {}
        # A split or merge (design §16): machines on their way to another shard, as they are, and
        # clusters that moved away (their roll-ups are forwarded there).
        self.leaving: dict[str, Machine] = {}
        self.moved: dict[str, int] = {}
        # Machines this shard took out of the fleet: never adopted again as new capacity.
        self.decommissioned: set[str] = set()
        # Providers' notices and the repair of unhealthy machines (notices.py).
        self.notices = NoticeBook(self.policy)
        # Preemption drains that block their preemptor when slow (blocked.py).
        self.blocked = BlockedDrains(self.policy)
        # Splits, merges and decommissions (design §16), on this shard's state.
        self.membership = Membership(self)
        self.offers = Offers()  # the report's offer samples, rebuilt when they change
        # Clusters whose configured machines this shard adopted before it heard from them
        # (BigFleet started over a running fleet): cluster -> when. Their machines are not
        # reclaimed as excess until the cluster's first roll-up comes, or for the silence a
        # cluster is allowed (`max_silence_seconds`): one that never reports then goes as a
        # silent one does. False: as before (a run begun earlier replays as it ran).
        self.unheard: dict[str, float] = {}
        self.keep_unheard = True
        # Unmanaged clusters, whose machines and roll-ups this shard leaves alone (issue 46).
        self.modes = ClusterModes()
        # Marks steer the engine (disruption.py `mark`); False: a run begun before, on replay.
        self.steer_by_marks = True
        # A spread need keeps to its skew when it waits or preempts; False: a run begun before.
        self.spread_in_phase_2 = True
        # Placement keeps to every spread rule; False: the first only (a run begun before).
        self.every_spread_rule = True
        # Consolidation leaves marked machines be; moves for cost keep to marks and budgets
        # (DrainRoom); owned machines yield across cycles (engine/yielding.py). Each False: a
        # run begun before.
        self.marks_steer_moves = self.cost_moves_bounded = self.owned_yields = True
        # What each cluster's operator bounds of BigFleet's voluntary moves (issue 33).
        self.disruption = DisruptionBook(self.policy)
        self.fences = FenceBook()  # refusals as stale, and the new epochs they caused

    def token(self) -> FencingToken:
        """The fencing token for the next provider call (design §11)."""
        self.seq += 1
        return FencingToken(shard_id=self.id, shard_epoch=self.epoch, seq=self.seq)

    # ---- roll-ups ---------------------------------------------------------------------------

    def receive(self, raw: Mapping[str, Any] | ClusterCapacityNeeds, now: float) -> str | None:
        """Take a roll-up. Returns None if accepted (or a harmless replay), else why not; a
        rejected roll-up changes nothing and the cluster's previous one stays in force."""
        why: str | None = None
        try:
            rollup = (
                raw
                if isinstance(raw, ClusterCapacityNeeds)
                else from_wire(ClusterCapacityNeeds, raw)
            )
        except ValueError as err:  # (a ValidationError, or data that is not JSON-shaped)
            cluster = raw.get("cluster", "?") if isinstance(raw, Mapping) else "?"
            why = explain(err) if isinstance(err, ValidationError) else clip(str(err))
        else:
            # A generation far ahead of the clock would make every later roll-up stale (issue 44).
            cluster = rollup.cluster
            why = self.modes.refusal(cluster)
            if self.generations_bounded and not why:
                why = generation_ahead(rollup.generation, now)
            if cluster in self.modes.shadow and not why:  # (bigfleet/shadow_clusters.py)
                why = self.shadows.take(rollup, now)
                if not why:
                    return None
        if why:
            # Bounded: the cluster's name and the fields are the sender's choice.
            reason = f"roll-up from cluster {clip(cluster, 80)} rejected: {why}"
            self.rejections.append(reason)
            return reason
        if self.needs.apply(rollup, now):
            self.disruption.take(rollup.cluster, rollup.disruption, self.inventory, now)
            if rollup.health is not None:
                self.reconcile_health(rollup.cluster, rollup.health)
        return None

    def reconcile_health(self, cluster: str, health: NodeHealth) -> None:
        """A configured machine missing from the cluster's report gets one more miss (design §9)."""
        inv = self.inventory
        cidx = inv.clusters.get(cluster)
        if cidx is None:
            return
        n = inv.rows_used
        rows = np.flatnonzero((inv.cluster[:n] == cidx) & (inv.state[:n] == CODE[S.CONFIGURED]))
        present = set(health.machine_ids)
        for r in rows.tolist():
            mid = inv.machine_id(r)
            if mid in present:
                inv.missed[r] = 0
                if self.notices:
                    self.notices.seen(mid)
            elif inv.missed[r] < 255:
                inv.missed[r] += 1

    def verified_up(self, machine_id: str, repair: bool = True) -> None:
        """A verify found a machine its cluster stopped reporting up at its provider: it is
        verified again only after more missed reports, and, with `repair`, repaired after
        `repair_after_verifies` such verifies (notices.py)."""
        row = self.inventory.ids.find(machine_id)
        if row >= 0:
            self.inventory.missed[row] = 0
            if repair:
                self.notices.up(machine_id)

    def refuse(self, cluster: str, priority: int, reason: str, until: float) -> None:
        """The operator refused to bootstrap for this need (design §13): it is unsatisfiable for
        a while, and shows as a shortfall instead of being retried every cycle."""
        self.refusals[(cluster, priority)] = (until, reason)

    def refuse_again(self, cluster: str, priority: int, reason: str, now: float) -> None:
        """`refuse`, with a wait that doubles with each refusal in a row (5 min, 10, 20, … at
        most `MAX_REFUSAL_BACKOFF_SECONDS`) and a shortfall that ages from the first of them,
        so it is escalated like any other: every retry creates machines that are then let go
        (issue 34). A machine configured for the cluster ends the streak."""
        key = (cluster, priority)
        first, streak = self.refused.get(key, (now, 0))
        if key in self.refusals and self.refusals[key][0] > now:
            streak -= 1  # (more results of the same try: one refusal)
        self.refused[key] = (first, streak + 1)
        wait = min(REFUSAL_BACKOFF_SECONDS * 2**streak, MAX_REFUSAL_BACKOFF_SECONDS)
        self.refuse(cluster, priority, reason, now + wait)

    # ---- machines ---------------------------------------------------------------------------

    def adopt(self, machines: Iterable[Machine], now: float) -> int:
        """Take machines into the inventory (those it has already are skipped); how many."""
        if self.modes.shadow:
            machines = list(machines)
            self.shadows.listed(machines, self.modes.shadow)
        fresh = [m for m in self.modes.keep(machines) if self.inventory.ids.find(m.id) < 0]
        if fresh:
            self.inventory.add(fresh, now)
        if self.keep_unheard:
            known = set(self.needs.clusters())
            for m in fresh:
                if m.cluster and m.state in SERVING and m.cluster not in known:
                    self.unheard.setdefault(m.cluster, now)
        return len(fresh)

    def timed_out(self, before: float, limit: int) -> list[str]:
        """Machines failed for their transition's time (`Decision.timed_out`) before `before`
        that are failed still: no result of their transition came back since (at most
        `limit`, oldest first)."""
        inv = self.inventory
        rows = [
            r
            for r, error in inv.last_error.items()
            if error == TIMED_OUT and inv.since[r] <= before and inv.state_of(r) is S.FAILED
        ]
        return [inv.machine_id(r) for r in sorted(rows, key=lambda r: int(inv.since[r]))[:limit]]

    def release(self, machine_ids: Iterable[str]) -> list[Machine]:
        """Give machines up (to another shard); a drained transfer leaves from the handoff."""
        return [
            self.handoff.pop(mid) if mid in self.handoff else self.inventory.remove(mid)
            for mid in machine_ids
        ]

    def withdraw(self, machine_ids: Iterable[str]) -> int:
        """Machines the provider refused to create because it no longer offers them (design §7:
        the quota slot is bad): the shard lets go of those still waiting to be created, so the
        engine plans on other capacity; the provider's listing offers them again if they come
        back. Returns how many it let go."""
        inv = self.inventory
        gone = 0
        for mid in machine_ids:
            row = inv.ids.find(mid)
            if row >= 0 and inv.state_of(row) in (S.CREATING, S.SPECULATIVE):
                inv.remove(mid)
                gone += 1
        return gone

    def unwanted_creates(self, queued: Iterable[tuple[str, list[str]]]) -> list[str]:
        """Of creates decided but not sent to a provider yet (cluster, machine ids; oldest
        first), the machines no need wants any more: where a cluster holds more machines on
        their way or serving (CREATING, IDLE for it, CONFIGURING, CONFIGURED) than its needs
        now ask for, the newest queued ones, up to the surplus. No create goes out for demand
        that has gone (issue 32); `withdraw` lets them go."""
        per_cluster: dict[str, list[str]] = {}
        for cluster, ids in queued:
            per_cluster.setdefault(cluster, []).extend(ids)
        if not per_cluster:
            return []
        inv = self.inventory
        n = inv.rows_used
        holding = np.isin(
            inv.state[:n], [CODE[s] for s in (S.CREATING, S.IDLE, S.CONFIGURING, S.CONFIGURED)]
        )
        codes = inv.cluster[:n][holding]
        held = np.bincount(codes[codes != NONE16], minlength=len(inv.clusters.names))
        out: list[str] = []
        for cluster, ids in per_cluster.items():
            code = inv.clusters.get(cluster)
            have = int(held[code]) if code is not None and code < len(held) else 0
            surplus = have - sum(need.count for need in self.needs.needs_of(cluster))
            if surplus > 0:
                out += ids[::-1][:surplus]
        return out

    def drain_for_transfer(self, machine_ids: Iterable[str], now: float) -> None:
        """Drain configured machines that are to leave the shard (cross-shard preemption).
        Once idle they wait in `handoff`, out of the engine's reach, until released."""
        inv = self.inventory
        for mid in machine_ids:
            inv.move(inv.row(mid), S.DRAINING, now)
            self.transfer_out.add(mid)

    def cancel_transfer(self, machine_ids: Iterable[str], now: float) -> None:
        """A transfer that will not happen: its machines are the shard's to use again."""
        for mid in machine_ids:
            self.transfer_out.discard(mid)
            machine = self.handoff.pop(mid, None)
            if machine is not None:
                self.inventory.add([machine], now)

    def observe(self, machine: Machine, now: float) -> bool:
        """Fold in what a provider says of a machine. True if the shard's view changed."""
        inv = self.inventory
        try:
            row = inv.row(machine.id)
        except MachineNotFound:
            return False
        if machine.notice is not None or self.notices:
            self.notices.note(machine.id, machine.notice, now)
        if self.refused and machine.state is S.CONFIGURED and machine.cluster:
            for key in [k for k in self.refused if k[0] == machine.cluster]:
                del self.refused[key]  # (its operator bootstraps again)
        have = inv.state_of(row)
        if have is machine.state:
            return False
        if machine.id in self.transfer_out and machine.state is S.IDLE:
            self.transfer_out.discard(machine.id)
            if have is S.DRAINING:
                inv.move(row, S.IDLE, now)
                self.handoff[machine.id] = inv.remove(machine.id)
            else:  # (a result seen out of order: the provider's record is the truth)
                inv.remove(machine.id)
                self.handoff[machine.id] = machine
        elif (have, machine.state) in LEGAL:
            inv.move(row, machine.state, now, cluster=machine.cluster, error=machine.last_error)
        else:
            # The provider is the source of truth for hosts: a jump we did not see step by step
            # (an interrupted machine cleaned up between two looks) replaces the row outright.
            inv.remove(machine.id)
            inv.add([machine], now)
        return True

    def reconcile_listing(
        self, listed: Iterable[Machine], now: float, providers: set[str] | None = None
    ) -> dict[str, int]:
        """Bring a restored inventory in line with every provider's `list` (all providers
        together): each listed machine the shard owns is observed; an owned machine no provider
        lists any more is given up. Machines the shard does not own are left alone (another
        shard owns them: ownership stays exactly-once). With `providers`, only those were
        listed: machines of the others are kept as they are. Returns counts of what happened."""
        inv = self.inventory
        seen: set[str] = set()
        changed = not_mine = 0
        if self.modes.shadow:
            listed = list(listed)
            self.shadows.listed(listed, self.modes.shadow)
        for m in listed:
            seen.add(m.id)
            if inv.ids.find(m.id) >= 0:
                changed += self.observe(m, now)
                if m.id in self.transfer_out and m.state is not S.DRAINING:
                    self.transfer_out.discard(m.id)  # its drain never started: it stays
            elif m.id not in self.handoff:
                not_mine += 1
        owned = [inv.machine_id(r) for r in inv.live_rows().tolist()] + list(self.handoff)
        gone = [
            mid
            for mid in owned
            if mid not in seen and (providers is None or self._provider_of(mid) in providers)
        ]
        self.release(gone)
        self.transfer_out.difference_update(gone)
        return {
            "listed": len(seen),
            "changed": changed,
            "gone": len(gone),
            "not_mine": not_mine,
        }

    def _provider_of(self, machine_id: str) -> str | None:
        row = self.inventory.ids.find(machine_id)
        if row >= 0:
            return self.inventory.profile_of(row).provider
        host = self.handoff[machine_id].host if machine_id in self.handoff else None
        return host.provider if host is not None else None

    def begin_configure(self, machine_id: str, cluster: str, now: float) -> None:
        """A machine created for a need is configured for it as soon as it is up."""
        inv = self.inventory
        inv.move(inv.row(machine_id), S.CONFIGURING, now, cluster=cluster)

    # ---- the cycle --------------------------------------------------------------------------

    def cycle(self, now: float) -> Decision:
        """One decision cycle (design §8): what to create, configure, drain and delete now, and
        what is short; the decision is applied to the inventory before it is returned."""
        self.needs.expire(now)
        self.refusals = {k: v for k, v in self.refusals.items() if v[0] > now}
        needs = [n for n in self.needs if (n.cluster, n.priority) not in self.refusals]
        bounds = self.disruption
        if bounds.clusters:
            bounds.forget(set(self.needs.clusters()))
        members = bounds.members(self.inventory)  # (one pass over the inventory a cycle)
        memory = self.engine.memory
        bounds.cost = self.cost_moves_bounded
        bounds.tell(memory, self.inventory, now, members)
        if self.steer_by_marks:
            bounds.mark(self.inventory, now)
        memory.victims_from_end = self.steer_by_marks
        memory.spread_in_phase_2 = self.spread_in_phase_2
        memory.every_spread_rule = self.every_spread_rule
        memory.marks_steer_moves = self.marks_steer_moves
        memory.owned_yields = self.owned_yields
        early, held = self.notices.act(self.inventory, bounds, members, self.transfer_out, now)
        decision = self.engine.decide(needs, now)
        if self.unheard:
            decision = spare_unheard(self, decision, now)
        decision = bounds.hold(decision, self.inventory, now, members)
        self.engine.apply(decision, now)
        if self.modes.shadow:  # what BigFleet would do for its shadow clusters (recorded only)
            self.shadows.cycle(self, now)
        decision.actions.extend(early)
        decision.shortfalls.extend(self._refused_shortfalls(now))
        decision.shortfalls.extend(held)
        if decision.preemptions:
            self.blocked.started(decision.preemptions, now)
        decision.shortfalls.extend(self.blocked.shortfalls(self.inventory, self.needs, now))
        self.last = decision
        self.cycles += 1
        return decision

    def _refused_shortfalls(self, now: float) -> list[Shortfall]:
        if self.refused:  # (streaks of needs no longer asked for end)
            asked = {(n.cluster, n.priority) for n in self.needs}
            self.refused = {k: v for k, v in self.refused.items() if k in asked}
        if not self.refusals:
            return []
        out = []
        cycle = self.policy.cycle_seconds
        for need in self.needs:
            refusal = self.refusals.get((need.cluster, need.priority))
            if refusal is not None and need.count > 0:
                streak = self.refused.get((need.cluster, need.priority))
                age = 1 if streak is None else 1 + int((now - streak[0]) // cycle)
                out.append(
                    Shortfall(
                        cluster=need.cluster,
                        profile=f"refused by operator: {refusal[1]}",
                        requirements=list(need.requirements),
                        priority=need.priority,
                        count=need.count,
                        age=age,
                        interruption_penalty=need.spec.interruption_penalty,
                        escalated=age >= self.policy.escalate_after_cycles,
                    )
                )
        return out
