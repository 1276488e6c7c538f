"""Roll-ups (design §8): a cluster's capacity needs, their node-selector requirements and
topology, the nodes its operator saw, and the shortfall a shard could not serve (design §9)."""

from __future__ import annotations

from enum import StrEnum
from typing import Annotated

from pydantic import Field, field_validator, model_validator

from .base import INT32_MAX, Count, Dollars, Int32, Name, Wire
from .budgets import Disruption
from .machines import Resources


class Operator(StrEnum):
    """A node-selector requirement's operator, as Kubernetes names it."""

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
    # At most 16 rules: a pod's constraints are a handful, and each rule costs every cycle.
    spread: list[TopologySpread] = Field(default_factory=list, max_length=16)
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


MAX_GENERATION = 2**53 - 1
"""The largest roll-up generation: the largest integer every JSON reader keeps exactly (a
roll-up crosses JSON at every hop, and JavaScript or jq round anything larger). A counter, unix
seconds or milliseconds fit; nanoseconds (`time.time_ns()`, about 2^60) do not, and neither does
anything near int64's limit. There is no limit on how far ahead of the last one a generation may
jump: an operator that moves from a counter to the clock jumps by 2^40 and is right to. But a
shard refuses one ahead of its clock (GENERATION_AHEAD_MS below: microseconds no longer fit),
since a generation this large would leave its cluster no room above it."""


GENERATION_AHEAD_MS = 3_600_000
"""How far ahead of the receiving shard's clock, in unix milliseconds, a generation may be (issue
44): a generation is a counter or a time (`bigfleet rollup send` uses unix ms), and one far ahead
of the clock would make every later roll-up of its cluster stale until the clock caught up —
2^53 - 1, never. So a shard refuses a roll-up whose generation is above now in ms + an hour
(room for clocks that disagree), naming `generation`. A counter, unix seconds or milliseconds
stay valid; microseconds or anything larger do not. A generation under the bound but still far
ahead of what its cluster sends (a counter jumped to the clock by mistake) is undone by an
operator: `bigfleet cluster NAME --reset-generation` (docs/operations.md)."""


def generation_ahead(generation: int, now: float) -> str | None:
    """Why a roll-up's `generation` is too far ahead of the clock `now` (unix seconds), or None."""
    bound = int(now * 1000) + GENERATION_AHEAD_MS
    if generation <= bound:
        return None
    return (
        f"generation: {generation} is ahead of the shard's clock: at most {bound} (now in unix "
        f"ms + {GENERATION_AHEAD_MS // 60_000} min); a counter, unix seconds or ms, not µs or ns"
    )


class ClusterCapacityNeeds(Wire):
    """A roll-up: all needs of one cluster, replacing the previous roll-up (design §8).

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
    """A need the shard could not serve from its own inventory (design §9)."""

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
    # Why no machine could ever serve it here, when the shard can tell: a `same` or spread key
    # that no machine of the shard carries ("" otherwise: only short of machines); or, with
    # `held_back`, which clusters hold back what it waits on.
    why: str = Field(default="", max_length=400)
    # Of `count`, machines it preempted that their clusters' do-not-disrupt marks or budgets
    # hold back (bigfleet/disruption.py): it waits on them, and another shard may serve it.
    held_back: Count = 0
