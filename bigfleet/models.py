"""Wire models: what crosses a boundary (roll-ups, provider replies, engine actions).

Field names follow the seed (§5, §7, §8, §9, §13). Every model is strict: a wrong type, an unknown
field or an out-of-range number is rejected with a pydantic error that names the field.
"""

from __future__ import annotations

import json
from collections.abc import Callable
from enum import StrEnum
from typing import Annotated, Any, Literal, TypeVar

from pydantic import (
    AfterValidator,
    BaseModel,
    ConfigDict,
    Field,
    field_validator,
    model_validator,
)

INT32_MIN = -(2**31)
INT32_MAX = 2**31 - 1

Int32 = Annotated[int, Field(ge=INT32_MIN, le=INT32_MAX)]
Count = Annotated[int, Field(ge=0, le=INT32_MAX)]
Dollars = Annotated[float, Field(ge=0, allow_inf_nan=False)]
Probability = Annotated[float, Field(ge=0, le=1, allow_inf_nan=False)]
Name = Annotated[str, Field(min_length=1, max_length=253)]


class Wire(BaseModel):
    """Base of every wire model: strict types, unknown fields rejected, immutable."""

    model_config = ConfigDict(strict=True, extra="forbid", frozen=True)


W = TypeVar("W", bound=BaseModel)


def from_wire(model: type[W], raw: Any) -> W:
    """Validate data from outside (a decoded signal, YAML, a provider reply) as its JSON form:
    enums arrive as their string values, but every type stays strict ("5" is not a count)."""
    try:
        text = json.dumps(raw)
    except (TypeError, ValueError) as err:
        raise ValueError(f"{model.__name__}: not JSON-shaped data: {err}") from None
    return model.model_validate_json(text)


def stamper(model: W, field: str) -> Callable[[Any], W]:
    """Copies of a validated model that differ only in `field`, one per call: how the engine
    stamps one validated action for each machine it names. The copies share one set of the
    fields set (a frozen model never changes it), so a copy costs a dict copy and four slot
    writes."""
    if not model.model_config.get("frozen"):
        raise TypeError(f"{type(model).__name__}: only a frozen model's copies may share state")
    cls, values = type(model), model.__dict__
    fields_set = model.__pydantic_fields_set__ | {field}
    new, write = object.__new__, object.__setattr__

    def stamp(value: Any) -> W:
        copy = new(cls)
        mine = values.copy()
        mine[field] = value
        write(copy, "__dict__", mine)
        write(copy, "__pydantic_fields_set__", fields_set)
        write(copy, "__pydantic_extra__", None)
        write(copy, "__pydantic_private__", None)
        return copy

    return stamp


class MachineState(StrEnum):
    SPECULATIVE = "SPECULATIVE"
    CREATING = "CREATING"
    IDLE = "IDLE"
    CONFIGURING = "CONFIGURING"
    CONFIGURED = "CONFIGURED"
    DRAINING = "DRAINING"
    DELETING = "DELETING"
    FAILED = "FAILED"


class CapacityType(StrEnum):
    ON_DEMAND = "on-demand"
    SPOT = "spot"
    RESERVED = "reserved"
    BARE_METAL = "bare-metal"


class Transition(StrEnum):
    """The four lifecycle operations of seed §5; each is one workflow in Temporal."""

    CREATE = "create"
    CONFIGURE = "configure"
    DRAIN = "drain"
    DELETE = "delete"


class Resources(Wire):
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
    """A machine as a provider reports it (seed §7 `Machine`).

    BigFleet's extensions: `cluster`, the cluster a CONFIGURED or DRAINING machine is bound to,
    and `failed_from`, the transitional state a FAILED machine failed in, which picks its
    corrective path (seed §7) for whoever reads the record, a restarted shard included.
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
    operation_id: Name
    machine: Machine


class ListFilter(Wire):
    states: list[MachineState] = Field(default_factory=list)
    zone: str = ""
    instance_type: str = ""
    max_results: Annotated[int, Field(ge=0, le=INT32_MAX)] = 0
    noticed: bool = False  # only machines with a notice (`Machine.notice`)


class FencingToken(Wire):
    """The shard's token on every provider call (seed §11): a stale epoch is rejected."""

    shard_id: Annotated[int, Field(ge=0)]
    shard_epoch: Annotated[int, Field(ge=0)]
    seq: Annotated[int, Field(ge=0)]


class Operator(StrEnum):
    IN = "In"
    NOT_IN = "NotIn"
    EXISTS = "Exists"
    DOES_NOT_EXIST = "DoesNotExist"
    GT = "Gt"
    LT = "Lt"


class NodeSelectorRequirement(Wire):
    """A Kubernetes `NodeSelectorRequirement`, validated as the API server would."""

    key: Name
    operator: Operator
    values: list[str] = Field(default_factory=list)

    @model_validator(mode="after")
    def _values_fit_operator(self) -> NodeSelectorRequirement:
        op = self.operator
        if op in (Operator.IN, Operator.NOT_IN) and not self.values:
            raise ValueError(f"values: operator {op} needs at least one value")
        if op in (Operator.EXISTS, Operator.DOES_NOT_EXIST) and self.values:
            raise ValueError(f"values: operator {op} takes no values")
        if op in (Operator.GT, Operator.LT):
            if len(self.values) != 1:
                raise ValueError(f"values: operator {op} takes exactly one integer value")
            try:
                int(self.values[0])
            except ValueError:
                raise ValueError(
                    f"values: operator {op} needs an integer, got {self.values[0]!r}"
                ) from None
        return self


class TopologySpread(Wire):
    """Spread the need's machines over the domains of `key`, at most `max_skew` apart."""

    key: Name
    max_skew: Annotated[int, Field(ge=1, le=INT32_MAX)] = 1


class CapacityNeed(Wire):
    """One entry of a roll-up: `count` machines matching `requirements`, at `priority`."""

    requirements: list[NodeSelectorRequirement] = Field(default_factory=list)
    resources: Resources = Resources()
    priority: Int32
    count: Count
    same: str | None = Field(
        default=None,
        description="Topology key whose single domain must hold all machines (e.g. a rack).",
    )
    spread: list[TopologySpread] = Field(default_factory=list)
    interruption_penalty: Dollars = 0.0
    reclamation_penalty: Dollars = 0.0
    drain_seconds: Annotated[float, Field(gt=0, allow_inf_nan=False)] | None = None

    @field_validator("same")
    @classmethod
    def _same_is_a_key(cls, value: str | None) -> str | None:
        if value is not None and not value:
            raise ValueError("same: must be a label key, not empty")
        return value


class NodeHealth(Wire):
    """What the operator saw of the cluster's nodes: the machine ids present and Ready."""

    machine_ids: list[str] = Field(default_factory=list)


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
            from .schedule import Cron  # (stdlib only: no cycle)

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


MAX_GENERATION = 2**53 - 1
"""The largest roll-up generation: the largest integer every JSON reader keeps exactly (a
roll-up crosses JSON at every hop, and JavaScript or jq round anything larger). A counter, unix
seconds, milliseconds (until the year 287 396) or microseconds (until 2255) fit; nanoseconds
(`time.time_ns()`, about 2^60) do not, and neither does anything near int64's limit. There is
no limit on how far ahead of the last one a generation may jump: an operator that moves from a
counter to the clock jumps by 2^40 and is right to. A generation is refused only when it could
never be followed: one this large would leave its cluster no room above it."""


class ClusterCapacityNeeds(Wire):
    """A roll-up: all needs of one cluster, replacing the previous roll-up (seed §8).

    `generation` rises with each roll-up the operator sends, from 0 to MAX_GENERATION; an older
    or repeated one changes nothing but the cluster's last-seen time (bigfleet/needs.py).
    """

    cluster: Name
    generation: Annotated[int, Field(ge=0)]
    needs: list[CapacityNeed] = Field(default_factory=list)
    health: NodeHealth | None = None
    disruption: Disruption | None = None

    @field_validator("generation")
    @classmethod
    def _generation_fits(cls, value: int) -> int:
        if value > MAX_GENERATION:
            raise ValueError(
                f"at most {MAX_GENERATION} (2^53 - 1: a counter or unix ms, not ns), got {value}"
            )
        return value


class Shortfall(Wire):
    """A need the shard could not serve from its own inventory (seed §9)."""

    cluster: str
    profile: str
    requirements: list[NodeSelectorRequirement] = Field(default_factory=list)
    priority: Int32
    count: Count
    age: Annotated[int, Field(ge=0)]
    interruption_penalty: Dollars = 0.0
    escalated: bool = False
    same: str | None = None  # a topology-confined need: never resolved across shards
    # Not a lack of machines: the cluster's repair is held (bigfleet/notices.py), for a human.
    repair_held: bool = False
    # The preemption drains the need has waited on too long (bigfleet/blocked.py): the
    # coordinator may shorten their grace once the shortfall is escalated.
    blocked_drains: list[str] = Field(default_factory=list, max_length=64)


class BootstrapRequest(Wire):
    cluster: Name
    machine_id: Name
    requirements: list[NodeSelectorRequirement] = Field(default_factory=list)
    labels: dict[str, str] = Field(default_factory=dict)


class BootstrapBlob(Wire):
    user_data: bytes
    ttl_seconds: Annotated[int, Field(gt=0, le=INT32_MAX)]


class DrainReason(StrEnum):
    PREEMPT = "preempt"
    EXCESS = "excess"
    UNHEALTHY = "unhealthy"
    TRANSFER = "transfer"
    FAILED = "failed"
    DECOMMISSION = "decommission"
    NOTICE = "notice"  # the provider warned it will take the machine (`Notice`)


class DeleteReason(StrEnum):
    IDLE_TIMEOUT = "idle-timeout"
    FAILED = "failed"
    UNHEALTHY = "unhealthy"
    DECOMMISSION = "decommission"
    NOTICE = "notice"


class CreateAction(Wire):
    """Create a batch of speculative machines of one provider (≤ 64 per call).

    `cluster` is set when the machines are provisioned for a need: the pipeline configures them
    for that cluster once they are idle (the seed's `provisionAndBootstrap`).
    """

    kind: Literal["create"] = "create"
    provider: str
    machine_ids: list[str]
    cluster: str | None = None
    need: str | None = None
    requirements: list[NodeSelectorRequirement] = Field(default_factory=list)
    priority: Int32 = 0


class ConfigureAction(Wire):
    kind: Literal["configure"] = "configure"
    provider: str
    machine_id: str
    cluster: str
    need: str | None = None
    requirements: list[NodeSelectorRequirement] = Field(default_factory=list)
    priority: Int32 = 0


class DrainAction(Wire):
    kind: Literal["drain"] = "drain"
    provider: str
    machine_id: str
    cluster: str
    grace_seconds: Annotated[float, Field(ge=0, allow_inf_nan=False)]
    reason: DrainReason
    preemptor_cluster: str | None = None
    preemptor_priority: Int32 | None = None
    victim_priority: Int32 | None = None
    force: bool = False


class DeleteAction(Wire):
    kind: Literal["delete"] = "delete"
    provider: str
    machine_id: str
    reason: DeleteReason


class VerifyAction(Wire):
    """Ask the provider (`Get`) whether a machine the cluster stopped reporting is alive."""

    kind: Literal["verify"] = "verify"
    provider: str
    machine_id: str
    cluster: str


Action = CreateAction | ConfigureAction | DrainAction | DeleteAction | VerifyAction
