"""What the engine decides and asks (design §5, §13): its actions on machines with their
reasons, and the bootstrap a configure asks of a cluster's operator."""

from __future__ import annotations

from enum import StrEnum
from typing import Annotated, Literal

from pydantic import Field

from .base import INT32_MAX, Int32, Name, Wire
from .rollups import NodeSelectorRequirement


class BootstrapRequest(Wire):
    """What a configure asks of a cluster's operator: the bootstrap of one machine."""

    cluster: Name
    machine_id: Name
    requirements: list[NodeSelectorRequirement] = Field(default_factory=list)
    labels: dict[str, str] = Field(default_factory=dict)


class BootstrapBlob(Wire):
    """The operator's bootstrap: the machine's user data, good for `ttl_seconds`."""

    user_data: bytes
    ttl_seconds: Annotated[int, Field(gt=0, le=INT32_MAX)]


class DrainReason(StrEnum):
    """Why the engine drains a machine."""

    PREEMPT = "preempt"
    EXCESS = "excess"
    UNHEALTHY = "unhealthy"
    TRANSFER = "transfer"
    FAILED = "failed"
    DECOMMISSION = "decommission"
    NOTICE = "notice"  # the provider warned it will take the machine (`Notice`)


class DeleteReason(StrEnum):
    """Why the engine gives a machine back to its provider."""

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
    """Configure an idle machine for `cluster` (for one of its needs, if `need` is set)."""

    kind: Literal["configure"] = "configure"
    provider: str
    machine_id: str
    cluster: str
    need: str | None = None
    requirements: list[NodeSelectorRequirement] = Field(default_factory=list)
    priority: Int32 = 0


class DrainAction(Wire):
    """Drain a machine of its cluster within `grace_seconds`; a preemption also names the
    cluster and priority it makes room for."""

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
    """Give a machine back to its provider."""

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
