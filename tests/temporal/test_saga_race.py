"""A transfer saga against the shards' own capacity look, on a real Temporal dev server with
real workers and the coordinator.

Between a saga's release and its adopt, a machine is no shard's. The donor of a speculative
slot is usually the shard the assignment rule gives it to, and every reconcile it compares its
provider's capacity with what the shards hold: a slot nobody holds at two looks in a row is
new capacity, its to adopt. A chaos run (worker and server killed mid-saga) delayed an adopt
by 31 s; the donor adopted the slot back in between, the saga then delivered it, and two
shards held it until an audit repaired it (tests/temporal/test_chaos.py, 2026-12-04). A slot
a saga carries is now nobody's new capacity (`provider_capacity` asks the coordinator).
"""

from __future__ import annotations

import asyncio

from temporalio.client import Client
from temporalio.testing import WorkflowEnvironment

from bigfleet.models import ListFilter
from tests.conftest import eventually, fleet_workers
from tests.temporal.test_saga_failures import DONOR, RECEIVER, SLOW, FaultyShardClient, owners
from tests.temporal.test_temporal_coordinator import (
    ask,
    machines_of,
    start,
    start_coordinator,
    two_shard_fleet,
)
from workers.worker import build_workers, run_workers


async def test_a_slot_in_a_late_saga_is_not_adopted_back_by_its_rule_owner(
    dev_env: WorkflowEnvironment,
):
    client: Client = dev_env.client
    raw = two_shard_fleet()  # its rack is shard 0's (DONOR) by the rule, its cluster shard 1's
    cluster = raw["clusters"][0]["name"]
    made: list[FaultyShardClient] = []

    def faulty(c: Client) -> FaultyShardClient:
        # The receiver's adopt waits 12 s: the donor looks at its capacity every second.
        made.append(FaultyShardClient(c, {("adopt", RECEIVER): SLOW}))
        return made[-1]

    async with fleet_workers(client, raw, roles=("transitions", "providers")) as sim:
        stop = asyncio.Event()
        task = asyncio.create_task(
            run_workers(build_workers(client, sim, ("shards",), shard_client=faulty), stop)
        )
        ids = [m.id for m in sim.providers["dc"].list(ListFilter())]
        doubles: dict[str, list[int]] = {}
        looks = 0

        async def watch() -> None:
            # Two holders at any moment (the donor let such a slot go again once the receiver
            # configured it, ~11 s later: only watching shows it).
            nonlocal looks
            while True:
                try:
                    owned = await owners(client, ids)
                except Exception:  # a shard between two runs answers no query: look again
                    owned = {}
                else:
                    looks += 1
                doubles.update({mid: s for mid, s in owned.items() if len(s) > 1})
                await asyncio.sleep(0.5)

        watching: asyncio.Task | None = None
        try:
            await start_coordinator(client)
            await start(client, raw, reconcile_seconds=1.0)
            watching = asyncio.create_task(watch())
            await ask(client, RECEIVER, cluster, 1_000_000, 4)
            receiver = await eventually(
                lambda: machines_of(client, RECEIVER),
                lambda m: m["CONFIGURED"] == 4,
                timeout=90,
                what="shard 1's four machines configured",
            )
            assert ("adopt", RECEIVER, SLOW) in made[0].calls  # the late adopt happened
            assert looks >= 5 and doubles == {}
            owned = await owners(client, ids)
            assert {mid: s for mid, s in owned.items() if len(s) != 1} == {}
            assert sum(receiver.values()) == 4
            assert sum((await machines_of(client, DONOR)).values()) == len(ids) - 4
        finally:
            if watching is not None:
                watching.cancel()
            stop.set()
            await task
