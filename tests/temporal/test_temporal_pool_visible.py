"""Issue 45, "Visible", on a real Temporal dev server: the coordinator's `status` shows elastic
machines one shard pays for beside idle owned ones in another, and the machines it moved for
cost; the saga it starts names its reason; the count of moves survives continue-as-new.

No shard workflow runs: the shards' reports are signalled by the test, so the transfer saga the
coordinator starts cannot complete, and nothing here waits for it to."""

from __future__ import annotations

import inspect
import time

from temporalio.testing import WorkflowEnvironment

from activities.wire import SHARD_TASK_QUEUE, CoordinatorInput
from bigfleet.models import MachineState
from bigfleet.reports import ShardReport
from tests.conftest import eventually, fleet_workers, query_retrying
from tests.core.test_pooling import elastic, idle_gpus
from tests.temporal.test_temporal_coordinator import two_shard_fleet
from workflows.coordinator import CoordinatorWorkflow
from workflows.sagas import COORDINATOR_ID

S = MachineState
AMS1 = "dc-ams/gpu-8xh100/ams-1/bare-metal"


async def test_the_coordinator_shows_elastic_machines_beside_idle_owned_ones(
    dev_env: WorkflowEnvironment,
):
    """Shard 0 pays $98/h for each of web's 3 on-demand GPUs (settled); shard 1 holds 10 idle
    owned GPUs. The status says 3 elastic machines run beside idle owned ones (profile
    dc-ams/gpu-8xh100/ams-1/bare-metal); the coordinator hands 3 of shard 1's idle GPUs to
    shard 0 for cost, in a saga whose summary says so, and still counts them after it
    continued as new (its 3 rounds a run)."""
    client = dev_env.client
    async with fleet_workers(client, two_shard_fleet(), roles=("shards",)):
        # Started with state: no new term, nothing asked of the (absent) shards first.
        state = {"term": 7, "shards": [0, 1], "providers": ["dc-ams"]}
        handle = await client.start_workflow(
            CoordinatorWorkflow.run,
            CoordinatorInput(
                shards=2, plan_seconds=1, missing_after_seconds=600, max_rounds_per_run=3,
                state=state,
            ),  # fmt: skip
            id=COORDINATOR_ID,
            task_queue=SHARD_TASK_QUEUE,
        )
        first_run = handle.result_run_id
        now = time.time()
        paying = ShardReport.of(0, now, machines={"CONFIGURED": 3}, elastic=[elastic(3, 98.0)])
        idle = ShardReport.of(1, now, machines={"IDLE": 10}, idle=idle_gpus(10, "A"))
        await handle.signal("shard_report", paying)
        await handle.signal("shard_report", idle)

        status = await eventually(
            lambda: handle.query("status"),
            lambda s: s["pool"]["moved_for_cost_last_hour"] > 0,
            timeout=60,
            what="a move for cost counted",
        )
        assert status["pool"]["by_profile"] == {AMS1: 3}
        assert status["pool"]["elastic_beside_idle_owned"] == 3
        assert status["pool"]["moved_for_cost_last_hour"] == 3
        assert status["pool"]["split_proposed"] == []  # (nobody is short)

        [saga] = [wf async for wf in client.list_workflows('WorkflowType = "TransferSaga"')]
        summary = (await client.get_workflow_handle(saga.id).describe()).static_summary()
        summary = await summary if inspect.isawaitable(summary) else summary
        assert summary == (
            "idle: 3 machine(s), shard 1 → shard 0, for cost (elastic machines paid for there)"
        )

        # The next run (reports are not carried: it waits for the shards' next ones) still
        # counts the hour's moves.
        after = await eventually(
            lambda: client.get_workflow_handle(COORDINATOR_ID).describe(),
            lambda d: d.run_id != first_run,
            timeout=60,
            what="the coordinator continued as new",
        )
        next_run = client.get_workflow_handle(COORDINATOR_ID, run_id=after.run_id)
        carried = await query_retrying(lambda: next_run.query("status"))
        assert carried["pool"]["moved_for_cost_last_hour"] == 3
        assert carried["pool"]["by_profile"] == {}
