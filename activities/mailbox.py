"""The shard's side of its mailbox (workflows/mailbox.py): take the results waiting there, the
mailbox started first if it does not run yet (a new shard, or one whose mailbox ended)."""

from __future__ import annotations

import asyncio
from typing import Any

from temporalio import activity
from temporalio.client import Client, WithStartWorkflowOperation
from temporalio.common import WorkflowIDConflictPolicy
from temporalio.service import RPCError, RPCStatusCode

from activities.wire import (
    SHARD_TASK_QUEUE,
    MailboxInput,
    TransitionResult,
    mailbox_workflow_id,
)

CLOSING_TRIES = 5  # a take that meets the mailbox continuing as new tries again this often


class MailboxActivities:
    def __init__(self, client: Client) -> None:
        self.client = client

    @activity.defn(name="mailbox_take")
    async def take(self, shard: int) -> list[TransitionResult]:
        """The results shard `shard`'s transitions left in its mailbox, oldest first, a batch
        of at most the mailbox's TAKE_BYTES."""
        start: WithStartWorkflowOperation[Any, Any] = WithStartWorkflowOperation(
            "ShardMailbox",
            MailboxInput(shard=shard),
            id=mailbox_workflow_id(shard),
            task_queue=SHARD_TASK_QUEUE,
            id_conflict_policy=WorkflowIDConflictPolicy.USE_EXISTING,
        )
        for attempt in range(CLOSING_TRIES):
            try:
                taken: list[TransitionResult] = (
                    await self.client.execute_update_with_start_workflow(
                        "take", start_workflow_operation=start, result_type=list[TransitionResult]
                    )
                )
                return taken
            except RPCError as err:
                # The mailbox is continuing as new: the next run takes the update soon.
                if err.status != RPCStatusCode.RESOURCE_EXHAUSTED or attempt + 1 == CLOSING_TRIES:
                    raise
                await asyncio.sleep(0.2 * (attempt + 1))
        raise AssertionError("unreachable")
