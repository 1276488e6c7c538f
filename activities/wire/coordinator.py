"""What crosses to and from the coordinator workflow (workflows/coordinator.py): its id and
input, its instructions to shards, its transfer and membership sagas, drain escalations, and
its term as an activity sees it."""

from __future__ import annotations

from typing import Annotated, Any, Literal

from pydantic import Field

from bigfleet.coordinator import MAX_SHARE, MembershipThresholds
from bigfleet.decommission import DecommissionRequest as DecommissionRequest
from bigfleet.models import Machine
from bigfleet.pooling.bounds import IDLE_SHARE
from bigfleet.pooling.pace import STEP_WORK

from .base import Model

COORDINATOR_ID = "coordinator"  # the coordinator's workflow id (one per namespace)


class Instruction(Model):
    """A coordinator instruction, fenced by (coordinator_term, seq) (design §11)."""

    term: int
    seq: int
    machine_ids: list[str] = Field(default_factory=list)
    machines: list[Machine] = Field(default_factory=list)
    grace_seconds: float = 600.0
    limit: int = 0  # hand_out: how many machine records at most
    # A saga's compensation giving a shard back its own machines: accepted from any term.
    compensation: bool = False
    # `cluster_mode` (bigfleet/cluster_modes.py): the cluster, its new mode, and whether this
    # shard takes back its machines (the cluster's shard, when it becomes managed).
    cluster: Annotated[str, Field(min_length=1, max_length=253)] | None = None
    mode: Literal["managed", "unmanaged", "shadow"] | None = None
    adopt: bool = False


class SplitInstruction(Model):
    """Let `fraction` of the shard's clusters and machines go to shard `to` (1.0: a merge)."""

    term: int
    seq: int
    to: int
    fraction: float = Field(default=0.5, gt=0, le=1)


class TakeIn(Model):
    """A part of a split or merge for the receiving shard (or back to the donor)."""

    term: int
    seq: int
    needs: list[dict[str, Any]] = Field(default_factory=list)
    machines: list[Machine] = Field(default_factory=list)
    last: bool = False
    # A merge's last part: the shard numbers whose share of new capacity the receiver takes.
    inherit: list[int] = Field(default_factory=list)


class ShardCall(Model):
    """One saga step: an update (or a query) on a shard workflow."""

    shard: int
    update: str
    instruction: Instruction | SplitInstruction | TakeIn


class SagaInput(Model):
    """Move machines between shards (design §9): idle, speculative, or preempted and drained."""

    kind: str
    donor: int
    receiver: int
    machine_ids: list[str]
    term: int
    seqs: list[int]
    priority: int = 0
    grace_seconds: float = 0.0
    drain_timeout_seconds: float = 4 * 3600.0
    poll_seconds: float = 10.0
    # A decommission (receiver -1) of configured machines drains them first.
    drain: bool = False


class SagaResult(Model):
    """How a transfer saga ended: the machines moved, those its compensation gave back, and
    those it could not."""

    moved: list[str] = Field(default_factory=list)
    compensated: list[str] = Field(default_factory=list)
    # Machines a compensation could not return (refused): for a human, named in the logs.
    orphaned: list[str] = Field(default_factory=list)
    failed_step: str | None = None
    error: str | None = None


class MembershipInput(Model):
    """A shard split (`into` is the new shard) or merge (`donor` retires into `into`), run as a
    saga with seqs `seq`, `seq + 1`, … of coordinator term `term` (design §16)."""

    kind: str  # "split" | "merge"
    donor: int
    into: int
    term: int
    seq: int
    fraction: float = 0.5
    chunk: int = 200  # machine records per step: far below Temporal's 2 MB payload limit
    poll_seconds: float = 10.0
    settle_timeout_seconds: float = 4 * 3600.0


class MembershipResult(Model):
    """How a split or merge ended: the clusters and machines it moved, and whether the donor
    retired."""

    kind: str
    donor: int
    into: int
    clusters: list[str] = Field(default_factory=list)
    machines: int = 0
    returned: int = 0
    retired: bool = False
    failed_step: str | None = None
    error: str | None = None


class CoordinatorInput(Model):
    """The coordinator workflow's input: the shard count, its cadences and bounds, and its
    state across continue-as-new."""

    shards: int
    # The most a round (or one decommission saga) asks of a shard; shards refuse more anyway.
    max_share: float = Field(default=MAX_SHARE, gt=0, le=1)
    # The same for hand-overs of idle or speculative machines, which disrupt nothing
    # (bigfleet/pooling/bounds.py; issue 45).
    idle_share: float = Field(default=IDLE_SHARE, gt=0, le=1)
    membership: MembershipThresholds = Field(default_factory=MembershipThresholds)
    membership_chunk: int = 200
    plan_seconds: float = 30.0
    missing_after_seconds: float = 30.0
    max_rounds_per_run: int = 500
    # A preemption drain that blocks an escalated shortfall is escalated to this grace, the
    # floor: no workload is given less by it (bigfleet/blocked.py).
    drain_floor_seconds: float = Field(default=60.0, ge=0)
    # Work a step of a round's plan, each step its own workflow task (bigfleet/pooling/pace.py;
    # the default keeps a step of a 100-shard round near 0.3 s of a quiet core).
    plan_step_work: int = Field(default=STEP_WORK, ge=1)
    state: dict[str, Any] | None = None


class EscalateDrains(Model):
    """The running drain workflows of these machines are escalated to `grace_seconds`."""

    machine_ids: list[str] = Field(max_length=4096)
    grace_seconds: float = Field(ge=0)


class CoordinatorTerm(Model):
    """What the `coordinator_term` activity saw: whether a coordinator runs, and its term (0
    while its first workflow task has not run yet)."""

    running: bool
    term: int = 0
