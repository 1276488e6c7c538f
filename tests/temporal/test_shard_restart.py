"""A shard whose workflow is gone is brought back from its durable state (design §6) on a real
Temporal dev server: by the coordinator, which resets the dead run so it replays to the state it
died with, or by `bigfleet shard revive --from-snapshot`, which restarts it from its last
snapshot. Same machines, same clusters' needs, a new epoch, and every machine of the fleet
still owned by exactly one shard."""

from __future__ import annotations

import asyncio

import pytest
from temporalio.client import WorkflowExecutionStatus
from temporalio.testing import WorkflowEnvironment

from bigfleet.models import ListFilter, MachineState
from tests.conftest import (
    eventually,
    fleet_workers,
    query_retrying,
)
from tests.temporal.test_temporal_coordinator import (
    ask,
    machines_of,
    on_shard,
    start,
    start_coordinator,
    two_shard_fleet,
)
from workers import cli
from workflows.sagas import COORDINATOR_ID

S = MachineState


async def revivals(client) -> list[str]:
    """What the coordinator's `revive_shard` activities returned, in order, leaving out those
    that found the shard running and did nothing (a report late by more than the test's 3 s
    `missing_after_seconds` on a busy machine sends the coordinator to look)."""
    scheduled: set[int] = set()
    outcomes = []
    async for e in client.get_workflow_handle(COORDINATOR_ID).fetch_history_events():
        if e.HasField("activity_task_scheduled_event_attributes"):
            if e.activity_task_scheduled_event_attributes.activity_type.name == "revive_shard":
                scheduled.add(e.event_id)
        elif e.HasField("activity_task_completed_event_attributes"):
            done = e.activity_task_completed_event_attributes
            if done.scheduled_event_id in scheduled:
                [result] = await client.data_converter.decode(done.result.payloads, [str])
                if result != "running":
                    outcomes.append(result)
    return outcomes


async def revive_by_hand(client, shard: int) -> None:
    """`bigfleet shard revive N --from-snapshot`, with the coordinator stopped first (it would
    revive the shard its own way within seconds)."""
    await client.get_workflow_handle(COORDINATOR_ID).terminate("test: revive by hand")
    address = client.service_client.config.target_host
    argv = ["shard", "revive", str(shard), "--from-snapshot", "--address", address]
    assert await asyncio.to_thread(cli.main, argv) == 0


@pytest.mark.parametrize(
    "how",
    ["reset", "from-snapshot-inline", "from-snapshot-store"],
)
async def test_a_terminated_shard_is_brought_back_with_its_state(
    dev_env: WorkflowEnvironment, how: str, tmp_path, monkeypatch
):
    """Reset: the coordinator replays the dead run to its end. From a snapshot: the latest
    run's input, the snapshot inline or a reference into the snapshot store."""
    client = dev_env.client
    store = how == "from-snapshot-store"
    monkeypatch.setenv("BIGFLEET_SNAPSHOT_DIR", str(tmp_path))
    sizes = dict(snapshot_inline_bytes=1, snapshot_part_bytes=1000) if store else {}
    raw = two_shard_fleet()  # 40 machines, one rack, all on shard 0
    rack = raw["providers"][0]["racks"][0]["rack"]
    ids = [f"dc-{rack}-{i:05d}" for i in range(40)]
    cluster = on_shard("c", 0)
    raw["clusters"] = [{"name": cluster}]  # a cluster (and its operator) on shard 0
    shard0 = client.get_workflow_handle("shard-0")
    async with fleet_workers(client, raw) as sim:
        await start_coordinator(client, missing_after_seconds=3)
        # Three cycles a run: the shard continues-as-new every ~3 s, so its durable state (the
        # latest run's input) is a recent snapshot.
        await start(client, raw, max_cycles_per_run=3, **sizes)
        await ask(client, 0, cluster, 100, 4)
        await eventually(
            lambda: machines_of(client, 0), lambda m: m["CONFIGURED"] == 4, timeout=20
        )
        # A continue-as-new after the machines were configured: the snapshot holds them.
        first = (await shard0.describe()).run_id
        await eventually(shard0.describe, lambda d: d.run_id != first, timeout=10)
        before = await query_retrying(lambda: shard0.query("status"))
        states = await query_retrying(lambda: shard0.query("machine_states", ids))
        configured = sorted(m for m, s in states.items() if s == S.CONFIGURED.value)
        assert len(configured) == 4

        dead = (await shard0.describe()).run_id
        await shard0.terminate("test: the shard workflow vanished")
        if how != "reset":
            await revive_by_hand(client, 0)
        revived = await eventually(
            shard0.describe,
            lambda d: d.run_id != dead and d.status == WorkflowExecutionStatus.RUNNING,
            timeout=20,
            what="shard-0 brought back",
        )
        if how == "reset":
            # (The reset's run can be running before the activity that made it has reported.)
            await eventually(
                lambda: revivals(client),
                lambda r: "reset" in r,
                timeout=20,
                what="the coordinator's record of the reset",
            )
        assert revived.run_id != dead

        # Brought back with its state, not from scratch: a new epoch, but the cluster's needs
        # (a fresh shard would know none until the next roll-up) and its machines carried over.
        after = await eventually(
            lambda: shard0.query("status"),
            lambda s: s["epoch"] > before["epoch"] and s["cycles"] >= before["cycles"] + 3,
            timeout=15,
        )
        view = await query_retrying(lambda: shard0.query("cluster", cluster))
        assert [n["count"] for n in view["needs"]] == [4]
        assert after["machines"]["CONFIGURED"] == 4
        assert await query_retrying(lambda: shard0.query("machine_states", ids)) == states
        on_provider = [
            m.id
            for m in sim.providers["dc"].list(ListFilter())
            if m.state is S.CONFIGURED and m.cluster == cluster
        ]
        assert sorted(on_provider) == configured
        # Every machine owned by exactly one shard: all 40 on shard 0, none lost or doubled.
        assert sum(after["machines"].values()) == 40
        assert sum((await machines_of(client, 1)).values()) == 0


def one_rack() -> tuple[dict, list[str]]:
    """Two shards, one rack of 40 machines (all on shard 0), and their ids."""
    raw = two_shard_fleet()
    rack = raw["providers"][0]["racks"][0]["rack"]
    return raw, [f"dc-{rack}-{i:05d}" for i in range(40)]


async def four_moved_to_shard_1(client, raw: dict, ids: list[str]) -> set[str]:
    """Neither shard continues as new (its durable input is its first); shard 1's cluster
    needs 4 GPUs, which the coordinator moves from shard 0's rack. The 4 moved machines."""
    await start_coordinator(client, missing_after_seconds=3)
    await start(client, raw)
    await ask(client, 1, raw["clusters"][0]["name"], 1_000_000, 4)
    await eventually(lambda: machines_of(client, 1), lambda m: m["CONFIGURED"] == 4, timeout=60)
    states = await client.get_workflow_handle("shard-1").query("machine_states", ids)
    moved = {m for m, s in states.items() if s != "GONE"}
    assert len(moved) == 4
    return moved


async def test_a_reset_shard_keeps_machines_it_adopted_after_its_snapshot(
    dev_env: WorkflowEnvironment,
):
    """Shard 1 got its 4 machines after the input of its last run: restarted from that input
    it would own none of them, and no shard would (the donor released them). Reset, it replays
    the adopt and keeps them, configured for its cluster."""
    client = dev_env.client
    raw, ids = one_rack()
    shard1 = client.get_workflow_handle("shard-1")
    async with fleet_workers(client, raw):
        moved = await four_moved_to_shard_1(client, raw, ids)
        before = await query_retrying(lambda: shard1.query("status"))
        dead = (await shard1.describe()).run_id
        await shard1.terminate("test: the shard workflow vanished")
        after = await eventually(
            lambda: shard1.query("status"),
            lambda s: s["epoch"] > before["epoch"] and s["cycles"] > before["cycles"],
            timeout=30,
            what="shard-1 reset and cycling again",
        )
        assert (await shard1.describe()).run_id != dead
        await eventually(lambda: revivals(client), lambda r: r == ["reset"], timeout=20)
        states = await query_retrying(lambda: shard1.query("machine_states", ids))
        assert {m for m, s in states.items() if s != "GONE"} == moved
        assert after["machines"]["CONFIGURED"] == 4
        assert sum(after["machines"].values()) == 4
        assert sum((await machines_of(client, 0)).values()) == 36


async def test_a_shard_restarted_from_scratch_gives_up_machines_that_moved_away(
    dev_env: WorkflowEnvironment,
):
    """Shard 0 never continued as new, so its last snapshot is none: restarted from it, it
    starts from scratch and adopts its rack by the assignment rule — including 4 machines the
    coordinator has since moved to shard 1. It gives those up: each machine stays owned once."""
    client = dev_env.client
    raw, ids = one_rack()
    shard0 = client.get_workflow_handle("shard-0")
    async with fleet_workers(client, raw):
        moved = await four_moved_to_shard_1(client, raw, ids)
        dead = (await shard0.describe()).run_id
        await shard0.terminate("test: the shard workflow vanished")
        await revive_by_hand(client, 0)
        await eventually(
            shard0.describe,
            lambda d: d.run_id != dead and d.status == WorkflowExecutionStatus.RUNNING,
            timeout=20,
        )
        states = await eventually(
            lambda: shard0.query("machine_states", ids),
            lambda st: sum(s != "GONE" for s in st.values()) == 36,
            timeout=15,
            what="the revived shard 0 owning its 36",
        )
        assert {m for m, s in states.items() if s == "GONE"} == moved
        assert sum((await machines_of(client, 1)).values()) == 4
