"""Issue 44, item 3: a flood of large signals ended a shard's and the coordinator's run (36 of
1.5 MB in 1.2 s; the coordinator TERMINATED at 53.8 MB). On a real dev server started with
`bigfleet dev`'s payload limits (workers/dev/server.py BLOB_LIMITS):

- the issue's 1.5 MB signal is refused by the server and never enters a history;
- a burst of signals of the largest payload the server takes, each refused by the workflow but
  each in its history, past SURGE_BYTES since the last cycle (or round): the shard and the
  coordinator continue as new at once, their state intact, instead of carrying the burst until
  their next cycle (here 120 s away) while the next bursts add to it towards the server's
  50 MB. (Under one endless flood no continue-as-new completes — Temporal refuses it while
  signals arrive during its task — and the payload limit alone bounds it: 84 signals.)

Fails on 2e880d5: the 1.5 MB signal went in (the limit was 2 MB), and neither run continued as
new within 60 s (each waited for its next cycle or round, 120 s away).
"""

from __future__ import annotations

import pytest
from temporalio.client import Client, WorkflowExecutionStatus
from temporalio.service import RPCError

from activities.wire import SHARD_TASK_QUEUE, CoordinatorInput
from tests.conftest import TEMPORAL, eventually, fleet_workers, query_retrying
from tests.temporal.test_shard_restart import one_rack
from tests.temporal.test_temporal_coordinator import machines_of, start
from workers.dev.server import BLOB_ERROR_BYTES, BLOB_LIMITS, throwaway_server
from workflows.coordinator import CoordinatorWorkflow
from workflows.sagas import COORDINATOR_ID

LARGEST = BLOB_ERROR_BYTES - 1_000  # a signal's payload the server takes (its JSON around it)
SLOW = 120.0  # the shards' cycle and the coordinator's round: far beyond the test's patience
BURST = 16  # signals of LARGEST: 9.6 MB, past SURGE_BYTES (8 MB)


async def burst_then_continued(client: Client, wid: str, signal: str, arg: dict) -> str:
    """BURST signals of LARGEST bytes to the current run of `wid` (each sent once the run has
    recorded the last as refused), then how that run closed. (A continue-as-new is refused
    while signals arrive during its workflow task: under an endless flood none completes, and
    the server's payload limit is what bounds it. After a burst, the run hands over at once.)"""
    run = (await client.get_workflow_handle(wid).describe()).run_id
    handle = client.get_workflow_handle(wid, run_id=run)
    before = (await query_retrying(lambda: handle.query("rejections")))["total"]
    for i in range(BURST):
        try:
            await handle.signal(signal, {**arg, "pad": "x" * LARGEST})
        except RPCError:
            break  # (the run closed meanwhile)
        await eventually(
            lambda: query_retrying(lambda: handle.query("rejections")),
            lambda r, n=before + i + 1: r["total"] >= n,
            what=f"{wid}: signal {i + 1} recorded",
        )
    closed = await eventually(
        handle.describe,
        lambda d: d.status != WorkflowExecutionStatus.RUNNING,
        timeout=60,
        what=f"{wid}'s flooded run continued as new",
    )
    assert closed.status is not None
    return closed.status.name


async def test_a_flood_of_the_largest_signals_continues_the_shard_and_coordinator_as_new():
    async with await throwaway_server(TEMPORAL, BLOB_LIMITS) as env:
        client = env.client
        raw, _ = one_rack()  # 40 machines on shard 0
        raw["cycle_seconds"] = SLOW
        async with fleet_workers(client, raw):
            await client.start_workflow(
                CoordinatorWorkflow.run,
                CoordinatorInput(shards=2, plan_seconds=SLOW, missing_after_seconds=600),
                id=COORDINATOR_ID,
                task_queue=SHARD_TASK_QUEUE,
            )
            await start(client, raw)
            await eventually(lambda: machines_of(client, 0), lambda m: sum(m.values()) == 40)
            shard0 = client.get_workflow_handle("shard-0")

            # The signal: refused by the server, not in any history.
            with pytest.raises(RPCError, match="exceeds"):
                await shard0.signal("rollup", {"cluster": "c", "pad": "x" * 1_500_000})

            status = await burst_then_continued(client, "shard-0", "rollup", {"cluster": "c"})
            assert status == "CONTINUED_AS_NEW"
            after = await eventually(
                shard0.describe, lambda d: d.status == WorkflowExecutionStatus.RUNNING
            )
            assert after.raw_description.workflow_execution_info.history_size_bytes < 5_000_000
            assert sum((await machines_of(client, 0)).values()) == 40  # (its state carried)

            term = (await client.get_workflow_handle(COORDINATOR_ID).query("status"))["term"]
            status = await burst_then_continued(
                client, COORDINATOR_ID, "shard_report", {"shard": 0}
            )
            assert status == "CONTINUED_AS_NEW"
            coordinator = client.get_workflow_handle(COORDINATOR_ID)
            now = await query_retrying(lambda: coordinator.query("status"))
            assert now["term"] == term  # (the same coordinator, its state carried)
