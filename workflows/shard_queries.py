"""What a shard answers (`ShardQueries`, mixed into workflows/shard.py): `status`, one
`cluster`'s view, shadow mode's report, and its config. Asked before the shard has read its
state back from the snapshot store, they are told to retry (`_not_restoring`).
"""

from __future__ import annotations

from typing import Any

from temporalio import workflow
from temporalio.exceptions import ApplicationError

with workflow.unsafe.imports_passed_through():
    from activities.wire import ShardConfig
    from bigfleet import node_costs
    from workflows.shard_parts import ShardParts


class ShardQueries(ShardParts):
    """The shard workflow's queries."""

    @workflow.query
    def status(self) -> dict[str, Any]:
        """How the shard is doing: its epoch and cycles, machines by state, needs and
        shortfalls, what it refused, what waits and what is out, failures, and what its
        machines cost."""
        self._not_restoring()
        last = self.shard.last
        return {
            "shard": self.shard.id,
            "epoch": self.shard.epoch,
            "cycles": self.shard.cycles,
            "last_cycle_ms": round(self.last_cycle_ms, 3),
            "machines": self.shard.machines_by_state(),
            "clusters": self.shard.needs.clusters(),
            "needs": len(self.shard.needs),
            "shortfalls": [s.model_dump(mode="json") for s in last.shortfalls],
            "rejections": list(self.shard.rejections)[-10:],
            "rejected_inputs": self.guard.rejections.counts,
            "coordinator_term": self.steps.fencing.term,
            # Machines free in other shards, as the engine last read the coordinator's summary
            # (a need about to preempt for one asks first: workflows/shard_pool.py).
            "free_elsewhere": sum(n for _, n in self.shard.engine.memory.elsewhere),
            "inherited": self.steps.inherited,
            "failures": self.failures,
            # Providers that keep refusing it as stale past its re-epochs (issue 44).
            "fences_escalated": self.shard.fences.view(),
            "shadow": self.cfg.shadow,
            # Its recording's lines waiting, written and dropped (`ShardConfig.record`).
            "recording": self.recorder.status() if self.cfg.record else None,
            # The build it runs on, the one its next run will (`bigfleet rollout`).
            **self.build_status(),
            # Clusters left to their own autoscalers (bigfleet/cluster_modes.py): how many,
            # their machines left alone as listed, their roll-ups refused, since this run began.
            "unmanaged": {
                "clusters": len(self.shard.modes.unmanaged),
                "machines_left_alone": self.shard.modes.left_alone,
                "rollups_refused": self.shard.modes.refused,
            },
            # When the last cycles ran (workflow time, s): their intervals show a shard that
            # keeps deciding, or one that waits.
            "cycle_ends": [round(t, 3) for t in self.cycle_ends],
            # Transitions decided but not started yet, and how long the oldest has waited.
            "queued_starts": len(self.pipeline) + len(self.outbox.queue),
            "oldest_queued_seconds": round(self.outbox.oldest(workflow.now().timestamp()), 1),
            # Cycles' notices to operators not sent yet, and those dropped for newer ones.
            "queued_notices": len(self.outbox.notices),
            "dropped_notices": self.outbox.dropped_notices,
            # Transitions started and not reported back (at most `max_in_flight`).
            "in_flight": len(self.outbox.in_flight),
            # Machine records of transition results not folded in yet (over `fold_per_cycle`).
            "waiting_results": self._backlog(self.results),
            # $/h in all, by capacity type and band, idle owned machines, elastic machines an
            # idle owned one could replace, as of the last cycle (None before this run's first).
            "spend": (
                {**self.spend_now.summary(), "at": self.spend_at}
                if self.spend_now is not None
                else None
            ),
        }

    @workflow.query
    def unmanaged_clusters(self) -> list[str]:
        """The clusters this shard leaves alone (bigfleet/cluster_modes.py): `bigfleet audit`
        counts their machines apart, not as orphans."""
        self._not_restoring()
        return sorted(self.shard.modes.unmanaged)

    @workflow.query
    def shadow_report(self) -> dict[str, Any]:
        """Shadow mode's record (docs/shadow.md): would-be against actual."""
        self._not_restoring()
        if not self.cfg.shadow:
            raise ApplicationError(f"shard {self.shard.id} is not in shadow mode")
        return self.shadow.report()

    @workflow.query
    def shadow_clusters(self) -> dict[str, Any]:
        """Each shadow cluster's record (bigfleet/shadow_clusters.py): would-be against what
        it has."""
        self._not_restoring()
        shadows = self.shard.shadows
        return {
            "shard": self.shard.id,
            "names": sorted(self.shard.modes.shadow),
            "clusters": shadows.report(),
            "error": shadows.error,
        }

    @workflow.query
    def cluster(self, name: str) -> dict[str, Any]:
        """One cluster as this shard sees it: its needs and machines, what they cost, its
        disruption bounds and its machines' health."""
        self._not_restoring()
        spend = self.spend_now  # (the cluster's $/h by band, as of the last cycle)
        now = workflow.now().timestamp()
        return {
            **self.shard.cluster_view(name),
            "spend": spend.of_cluster(name) if spend is not None else None,
            "disruption": self.shard.disruption.view(name, self.shard.inventory, now),
            "health": self.shard.notices.view(name, self.shard.inventory),
        }

    @workflow.query
    def config(self) -> ShardConfig:
        """How this shard runs: a shard split from it runs the same way."""
        return self.cfg

    @workflow.query
    def nodes(self) -> dict[str, Any]:
        """The machines the shard pays for and their prices (bigfleet/node_costs.py): what a
        worker exports as OpenCost's node metrics (workers/node_costs.py)."""
        self._not_restoring()
        return node_costs.nodes(self.shard.inventory)
