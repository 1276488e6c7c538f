"""How machines rank, the tie-break rules both engines share: the order a need claims its
cluster's machines in, the order it takes free supply in, and the order victims are chosen in.

Both engines implement the same rules (docs/engine.md); the fast one over profile counts and
numpy columns, the reference one over a plain list of machine objects. Rules that are pure
arithmetic over a few numbers live in shared modules like this one so the two cannot drift
apart.
"""

from __future__ import annotations

from ..cost import VictimWeights, effective_cost, victim_merit
from ..models import MachineState
from ..needs import Need
from ..policy import Policy
from ..profiles import Profile

# Claimable states of a cluster's own machines, in the order a need claims them.
CLAIM_ORDER = (MachineState.CONFIGURED, MachineState.CONFIGURING, MachineState.CREATING)


def supply_key(need: Need, profile: Profile, sunk: bool = True) -> tuple[float, float, str]:
    """How a need ranks machines of a profile, for keeping its own and for taking idle,
    speculative, draining and excess ones: cheapest effective cost for the fleet (owned and
    committed capacity at its marginal price, 0: `cost.marginal_price`; at its list price when
    not `sunk`, as before `Policy.fleet_cost`), then the lower list price, then by name."""
    price = profile.marginal_price if sunk else profile.price_per_hour
    return (
        effective_cost(price, profile.interruption_probability, need.spec.interruption_penalty),
        profile.price_per_hour,
        profile.name,
    )


def victim_order(weights: VictimWeights, holder: Need, policy: Policy) -> tuple:
    """How a configured machine held by `holder` ranks as a preemption victim, best first
    (before the profile-name and row tie-breaks): the seed's four-factor merit, then the
    holder's priority and table order."""
    merit = victim_merit(
        weights,
        holder.priority,
        holder.spec.drain_seconds or policy.default_drain_seconds,
        holder.spec.interruption_penalty,
        holder.spec.reclamation_penalty,
    )
    return (-merit, holder.priority, holder.sort_key())
