"""A simulated bare-metal fleet (design §7 "Bare-metal providers"): racks of owned machines.

Every machine of a rack is SPECULATIVE until claimed; Create claims it in about a second if the
rack is commissioned, or after commissioning (firmware, OS, burn-in: hours) if not. There is no
Delete: bare metal stays in inventory, and an idle machine is simply reused.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from typing import Annotated

from pydantic import Field

from ... import labels
from ...models import (
    CapacityType,
    Count,
    Dollars,
    FencingToken,
    MachineState,
    Name,
    Resources,
    Transition,
    TransitionAck,
    Wire,
)
from ..base import NotSupported, slot_id
from .provider import SimulatedProvider
from .slots import Pool, Slot

CLAIM_SECONDS = 1.0
"""Create on a commissioned rack: bookkeeping in the provider, nothing boots."""


class RackSpec(Wire):
    """One rack of owned machines: where it is, what its machines are, and whether it is
    commissioned."""

    rack: Name
    zone: Name
    region: Name | None = None  # defaults to the zone without its last part: ams-1 -> ams
    instance_type: Name
    count: Count
    price_per_hour: Dollars = 0.0  # owned hardware; an amortised cost if the operator wants one
    commissioned: bool = True
    commissioning_seconds: Annotated[float, Field(gt=0, allow_inf_nan=False)] = 4 * 3600.0
    resources: Resources = Resources()
    arch: Name = "amd64"


class SimulatedBareMetalProvider(SimulatedProvider):
    """Racks as pools of slots; a failed create is held for a human, as nothing can delete it."""

    supports_delete = False  # what Describe says (bigfleet/edge/provider_server.py)

    def __init__(
        self,
        name: str,
        racks: list[RackSpec],
        clock: Callable[[], float],
        seed: int,
        *,
        configure_latency: float = 120.0,
        drain_latency: float = 60.0,
        timeouts: Mapping[MachineState, float] | None = None,
        failure_rates: Mapping[Transition, float] | Mapping[str, float] | None = None,
    ) -> None:
        super().__init__(
            name,
            clock,
            seed,
            configure_latency=configure_latency,
            delete_latency=0.0,  # never used: delete is refused before anything starts
            drain_latency=drain_latency,
            timeouts=timeouts,
            failure_rates=failure_rates,
        )
        seen: set[str] = set()
        for spec in racks:
            if spec.rack in seen:
                raise ValueError(f"provider {name}: rack {spec.rack} listed twice")
            seen.add(spec.rack)
            pool = self._pool(spec)
            self._slots.resize(pool, spec.count)

    def delete(self, machine_id: str, token: FencingToken, *, key: str = "") -> TransitionAck:
        """Always NotSupported: bare metal stays in inventory."""
        self.calls["delete"] += 1
        raise NotSupported(
            self.name,
            "delete",
            f"bare metal stays in inventory; idle machine {machine_id} is reused, not released",
        )

    def _new_host_ref(self, slot: Slot) -> str:
        # A serial number: the same physical box every time this slot is claimed.
        return slot_id(slot.pool.key, f"sn{slot.index:05d}")

    def _pool(self, spec: RackSpec) -> Pool:
        claim = CLAIM_SECONDS if spec.commissioned else spec.commissioning_seconds
        return Pool(
            key=spec.rack,
            id_prefix=slot_id(self.name, spec.rack),
            instance_type=spec.instance_type,
            zone=spec.zone,
            capacity_type=CapacityType.BARE_METAL,
            price_per_hour=spec.price_per_hour,
            interruption_probability=0.0,
            resources=spec.resources,
            labels=labels.rack_labels(self.name, spec),
            quota=spec.count,
            create_latency=(claim, claim),
            # Commissioning is slow by design, not stuck: the CREATING timeout starts after it.
            create_allowance=0.0 if spec.commissioned else spec.commissioning_seconds,
        )
