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
    REQ,
    ask,
    gpu_fleet,
    machines_of,
    on_shard,
    start,
    start_coordinator,
)

# The urgent need fits shard 0's A100s and shard 1's H100s; the backfill only H100s, so until the
# urgent need comes no need fits the A100s and the coordinator leaves them where they are
# (free machines follow demand: bigfleet/pooling/headroom.py).
EITHER = [{**REQ[0], "values": ["gpu-8xh100", "gpu-8xa100"]}]


async def test_a_need_is_served_from_another_shard_instead_of_preempting(
    dev_env: WorkflowEnvironment,
):
    client = dev_env.client
    backfill, urgent = on_shard("backfill", 1), on_shard("urgent", 1)
    a100s, h100s = on_shard("rack", 0), on_shard("rack", 1)
    raw = gpu_fleet(2, {a100s: 8, h100s: 4}, [backfill, urgent], {a100s: "gpu-8xa100"})
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

        await ask(client, 1, urgent, 1_000_000, 2, EITHER)

        await eventually(lambda: machines_of(client, 1), lambda m: m["CONFIGURED"] == 6, timeout=80)
        # Its own 4, and 2 moved from shard 0 (then up to 2 free A100s more, by demand).
        both = [await machines_of(client, s) for s in (0, 1)]
        assert sum(sum(m.values()) for m in both) == 12 and sum(both[1].values()) in (6, 7, 8)
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
