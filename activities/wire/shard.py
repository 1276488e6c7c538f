"""What crosses to a shard workflow (workflows/shard.py): its task queue, id and task timeout,
its configuration, and its input across continue-as-new (its state inline or in the snapshot
store, the transitions and signals it carries on)."""

from __future__ import annotations

from datetime import timedelta
from typing import Annotated, Any, Literal

from pydantic import ConfigDict, Field

from bigfleet.cluster_modes import MAX_UNMANAGED
from bigfleet.coordinator import MAX_SHARE
from bigfleet.deployment import MAX_TASK_TIMEOUT_SECONDS, SHARD_TASK_TIMEOUT_SECONDS
from bigfleet.pooling.bounds import IDLE_SHARE
from bigfleet.shard_state import ShardState
from bigfleet.snapshot import INLINE_BYTES
from bigfleet.transitions import MAX_TRANSITION_BATCH

from .base import Model
from .transitions import TransitionInput, TransitionResult

SHARD_TASK_QUEUE = "bigfleet-shards"
# A build of the shard workers (`bigfleet worker --build NAME`, `bigfleet rollout`; docs/
# rollout.md) polls a task queue of its own; the unnamed build polls SHARD_TASK_QUEUE.
BUILD_PATTERN = r"^[A-Za-z0-9][A-Za-z0-9._-]{0,62}$"


def build_queue(build: str = "") -> str:
    """The shard task queue a build's workers poll ("": the default build's)."""
    return f"{SHARD_TASK_QUEUE}@{build}" if build else SHARD_TASK_QUEUE


def queue_build(queue: str) -> str:
    """The build whose workers poll `queue` ("": the default build)."""
    return queue.partition("@")[2]
# A shard's workflow task timeout by default (`ShardConfig.task_timeout_seconds`; Temporal's
# default is 10 s, its most 120 s). A worker that lost the shard from its cache replays the
# run's history in one task: at 100 000 machines a run holds seconds of decisions, and a replay
# cut off at 10 s is retried from the start, forever.
SHARD_TASK_TIMEOUT = timedelta(seconds=SHARD_TASK_TIMEOUT_SECONDS)


def shard_workflow_id(shard: int) -> str:
    """A shard's workflow id: `shard-<number>`."""
    return f"shard-{shard}"



def shard_task_timeout(config: ShardConfig) -> timedelta:
    """The task timeout a shard workflow is started with (a continue-as-new or a reset keeps
    its run's)."""
    return timedelta(seconds=config.task_timeout_seconds)


class ShardConfig(Model):
    """A shard workflow's settings: its providers, cadences and policy, and the bounds that
    keep its workflow tasks and history small."""

    # A policy may say "never" (`.inf`: an idle or transition timeout); JSON has no infinity,
    # and pydantic writes one as null by default, which the shard's `Policy` then refuses
    # (every shard would fail its first workflow task). Written as `Infinity`, read back.
    model_config = ConfigDict(extra="forbid", ser_json_inf_nan="constants")

    shard: int
    shards: int = 1
    providers: list[str]
    cycle_seconds: float = 10.0
    report_seconds: float = 30.0
    reconcile_seconds: float = 30.0
    # A machine failed for its transition's time is read back from its provider (at a
    # reconcile) if no result of that transition came back within this (it was lost).
    unstick_seconds: float = Field(default=600.0, ge=0)
    # Each provider is asked for its machines under a notice (`Machine.notice`) this often: a
    # spot interruption warning comes 2 minutes ahead (bigfleet/notices.py).
    notice_seconds: float = Field(default=10.0, gt=0)
    max_cycles_per_run: int = 500
    policy: dict[str, Any] = Field(default_factory=dict)
    transition_poll_seconds: float = 5.0
    # Transition workflows started in one cycle at most; the rest start in the next cycles
    # (workflows/outbox.py: a workflow task's commands stay far below gRPC's 4 MB).
    max_starts_per_cycle: int = Field(default=2000, ge=1)
    # Transition workflows of the shard running at once, at most (workflows/outbox.py); the
    # rest wait in the pipeline until results come back.
    max_in_flight: int = Field(default=1000, ge=1)
    # Machines one configure workflow carries at most: configures of one need on one provider
    # in a cycle are merged, each machine still with its own bootstrap and provider call (a
    # Temporal server's work grows with workflows; 1 = a workflow per machine, as before).
    configure_batch: int = Field(default=MAX_TRANSITION_BATCH, ge=1, le=MAX_TRANSITION_BATCH)
    # The shard workflow's task timeout (`shard_task_timeout`): long enough to replay a run
    # (docs/temporal.md, "Bounded workflow tasks"); a worker killed mid-task leaves the shard
    # waiting this long.
    task_timeout_seconds: float = Field(
        default=SHARD_TASK_TIMEOUT_SECONDS, ge=1, le=MAX_TASK_TIMEOUT_SECONDS
    )
    # The same for drains of one cluster with one grace and reason. `escalate_drain` (and
    # `bigfleet drain escalate <machine>`) escalates a drain workflow: every machine of it.
    drain_batch: int = Field(default=MAX_TRANSITION_BATCH, ge=1, le=MAX_TRANSITION_BATCH)
    # And deletes of one provider with one reason, a delete call per machine (runs whose cycle
    # never waits, workflows/outbox.py; before, a workflow per machine: 34 history events each).
    delete_batch: int = Field(default=MAX_TRANSITION_BATCH, ge=1, le=MAX_TRANSITION_BATCH)
    # Machine records of transition results folded in at most, a cycle (~50 µs each: 70 000
    # creates coming back at once would hold one workflow task for seconds); the rest wait.
    fold_per_cycle: int = Field(default=10_000, ge=1)
    # Coordinator instructions taking more than this share of the shard's machines are refused.
    max_share: float = Field(default=MAX_SHARE, gt=0, le=1)
    # Releases of idle or speculative machines (hand-overs that disrupt nothing) have their
    # own, larger share (bigfleet/pooling/bounds.py; issue 45).
    idle_share: float = Field(default=IDLE_SHARE, gt=0, le=1)
    # State larger than this crosses continue-as-new through the snapshot store, in parts of
    # `snapshot_part_bytes` (under the 600 KB payload limit BigFleet sets its Temporal server to).
    snapshot_inline_bytes: int = Field(default=INLINE_BYTES, ge=1)
    snapshot_part_bytes: int = Field(default=INLINE_BYTES, ge=1)
    # Parts moved in one workflow task at most, in bytes (its commands or the results it
    # reads travel in one gRPC message, refused over 4 MB).
    snapshot_wave_bytes: int = Field(default=1_600_000, ge=1)
    # Adopting a fleet's machines at a fresh start: past this much history the shard continues
    # as new and adopts the rest in the next run (each machine listed costs ~90 bytes of history
    # and ~100 µs whenever the run is replayed: a worker that lost it from its cache replays the
    # whole run in one workflow task). An adoption that wrote more than `adopted_continue_bytes`
    # continues as new before the first cycle, so no deciding run replays an adoption.
    adopt_history_bytes: int = Field(default=5_000_000, ge=1)
    adopted_continue_bytes: int = Field(default=2_000_000, ge=1)
    # A run continues as new once its cycles have decided over this many machines in all (the
    # sum of its inventory's size over its cycles): ~2 µs each when the run is replayed, so a
    # replay stays far below SHARD_TASK_TIMEOUT (at 100 000 machines: 100 cycles a run).
    replay_machine_cycles: int = Field(default=10_000_000, ge=1)
    # Shadow mode (docs/shadow.md): decide every cycle, call no mutating provider or operator
    # method, and record would-be against actual (`shadow_report`).
    shadow: bool = False
    # Clusters whose machines and roll-ups the shard leaves alone (bigfleet/cluster_modes.py).
    unmanaged: list[Annotated[str, Field(min_length=1, max_length=253)]] = Field(
        default_factory=list, max_length=MAX_UNMANAGED
    )
    # Record what it accepts, holds and decides (workflows/shard_record.py, activities/
    # recording.py; off by default).
    record: bool = False
    # Clusters left alone as those are, whose roll-ups it takes and decides on without acting
    # (bigfleet/shadow_clusters.py).
    shadow_clusters: list[Annotated[str, Field(min_length=1, max_length=253)]] = Field(
        default_factory=list, max_length=MAX_UNMANAGED
    )


class AdoptCursor(Model):
    """Where a fresh shard's adoption goes on: after machine `after` of provider number
    `provider` in its config."""

    provider: int
    after: str


class SnapshotRef(Model):
    """Where a shard's state went when it was too large for one payload (the claim check)."""

    key: str
    parts: int
    size: int
    sha256: str
    # How the parts hold the state: its JSON, or ("zlib") the JSON compressed, in base64.
    # `size` and `sha256` are of what the parts hold.
    encoding: Literal["json", "zlib"] = "json"


class SnapshotPart(Model):
    """One part of what a SnapshotRef points to, in the snapshot store."""

    key: str
    part: int
    data: str


class ShardInput(Model):
    """A shard workflow's input: its config and, across continue-as-new or a revival, its state
    and what it carries on."""

    config: ShardConfig
    # The last run's state, when small enough to travel inline (JSON: its dict as before).
    state: ShardState | None = None
    # The state in the snapshot store instead, when it is larger than `snapshot_inline_bytes`.
    snapshot: SnapshotRef | None = None
    # Carried across continue-as-new: transitions decided but not yet started.
    pipeline: list[TransitionInput] = Field(default_factory=list)
    # Signals that arrived while the state was being written to the snapshot store.
    rollups: list[dict[str, Any]] = Field(default_factory=list)
    results: list[TransitionResult] = Field(default_factory=list)
    # Those too, in the snapshot store, when too many to travel inline ({"results": [...],
    # "rollups": [...]}; they come before `results` and `rollups`).
    late: SnapshotRef | None = None
    # Revived from a dead run's durable state: take a new epoch, reconcile against providers.
    restarted: bool = False
    # Revived without the roll-ups its state holds (one may be what broke it; the recovery
    # ladder's last rung, activities/shards.py `revive`): its clusters are heard anew.
    rollups_dropped: bool = False
    # Born of a split: adopts nothing from the providers and decides nothing until the split's
    # last part has arrived.
    joining: bool = False
    # A fresh start whose adoption goes on in this run (see `adopt_history_bytes`).
    adopting: AdoptCursor | None = None



class ResetGeneration(Model):
    """`reset_generation` (an operator's, `bigfleet cluster NAME --reset-generation`): forget
    `cluster`'s roll-up generation, saying why (issue 44)."""

    cluster: str = Field(min_length=1, max_length=253)
    reason: str = Field(default="", max_length=200)


class BuildMove(Model):
    """`move_to_build` (`bigfleet rollout`): the build the shard's next run runs on ("": the
    default build), who asks and why."""

    build: str = Field(default="", max_length=63, pattern=BUILD_PATTERN + "|^$")
    reason: str = Field(default="", max_length=200)
    by: str = Field(default="", max_length=100)


class RecordBatch(Model):
    """Lines of a live shard's recording (activities/recording.py), each one JSON object."""

    shard: int = Field(ge=0)
    lines: list[str] = Field(default_factory=list, max_length=10_000)
