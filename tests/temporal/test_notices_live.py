"""Notices and repair through the shard workflow on a real dev server (issue 33): the shard
reads its providers' notices (`provider_noticed`) and drains a doomed machine within the time
left; a machine its cluster stops reporting is verified with its provider and repaired; an
operator that reports no node at all holds repair and escalates."""

from __future__ import annotations

import asyncio
import time
from typing import Any

from temporalio.client import Client
from temporalio.testing import WorkflowEnvironment

from activities.wire import CLUSTER
from bigfleet import labels as L
from bigfleet.models import ListFilter, MachineState, Notice, NoticeKind, from_wire
from bigfleet.simulation.scenario import Scenario
from tests.conftest import eventually, fleet_workers, query_retrying
from tests.temporal.test_temporal_shard import closed_for, transition_input
from workers.worker import ensure_shards
from workflows.shard import ShardWorkflow

S = MachineState
GPU = "gpu-8xh100"
FAST = dict(transition_poll_seconds=0.5, notice_seconds=1.0)


def fleet(machines: int, **policy: Any) -> Scenario:
    return from_wire(Scenario, {
        "name": "notices-test", "cycle_seconds": 1, "duration_seconds": 1, "shards": 1,
        "policy": policy,
        "providers": [{
            "name": "dc", "kind": "bare-metal", "configure_latency": 1, "drain_latency": 1,
            "racks": [{"rack": "r1", "zone": "ams-1", "instance_type": GPU, "count": machines}],
        }],
        "clusters": [{"name": "a"}, {"name": "b"}],
    })  # fmt: skip


def rollup(
    generation: int,
    count: int,
    seen: list[str] | None = None,
    cluster: str = "a",
    priority: int = 500_000,
) -> dict[str, Any]:
    need = {"requirements": [{"key": L.INSTANCE_TYPE, "operator": "In", "values": [GPU]}],
            "priority": priority, "count": count}  # fmt: skip
    out: dict[str, Any] = {"cluster": cluster, "generation": generation, "needs": [need]}
    if seen is not None:
        out["health"] = {"machine_ids": seen}
    return out


def shard(client: Client):
    return client.get_workflow_handle_for(ShardWorkflow.run, "shard-0")


async def status(client: Client) -> dict[str, Any]:
    return await query_retrying(lambda: shard(client).query(ShardWorkflow.status))


async def view(client: Client) -> dict[str, Any]:
    return await query_retrying(lambda: shard(client).query(ShardWorkflow.cluster, "a"))


def configured_for_a(sim) -> list[str]:
    return sorted(
        m.id for m in sim.providers["dc"].list(ListFilter(states=[S.CONFIGURED]))
        if m.cluster == "a"
    )  # fmt: skip


async def test_an_interruption_notice_drains_within_the_time_left_and_replaces(
    dev_env: WorkflowEnvironment,
):
    client = dev_env.client
    async with fleet_workers(client, fleet(4)) as sim:
        await ensure_shards(client, sim.fleet, **FAST)
        await shard(client).signal("rollup", rollup(1, 3))
        serving = await eventually(
            lambda: configured_for_a(sim), lambda ids: len(ids) == 3, what="a served"
        )
        doomed = serving[0]
        deadline = int(time.time()) + 90
        sim.providers["dc"].warn(
            doomed, Notice(kind=NoticeKind.INTERRUPTION, deadline_unix=deadline, detail="test")
        )
        health = await eventually(
            lambda: view(client), lambda v: doomed in v["health"]["notices"], what="noticed"
        )
        assert health["health"]["notices"][doomed]["deadline_unix"] == deadline
        [drain] = await closed_for(client, 'BigFleetTransition = "drain"', 1)
        inp = await transition_input(client, drain)
        assert inp.machine_ids == [doomed] and inp.reason == "notice"
        assert 0 < inp.grace_seconds <= 90
        assert drain.typed_search_attributes.get(CLUSTER) == "a"
        # The replacement: three configured for a again, the doomed one not among them.
        after = await eventually(
            lambda: configured_for_a(sim),
            lambda ids: len(ids) == 3 and doomed not in ids,
            what="a replacement configured",
        )
        # Drained bare metal is not deleted: it waits out of the engine's reach.
        st = await eventually(
            lambda: status(client), lambda st: st["machines"]["DRAINING"] == 0, what="drained"
        )
    assert len(set(after) - set(serving)) == 1
    assert st["machines"]["IDLE"] == 1


async def test_repair_of_an_unseen_machine_and_the_short_circuit_of_a_silent_operator(
    dev_env: WorkflowEnvironment,
):
    client = dev_env.client
    policy = {"repair_after_verifies": 1, "health_missed_reports": 2}
    async with fleet_workers(client, fleet(10, **policy)) as sim:
        await ensure_shards(client, sim.fleet, **FAST)
        await shard(client).signal("rollup", rollup(1, 5))
        serving = await eventually(
            lambda: configured_for_a(sim), lambda ids: len(ids) == 5, what="a served"
        )
        lost = serving[0]
        generation = 1

        async def report(seen: list[str]) -> list[str]:
            nonlocal generation
            generation += 1
            await shard(client).signal("rollup", rollup(generation, 5, seen))
            return configured_for_a(sim)

        # The cluster stops seeing one machine, which is up at its provider: verified, then
        # repaired (drained, replaced).
        await eventually(
            lambda: report([m for m in configured_for_a(sim) if m != lost]),
            lambda ids: lost not in ids and len(ids) == 5,
            timeout=60,
            what="the unseen machine repaired",
        )
        [drain] = await closed_for(client, 'BigFleetTransition = "drain"', 1)
        inp = await transition_input(client, drain)
        assert (inp.machine_ids, inp.reason) == ([lost], "unhealthy")
        assert sim.providers["dc"].calls["get"] >= 1  # (the verify asked the provider)

        # Now the operator reports no node at all: 5 of 5 "unhealthy" is past max_unhealthy
        # (20 %): nothing is repaired, and the shard escalates.
        async def silent() -> dict[str, Any]:
            await report([])
            return await view(client)

        held = await eventually(
            silent, lambda v: v["health"]["repair_held"] is not None, timeout=60, what="held"
        )
        for _ in range(8):  # (more cycles of silence: still nothing is repaired)
            await report([])
            await asyncio.sleep(0.5)
        st = await status(client)
        held = await view(client)
        still = configured_for_a(sim)
    assert held["health"]["repair_held"]["unhealthy"] == 5
    assert held["health"]["repair_held"]["allowed"] == 1
    assert [s["cluster"] for s in st["shortfalls"] if s.get("repair_held")] == ["a"]
    assert len(still) == 5 and lost not in still  # nothing more drained


async def test_the_coordinator_shortens_a_slow_drain_that_blocks_a_higher_priority(
    dev_env: WorkflowEnvironment,
):
    """Seed §7: b (1 000 000) preempts a (900 000); the gap of 100 000 drains with 10 min of
    grace, and the machines take all of it. Past `blocked_drain_seconds` b is short, the
    shortfall ages and is escalated, and the coordinator escalates the drains to its floor
    (0 here): b is served in seconds instead of 10 minutes."""
    from activities.wire import SHARD_TASK_QUEUE, CoordinatorInput
    from workflows.coordinator import CoordinatorWorkflow
    from workflows.sagas import COORDINATOR_ID

    client = dev_env.client
    raw = fleet(4, blocked_drain_seconds=2, escalate_after_cycles=2)
    raw = raw.model_copy(
        update={"providers": [raw.providers[0].model_copy(update={"drain_latency": 600})]}
    )
    await client.start_workflow(
        CoordinatorWorkflow.run,
        CoordinatorInput(shards=1, plan_seconds=1, drain_floor_seconds=0),
        id=COORDINATOR_ID,
        task_queue=SHARD_TASK_QUEUE,
    )
    async with fleet_workers(client, raw) as sim:
        await ensure_shards(client, sim.fleet, report_seconds=1.0, **FAST)
        await shard(client).signal("rollup", rollup(1, 4, priority=900_000))
        await eventually(lambda: configured_for_a(sim), lambda ids: len(ids) == 4, what="a")
        await shard(client).signal("rollup", rollup(1, 4, cluster="b", priority=1_000_000))

        def configured_for_b() -> list[str]:
            return [
                m.id for m in sim.providers["dc"].list(ListFilter(states=[S.CONFIGURED]))
                if m.cluster == "b"
            ]  # fmt: skip

        await eventually(configured_for_b, lambda ids: len(ids) == 4, timeout=90, what="b")
        drains = [wf async for wf in client.list_workflows('BigFleetTransition = "drain"')]
        inputs = [await transition_input(client, wf) for wf in drains]
    assert {(i.reason, i.grace_seconds) for i in inputs} == {("preempt", 600.0)}
    assert sum(len(i.machine_ids) for i in inputs) == 4
