"""A shard asks before it preempts, live (issue 45): on a real Temporal dev server with two shards
and the coordinator, shard 0 holds free GPU servers and shard 1's GPU servers are all held by
backfill. A 1 000 000-priority need on shard 1 would preempt the backfill at once (design §8);
told by the coordinator's summary that shard 0 holds matching free machines, it waits instead
(`Policy.ask_before_preempt_seconds`, 90 s) and is served by a transfer: nothing drains on
shard 1, the backfill keeps every machine."""

from __future__ import annotations

from temporalio.testing import WorkflowEnvironment

from tests.conftest import eventually, fleet_workers
from tests.temporal.test_temporal_coordinator import (
    ask,
    gpu_fleet,
    machines_of,
    on_shard,
    start,
    start_coordinator,
)


async def test_a_need_is_served_from_another_shard_instead_of_preempting(
    dev_env: WorkflowEnvironment,
):
    client = dev_env.client
    backfill, urgent = on_shard("backfill", 1), on_shard("urgent", 1)
    raw = gpu_fleet(2, {on_shard("rack", 0): 8, on_shard("rack", 1): 4}, [backfill, urgent])
    async with fleet_workers(client, raw):
        await start_coordinator(client)
        await start(client, raw)
        await ask(client, 1, backfill, 0, 4)
        await eventually(lambda: machines_of(client, 1), lambda m: m["CONFIGURED"] == 4, timeout=60)
        shard1 = client.get_workflow_handle("shard-1")
        # The coordinator has told shard 1 what shard 0 holds free.
        await eventually(
            lambda: shard1.query("status"), lambda s: s["free_elsewhere"] >= 2, timeout=60
        )

        await ask(client, 1, urgent, 1_000_000, 2)

        served = await eventually(
            lambda: machines_of(client, 1), lambda m: m["CONFIGURED"] == 6, timeout=80
        )
        assert sum(served.values()) == 6  # its own 4, and 2 moved from shard 0
        assert sum((await machines_of(client, 0)).values()) == 6
        drains = [
            wf.id
            async for wf in client.list_workflows(
                'BigFleetTransition = "drain" AND BigFleetShard = "1"'
            )
        ]
        assert drains == []  # nothing preempted
        sagas = [wf.id async for wf in client.list_workflows('WorkflowType = "TransferSaga"')]
        assert sagas and not any(s.startswith("saga-preempt-") for s in sagas)
        status = await shard1.query("status")
        assert status["shortfalls"] == []
        assert status["rejected_inputs"].get("pool_summary", 0) == 0
