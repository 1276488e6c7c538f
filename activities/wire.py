"""What crosses the Temporal boundary: workflow and task queue names, search attributes, and
the one input/result model of each workflow and activity.

Workflows (a layer up) and activities both import it; it imports only bigfleet/ below.
Everything here travels as JSON through Temporal's pydantic data converter."""

from __future__ import annotations

import json
from datetime import timedelta
from typing import Any, Literal

from pydantic import BaseModel, ConfigDict, Field, TypeAdapter
from temporalio.common import SearchAttributeKey

from bigfleet.coordinator import MAX_SHARE, MembershipThresholds
from bigfleet.decommission import DecommissionRequest as DecommissionRequest
from bigfleet.deployment import MAX_TASK_TIMEOUT_SECONDS, SHARD_TASK_TIMEOUT_SECONDS
from bigfleet.models import FencingToken, Machine, NodeSelectorRequirement, Transition
from bigfleet.shard_state import ShardState
from bigfleet.snapshot import INLINE_BYTES
from bigfleet.transitions import MAX_TRANSITION_BATCH

SHARD_TASK_QUEUE = "bigfleet-shards"
# A shard's workflow task timeout by default (`ShardConfig.task_timeout_seconds`; Temporal's
# default is 10 s, its most 120 s). A worker that lost the shard from its cache replays the
# run's history in one task: at 100 000 machines a run holds seconds of decisions, and a replay
# cut off at 10 s is retried from the start, forever.
SHARD_TASK_TIMEOUT = timedelta(seconds=SHARD_TASK_TIMEOUT_SECONDS)
LIST_PAGE = 1000  # machines per provider_list page (~70–90 KB as a MachinePage)
TRANSITION_TASK_QUEUE = "bigfleet-transitions"


def provider_task_queue(provider: str) -> str:
    """One queue per provider account-region: the server enforces its API rate limit there."""
    return f"bigfleet-provider-{provider}"


def shard_workflow_id(shard: int) -> str:
    return f"shard-{shard}"


def mailbox_workflow_id(shard: int) -> str:
    """The workflow that holds a shard's transition results until it takes them."""
    return f"{shard_workflow_id(shard)}-mailbox"


COORDINATOR_ID = "coordinator"  # the coordinator's workflow id (one per namespace)


def shard_task_timeout(config: ShardConfig) -> timedelta:
    """The task timeout a shard workflow is started with (a continue-as-new or a reset keeps
    its run's)."""
    return timedelta(seconds=config.task_timeout_seconds)


WORKFLOW_ID_BYTES = 1000  # Temporal refuses a longer workflow id (`limit.maxIDLength`)
ID_WHERE_BYTES = 100  # of a batch's cluster (or provider) name in its workflow id, at most


def _clip(text: str, limit: int) -> str:
    """`text` cut to at most `limit` UTF-8 bytes (on a character boundary)."""
    return text.encode()[: max(limit, 0)].decode(errors="ignore")


def transition_workflow_id(t: TransitionInput) -> str:
    """Same machines, same transition, same operation: the same workflow (seed §7
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


# Typed search attributes: a machine's whole life is `BigFleetMachineIds = "m-…"` in the UI.
MACHINE_IDS = SearchAttributeKey.for_keyword_list("BigFleetMachineIds")
SHARD = SearchAttributeKey.for_keyword("BigFleetShard")
CLUSTER = SearchAttributeKey.for_keyword("BigFleetCluster")
PROVIDER = SearchAttributeKey.for_keyword("BigFleetProvider")
TRANSITION = SearchAttributeKey.for_keyword("BigFleetTransition")
RESULT_STATE = SearchAttributeKey.for_keyword("BigFleetState")
SEARCH_ATTRIBUTES = (MACHINE_IDS, SHARD, CLUSTER, PROVIDER, TRANSITION, RESULT_STATE)


class Model(BaseModel):
    model_config = ConfigDict(extra="forbid")


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


class TransitionResult(Model):
    transition: Transition
    machines: list[Machine]
    corrective: list[str] = Field(default_factory=list)
    refused: str | None = None
    # A create the provider refused for want of capacity or quota (QuotaExhausted, e.g. EC2's
    # InsufficientInstanceCapacity): the machines it no longer offers. The shard lets go of
    # them (seed §7: "marks the quota slot bad"); the provider's listing brings them back when
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


class MailboxInput(Model):
    """A shard's mailbox (workflows/mailbox.py): its shard, and the results it still holds
    (carried across its continue-as-new)."""

    shard: int = Field(ge=0)
    results: list[TransitionResult] = Field(default_factory=list)
    first: int = Field(default=0, ge=0)  # the number of results[0] (they are numbered in order)
    # The mailbox's chain of runs: its first run's id, carried on ("": this is the first run).
    chain: str = Field(default="", max_length=200)


class MailboxTake(Model):
    """A shard's take from its mailbox (`take_after`): it has every result up to number
    `after` of the mailbox `chain` (its first run's id), which lets them go and answers those
    that follow. Taking again with the same `after` answers them again: a batch whose answer
    was lost (a worker killed as it came back) is not lost with it."""

    shard: int = Field(ge=0)
    after: int = Field(default=-1, ge=-1)
    chain: str = Field(default="", max_length=200)
    # Unix time the take is answered at (the shard's next cycle; 0: at once): its answer wakes
    # the shard then (workflows/shard.py `_collect`).
    at: float = 0.0


class TakenResults(Model):
    """A batch from the mailbox: `results` numbered from `first`, of the mailbox `chain`."""

    results: list[TransitionResult] = Field(default_factory=list)
    first: int = Field(default=0, ge=0)
    chain: str = ""


class ProviderCall(Model):
    """A lifecycle call to a provider. `now` is the caller's (workflow) time: simulated
    providers keep their clock by it, so time-skipping tests skip their time too."""

    provider: str
    transition: Transition
    machine_ids: list[str]
    token: FencingToken
    now: float
    cluster: str | None = None
    user_data: bytes = b""
    ttl_seconds: int = 3600
    grace_seconds: float = 0.0
    force: bool = False


class ProviderRead(Model):
    provider: str
    machine_ids: list[str] = Field(default_factory=list)
    now: float
    states: list[str] = Field(default_factory=list)
    # provider_list pages: machines with ids after `after`, at most `limit` (a page of records
    # stays far below Temporal's 2 MB payload limit).
    after: str = ""
    limit: int = Field(default=LIST_PAGE, ge=1)
    # provider_get: a machine the provider does not (or no longer) offer is left out of the
    # answer instead of failing the read.
    missing_ok: bool = False


# A machine's own fields; the rest (type, zone, capacity, price, labels, …) it shares with the
# other machines of its rack or pool: its shape.
_OWN = ("id", "state", "host", "cluster", "failed_from", "transition_started_unix", "last_error")


class MachinePage(Model):
    """A page of a provider's listing, compact: each shape once, then a row per machine of its
    own fields in `_OWN` order (`shape` after `id`). A listing enters the shard's history
    page by page: ~90 bytes a machine this way against ~630 as records."""

    shapes: list[dict[str, Any]] = Field(default_factory=list)
    rows: list[list[Any]] = Field(default_factory=list)

    @classmethod
    def of(cls, machines: list[Machine]) -> MachinePage:
        index: dict[str, int] = {}
        page = cls()
        for m in machines:
            shape = m.model_dump(mode="json", exclude=set(_OWN))
            key = json.dumps(shape, sort_keys=True)
            if key not in index:
                index[key] = len(page.shapes)
                page.shapes.append(shape)
            own = m.model_dump(mode="json", include=set(_OWN))
            host = own["host"]
            page.rows.append(
                [
                    m.id,
                    index[key],
                    own["state"],
                    None if host is None else [host["provider"], host["ref"]],
                    own["cluster"],
                    own["failed_from"],
                    own["transition_started_unix"],
                    own["last_error"],
                ]
            )
        return page

    def machines(self) -> list[Machine]:
        raw = [
            {
                **self.shapes[shape],
                "id": mid,
                "state": state,
                "host": None if host is None else {"provider": host[0], "ref": host[1]},
                "cluster": cluster,
                "failed_from": failed_from,
                "transition_started_unix": started,
                "last_error": error,
            }
            for mid, shape, state, host, cluster, failed_from, started, error in self.rows
        ]
        # Validated as JSON, as the records were (enums by value, every type strict).
        return _MACHINES.validate_json(json.dumps(raw))


_MACHINES = TypeAdapter(list[Machine])
TransitionResult.model_rebuild()  # (its `page` is a MachinePage, defined after it)


class CapacityRead(Model):
    """`provider_capacity`: a provider's speculative machines against what `shard` holds."""

    provider: str
    now: float
    shard: int
    shards: int
    # The shards whose machines by the assignment rule this shard takes (its own, and those of
    # shards merged into it).
    shares: list[int]


class CapacityDiff(Model):
    """What changed, small in steady state: at most `CAPACITY_GONE` ids and `LIST_PAGE`
    machines a reconcile (the rest at the next)."""

    gone: list[str] = Field(default_factory=list)
    fresh: list[Machine] = Field(default_factory=list)


CAPACITY_GONE = 20_000  # ids (~1 MB)
ELSEWHERE_MAX = 20_000  # ids an `owned_elsewhere` answer carries; asked again while full


class BootstrapCall(Model):
    cluster: str
    machine_id: str
    requirements: list[NodeSelectorRequirement] = Field(default_factory=list)


class BootstrapAnswer(Model):
    user_data: bytes = b""
    ttl_seconds: int = 0
    refused: str | None = None


class ShardConfig(Model):
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
    # State larger than this crosses continue-as-new through the snapshot store, in parts of
    # `snapshot_part_bytes` (Temporal refuses a payload over 2 MB and warns over 512 KB).
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
    key: str
    part: int
    data: str


class ShardInput(Model):
    """A shard workflow's input: its config, and what its last run handed over."""

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
    # Born of a split: adopts nothing from the providers and decides nothing until the split's
    # last part has arrived.
    joining: bool = False
    # A fresh start whose adoption goes on in this run (see `adopt_history_bytes`).
    adopting: AdoptCursor | None = None


class Instruction(Model):
    """A coordinator instruction, fenced by (coordinator_term, seq) (seed §11)."""

    term: int
    seq: int
    machine_ids: list[str] = Field(default_factory=list)
    machines: list[Machine] = Field(default_factory=list)
    grace_seconds: float = 600.0
    limit: int = 0  # hand_out: how many machine records at most
    # A saga's compensation giving a shard back its own machines: accepted from any term.
    compensation: bool = False


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
    """Move machines between shards (seed §9): idle, speculative, or preempted and drained."""

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
    moved: list[str] = Field(default_factory=list)
    compensated: list[str] = Field(default_factory=list)
    # Machines a compensation could not return (refused): for a human, named in the logs.
    orphaned: list[str] = Field(default_factory=list)
    failed_step: str | None = None
    error: str | None = None


class MembershipInput(Model):
    """A shard split (`into` is the new shard) or merge (`donor` retires into `into`), run as a
    saga with seqs `seq`, `seq + 1`, … of coordinator term `term` (seed §16)."""

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
    shards: int
    # The most a round (or one decommission saga) asks of a shard; shards refuse more anyway.
    max_share: float = Field(default=MAX_SHARE, gt=0, le=1)
    membership: MembershipThresholds = Field(default_factory=MembershipThresholds)
    membership_chunk: int = 200
    plan_seconds: float = 30.0
    missing_after_seconds: float = 30.0
    max_rounds_per_run: int = 500
    # A preemption drain that blocks an escalated shortfall is escalated to this grace, the
    # floor: no workload is given less by it (bigfleet/blocked.py).
    drain_floor_seconds: float = Field(default=60.0, ge=0)
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
