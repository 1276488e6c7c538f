"""The simulator (the seed's Fauxmaster, §3.1): the real shards and engine against simulated
providers and operators, in virtual time, deterministic for a seed."""

from __future__ import annotations

import heapq
import itertools
from collections.abc import Sequence
from typing import Any

from ..assignment import machine_shard
from ..coordinator import Coordinator
from ..models import CapacityNeed, ClusterCapacityNeeds, ListFilter, MachineState, NodeHealth
from ..providers.simulated.cloud import SimulatedCloudProvider
from ..shard import Shard
from . import fleet as simulated
from .closed_loop import ClosedLoop
from .executor import Executor
from .rebalance import Rebalancer
from .recorder import Recorder
from .recording import RecordingWriter
from .report import build_report
from .scenario import CloudProviderSpec, Scenario
from .trouble import Trouble
from .workload import rollups_from_trace

S = MachineState
# An unchanged roll-up is re-delivered at most this often in a run (`Simulation._resend_due`).
RESEND_SECONDS = 60.0


class Simulation:
    def __init__(
        self,
        scenario: Scenario,
        seed: int | None = None,
        feed: Sequence[tuple[float, ClusterCapacityNeeds]] | None = None,
        record: RecordingWriter | None = None,
    ) -> None:
        """`feed`: roll-ups to deliver verbatim at their times, in order (a replay of a
        recording: recording.py), besides the scenario's own; `record`: write a recording."""
        self.scenario = scenario
        self._feed = list(feed or [])
        self._fed = 0
        self.record = record
        self.seed = scenario.seed if seed is None else seed
        self.now = 0.0
        self.policy = scenario.make_policy()
        self.recorder = Recorder()
        self.providers = simulated.providers(scenario, lambda _: self._clock, self.seed)
        self.operators = simulated.operators(scenario, self.seed)
        self.shards = [Shard(i, self.policy) for i in range(scenario.shards)]
        self.executors = [
            Executor(s, self.providers, self.operators, self.recorder) for s in self.shards
        ]
        self.owner: dict[str, int] = {}
        # Clusters go to the least-loaded shard on first contact, as the coordinator assigns.
        self.coordinator = Coordinator(term=1, shards=list(range(scenario.shards)))
        self._distribute_machines()
        # Closed-loop clusters: their roll-ups answer what the fleet served (closed_loop.py).
        self.loops = {
            c.name: ClosedLoop.from_spec(c.workload)
            for c in scenario.clusters
            if c.workload is not None and c.workload.closed_loop
        }
        self._timeline = self._rollup_timeline()
        self.latest: dict[str, list[CapacityNeed]] = {}
        # The coordinator rebalances between shards, splits and merges them, as in production.
        self.rebalancer = Rebalancer(self)
        self.generation: dict[str, int] = {}
        # Each cluster's last roll-up delivered at a cycle, and when (`_resend_due`).
        self._sent: dict[str, tuple[list[CapacityNeed], float]] = {}
        # Failing racks, and the node health operators report (trouble.py).
        self.trouble = Trouble(scenario.rack_failures, self.providers)
        self.seen: dict[str, list[str]] | None = None  # (health to send with the next roll-ups)

    # ---- set-up -----------------------------------------------------------------------------

    def _clock(self) -> float:
        return self.now

    def _distribute_machines(self) -> None:
        """Whole racks and cloud slots to shards, by the same rule the shard workflows use."""
        n = len(self.shards)
        for provider in self.providers.values():
            for m in provider.list(ListFilter()):
                shard = machine_shard(m, n)
                self.shards[shard].adopt([m], 0.0)
                self.owner[m.id] = shard

    def _rollup_timeline(self) -> list[tuple[float, int, str, list[CapacityNeed]]]:
        events: list[tuple[float, int, str, list[CapacityNeed]]] = []
        seq = itertools.count()
        for cluster in self.scenario.clusters:
            if cluster.name in self.loops:
                continue
            if cluster.workload is not None:
                timed = rollups_from_trace(
                    cluster.workload, self.scenario.cycle_seconds, self.scenario.duration_seconds
                )
            else:
                timed = [(r.at, r.needs) for r in cluster.rollups]
            for at, needs in sorted(timed, key=lambda x: x[0]):
                events.append((at, next(seq), cluster.name, needs))
        heapq.heapify(events)
        return events

    # ---- the loop ---------------------------------------------------------------------------

    def run(self) -> dict[str, Any]:
        sc = self.scenario
        next_cycle, next_sample, next_health = 0.0, 0.0, 0.0
        decommissions = sorted(sc.decommissions, key=lambda d: d.at)
        quota_changes = sorted(
            (c.at, spec.name, c)
            for spec in sc.providers
            if isinstance(spec, CloudProviderSpec)
            for c in spec.quota_changes
        )
        while True:
            candidates = [next_cycle]
            if self._timeline:
                candidates.append(self._timeline[0][0])
            if self._fed < len(self._feed):
                candidates.append(self._feed[self._fed][0])
            if quota_changes:
                candidates.append(quota_changes[0][0])
            if decommissions:
                candidates.append(decommissions[0].at)
            candidates += [
                t for p in self.providers.values() if (t := p.next_event_at()) is not None
            ]
            if (trouble := self.trouble.next_at()) is not None:
                candidates.append(trouble)
            t = min(candidates)
            if t > sc.duration_seconds:
                break
            self._bill(t - self.now)
            self.now = t
            self.trouble.apply(t)
            self._observe_providers()
            while quota_changes and quota_changes[0][0] <= t:
                _, name, change = quota_changes.pop(0)
                self._change_quota(name, change)
            while decommissions and decommissions[0].at <= t:
                self.rebalancer.decommission(decommissions.pop(0), t)
            while self._timeline and self._timeline[0][0] <= t:
                _, _, cluster, needs = heapq.heappop(self._timeline)
                self.latest[cluster] = needs
                self._deliver(cluster, needs)
            while self._fed < len(self._feed) and self._feed[self._fed][0] <= t:
                self._hand_over(self._feed[self._fed][1])
                self._fed += 1
            if t >= next_cycle:
                self._close_loops(t)
                if sc.health_seconds and t >= next_health:
                    self.seen = self.trouble.health()
                    next_health = t + sc.health_seconds
                # Operators re-send their roll-up every cycle; an unchanged one only keeps the
                # cluster alive, so it is delivered once in a while (`_resend_due`).
                for cluster, needs in self.latest.items():
                    if self._resend_due(cluster, needs, t):
                        self._deliver(cluster, needs)
                self.seen = None
                sample = t >= next_sample
                for shard, executor in zip(self.shards, self.executors, strict=True):
                    decision = shard.cycle(t)
                    if self.record is not None:
                        self.record.decision(t, shard.id, decision.actions)
                    executor.execute(decision.actions, t)
                    for update in shard.operator_updates(decision):
                        self.operators[update.cluster].notify(update)
                    self.recorder.cycle(t, shard, decision, sample)
                # Each cycle's view holds until the next one (or the end of the run).
                held = min(sc.cycle_seconds, sc.duration_seconds - t)
                self.recorder.after_cycle(t, self.shards, held, sample)
                self.rebalancer.step(t)
                if sample:
                    next_sample += sc.sample_seconds
                next_cycle += sc.cycle_seconds
        self._bill(sc.duration_seconds - self.now)
        self.now = sc.duration_seconds
        if self.record is not None:
            self.record.end(self.now)
        return build_report(self)

    def _close_loops(self, t: float) -> None:
        """Each closed-loop cluster's roll-up from the machines its needs held last cycle."""
        for cluster, loop in self.loops.items():
            tracks = self.recorder.needs
            served = [
                tracks[(cluster, i)].satisfied if (cluster, i) in tracks else 0
                for i in range(len(loop.needs))
            ]
            needs = loop.needs_at(t, served)
            if needs is not None:
                self.latest[cluster] = needs  # delivered with the cycle's re-sends

    def add_shard(self) -> Shard:
        """A shard born of a split: empty until the split hands it its part."""
        shard = Shard(len(self.shards), self.policy)
        self.shards.append(shard)
        self.executors.append(Executor(shard, self.providers, self.operators, self.recorder))
        return shard

    def _bill(self, seconds: float) -> None:
        if seconds > 0:
            for shard in self.shards:
                self.recorder.bill(shard, seconds)
            self.recorder.stranded(self.shards, seconds)

    def _observe_providers(self) -> None:
        for provider in self.providers.values():
            provider.advance(self.now)
            for machine_id in provider.changes():
                shard = self.owner.get(machine_id)
                if shard is not None:
                    self.executors[shard].observe(provider.get(machine_id), self.now)

    def _resend_due(self, cluster: str, needs: list[CapacityNeed], now: float) -> bool:
        """Whether the cycle's re-send of `cluster`'s roll-up is delivered: always when it
        changed or carries node health, else once `RESEND_SECONDS` (or a third of the silence
        that ages a cluster out) have passed since the last. A shard does nothing with an
        unchanged roll-up but note that the cluster is alive (bigfleet/needs.py), and
        delivering every one was a sixth of a day's run (`bigfleet plan` runs dozens)."""
        last = self._sent.get(cluster)
        every = min(RESEND_SECONDS, self.policy.max_silence_seconds / 3)
        if self.seen is None and last is not None and last[0] is needs and now - last[1] < every:
            return False
        self._sent[cluster] = (needs, now)
        return True

    def _deliver(self, cluster: str, needs: list[CapacityNeed]) -> None:
        self.generation[cluster] = self.generation.get(cluster, 0) + 1
        health = None
        if self.seen is not None:
            health = NodeHealth(machine_ids=self.seen.get(cluster, []))
        rollup = ClusterCapacityNeeds(
            cluster=cluster, generation=self.generation[cluster], needs=needs, health=health
        )
        self._hand_over(rollup)

    def _hand_over(self, rollup: ClusterCapacityNeeds) -> None:
        """A roll-up to the shard of its cluster (assigned on first contact), recorded."""
        cluster, needs = rollup.cluster, rollup.needs
        if cluster not in self.coordinator.clusters:
            self.rebalancer.first_reports(self.now)
        wants = [n.requirements for n in needs]
        shard = self.coordinator.assign(cluster, wants=wants)
        reason = self.shards[shard].receive(rollup, self.now)
        if reason:
            self.recorder.rejected_rollups.append(reason)
        else:
            self.recorder.rollup(self.now, rollup)
        if self.record is not None:
            self.record.rollup(self.now, rollup, not reason)

    def _change_quota(self, name: str, change: Any) -> None:
        provider = self.providers[name]
        assert isinstance(provider, SimulatedCloudProvider)
        provider.set_quota(change.instance_type, change.zone, change.capacity_type, change.count)
        listed = {m.id: m for m in provider.list(ListFilter(states=[S.SPECULATIVE]))}
        for mid, shard in list(self.owner.items()):
            inv = self.shards[shard].inventory
            row = inv.ids.find(mid)
            if row < 0 or mid in listed or inv.profile_of(row).provider != name:
                continue
            if inv.state_of(row) is S.SPECULATIVE:
                self.shards[shard].release([mid])
                del self.owner[mid]
        fresh = [m for mid, m in listed.items() if mid not in self.owner]
        for m in fresh:
            # The assignment rule, as the shard workflows apply it to new capacity; a merged-away
            # shard's share goes to the shard it merged into.
            shard = machine_shard(m, self.scenario.shards)
            while shard in self.rebalancer.merged_into:
                shard = self.rebalancer.merged_into[shard]
            self.shards[shard].adopt([m], self.now)
            self.owner[m.id] = shard


def run_scenario(scenario: Scenario, seed: int | None = None) -> dict[str, Any]:
    return Simulation(scenario, seed).run()

