"""Tuning knobs of the decision cycle, validated like any other input."""

from __future__ import annotations

from math import inf
from typing import Annotated

from pydantic import BaseModel, ConfigDict, Field, field_validator

from .models import CapacityType, DisruptionBudget, MachineState, Share, from_wire

Seconds = Annotated[float, Field(gt=0, allow_inf_nan=True)]

IDLE_TIMEOUT_SECONDS = {
    CapacityType.ON_DEMAND: 300.0,
    CapacityType.SPOT: 120.0,
    CapacityType.RESERVED: float("inf"),
    CapacityType.BARE_METAL: float("inf"),
}
TRANSITION_TIMEOUT_SECONDS = {
    MachineState.CREATING: 900.0,
    MachineState.CONFIGURING: 600.0,
    MachineState.DRAINING: 4 * 3600.0,
    MachineState.DELETING: 900.0,
}


class Policy(BaseModel):
    model_config = ConfigDict(extra="forbid", frozen=True)

    cycle_seconds: Seconds = 10.0
    # Cap of one provider Create call (design §7: "64 machines at once, not 1").
    create_batch: Annotated[int, Field(ge=1, le=64)] = 64
    # Grace for draining machines no need claims any more (a full graceful shutdown).
    excess_grace_seconds: Annotated[float, Field(ge=0)] = 600.0
    # Drain time assumed for a need that gave no estimate.
    default_drain_seconds: Seconds = 60.0
    # How long an idle machine of each capacity type is held before going back to speculative.
    # Bare metal is never deleted; reserved capacity is paid for whether held or not.
    # A map that names some types keeps the defaults of the others (`idle_timeout`).
    idle_timeout_seconds: dict[CapacityType, Seconds] = Field(
        default_factory=lambda: dict(IDLE_TIMEOUT_SECONDS)
    )
    # A transition older than this is stuck: the machine is marked FAILED (design §5, §9).
    # (Likewise: naming one state leaves the others' in force, `transition_timeouts`.)
    transition_timeout_seconds: dict[MachineState, Seconds] = Field(
        default_factory=lambda: dict(TRANSITION_TIMEOUT_SECONDS)
    )
    # Demand forecast: per-cycle decay of the per-profile average, and the level that holds idle.
    forecast_decay: Annotated[float, Field(gt=0, lt=1)] = 0.9
    forecast_hold: Annotated[float, Field(ge=0)] = 0.5
    max_shortfalls: Annotated[int, Field(ge=0)] = 100
    escalate_after_cycles: Annotated[int, Field(ge=1)] = 5
    # Consecutive cluster reports a configured machine may be missing from before it is verified.
    health_missed_reports: Annotated[int, Field(ge=1, le=255)] = 3
    # Clusters silent this long age out of the needs table.
    max_silence_seconds: Seconds = 300.0
    # Consolidation toward cheaper capacity (docs/engine.md, The cycle 5): a need holding its
    # whole count moves a configured machine onto a free cheaper one when the effective cost
    # saved is at least this much per hour...
    consolidation_min_saving_per_hour: Annotated[float, Field(gt=0, allow_inf_nan=False)] = 0.5
    # ...and the saving over this many hours exceeds the need's reclamation penalty...
    consolidation_horizon_hours: Annotated[float, Field(gt=0, allow_inf_nan=False)] = 1.0
    # ...at most this fraction of the shard's configured machines a cycle (at least one move);
    # 0 turns consolidation off...
    consolidation_max_fraction: Annotated[float, Field(ge=0, le=1)] = 0.02
    # ...and only for a need whose count has not changed for this long (Karpenter's
    # consolidateAfter): demand in flux would undo the move before it paid.
    consolidation_stable_seconds: Annotated[float, Field(ge=0, allow_inf_nan=False)] = 300.0

    # Placement by the fleet's cost (docs/decisions/0012): owned and committed capacity ranks
    # at its marginal price (0: it is paid for whether used or not), a need about to buy
    # elastic capacity displaces backfill at least `displace_gap` below it from owned machines
    # when that saves more over `consolidation_horizon_hours` than the backfill's reclamation
    # penalty, and an idle elastic machine no forecast wants goes at once. False: the engine
    # of before (a shard run begun before it replays with it off).
    fleet_cost: bool = True
    displace_gap: Annotated[int, Field(ge=1, le=1_000_000)] = 900_000

    # Bounding disruption (docs/operations.md): the budgets of a cluster whose roll-up sets
    # none (none: BigFleet's voluntary moves are bounded by priority and cost alone)...
    disruption_budgets: list[DisruptionBudget] = Field(default_factory=list, max_length=32)
    # ...a preemption this many priority points above its victim or more ignores budgets and
    # do-not-disrupt marks (design §5: priority is the only throttle, above this gap)...
    disruption_override_gap: Annotated[int, Field(ge=1)] = 1_000_000
    # ...and a do-not-disrupt mark holds at most this long from when it is received.
    max_do_not_disrupt_seconds: Annotated[float, Field(ge=0, allow_inf_nan=False)] = 86400.0

    # Notices and repair (docs/operations.md): a machine its provider warns will go (`Notice`)
    # is drained with at most this grace (less when the notice's deadline is sooner) and
    # replaced at once...
    notice_grace_seconds: Annotated[float, Field(ge=0, allow_inf_nan=False)] = 600.0
    # ...a configured machine its cluster keeps leaving out of its health reports, which its
    # provider says is up, is repaired (drained, replaced) after this many such verifies...
    repair_after_verifies: Annotated[int, Field(ge=1, le=255)] = 2
    # ...and more of a cluster's machines unhealthy at once than this ("3" or "20%" of its
    # machines, rounded up; a roll-up's `disruption.max_unhealthy` overrides it) stops their
    # repair and raises an escalation: a broken network or operator must not make BigFleet
    # replace a whole cluster (Karpenter's node repair stops at 20 % too).
    max_unhealthy: Share = "20%"
    # Bare metal drained for a notice or repair (it is never deleted) waits this long out of
    # the engine's reach before it may serve again.
    quarantine_seconds: Annotated[float, Field(ge=0, allow_inf_nan=False)] = 3600.0
    # A preemption drain still running this long after it started blocks its preemptor: the
    # need it is for is reported short (design §7 "Slow drains under priority pressure"), aged
    # and escalated like any shortfall; the coordinator then shortens the drain's grace.
    blocked_drain_seconds: Annotated[float, Field(gt=0, allow_inf_nan=False)] = 300.0
    # A shard asks before it preempts (issue 45; docs/operations.md): a need about to preempt
    # by priority for machines that the coordinator's last summary shows free in another
    # shard waits this long for the coordinator to move them (a shortfall), then preempts as
    # before. 0: it preempts at once.
    ask_before_preempt_seconds: Annotated[float, Field(ge=0, le=3600, allow_inf_nan=False)] = 90.0

    @field_validator("disruption_budgets", mode="before")
    @classmethod
    def _budgets_as_json(cls, value: object) -> object:
        """Budgets read as their JSON form (a deployment file's strings name reasons)."""
        if isinstance(value, list):
            return [b if isinstance(b, DisruptionBudget) else from_wire(DisruptionBudget, b)
                    for b in value]  # fmt: skip
        return value

    def idle_timeout(self, capacity_type: CapacityType) -> float:
        """How long an idle machine of this capacity type is held: a type the policy's map
        leaves out keeps its default (`{on-demand: 600}` changes on-demand alone)."""
        found = self.idle_timeout_seconds.get(capacity_type)
        return IDLE_TIMEOUT_SECONDS.get(capacity_type, inf) if found is None else found

    def transition_timeouts(self) -> dict[MachineState, float]:
        """Each transitional state's timeout: the policy's map over the defaults (a state it
        leaves out keeps its default; `.inf` turns one off)."""
        return {**TRANSITION_TIMEOUT_SECONDS, **self.transition_timeout_seconds}
