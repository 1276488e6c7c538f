"""Machines as providers report them (design §7): their states, capacity types, hosts and
notices, and what a provider call carries besides (its fencing token, a listing's filter, an
acknowledged transition)."""

from __future__ import annotations

from enum import StrEnum
from typing import Annotated

from pydantic import Field, field_validator, model_validator

from .base import INT32_MAX, Dollars, Name, Probability, Wire


class MachineState(StrEnum):
    """A machine's place in its life (design §5): offered (SPECULATIVE) through bound to a
    cluster (CONFIGURED), the transitional states between, and FAILED."""

    SPECULATIVE = "SPECULATIVE"
    CREATING = "CREATING"
    IDLE = "IDLE"
    CONFIGURING = "CONFIGURING"
    CONFIGURED = "CONFIGURED"
    DRAINING = "DRAINING"
    DELETING = "DELETING"
    FAILED = "FAILED"


class CapacityType(StrEnum):
    """How a machine is bought: on demand, spot (interruptible), reserved, or bare metal."""

    ON_DEMAND = "on-demand"
    SPOT = "spot"
    RESERVED = "reserved"
    BARE_METAL = "bare-metal"


class Transition(StrEnum):
    """The four lifecycle operations of design §5; each is one workflow in Temporal."""

    CREATE = "create"
    CONFIGURE = "configure"
    DRAIN = "drain"
    DELETE = "delete"


class Resources(Wire):
    """What a machine offers, or a need asks of one at least: CPUs, memory (GiB), GPUs."""

    cpu: Annotated[float, Field(ge=0, allow_inf_nan=False)] = 0.0
    memory_gib: Annotated[float, Field(ge=0, allow_inf_nan=False)] = 0.0
    gpu: Annotated[int, Field(ge=0, le=INT32_MAX)] = 0

    def covers(self, minimum: Resources) -> bool:
        return (
            self.cpu >= minimum.cpu
            and self.memory_gib >= minimum.memory_gib
            and self.gpu >= minimum.gpu
        )


class HostRef(Wire):
    """The real host behind a machine: its provider and the provider's own reference."""

    provider: Name
    ref: Name


class NoticeKind(StrEnum):
    """What a provider warns of before it happens (docs/operations.md, "Notices and repair").

    - `interruption`: the cloud takes the machine back at the deadline (EC2's spot
      interruption warning: two minutes).
    - `scheduled`: maintenance the provider will do to the machine at the deadline (EC2's
      scheduled change: a retirement, a reboot).
    - `rebalance`: the machine is at elevated risk (EC2's rebalance recommendation): no
      deadline; it is the first of its cluster to be replaced.
    - `unhealthy`: the provider's own health check says the machine is degraded (a BMC's
      `Status.Health` Warning): it is repaired (drained and replaced) within the cluster's
      `max_unhealthy`.
    """

    INTERRUPTION = "interruption"
    SCHEDULED = "scheduled"
    REBALANCE = "rebalance"
    UNHEALTHY = "unhealthy"


NOTICE_DETAIL_MAX = 120


class Notice(Wire):
    """A provider's warning about one machine: what, by when (unix seconds, 0 when it names
    no time), and its own words (clipped)."""

    kind: NoticeKind
    deadline_unix: Annotated[int, Field(ge=0, le=2**40)] = 0
    detail: Annotated[str, Field(max_length=NOTICE_DETAIL_MAX)] = ""

    @field_validator("detail", mode="before")
    @classmethod
    def _clipped(cls, value: object) -> object:
        """A provider's words are free text: a long one is cut, never the machine refused."""
        if isinstance(value, str) and len(value) > NOTICE_DETAIL_MAX:
            return value[: NOTICE_DETAIL_MAX - 1] + "…"
        return value


class Machine(Wire):
    """A machine as a provider reports it (design §7 `Machine`).

    BigFleet's extensions: `cluster`, the cluster a CONFIGURED or DRAINING machine is bound to,
    and `failed_from`, the transitional state a FAILED machine failed in, which picks its
    corrective path (design §7) for whoever reads the record, a restarted shard included.
    The seed's core invariant holds here: no host, no cluster. A FAILED machine may keep its
    host (a half-made instance still has to be cleaned up) or have none.
    """

    id: Name
    state: MachineState
    host: HostRef | None = None
    instance_type: Name
    zone: Name
    capacity_type: CapacityType
    price_per_hour: Dollars
    interruption_probability: Probability
    resources: Resources = Resources()
    labels: dict[str, str] = Field(default_factory=dict)
    transition_started_unix: Annotated[int, Field(ge=0)] = 0
    last_error: str = ""
    cluster: str | None = None
    failed_from: MachineState | None = None
    # (Left out of the JSON when none: a record's size is what every listing and saga pays.)
    notice: Notice | None = Field(default=None, exclude_if=lambda v: v is None)

    @model_validator(mode="after")
    def _no_host_no_cluster(self) -> Machine:
        if self.host is None and self.cluster:
            raise ValueError(
                f"machine {self.id}: cluster {self.cluster!r} set without a host "
                "(a machine must be bound to a real host before it is configured)"
            )
        if self.host is None and self.state in HOSTED_STATES:
            raise ValueError(f"machine {self.id}: state {self.state} requires a host")
        return self


HOSTED_STATES = frozenset(
    {
        MachineState.IDLE,
        MachineState.CONFIGURING,
        MachineState.CONFIGURED,
        MachineState.DRAINING,
        MachineState.DELETING,
    }
)


class TransitionAck(Wire):
    """A provider's answer to a lifecycle call: its operation and the machine as it is now."""

    operation_id: Name
    machine: Machine


class ListFilter(Wire):
    """Which machines a provider's listing returns (every field unset: all of them)."""

    states: list[MachineState] = Field(default_factory=list)
    zone: str = ""
    instance_type: str = ""
    max_results: Annotated[int, Field(ge=0, le=INT32_MAX)] = 0
    noticed: bool = False  # only machines with a notice (`Machine.notice`)


class FencingToken(Wire):
    """The shard's token on every provider call (design §11): a stale epoch is rejected."""

    shard_id: Annotated[int, Field(ge=0)]
    shard_epoch: Annotated[int, Field(ge=0)]
    seq: Annotated[int, Field(ge=0)]
