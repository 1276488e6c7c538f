"""The rules of a move toward cheaper capacity (consolidation; docs/engine.md, The cycle 5):
how many a cycle may start and which are worth their disruption."""

from __future__ import annotations

from ..needs import Need
from ..policy import Policy


def consolidation_budget(policy: Policy, configured: int) -> int:
    """Moves toward cheaper capacity a cycle may start: `consolidation_max_fraction` of the
    shard's configured machines, at least one (none when the fraction is 0 or none is
    configured)."""
    if policy.consolidation_max_fraction <= 0 or configured <= 0:
        return 0
    return max(1, int(policy.consolidation_max_fraction * configured))


def worth_moving(need: Need, policy: Policy, saving_per_hour: float) -> bool:
    """A move saving `saving_per_hour` of effective cost is worth its disruption: at least
    the policy's minimum saving, and the saving over the horizon exceeds what the need loses
    by leaving its machine (its reclamation penalty)."""
    return (
        saving_per_hour >= policy.consolidation_min_saving_per_hour
        and saving_per_hour * policy.consolidation_horizon_hours > need.spec.reclamation_penalty
    )
