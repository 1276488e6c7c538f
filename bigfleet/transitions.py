"""What to do when a transition ends in FAILED (design §7), as a pure rule both the simulator's
executor and the Temporal transition workflows follow."""

from __future__ import annotations

from enum import StrEnum

from .models import CapacityType, MachineState

S = MachineState

# Machines one configure or drain workflow carries at most (a shard merges a cycle's
# configures of a need, and drains of a cluster with one grace and reason: workflows/actions.py
# `batched`); their ids stay within one Temporal search attribute value (activities/starter.py).
MAX_TRANSITION_BATCH = 32
# How often a configure is retried with a fresh bootstrap blob before the machine goes back to
# idle for a different use.
CONFIGURE_RETRIES = 1


class Corrective(StrEnum):
    CLEANUP = "cleanup"  # provider Delete of the half-made host; the slot returns to speculative
    MARK_BAD = "mark-bad"  # no Delete (bare metal): the slot is held FAILED and left alone
    RETRY_CONFIGURE = "retry-configure"  # fresh bootstrap blob, Configure again
    GIVE_UP = "give-up"  # forced drain back to idle, for a different use
    FORCE_DRAIN = "force-drain"  # grace exceeded: forced termination
    HOLD = "hold"  # a failed delete: held in FAILED for an operator


def corrective(
    failed_from: MachineState | None, capacity_type: CapacityType, configure_attempts: int = 0
) -> Corrective:
    """The corrective path for a machine that failed out of `failed_from`."""
    cloud = capacity_type is not CapacityType.BARE_METAL
    if failed_from is S.CREATING:
        return Corrective.CLEANUP if cloud else Corrective.MARK_BAD
    if failed_from is S.CONFIGURING:
        if configure_attempts <= CONFIGURE_RETRIES:
            return Corrective.RETRY_CONFIGURE
        return Corrective.GIVE_UP
    if failed_from is S.DRAINING:
        return Corrective.FORCE_DRAIN
    if failed_from is S.DELETING:
        return Corrective.HOLD
    # A running machine that died (spot interruption, found dead by health checks).
    return Corrective.CLEANUP if cloud else Corrective.HOLD
