"""What a cluster's operator bounds of BigFleet's voluntary moves (a roll-up's `disruption`):
disruption budgets, shares of a cluster, and machines not to disrupt."""

from __future__ import annotations

from enum import StrEnum
from typing import Annotated

from pydantic import AfterValidator, Field, field_validator, model_validator

from ..schedule import Cron
from .base import Name, Wire


class BudgetReason(StrEnum):
    """What a disruption budget bounds (docs/operations.md, "Bounding disruption"): starting
    consolidation moves toward cheaper capacity, draining excess machines (a consolidation's
    replaced machine among them), draining machines to hand them to another shard, and
    draining machines for a higher priority."""

    CONSOLIDATION = "consolidation"
    EXCESS = "excess"
    TRANSFER = "transfer"
    PREEMPT = "preempt"


MAX_BUDGET_SECONDS = 366 * 86400.0  # a scheduled budget's window, at most


def _a_share(value: str) -> str:
    if value.endswith("%") and int(value[:-1]) > 100:
        raise ValueError(f"{value} is over 100%")
    return value


# Some of a cluster's machines: "3", or "10%" of them (rounded up; `share_of`).
Share = Annotated[
    str, Field(pattern=r"^[0-9]{1,9}%?$"), AfterValidator(_a_share)
]


def share_of(share: str, machines: int) -> int:
    """How many of `machines` a `Share` is: a count, or a percentage rounded up."""
    if share.endswith("%"):
        return -(-machines * int(share[:-1]) // 100)
    return int(share)


class DisruptionBudget(Wire):
    """At most `machines` of a cluster's machines ("3", or "10%" of them, rounded up) may be
    disrupted at once for `reasons` (all four if empty): machines draining count against it.
    With a `schedule` (5-field cron, UTC) it holds only for `duration_seconds` after each
    time the schedule fires; several budgets: the most restrictive that holds."""

    machines: Share
    reasons: list[BudgetReason] = Field(default_factory=list, max_length=4)
    schedule: Annotated[str, Field(min_length=1, max_length=200)] | None = None
    duration_seconds: (
        Annotated[float, Field(gt=0, le=MAX_BUDGET_SECONDS, allow_inf_nan=False)] | None
    ) = None

    @field_validator("schedule")
    @classmethod
    def _a_schedule(cls, value: str | None) -> str | None:
        if value is not None:
            Cron.parse(value)  # (a ValueError naming its field)
        return value

    @model_validator(mode="after")
    def _window(self) -> DisruptionBudget:
        if (self.schedule is None) != (self.duration_seconds is None):
            raise ValueError("schedule and duration_seconds: give both or neither")
        return self

    def limit(self, machines: int) -> int:
        """How many of a cluster's `machines` may be disrupted at once under this budget."""
        return share_of(self.machines, machines)


class DoNotDisrupt(Wire):
    """A machine its cluster's operator asks BigFleet not to take voluntarily until `until`
    (unix seconds; the policy caps how far ahead: `max_do_not_disrupt_seconds`)."""

    machine_id: Name
    until: Annotated[float, Field(ge=0, allow_inf_nan=False)]


class Disruption(Wire):
    """What a cluster's operator bounds of BigFleet's voluntary moves (its roll-up's
    `disruption`; unset: the deployment's `policy.disruption_budgets`)."""

    budgets: list[DisruptionBudget] = Field(default_factory=list, max_length=32)
    do_not_disrupt: list[DoNotDisrupt] = Field(default_factory=list, max_length=10_000)
    # More of the cluster's machines unhealthy at once than this stops their repair (and
    # raises an escalation); unset: the deployment's `policy.max_unhealthy`.
    max_unhealthy: Share | None = None
