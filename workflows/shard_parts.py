"""What the parts of the shard workflow share: `ShardParts`, the one typed place that declares
the attributes `ShardWorkflow.__init__` makes and the methods one mixin calls on another.

The shard workflow is one class made of mixins, each a concept of its own (workflows/shard.py
the signals and the loop, shard_queries.py what it answers, shard_cycle.py a cycle's work,
shard_carry.py continue-as-new, shard_results.py what transitions report back,
instructions.py and audit_handlers.py the coordinator's updates). Temporal finds handlers on
the workflow class, so they are mixed in rather than held as helper objects; every mixin
derives from `ShardParts` and reads what it needs from it.
"""

from __future__ import annotations

import asyncio
from collections import deque
from collections.abc import Awaitable, Callable
from functools import cached_property
from typing import Any

from temporalio import workflow
from temporalio.exceptions import ActivityError

with workflow.unsafe.imports_passed_through():
    from activities.wire import ShardConfig, TransitionInput, TransitionResult
    from bigfleet.engine import Decision
    from bigfleet.shard import Shard
    from bigfleet.spend import Spend
    from workflows.actions import TransitionInputs
    from workflows.guard import Guard
    from workflows.instruction_steps import InstructionSteps
    from workflows.new_clusters import NewClusters
    from workflows.outbox import Outbox
    from workflows.provider_sync import ProviderSync
    from workflows.shadow import ShadowSync
    from workflows.shard_record import ShardRecorder
    from workflows.snapshot_store import SnapshotStore


class ShardParts:
    """The shard workflow's state in memory, as its mixins see it (made in `__init__`)."""

    # ---- what the shard is, and the helper objects that act for it ------------------------
    cfg: ShardConfig
    shard: Shard  # the pure shard (bigfleet/shard.py): needs, inventory, decisions
    guard: Guard  # checks signals and updates, records what it refuses
    inputs: TransitionInputs  # decisions and results into transition inputs
    providers: ProviderSync  # reads the providers (adopt, reconcile, notices)
    shadow: ShadowSync  # shadow mode's would-be against actual
    store: SnapshotStore  # the snapshot store, for a state too large to travel inline
    outbox: Outbox  # starts and notices on their way out
    steps: InstructionSteps  # fencing and membership of the coordinator's instructions

    # ---- how this run began ------------------------------------------------------------------
    fresh: bool  # started from scratch (no state, no snapshot)
    restarted: bool  # revived from a dead run's state: a new epoch, then catch up
    restoring: bool  # reading its state back from the snapshot store
    snapshotting: bool = False  # writing its state before it continues as new

    # ---- what waits -------------------------------------------------------------------------
    early_rollups: list[dict[str, Any]]  # roll-ups that came while the state moved
    early_bytes: int
    forward: dict[str, dict[str, Any]]  # roll-ups of clusters that moved away
    results: list[TransitionResult]  # results not folded in yet
    pipeline: list[TransitionInput]  # starts decided and not handed to the outbox yet
    taken: tuple[str, int]  # the last result taken from the mailbox: its chain and number

    # ---- the loop ---------------------------------------------------------------------------
    revive: bool  # `revived` arrived: catch up with the providers next cycle
    revived_run: bool  # (once per run)
    background: bool  # a cycle that never waits (the outbox sends beside it)
    mailbox: bool  # results are taken from the shard's mailbox
    woken: bool  # a take came back at its time: the next cycle is due
    chores: asyncio.Future[None] | None  # verify, catch up, reconcile beside the loop
    pumping: asyncio.Future[None] | None  # the outbox's `pump`
    reporting: asyncio.Future[None] | None
    collecting: asyncio.Future[None] | None  # the take from the mailbox
    forwarding: asyncio.Future[None] | None
    next_reconcile: float
    next_notices: float
    base_history: tuple[int, int]  # history bytes and events before the first cycle
    cycle_ends: deque[float]  # when the last cycles ran (workflow time; `status`)
    last_cycle_ms: float
    last_report: float = 0.0  # when the last report went to the coordinator
    started: dict[str, int]
    failures: list[dict[str, Any]]  # the last outside calls that failed (`status`)

    # ---- what the machines cost, as of the last cycle (bigfleet/spend.py; `_cycle`) ---------
    spend_now: Spend | None
    spend_at: float | None
    spend_seen: tuple | None
    spend_set: Spend | None
    spend_keys: Any

    # ---- what one part calls on another ----------------------------------------------------
    _not_restoring: Callable[[], None]  # instructions.py
    _fence: Callable[..., bool]  # instructions.py
    _new_term: Callable[..., Awaitable[bool]]  # instructions.py
    _take_rollup: Callable[[dict[str, Any]], None]  # shard.py
    _fold_results: Callable[[float], None]  # shard_results.py
    _note_failure: Callable[[str, ActivityError], None]  # shard_cycle.py
    _cycle: Callable[[float], Decision]  # shard_cycle.py
    _settled: Callable[[], bool]  # shard_carry.py
    _backlog: Callable[[list[TransitionResult]], int]  # shard_results.py
    _tell_engine: Callable[[float], None]  # shard_pool.py
    _summary_carried: Callable[[], dict[str, Any] | None]  # shard_pool.py
    _summary_restored: Callable[[Any], None]  # shard_pool.py
    build_status: Callable[[], dict[str, Any]]  # shard_builds.py

    @cached_property
    def recorder(self) -> ShardRecorder:
        """What it records, when its config says so (`ShardConfig.record`)."""
        return ShardRecorder(self.shard)

    @cached_property
    def new_clusters(self) -> NewClusters:
        """Roll-ups of clusters this shard does not serve yet, and the question about them."""
        return NewClusters(self)
