"""Talking to shard workflows from sagas: a workflow cannot send another workflow an update, so
each saga step is an activity that does it through the client. The update id is the
instruction's (term, seq), so a retried step is the same update."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from temporalio import activity
from temporalio.api.common.v1 import WorkflowExecution
from temporalio.api.enums.v1 import (
    EventType,
    ResetReapplyExcludeType,
    ResetReapplyType,
    TaskQueueKind,
    TaskQueueType,
    WorkflowTaskFailedCause,
)
from temporalio.api.taskqueue.v1 import TaskQueue
from temporalio.api.workflowservice.v1 import (
    DescribeTaskQueueRequest,
    GetWorkflowExecutionHistoryReverseRequest,
    ResetWorkflowExecutionRequest,
)
from temporalio.client import (
    Client,
    WorkflowExecutionDescription,
    WorkflowExecutionStatus,
    WorkflowUpdateFailedError,
)
from temporalio.common import WorkflowIDConflictPolicy
from temporalio.exceptions import ApplicationError
from temporalio.service import RPCError, RPCStatusCode

from activities.wire import (
    SHARD_TASK_QUEUE,
    Instruction,
    ShardCall,
    ShardInput,
    shard_task_timeout,
    shard_workflow_id,
)
from bigfleet.inputs import clip
from bigfleet.models import Machine

# Refusals that a later try may not meet: the shard is reading or writing its state, or could
# not yet check a new coordinator term.
RETRIED = ("ShardRestoring", "TermUnchecked")


class ShardClientActivities:
    def __init__(self, client: Client) -> None:
        self.client = client

    @activity.defn(name="shard_update")
    async def update(self, call: ShardCall) -> Any:
        handle = self.client.get_workflow_handle(shard_workflow_id(call.shard))
        ins: Instruction = call.instruction
        result_type = list[Machine] if call.update in ("release", "hand_out") else None
        try:
            return await handle.execute_update(
                call.update, ins, id=f"{call.update}-{ins.term}-{ins.seq}", result_type=result_type
            )
        except WorkflowUpdateFailedError as err:
            cause = err.cause
            if isinstance(cause, ApplicationError) and cause.type in RETRIED:
                raise ApplicationError(str(cause), type=cause.type) from err  # retried
            # Refused by the shard (stale, too large, wrong state): no retry helps.
            raise ApplicationError(
                f"shard {call.shard} refused {call.update}: {err.cause}",
                type="InstructionRefused",
                non_retryable=True,
            ) from err

    @activity.defn(name="shard_clusters")
    async def clusters(self, shard: int) -> list[str]:
        """The clusters a shard serves now; none if it is not running (yet)."""
        handle = self.client.get_workflow_handle(shard_workflow_id(shard))
        try:
            status = await handle.query("status")
        except RPCError as err:
            if err.status == RPCStatusCode.NOT_FOUND:
                return []
            raise
        return list(status["clusters"])

    @activity.defn(name="shard_machine_states")
    async def machine_states(self, call: ShardCall) -> dict[str, str]:
        handle = self.client.get_workflow_handle(shard_workflow_id(call.shard))
        return await handle.query("machine_states", call.instruction.machine_ids)

    @activity.defn(name="queue_polled")
    async def queue_polled(self, queue: str) -> bool:
        """Whether a worker polls workflow task queue `queue` (one seen in the last minutes:
        `bigfleet rollout` moves a shard only to a build some worker runs)."""
        svc = self.client.workflow_service
        got = await svc.describe_task_queue(
            DescribeTaskQueueRequest(
                namespace=self.client.namespace,
                task_queue=TaskQueue(name=queue, kind=TaskQueueKind.TASK_QUEUE_KIND_NORMAL),
                task_queue_type=TaskQueueType.TASK_QUEUE_TYPE_WORKFLOW,
            )
        )
        return len(got.pollers) > 0

    @activity.defn(name="revive_shard")
    async def revive_shard(self, shard: int, from_snapshot: bool = False) -> str:
        return await revive(self.client, shard, from_snapshot)


async def revive(client: Client, shard: int, from_snapshot: bool = False) -> str:
    """Bring back a shard workflow that is gone (terminated, failed, timed out) from its durable
    state (design §6). "running" if it runs, "unknown" if it never ran, "completed" if it ended on
    purpose (a shard retired by a merge: its machines are another shard's now).

    Its durable state is its history: the dead run is reset to its last completed workflow task
    ("reset"), so it replays to the very state it died with — machines adopted and released
    since its last snapshot, the outcomes it owes retried instructions — and is then signalled
    `revived`: a new epoch, and every provider's list for what became of its machines while
    nobody watched; signals and updates after the reset point are not applied again (one may
    be what broke it). A running shard whose workflow task fails on every attempt (`wedged`)
    is terminated first and revived the same way. A run the server ended for the size of its
    history is reset further back: to its last completed task below RESET_HISTORY_BYTES, so
    whatever flooded it is not replayed. A run born of such a reset that died again (in any
    way: what broke it may lie before the reset point), a run ended for its size with no task
    below that, a history that cannot be reset, or `from_snapshot` (an operator's choice when
    the code changed so that the history no longer replays) restart it from its latest run's
    input instead ("restarted") — the snapshot of its last continue-as-new, or from scratch if
    it never continued as new. Reset or restarted from a snapshot, the shard then takes back,
    from its providers' listings, the machines of its clusters (and of its share) that no shard
    owns: those it adopted after the reset point or the snapshot (workflows/provider_sync.py
    `adopt_unowned`). A run restarted that way, reset, and dead again is restarted from the
    same snapshot once more without any roll-up (what broke it may be in the snapshot: a
    roll-up taken in the last cycle before the run continued as new); the clusters are heard
    anew, their machines kept meanwhile (bigfleet/cluster_modes.py `drop_rollups`). That run,
    reset and dead again, is "held" for an operator: recovery never goes round in a circle."""
    wid = shard_workflow_id(shard)
    try:
        desc = await client.get_workflow_handle(wid).describe()
    except RPCError as err:
        if err.status == RPCStatusCode.NOT_FOUND:
            return "unknown"
        raise
    if desc.status == WorkflowExecutionStatus.RUNNING:
        failing = await wedged(client, wid, desc)
        if failing is None:
            return "running"
        # Running but deciding nothing: its workflow task fails on every attempt. End this
        # run and bring it back below, without the input that broke it.
        await terminate(client, wid, desc.run_id, f"bigfleet: revived: {failing}")
        desc = await client.get_workflow_handle(wid, run_id=desc.run_id).describe()
    elif desc.status == WorkflowExecutionStatus.CONTINUED_AS_NEW:
        return "running"  # its next run is already there
    if desc.status == WorkflowExecutionStatus.COMPLETED:
        return "completed"
    dead = await DeadRun.read(client, wid, desc)
    # A run born of a reset that died again (failed, terminated, timed out) is not reset once
    # more: whatever killed it may be in the history a reset replays. Its snapshot it is.
    # A run the server ended for its size is reset to before the history grew past
    # RESET_HISTORY_BYTES (a flood of oversized signals lies after that point); only if no
    # task completed below it is it restarted from its snapshot.
    if dead.reset_to and not from_snapshot and not dead.was_reset:
        if await _reset(client, shard, dead):
            return "reset"
    # A run restarted from its snapshot that died again, reset or with no good task to be
    # reset to: what breaks it is in the snapshot itself (a roll-up taken in the last cycle
    # before it continued as new). Once more from the snapshot, without any roll-up: the
    # operators send theirs again. Restarted that way and dead again: held.
    again = dead.start.restarted and (dead.was_reset or not dead.reset_to)
    if again and not dead.start.rollups_dropped:
        await _restart(client, shard, dead, drop_rollups=True)
        return "restarted"
    if again and not from_snapshot:
        # Restarted without its roll-ups, reset, and dead again: another automatic try would
        # go round the same circle. Held for an operator (`bigfleet status` says WEDGED or
        # NOT RUNNING; `bigfleet shard revive N --from-snapshot` tries the snapshot again).
        activity.logger.error(
            "shard %s was %s again after a restart from its snapshot and a reset: held for an "
            "operator",
            shard,
            dead.status,
        )
        return "held"
    await _restart(client, shard, dead)
    return "restarted"


# How far back a run the server ended for its history ("Workflow history size exceeds limit.")
# is reset: to its last completed workflow task whose history up to there is at most this
# many bytes — and at most a fifth of what the server ended it at (RESET_SHARE), for servers
# whose limit is lower than the default 50 MB. A shard continues as new when Temporal suggests
# it (4 MB by default), so its own history before a flood lies below this; the reset run,
# asked at once to continue as new, has 40 MB of room to do it. A flood of signals that the
# shard refused (each still in its history: 36 of 1.5 MB passed the 50 MB limit in a second)
# lies after that point and is not applied again.
RESET_HISTORY_BYTES = 10_000_000
RESET_SHARE = 5


@dataclass
class DeadRun:
    """What a dead shard run's history says: how it started, its last completed workflow
    task, whether it was born of a reset, whether the server ended it for its size, and
    where a reset takes it (`reset_to`; 0: nowhere)."""

    wid: str
    run_id: str
    status: str
    start: ShardInput
    last_task: int = 0
    was_reset: bool = False
    too_long: bool = False
    reset_to: int = 0
    queue: str = SHARD_TASK_QUEUE  # where it ran (its build's: workflows/shard_builds.py)

    @classmethod
    async def read(cls, client: Client, wid: str, desc: WorkflowExecutionDescription) -> DeadRun:
        start: ShardInput | None = None
        last_task = 0
        was_reset = too_long = by_count = False
        size = events = 0
        # Each completed workflow task: (event id, history bytes and events up to it).
        tasks: list[tuple[int, int, int]] = []
        history = client.get_workflow_handle(wid, run_id=desc.run_id).fetch_history_events()
        async for event in history:
            size += event.ByteSize()
            events += 1
            if event.HasField("workflow_execution_started_event_attributes"):
                started = event.workflow_execution_started_event_attributes
                [start] = await client.data_converter.decode(
                    list(started.input.payloads), [ShardInput]
                )
            elif event.event_type == EventType.EVENT_TYPE_WORKFLOW_TASK_COMPLETED:
                last_task = event.event_id
                tasks.append((event.event_id, size, events))
            elif event.HasField("workflow_task_failed_event_attributes"):
                cause = event.workflow_task_failed_event_attributes.cause
                was_reset |= cause == RESET_CAUSE
            elif event.HasField("workflow_execution_terminated_event_attributes"):
                # The server ends a run whose history passed its limits ("Workflow history
                # size exceeds limit.", "… count exceeds limit."): a reset to its last task
                # would replay into the same wall.
                reason = event.workflow_execution_terminated_event_attributes.reason
                too_long = "exceeds limit" in reason
                by_count = too_long and "count" in reason
        if start is None:
            raise ApplicationError(f"{wid}: run {desc.run_id} has no start event")
        reset_to = reset_point(tasks, size, events, by_count) if too_long else last_task
        return cls(
            wid, desc.run_id, status_name(desc), start, last_task, was_reset, too_long, reset_to,
            desc.task_queue or SHARD_TASK_QUEUE,
        )  # fmt: skip


def reset_point(
    tasks: list[tuple[int, int, int]], size: int, events: int, by_count: bool = False
) -> int:
    """Where a run the server ended for its history (`size` bytes, `events` events) is reset:
    its last completed workflow task — `tasks`: (event id, history bytes and events up to
    it) — at most RESET_HISTORY_BYTES and a RESET_SHARE-th of `size` into the history (and of
    `events`, if the server counted events). 0: none; it restarts from its snapshot."""
    budget = min(RESET_HISTORY_BYTES, size // RESET_SHARE)
    most = events // RESET_SHARE if by_count else events
    below = [task for task, upto, n in tasks if upto <= budget and n <= most]
    return below[-1] if below else 0


RESET_CAUSE = WorkflowTaskFailedCause.WORKFLOW_TASK_FAILED_CAUSE_RESET_WORKFLOW


async def _reset(client: Client, shard: int, dead: DeadRun) -> bool:
    """Reset the dead run to `dead.reset_to` (its last completed workflow task, or for a run
    ended for its size the last one below RESET_HISTORY_BYTES) and tell the new run; False if
    the server would not reset it."""
    try:
        reset = await client.workflow_service.reset_workflow_execution(
            ResetWorkflowExecutionRequest(
                namespace=client.namespace,
                workflow_execution=WorkflowExecution(workflow_id=dead.wid, run_id=dead.run_id),
                reason=f"bigfleet: shard {shard} was {dead.status}; revived",
                workflow_task_finish_event_id=dead.reset_to,
                # A retried revival of the same dead run is the same reset.
                request_id=f"revive-{dead.run_id}",
                # Signals and updates that came after the reset point are not applied again:
                # one of them may be what wedged the run (the shard reconciles with its
                # providers instead, and roll-ups stand until their cluster sends again).
                reset_reapply_type=ResetReapplyType.RESET_REAPPLY_TYPE_NONE,
                reset_reapply_exclude_types=[
                    ResetReapplyExcludeType.RESET_REAPPLY_EXCLUDE_TYPE_SIGNAL,
                    ResetReapplyExcludeType.RESET_REAPPLY_EXCLUDE_TYPE_UPDATE,
                ],
            )
        )
        # (Servers up to 1.32 refuse a signal as a post-reset operation, so it follows the
        # reset: the new run may finish the cycle it died in before it reads it.) It names
        # the new run: the shard takes `revived` only from a run born of a reset.
        await client.get_workflow_handle(dead.wid, run_id=reset.run_id).signal(
            "revived", {"run_id": reset.run_id}
        )
    except RPCError as err:
        activity.logger.warning("shard %s could not be reset (%s): restarting it", shard, err)
        return False
    activity.logger.warning(
        "shard %s was %s%s; reset to event %s of its last run (its last task: %s)",
        shard,
        dead.status,
        " for the size of its history" if dead.too_long else "",
        dead.reset_to,
        dead.last_task,
    )
    return True


async def _restart(client: Client, shard: int, dead: DeadRun, drop_rollups: bool = False) -> None:
    """Start the shard again from its latest run's input: the snapshot of its last
    continue-as-new (without the roll-ups it holds, if `drop_rollups`), or from scratch if it
    never continued as new."""
    start = dead.start
    snapshot = start.state is not None or start.snapshot is not None
    # (Once dropped, an operator's `--from-snapshot` drops them again.)
    dropped = snapshot and (drop_rollups or start.rollups_dropped)
    await client.start_workflow(
        "Shard",
        start.model_copy(update={"restarted": snapshot, "rollups_dropped": dropped}),
        id=dead.wid,
        task_queue=dead.queue,  # (on the build it ran on)
        task_timeout=shard_task_timeout(start.config),
        # Two revivals at once start one run; the second joins it.
        id_conflict_policy=WorkflowIDConflictPolicy.USE_EXISTING,
        static_summary=f"BigFleet shard {shard} of {start.config.shards} (restarted)",
    )
    activity.logger.warning(
        "shard %s was %s; restarted from %s",
        shard,
        dead.status,
        ("its last snapshot, without its roll-ups" if dropped else "its last snapshot")
        if snapshot
        else "scratch",
    )


def status_name(desc: WorkflowExecutionDescription) -> str:
    return desc.status.name.lower() if desc.status else "gone"


WEDGED_ATTEMPTS = 3  # workflow task attempts in a row that failed: the workflow is wedged
# Failed workflow tasks in a row a history is read back for (newest first, one small page).
FAILURES_READ = 200
# Failures that say nothing about the code: a reset's mark, and a completion the server refused
# because new events came in meanwhile (a storm of signals while a run continues as new).
PASSING_CAUSES = (
    RESET_CAUSE,
    WorkflowTaskFailedCause.WORKFLOW_TASK_FAILED_CAUSE_UNHANDLED_COMMAND,
)


async def wedged(
    client: Client, wid: str, desc: WorkflowExecutionDescription | None = None
) -> str | None:
    """Why a running workflow decides nothing ("workflow task failing, attempt N: …"), or None
    if its workflow tasks complete. Temporal retries a failing workflow task forever without
    failing the workflow; the attempt count of the pending task says so — unless signals keep
    coming (a coordinator gets a shard report every few seconds): each one writes the failure
    into the history and starts the count again at 1. So the failed tasks since the last
    completed one, read from the end of the history, count as well."""
    if desc is None:
        desc = await client.get_workflow_handle(wid).describe()
    if desc.status != WorkflowExecutionStatus.RUNNING:
        return None
    raw = desc.raw_description
    if not raw.HasField("pending_workflow_task"):
        return None  # nothing to decide now: nothing failing
    attempt = raw.pending_workflow_task.attempt
    failed, cause = await failed_in_a_row(client, wid, desc.run_id)
    if max(attempt, failed) < WEDGED_ATTEMPTS:
        return None
    return (
        f"workflow task failing, attempt {attempt}, {failed} failed since the last one that "
        f"completed: {clip(cause, 300)}"
    )


async def failed_in_a_row(client: Client, wid: str, run_id: str | None) -> tuple[int, str]:
    """Workflow tasks that failed since the run's last completed one (read newest first, at
    most FAILURES_READ events), and the newest failure's message."""
    reply = await client.workflow_service.get_workflow_execution_history_reverse(
        GetWorkflowExecutionHistoryReverseRequest(
            namespace=client.namespace,
            execution=WorkflowExecution(workflow_id=wid, run_id=run_id or ""),
            maximum_page_size=FAILURES_READ,
        )
    )
    failed, cause = 0, ""
    for event in reply.history.events:
        if event.event_type == EventType.EVENT_TYPE_WORKFLOW_TASK_COMPLETED:
            break
        if event.HasField("workflow_task_failed_event_attributes"):
            attrs = event.workflow_task_failed_event_attributes
            if attrs.cause in PASSING_CAUSES:
                continue
            failed += 1
            cause = cause or attrs.failure.message
    return failed, cause


async def terminate(client: Client, wid: str, run_id: str | None, reason: str) -> None:
    """End one run (only that one: a newer run started meanwhile is left alone)."""
    try:
        await client.get_workflow_handle(wid, run_id=run_id).terminate(reason=reason)
    except RPCError as err:
        if err.status != RPCStatusCode.NOT_FOUND:
            raise
