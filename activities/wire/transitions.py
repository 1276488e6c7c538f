"""What crosses to and from a machine transition workflow (workflows/transition.py): its task
queue, its workflow id, its input and the result it sends its shard."""

from __future__ import annotations

from typing import Any

from pydantic import Field, SerializerFunctionWrapHandler, model_serializer

from bigfleet.models import FencingToken, Machine, NodeSelectorRequirement, Transition

from .base import Model
from .providers import MachinePage

TRANSITION_TASK_QUEUE = "bigfleet-transitions"
WORKFLOW_ID_BYTES = 1000  # Temporal refuses a longer workflow id (`limit.maxIDLength`)
ID_WHERE_BYTES = 100  # of a batch's cluster (or provider) name in its workflow id, at most


def _clip(text: str, limit: int) -> str:
    """`text` cut to at most `limit` UTF-8 bytes (on a character boundary)."""
    return text.encode()[: max(limit, 0)].decode(errors="ignore")


def transition_workflow_id(t: TransitionInput) -> str:
    """Same machines, same transition, same operation: the same workflow (design §7
    idempotency), so a retried start finds the workflow it started. The shard's epoch is part
    of the operation: a shard started from scratch never attaches to an earlier incarnation's
    workflow.

    One machine: `machine-<machine>-<transition>-<epoch>-<seq>`. A batch (one workflow
    carrying several machines) says what it is: `batch-<transition>-<cluster>-<first
    machine>-x<count>-<epoch>-<seq>` (a delete's, which has no cluster: its provider's name;
    the name clipped to ID_WHERE_BYTES). A batch decided before batches were named
    (`batch_name` false) keeps the first machine's name, as it was started then."""
    first = t.machine_ids[0]
    op = f"{t.transition.value}-{t.token.shard_epoch}-{t.token.seq}"
    if len(t.machine_ids) == 1 or not t.batch_name:
        return f"machine-{first}-{op}"
    head = f"batch-{t.transition.value}-{_clip(t.cluster or t.provider, ID_WHERE_BYTES)}-"
    tail = f"-x{len(t.machine_ids)}-{t.token.shard_epoch}-{t.token.seq}"
    return head + _clip(first, WORKFLOW_ID_BYTES - len(head.encode()) - len(tail.encode())) + tail



class TransitionInput(Model):
    """One machine transition (or one batched create of up to 64 machines)."""

    shard: int
    transition: Transition
    machine_ids: list[str]
    provider: str
    capacity_type: str
    token: FencingToken
    cluster: str | None = None
    need: str | None = None
    priority: int = 0
    requirements: list[NodeSelectorRequirement] = Field(default_factory=list)
    grace_seconds: float = 0.0
    force: bool = False
    reason: str | None = None
    timeout_seconds: float = 900.0
    poll_seconds: float = 5.0
    # Its workflow id, when it carries several machines, names the batch (`batch-…`,
    # `transition_workflow_id`). False in inputs decided before (a shard's pipeline, a start
    # retried across the upgrade): the id they were or would have been started with, after
    # their first machine, so the same operation is still the same workflow.
    batch_name: bool = False


class FenceRefusal(Model):
    """A provider's refusal of a call as stale (StaleFencingToken): the epoch presented and
    the one the provider keeps for the shard."""

    provider: str
    presented: int
    kept: int


class TransitionResult(Model):
    """What a transition workflow sends its shard: the machines as they came out of it, and
    what went wrong with them (corrective paths, a refused bootstrap, capacity no longer
    offered)."""

    transition: Transition
    machines: list[Machine]
    corrective: list[str] = Field(default_factory=list)
    refused: str | None = None
    # A create the provider refused for want of capacity or quota (QuotaExhausted, e.g. EC2's
    # InsufficientInstanceCapacity): the machines it no longer offers. The shard lets go of
    # them (design §7: "marks the quota slot bad"); the provider's listing brings them back when
    # it offers them again. `refused` is the operator's refusal to bootstrap; this is not.
    unavailable: list[str] = Field(default_factory=list)
    # The machines as a MachinePage instead (a quarter of the bytes: 64 created machines are
    # ~27 KB as records, ~7 KB as a page), as transition workflows tell their shard: at fleet
    # scale these results are most of a shard's history. `machines` is then empty.
    page: MachinePage | None = None
    # Echoed from the input: what a created machine is to be configured for next.
    cluster: str | None = None
    need: str | None = None
    priority: int = 0
    requirements: list[NodeSelectorRequirement] = Field(default_factory=list)
    # The provider refused the call as stale (issue 44): what the shard needs to supersede
    # the epoch it keeps (workflows/shard_fences.py). Present only then.
    fenced: FenceRefusal | None = None

    @model_serializer(mode="wrap")
    def _present(self, handler: SerializerFunctionWrapHandler) -> dict[str, Any]:
        """`fenced` only when set: a result's JSON is as it was before (snapshots' bytes)."""
        data: dict[str, Any] = handler(self)
        if data.get("fenced", 0) is None:
            del data["fenced"]
        return data

