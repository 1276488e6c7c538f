"""Talking to shard workflows from sagas: a workflow cannot send another workflow an update, so
each saga step is an activity that does it through the client. The update id is the
instruction's (term, seq), so a retried step is the same update."""

from __future__ import annotations

from typing import Any

from temporalio import activity
from temporalio.client import Client, WorkflowExecutionStatus, WorkflowUpdateFailedError
from temporalio.common import WorkflowIDConflictPolicy
from temporalio.exceptions import ApplicationError
from temporalio.service import RPCError, RPCStatusCode

from bigfleet.models import Machine
from workflows.types import (
    SHARD_TASK_QUEUE,
    Instruction,
    ShardCall,
    ShardInput,
    shard_workflow_id,
)


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
            if isinstance(cause, ApplicationError) and cause.type == "ShardRestoring":
                raise ApplicationError(str(cause), type="ShardRestoring") from err  # retried
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

    @activity.defn(name="revive_shard")
    async def revive_shard(self, shard: int) -> str:
        """Restart a shard workflow that is gone (terminated, failed, timed out) from its
        durable state: the input of its latest run, i.e. the snapshot of its last
        continue-as-new. "running" if it runs, "unknown" if it was never started (nothing to
        restart from), "completed" if it ended on purpose (a shard retired by a merge returns:
        its machines are another shard's now, so it is not revived), else "restarted". A latest
        run without a snapshot (the first run) is started fresh: it re-adopts its share of the
        providers' machines."""
        wid = shard_workflow_id(shard)
        try:
            desc = await self.client.get_workflow_handle(wid).describe()
        except RPCError as err:
            if err.status == RPCStatusCode.NOT_FOUND:
                return "unknown"
            raise
        if desc.status in (
            WorkflowExecutionStatus.RUNNING,
            WorkflowExecutionStatus.CONTINUED_AS_NEW,  # its next run is already there
        ):
            return "running"
        if desc.status == WorkflowExecutionStatus.COMPLETED:
            return "completed"
        inp: ShardInput | None = None
        async for event in self.client.get_workflow_handle(
            wid, run_id=desc.run_id
        ).fetch_history_events(page_size=1):
            started = event.workflow_execution_started_event_attributes
            [inp] = await self.client.data_converter.decode(
                list(started.input.payloads), [ShardInput]
            )
            break
        if inp is None:
            raise ApplicationError(f"{wid}: run {desc.run_id} has no start event")
        snapshot = inp.state is not None or inp.snapshot is not None
        revived = inp.model_copy(update={"restarted": snapshot})
        await self.client.start_workflow(
            "Shard",
            revived,
            id=wid,
            task_queue=SHARD_TASK_QUEUE,
            # Two revivals at once start one run; the second joins it.
            id_conflict_policy=WorkflowIDConflictPolicy.USE_EXISTING,
            static_summary=f"BigFleet shard {shard} of {inp.config.shards} (restarted)",
        )
        activity.logger.warning(
            "shard %s was %s; restarted from %s",
            shard,
            desc.status.name if desc.status else "?",
            "its last snapshot" if snapshot else "scratch",
        )
        return "restarted"
