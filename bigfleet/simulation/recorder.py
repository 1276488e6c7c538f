"""What a simulation observed: actions, preemptions, shortfalls, cost, readiness over time."""

from __future__ import annotations

from collections import Counter
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

import numpy as np

from ..inventory import CODE
from ..models import Action, CapacityType, ClusterCapacityNeeds, Machine, MachineState
from ..transitions import Corrective

if TYPE_CHECKING:
    from ..engine import Decision
    from ..providers.simulated import SimulatedProvider
    from ..shard import Shard
    from .executor import InFlight

S = MachineState
BILLED = (S.CREATING, S.IDLE, S.CONFIGURING, S.CONFIGURED, S.DRAINING, S.DELETING)


def band(priority: int) -> str:
    if priority >= 900_000:
        return ">=900000"
    if priority >= 500_000:
        return "500000-899999"
    if priority >= 100_000:
        return "100000-499999"
    return "<100000"


@dataclass
class NeedTrack:
    cluster: str
    index: int
    priority: int
    count: int
    demand_since: float
    ready_at: float | None = None
    satisfied: int = 0
    samples: list[tuple[float, int]] = field(default_factory=list)


class Recorder:
    def __init__(self) -> None:
        self.actions: list[dict[str, Any]] = []
        self.preemptions: list[dict[str, Any]] = []
        self.shortfalls: dict[tuple[str, int, str], dict[str, Any]] = {}
        self.errors: list[tuple[float, str]] = []
        self.failures: list[dict[str, Any]] = []
        self.rate_limits: Counter[str] = Counter()
        self.cost: Counter[str] = Counter()
        self.idle_machine_hours = 0.0
        self.latencies: list[tuple[int, float]] = []
        self.needs: dict[tuple[str, int], NeedTrack] = {}
        self.rejected_rollups: list[str] = []

    # ---- inputs -----------------------------------------------------------------------------

    def rollup(self, now: float, rollup: ClusterCapacityNeeds) -> None:
        known = [t for (c, _), t in self.needs.items() if c == rollup.cluster]
        if [(t.priority, t.count) for t in sorted(known, key=lambda t: t.index)] == [
            (n.priority, n.count) for n in rollup.needs
        ]:
            return
        for i, need in enumerate(rollup.needs):
            track = self.needs.get((rollup.cluster, i))
            if track is None or track.priority != need.priority:
                self.needs[(rollup.cluster, i)] = NeedTrack(
                    rollup.cluster, i, need.priority, need.count, now
                )
                continue
            if need.count > track.count:
                track.demand_since = now
                if track.ready_at is not None and track.satisfied < need.count:
                    track.ready_at = None
            track.count = need.count
        for (cluster, i) in list(self.needs):
            if cluster == rollup.cluster and i >= len(rollup.needs):
                self.needs[(cluster, i)].count = 0

    # ---- what happened ----------------------------------------------------------------------

    def action(self, now: float, action: Action, shard: Shard, provider: SimulatedProvider) -> None:
        inv = shard.inventory
        ids = action.machine_ids if action.kind == "create" else [action.machine_id]
        for mid in ids:
            profile = inv.profile_of(inv.row(mid))
            self.actions.append(
                {
                    "t": now,
                    "kind": action.kind,
                    "machine": mid,
                    "cluster": getattr(action, "cluster", None),
                    "provider": provider.name,
                    "capacity_type": profile.capacity_type.value,
                    "grace_seconds": getattr(action, "grace_seconds", None),
                    "reason": _reason(action),
                    "shard": shard.id,
                }
            )

    def settled(self, now: float, machine: Machine, flight: InFlight) -> None:
        if machine.state is S.CONFIGURED and flight.need and flight.cluster:
            index = int(flight.need.rsplit("#", 1)[1])
            track = self.needs.get((flight.cluster, index))
            since = track.demand_since if track else now
            self.latencies.append((flight.priority, now - since))

    def failed(self, now: float, machine: Machine, path: Corrective) -> None:
        self.failures.append(
            {
                "t": now,
                "machine": machine.id,
                "failed_from": machine.failed_from.value if machine.failed_from else None,
                "error": machine.last_error,
                "corrective": path.value,
            }
        )

    def error(self, now: float, message: str) -> None:
        self.errors.append((now, message))

    def rate_limited(self, provider: str) -> None:
        self.rate_limits[provider] += 1

    def cycle(self, now: float, shard: Shard, decision: Decision, sample: bool) -> None:
        for p in decision.preemptions:
            self.preemptions.append(
                {
                    "t": now,
                    "machine": p.machine_id,
                    "victim": p.victim_cluster,
                    "victim_priority": p.victim_priority,
                    "preemptor": p.preemptor_cluster,
                    "preemptor_priority": p.preemptor_priority,
                    "grace_seconds": p.grace_seconds,
                }
            )
        for s in decision.shortfalls:
            key = (s.cluster, s.priority, s.profile)
            seen = self.shortfalls.setdefault(
                key,
                {
                    "cluster": s.cluster,
                    "priority": s.priority,
                    "profile": s.profile,
                    "first_t": now,
                    "max_count": 0,
                    "max_age": 0,
                    "escalated": False,
                },
            )
            seen["last_t"] = now
            seen["max_count"] = max(seen["max_count"], s.count)
            seen["max_age"] = max(seen["max_age"], s.age)
            seen["escalated"] = seen["escalated"] or s.escalated
        for need in shard.needs:
            track = self.needs.get((need.cluster, need.index))
            if track is None:
                continue
            track.satisfied = shard.engine.ready(need)
            if track.ready_at is None and track.count > 0 and track.satisfied >= track.count:
                track.ready_at = now
            if sample:
                track.samples.append((now, track.satisfied))

    def bill(self, shard: Shard, seconds: float) -> None:
        """Integrate cost over `seconds` of the shard's current fleet."""
        inv = shard.inventory
        billed = sum(inv.counts[CODE[s]] for s in BILLED).astype(np.float64)
        hours = seconds / 3600.0
        for p, profile in enumerate(inv.profiles.profiles):
            if billed[p]:
                self.cost[profile.capacity_type.value] += billed[p] * profile.price_per_hour * hours
        self.idle_machine_hours += float(inv.counts[CODE[S.IDLE]].sum()) * hours


def _reason(action: Action) -> str | None:
    if action.kind == "drain":
        return action.reason.value
    if action.kind == "delete":
        return action.reason.value
    return None


CAPACITY_TYPES = [c.value for c in CapacityType]
