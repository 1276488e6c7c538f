"""A workflow whose tasks keep failing is wedged even while signals keep coming (issue 30).

A hostile campaign left the coordinator failing every workflow task for nine minutes: each shard
report (every few seconds) wrote the failure into its history and started the pending task's
attempt count at 1 again, so the keeper, which judged by that count alone, never restarted it.
"""

from __future__ import annotations

import asyncio
import uuid
from datetime import timedelta

from temporalio import workflow
from temporalio.testing import WorkflowEnvironment
from temporalio.worker import UnsandboxedWorkflowRunner, Worker

from activities.shards import WEDGED_ATTEMPTS, wedged
from tests.conftest import eventually


@workflow.defn(name="FailsOnceTold")
class FailsOnceTold:
    def __init__(self) -> None:
        self.told = 0

    @workflow.signal
    def tell(self) -> None:
        self.told += 1

    @workflow.run
    async def run(self) -> None:
        await workflow.wait_condition(lambda: self.told > 0)
        raise RuntimeError("planted: every workflow task of this run fails from here on")


async def test_a_workflow_failing_under_a_stream_of_signals_is_wedged(
    dev_env: WorkflowEnvironment,
):
    client = dev_env.client
    queue = f"wedged-{uuid.uuid4()}"
    async with Worker(
        client,
        task_queue=queue,
        workflows=[FailsOnceTold],
        workflow_runner=UnsandboxedWorkflowRunner(),
    ):
        handle = await client.start_workflow(
            FailsOnceTold.run,
            id="fails-once-told",
            task_queue=queue,
            task_timeout=timedelta(seconds=2),
        )
        assert await wedged(client, handle.id) is None  # healthy: waiting, nothing failing

        async def failures() -> int:
            events = [e async for e in handle.fetch_history_events()]
            return sum(e.HasField("workflow_task_failed_event_attributes") for e in events)

        async def tell_until_failed_often() -> int:
            await handle.signal(FailsOnceTold.tell)  # as shard reports reach a coordinator
            return await failures()

        await eventually(
            tell_until_failed_often, lambda n: n >= WEDGED_ATTEMPTS + 1, timeout=60, interval=0.5
        )
        desc = await handle.describe()
        # The signals keep the pending task's attempt count low: the count alone says healthy.
        assert desc.raw_description.pending_workflow_task.attempt < WEDGED_ATTEMPTS
        reason = await wedged(client, handle.id)
        assert reason is not None and "planted" in reason, reason
        await handle.terminate("test over")
        await asyncio.sleep(0)
