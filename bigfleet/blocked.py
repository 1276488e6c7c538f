"""Slow drains under priority pressure (design §7; issue 33): a preemption drain that runs long
blocks the higher priority it is for. The shard remembers each preemption drain it started,
and once one has run `blocked_drain_seconds`, reports its preemptor's need short by the
machines still draining for it — "drain requested N minutes ago, still in progress,
priority-X preemptor waiting" — aged and escalated like any other shortfall (design §9). The
coordinator may fill it from another shard, and shortens the drains' grace once it is
escalated (workflows/coordinator.py). The drain itself runs on: cancelling it would lose what
the workload has already given up.
"""

from __future__ import annotations

from collections.abc import Iterable
from typing import Any

from .engine.decision import Preemption
from .inventory import CODE, Inventory
from .models import MachineState, Shortfall
from .needs import NeedsTable
from .policy import Policy

S = MachineState
SHOWN = 64  # machine ids a shortfall names, at most


class BlockedDrains:
    def __init__(self, policy: Policy) -> None:
        self.policy = policy
        # machine id → (preemptor cluster, preemptor priority, when its drain started)
        self.drains: dict[str, tuple[str, int, float]] = {}

    def started(self, preemptions: Iterable[Preemption], now: float) -> None:
        """The cycle's preemption drains (one held back by a budget never drains: it is
        forgotten at the next look)."""
        for p in preemptions:
            self.drains[p.machine_id] = (p.preemptor_cluster, p.preemptor_priority, now)

    def shortfalls(self, inv: Inventory, needs: NeedsTable, now: float) -> list[Shortfall]:
        """Per preemptor need still asked for, the drains for it past `blocked_drain_seconds`
        (those no longer draining are forgotten)."""
        if not self.drains:
            return []
        draining = CODE[S.DRAINING]
        for mid in [m for m in self.drains if (r := inv.ids.find(m)) < 0
                    or inv.state[r] != draining]:  # fmt: skip
            del self.drains[mid]
        late: dict[tuple[str, int], list[tuple[float, str]]] = {}
        for mid, (cluster, priority, since) in self.drains.items():
            if now - since >= self.policy.blocked_drain_seconds:
                late.setdefault((cluster, priority), []).append((since, mid))
        out = []
        for (cluster, priority), drains in sorted(late.items()):
            need = next((n for n in needs.needs_of(cluster) if n.priority == priority), None)
            if need is None or need.count == 0:
                continue  # (the preemptor no longer asks: nobody waits)
            drains.sort()
            oldest = drains[0][0]
            overdue = now - oldest - self.policy.blocked_drain_seconds
            age = 1 + int(overdue // self.policy.cycle_seconds)
            out.append(
                Shortfall(
                    cluster=cluster,
                    profile=(
                        f"waiting on {len(drains)} preemption drain(s), the oldest started "
                        f"{now - oldest:.0f} s ago"
                    ),
                    requirements=list(need.requirements),
                    priority=priority,
                    count=min(len(drains), need.count),
                    age=age,
                    interruption_penalty=need.spec.interruption_penalty,
                    escalated=age >= self.policy.escalate_after_cycles,
                    blocked_drains=[mid for _, mid in drains[:SHOWN]],
                )
            )
        return out

    def state(self) -> dict[str, Any]:
        return {mid: list(entry) for mid, entry in self.drains.items()}

    def restore(self, state: Any) -> None:
        if isinstance(state, dict):
            self.drains = {
                str(mid): (str(c), int(p), float(t)) for mid, (c, p, t) in state.items()
            }
