"""Talking to shard workflows from sagas: a workflow cannot send another workflow an update, so
each saga step is an activity that does it through the client. The update id is the
instruction's (term, seq), so a retried step is the same update."""

from __future__ import annotations

from typing import Any

from temporalio import activity
from temporalio.client import Client, WorkflowUpdateFailedError
from temporalio.exceptions import ApplicationError
from temporalio.service import RPCError, RPCStatusCode

from bigfleet.models import Machine
from workflows.types import Instruction, ShardCall, shard_workflow_id


class ShardClientActivities:
    def __init__(self, client: Client) -> None:
        self.client = client

    @activity.defn(name="shard_update")
    async def update(self, call: ShardCall) -> Any:
        handle = self.client.get_workflow_handle(shard_workflow_id(call.shard))
        ins: Instruction = call.instruction
        result_type = list[Machine] if call.update == "release" else None
        try:
            return await handle.execute_update(
                call.update, ins, id=f"{call.update}-{ins.term}-{ins.seq}", result_type=result_type
            )
        except WorkflowUpdateFailedError as err:
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
