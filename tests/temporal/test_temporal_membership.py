"""Shard membership on a real Temporal dev server (design §16): a split keeps every cluster and
every machine on exactly one shard and redirects roll-ups; a merge puts them back together and
ends the emptied shard; a decommission takes each shard's proportional share out of the fleet."""

from __future__ import annotations

import asyncio

from temporalio.client import WorkflowExecutionStatus
from temporalio.testing import WorkflowEnvironment

from activities.wire import MACHINE_IDS, DecommissionRequest, MembershipResult
from bigfleet.models import ListFilter
from tests.conftest import eventually, fleet_workers
from tests.temporal.test_saga_failures import REFUSE, FaultyShardClient
from tests.temporal.test_temporal_coordinator import REQ, gpu_fleet, machines_of, on_shard, start
from workers import cli
from workers.routing import assign_cluster
from workers.worker import build_workers, run_workers
from workflows.sagas import COORDINATOR_ID

CLUSTERS = {"a": 6, "b": 4, "c": 3, "d": 1}


def fleet(shards: int, racks: dict[str, int]) -> dict:
    return gpu_fleet(shards, racks, [*CLUSTERS, "busy"])


async def send(client, shard: int, cluster: str, count: int, generation: int = 1) -> None:
    need = {"requirements": REQ, "priority": 100_000, "count": count}
    await client.get_workflow_handle(f"shard-{shard}").signal(
        "rollup", {"cluster": cluster, "generation": generation, "needs": [need]}
    )


async def owners(client, shards: list[int], ids: list[str]) -> dict[str, list[int]]:
    """Which shards own each machine (a machine a shard does not own shows as GONE there, one
    it took out of the fleet as DECOMMISSIONED)."""
    out: dict[str, list[int]] = {mid: [] for mid in ids}
    for shard in shards:
        states = await client.get_workflow_handle(f"shard-{shard}").query("machine_states", ids)
        for mid, state in states.items():
            if state not in ("GONE", "DECOMMISSIONED"):
                out[mid].append(shard)
    return out


async def clusters_of(client, shard: int) -> set[str]:
    return set((await client.get_workflow_handle(f"shard-{shard}").query("status"))["clusters"])


async def test_a_split_keeps_everything_once_and_a_merge_puts_it_back(
    dev_env: WorkflowEnvironment,
):
    client = dev_env.client
    raw = fleet(1, {"r1": 10, "r2": 8, "r3": 6})
    async with fleet_workers(client, raw) as sim:
        await start(client, raw)
        for cluster, count in CLUSTERS.items():
            assert await assign_cluster(client, cluster, 1) == 0
            await send(client, 0, cluster, count)
        await eventually(
            lambda: machines_of(client, 0), lambda m: m["CONFIGURED"] == 14, timeout=60
        )
        ids = [m.id for m in sim.providers["dc"].list(ListFilter())]
        coordinator = client.get_workflow_handle(COORDINATOR_ID)

        saga = await coordinator.execute_update("split_shard", 0)
        split = await client.get_workflow_handle(saga, result_type=MembershipResult).result()
        assert split.failed_step is None and split.machines > 0
        assert len(split.clusters) == 2
        moved = set(split.clusters)
        # Every cluster and every machine on exactly one shard; half of each moved.
        assert await clusters_of(client, 1) == moved
        assert await clusters_of(client, 0) == set(CLUSTERS) - moved
        owned = await owners(client, [0, 1], ids)
        assert all(len(shards) == 1 for shards in owned.values()), owned
        assert abs(sum(s == [1] for s in owned.values()) - len(ids) / 2) <= 10
        # The moved clusters keep their configured machines on the new shard, which decides.
        new = await eventually(
            lambda: machines_of(client, 1),
            lambda m: m["CONFIGURED"] == sum(CLUSTERS[c] for c in moved),
        )
        assert sum(new.values()) == split.machines
        status = await coordinator.query("status")
        assert status["shards"] == [0, 1]
        assert all(status["clusters"][c] == 1 for c in moved)
        # A sender that still signals the old shard is passed on to the new one.
        grown = sorted(moved)[0]
        await send(client, 0, grown, CLUSTERS[grown] + 1, generation=2)
        await eventually(
            lambda: client.get_workflow_handle("shard-1").query("cluster", grown),
            lambda v: v["needs"] and v["needs"][0]["count"] == CLUSTERS[grown] + 1,
        )
        assert await assign_cluster(client, grown, 1) == 1

        # Merged back by a human: `bigfleet shard merge 1 --into 0 --wait`.
        address = client.service_client.config.target_host
        argv = ["shard", "merge", "1", "--into", "0", "--wait", "--address", address]
        assert await asyncio.to_thread(cli.main, argv) == 0
        assert await clusters_of(client, 0) == set(CLUSTERS)
        owned = await owners(client, [0], ids)
        assert all(shards == [0] for shards in owned.values())
        await eventually(  # its workflow ends at its next cycle
            lambda: client.get_workflow_handle("shard-1").describe(),
            lambda d: d.status == WorkflowExecutionStatus.COMPLETED,
        )
        status = await eventually(
            lambda: coordinator.query("status"), lambda s: not s["membership"]
        )
        assert status["shards"] == [0] and status["clusters"][grown] == 0

        # A new, empty shard by hand: `bigfleet shard add`. Number 1 retired, so it is 2, and
        # the next new cluster goes to it (fewest clusters).
        assert await asyncio.to_thread(cli.main, ["shard", "add", "--address", address]) == 0
        assert (await coordinator.query("status"))["shards"] == [0, 2]
        assert await assign_cluster(client, "e", 1) == 2
        await send(client, 2, "e", 1)
        # It decides (it is not waiting for a split): no machines yet, so a shortfall.
        st = await eventually(
            lambda: client.get_workflow_handle("shard-2").query("status"),
            lambda st: [s["count"] for s in st["shortfalls"]] == [1],
        )
        assert st["clusters"] == ["e"]


async def test_a_decommission_takes_each_shards_share(dev_env: WorkflowEnvironment):
    """10 machines out of a fleet of 30 whose shards own 20 and 10: 7 and 3 (largest
    remainder), free ones first, configured ones drained; bare metal goes back to its
    provider free, and no shard owns it any more."""
    client = dev_env.client
    big, small = on_shard("rack", 0), on_shard("rack", 1)
    raw = fleet(2, {big: 20, small: 10})
    async with fleet_workers(client, raw) as sim:
        await start(client, raw)
        await send(client, 0, "busy", 16)  # 4 free on shard 0: the other 3 of its share drain
        await eventually(
            lambda: machines_of(client, 0), lambda m: m["CONFIGURED"] == 16, timeout=60
        )
        ids = [m.id for m in sim.providers["dc"].list(ListFilter())]
        coordinator = client.get_workflow_handle(COORDINATOR_ID)
        out = await coordinator.execute_update(
            "decommission", DecommissionRequest(provider="dc", count=10, grace_seconds=0)
        )
        assert out["shares"] == {"0": 7, "1": 3}
        for saga in out["sagas"]:
            await client.get_workflow_handle(saga).result()
        owned = await owners(client, [0, 1], ids)
        assert all(len(s) <= 1 for s in owned.values())  # (the coordinator may refill busy)
        left = [mid for mid, s in owned.items() if not s]
        assert len(left) == 10
        marked = {
            shard: sorted(
                m
                for m, st in (
                    await client.get_workflow_handle(f"shard-{shard}").query("machine_states", ids)
                ).items()
                if st == "DECOMMISSIONED"
            )
            for shard in (0, 1)
        }
        assert sorted(marked[0] + marked[1]) == sorted(left)  # never adopted again
        assert sum(mid.startswith(f"dc-{big}-") for mid in left) == 7
        listed = {m.id: m for m in sim.providers["dc"].list(ListFilter())}
        free = ("IDLE", "SPECULATIVE")  # drained, or never claimed: free at the provider
        assert all(listed[mid].state.value in free and not listed[mid].cluster for mid in left)
        drained = [
            wf
            async for wf in client.list_workflows(
                'BigFleetTransition = "drain" AND BigFleetShard = "0"'
            )
        ]
        # The free machines went first (drains merged into workflows: `drain_batch`).
        assert sum(len(wf.typed_search_attributes.get(MACHINE_IDS) or []) for wf in drained) == 3


async def test_new_capacity_is_spread_and_gone_capacity_given_up(dev_env: WorkflowEnvironment):
    """Seed §16: quota that grows after the shards started is adopted, each new slot by the
    shard the assignment rule gives it to, once; quota that shrinks takes speculative slots
    away from the shards that held them."""
    client = dev_env.client
    line = {
        "instance_type": "m6i.xlarge",
        "zone": "us-east-1a",
        "capacity_type": "on-demand",
        "count": 10,
        "price_per_hour": 6.0,
    }
    raw = {
        "name": "quota",
        "cycle_seconds": 1,
        "duration_seconds": 1,
        "shards": 2,
        "providers": [{"name": "aws", "kind": "cloud", "quota": [line]}],
        "clusters": [],
    }

    async def speculative() -> list[int]:
        return [(await machines_of(client, s))["SPECULATIVE"] for s in (0, 1)]

    async with fleet_workers(client, raw) as sim:
        await start(client, raw)
        before = await eventually(speculative, lambda c: sum(c) == 10)
        aws = sim.providers["aws"]
        aws.set_quota("m6i.xlarge", "us-east-1a", "on-demand", 30)
        after = await eventually(speculative, lambda c: sum(c) == 30, timeout=40)
        assert all(a > b for a, b in zip(after, before, strict=True))  # both got a share
        ids = [m.id for m in aws.list(ListFilter())]
        owned = await owners(client, [0, 1], ids)
        assert all(len(s) == 1 for s in owned.values()), owned

        aws.set_quota("m6i.xlarge", "us-east-1a", "on-demand", 4)
        await eventually(speculative, lambda c: sum(c) == 4, timeout=40)


async def test_a_split_whose_receiver_refuses_gives_everything_back(
    dev_env: WorkflowEnvironment,
):
    """The new shard refuses its first part: the part and everything not yet handed over go
    back to the donor, which serves its clusters again; the empty new shard is stopped."""
    client = dev_env.client
    raw = fleet(1, {"r1": 10, "r2": 8})
    faults = {("take_in", 1): REFUSE}
    async with fleet_workers(client, raw, roles=("transitions", "providers")) as sim:
        stop = asyncio.Event()
        workers = build_workers(
            client, sim, ("shards",), shard_client=lambda c: FaultyShardClient(c, faults)
        )
        task = asyncio.create_task(run_workers(workers, stop))
        try:
            await start(client, raw)
            for cluster, count in CLUSTERS.items():
                await send(client, 0, cluster, count)
            await eventually(
                lambda: machines_of(client, 0), lambda m: m["CONFIGURED"] == 14, timeout=60
            )
            ids = [m.id for m in sim.providers["dc"].list(ListFilter())]
            saga = await client.get_workflow_handle(COORDINATOR_ID).execute_update(
                "split_shard", 0
            )
            result = await client.get_workflow_handle(saga, result_type=MembershipResult).result()
            assert result.failed_step == "take_in" and "injected" in (result.error or "")
            assert result.machines == 0 and result.clusters == [] and result.returned > 0
            assert await clusters_of(client, 0) == set(CLUSTERS)
            assert all(s == [0] for s in (await owners(client, [0], ids)).values())
            await eventually(  # the donor decides again: its clusters keep their machines
                lambda: machines_of(client, 0), lambda m: m["CONFIGURED"] == 14
            )
            new = await client.get_workflow_handle("shard-1").describe()
            assert new.status == WorkflowExecutionStatus.TERMINATED
            status = await eventually(
                lambda: client.get_workflow_handle(COORDINATOR_ID).query("status"),
                lambda s: not s["membership"],
            )
            assert status["shards"] == [0]
        finally:
            stop.set()
            await task
