"""The seed's pure cost functions: effective cost, drain grace, victim scoring (§4, §8)."""

from __future__ import annotations

from dataclasses import dataclass

from .models import CapacityType


def effective_cost(price_per_hour: float, interruption_probability: float, penalty: float) -> float:
    """effective_cost = price + interruption_probability × interruption_penalty (design §4)."""
    return price_per_hour + interruption_probability * penalty


def drain_grace_period(preemptor_priority: int, victim_priority: int) -> float:
    """Seconds of grace a preempted machine gets, from the priority gap (design §8).

    The seed's code says `> 500000` for 30 s, but both of its worked examples are normative: a gap
    of exactly 500 000 drains with 30 s and a gap of exactly 100 000 gets the full 10 minutes.
    """
    gap = preemptor_priority - victim_priority
    if gap > 900_000:
        return 10.0
    if gap >= 500_000:
        return 30.0
    if gap > 100_000:
        return 120.0
    return 600.0


@dataclass(frozen=True, slots=True)
class VictimWeights:
    priority: float
    speed: float
    interruption: float
    reclamation: float


CALM = VictimWeights(priority=0.7, speed=0.1, interruption=0.1, reclamation=0.1)
SATURATED = VictimWeights(priority=0.2, speed=0.6, interruption=0.1, reclamation=0.1)


def victim_weights(pressure: float) -> VictimWeights:
    """Priority dominates a calm shard; drain speed dominates a saturated one (design §8)."""
    p = min(max(pressure, 0.0), 1.0)
    mix = [
        (1 - p) * calm + p * hot
        for calm, hot in zip(
            (CALM.priority, CALM.speed, CALM.interruption, CALM.reclamation),
            (SATURATED.priority, SATURATED.speed, SATURATED.interruption, SATURATED.reclamation),
            strict=True,
        )
    ]
    return VictimWeights(*mix)


def shard_pressure(free_machines: int, usable_machines: int) -> float:
    """0 while at least half the shard is free (idle or speculative), rising to 1 at none free."""
    if usable_machines <= 0:
        return 1.0
    utilisation = 1.0 - free_machines / usable_machines
    return min(max((utilisation - 0.5) / 0.5, 0.0), 1.0)


def victim_merit(
    weights: VictimWeights,
    victim_priority: int,
    drain_seconds: float,
    interruption_penalty: float,
    reclamation_penalty: float,
) -> float:
    """The victim's share of the seed's four-factor score, without the preemptor's term.

    score = w_p × (preemptor − victim)/10⁶ + w_s × speed + w_i × 1/(1+penalty) + w_r × 1/(1+penalty)
    The preemptor's priority shifts every candidate's score by the same amount, so candidates are
    ranked by this merit alone; penalties use 1/(1+x) because the common value is 0.
    """
    return (
        -weights.priority * victim_priority / 1_000_000
        + weights.speed * 60.0 / (60.0 + drain_seconds)
        + weights.interruption / (1.0 + interruption_penalty)
        + weights.reclamation / (1.0 + reclamation_penalty)
    )


DELETABLE = frozenset({CapacityType.ON_DEMAND, CapacityType.SPOT, CapacityType.RESERVED})

# Capacity the fleet pays for whether it is used or not (owned racks, committed reservations):
# its price is sunk, so using one costs the fleet nothing more (docs/decisions/0012).
OWNED = frozenset({CapacityType.BARE_METAL, CapacityType.RESERVED})
ELASTIC = frozenset({CapacityType.ON_DEMAND, CapacityType.SPOT})


def marginal_price(capacity_type: CapacityType, price_per_hour: float) -> float:
    """What running one more hour on a machine of this kind adds to the fleet's bill: its price
    for elastic capacity, 0 for owned and committed capacity (billed whether used or not).
    Placement ranks by it; reports bill the full price."""
    return 0.0 if capacity_type in OWNED else price_per_hour
