"""The shard's side of its mailbox (workflows/mailbox.py): take the results waiting there, the
mailbox started first if it does not run yet (a new shard, or one whose mailbox ended)."""

from __future__ import annotations

import asyncio
import math
import time
from typing import Any

from temporalio import activity
from temporalio.client import Client, WithStartWorkflowOperation
from temporalio.common import WorkflowIDConflictPolicy
from temporalio.service import RPCError, RPCStatusCode

from activities.wire import (
    SHARD_TASK_QUEUE,
    MailboxInput,
    MailboxTake,
    TakenResults,
    TransitionResult,
    mailbox_workflow_id,
)

CLOSING_TRIES = 5  # a take that meets the mailbox continuing as new tries again this often
AGAIN = (RPCStatusCode.RESOURCE_EXHAUSTED, RPCStatusCode.FAILED_PRECONDITION)
TAKE_HOLD_SECONDS = 10.0  # a take waits this long at most for its time (`MailboxTake.at`)


class MailboxActivities:
    def __init__(self, client: Client) -> None:
        self.client = client

    def all(self) -> list[Any]:
        return [self.take, self.take_after]

    @activity.defn(name="mailbox_take")
    async def take(self, shard: int) -> list[TransitionResult]:
        """The results shard `shard`'s transitions left in its mailbox, oldest first, a batch
        of at most the mailbox's TAKE_BYTES; they leave it (runs begun before `take_after`)."""
        taken: list[TransitionResult] = await self._update(
            shard, "take", None, list[TransitionResult]
        )
        return taken

    @activity.defn(name="mailbox_take_after")
    async def take_after(self, ask: MailboxTake) -> TakenResults:
        """The results that follow those the shard has (`ask.after`), oldest first, a batch
        of at most the mailbox's TAKE_BYTES; those it has leave the mailbox. Taken at
        `ask.at` (at most TAKE_HOLD_SECONDS from now): the answer comes when the shard's next
        cycle is due, with what arrived until then."""
        hold = ask.at - time.time()
        if math.isfinite(hold) and hold > 0:
            await asyncio.sleep(min(hold, TAKE_HOLD_SECONDS))
        taken: TakenResults = await self._update(ask.shard, "take_after", ask, TakenResults)
        return taken

    async def _update(self, shard: int, update: str, arg: Any, result_type: Any) -> Any:
        """Run `update` on shard `shard`'s mailbox, started first if it does not run."""
        start: WithStartWorkflowOperation[Any, Any] = WithStartWorkflowOperation(
            "ShardMailbox",
            MailboxInput(shard=shard),
            id=mailbox_workflow_id(shard),
            task_queue=SHARD_TASK_QUEUE,
            id_conflict_policy=WorkflowIDConflictPolicy.USE_EXISTING,
        )
        for attempt in range(CLOSING_TRIES):
            try:
                return await self.client.execute_update_with_start_workflow(
                    update,
                    args=[] if arg is None else [arg],
                    start_workflow_operation=start,
                    result_type=result_type,
                )
            except RPCError as err:
                # The mailbox is continuing as new (RESOURCE_EXHAUSTED), or a signal came as it
                # did and its task is tried again (FAILED_PRECONDITION, "unexpected workflow
                # task failure"): the update goes through soon.
                if err.status not in AGAIN or attempt + 1 == CLOSING_TRIES:
                    raise
                await asyncio.sleep(0.2 * (attempt + 1))
        raise AssertionError("unreachable")
