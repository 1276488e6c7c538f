"""Moves for the fleet's cost keep to do-not-disrupt marks (issue 44, item 5), on a real shard
workflow over simulated providers: research (priority 0) runs on the 4 owned GPU racks and
marks them do-not-disrupt; inference asks for 2 machines at 900 000, which it may run on those
racks or on on-demand p5 at $98/h. Displacing research for cost would be held back by the
marks (before: the shard asked for it anyway, so bought nothing and inference waited for the
marks' life); the shard buys 2 p5 instead and research keeps every machine."""

from __future__ import annotations

import asyncio
import time
from typing import Any

from temporalio.testing import WorkflowEnvironment

from bigfleet import labels as L
from bigfleet.models import ListFilter, MachineState
from tests.conftest import eventually, fleet_workers, query_retrying
from tests.temporal.test_temporal_coordinator import start
from tests.temporal.test_temporal_shard import fleet
from workers import cli

S = MachineState
GPU, P5 = "gpu-8xh100", "p5.48xlarge"
AWS = {
    "name": "aws",
    "kind": "cloud",
    "create_latency": [1, 1],
    "configure_latency": 1,
    "drain_latency": 1,
    "quota": [
        {
            "instance_type": P5,
            "zone": "eu-west-1a",
            "capacity_type": "on-demand",
            "count": 4,
            "price_per_hour": 98.0,
        },
    ],
}
# One rack of 4 GPU servers (test_temporal_shard's fleet), on-demand p5 beside it.
FLEET = fleet(4, configure_latency=1, drain_latency=1).model_dump(mode="json", exclude_unset=True)
FLEET["providers"].append(AWS)
FLEET["clusters"] = [{"name": "research"}, {"name": "infer"}]
BARE = {"key": L.CAPACITY_TYPE, "operator": "In", "values": ["bare-metal"]}


def research(generation: int, marks: list[str]) -> dict[str, Any]:
    need = {
        "requirements": [{"key": L.INSTANCE_TYPE, "operator": "In", "values": [GPU]}, BARE],
        "priority": 0,
        "count": 4,
    }
    until = time.time() + 3600
    return {
        "cluster": "research",
        "generation": generation,
        "needs": [need],
        "disruption": {"do_not_disrupt": [{"machine_id": m, "until": until} for m in marks]},
    }


INFER = {
    "cluster": "infer",
    "generation": 1,
    "needs": [
        {
            "requirements": [{"key": L.INSTANCE_TYPE, "operator": "In", "values": [GPU, P5]}],
            "priority": 900_000,
            "count": 2,
        }
    ],
}


def held(sim, provider: str) -> dict[str, tuple[MachineState, str | None]]:
    return {m.id: (m.state, m.cluster) for m in sim.providers[provider].list(ListFilter())}


async def research_marks_its_racks(sim, shard) -> dict[str, tuple[MachineState, str | None]]:
    """Research served on the 4 racks, which it then marks do-not-disrupt; inference asks."""
    await shard.signal("rollup", research(1, []))
    racks = await eventually(
        lambda: held(sim, "dc"),
        lambda ms: len(ms) == 4 and set(ms.values()) == {(S.CONFIGURED, "research")},
        timeout=60,
        what="research on the 4 racks",
    )
    await shard.signal("rollup", research(2, sorted(racks)))
    await shard.signal("rollup", INFER)
    return racks


async def test_marked_backfill_is_not_displaced_for_cost_the_shard_buys(
    dev_env: WorkflowEnvironment,
):
    client = dev_env.client
    shard = client.get_workflow_handle("shard-0")
    async with fleet_workers(client, FLEET) as sim:
        await start(client, FLEET)
        racks = await research_marks_its_racks(sim, shard)
        bought = await eventually(
            lambda: held(sim, "aws"),
            lambda ms: sum(1 for v in ms.values() if v == (S.CONFIGURED, "infer")) == 2,
            timeout=60,
            what="inference on 2 on-demand p5",
        )
        view = await query_retrying(lambda: shard.query("cluster", "research"))
        status = await query_retrying(lambda: shard.query("status"))

    assert held(sim, "dc") == racks  # (research kept every machine: nothing drained)
    assert sum(1 for v in bought.values() if v[1] == "infer") == 2
    assert view["disruption"]["do_not_disrupt"] == 4
    assert view["disruption"]["held_back"] == {}
    assert [s for s in status["shortfalls"] if s["cluster"] == "infer"] == []


async def test_a_need_waiting_on_held_machines_is_a_shortfall_bigfleet_status_shows(
    dev_env: WorkflowEnvironment, capsys
):
    """Nothing for sale: inference can only preempt research's marked racks, below the
    override gap. The shard holds the drains back, and inference's wait is a shortfall that
    says why, in the shard's status and `bigfleet status` (before: no shortfall at all)."""
    client = dev_env.client
    address = client.service_client.config.target_host
    shard = client.get_workflow_handle("shard-0")
    racks_only = {**FLEET, "providers": FLEET["providers"][:1]}
    async with fleet_workers(client, racks_only) as sim:
        await start(client, racks_only)
        racks = await research_marks_its_racks(sim, shard)
        status = await eventually(
            lambda: query_retrying(lambda: shard.query("status")),
            lambda st: any(s["cluster"] == "infer" for s in st["shortfalls"]),
            timeout=60,
            what="inference's shortfall",
        )
        capsys.readouterr()
        assert await asyncio.to_thread(cli.main, ["status", "--address", address]) == 0
        out = capsys.readouterr().out

    [short] = [s for s in status["shortfalls"] if s["cluster"] == "infer"]
    why = (
        "waiting on 2 machine(s) it preempts that their clusters hold back "
        "(cluster research: 2 marked do-not-disrupt)"
    )
    assert (short["count"], short["held_back"], short["why"]) == (2, 2, why)
    assert [s for s in status["shortfalls"] if s["cluster"] == "research"] == []
    assert "at priority 900000, " in out and why in out
    assert held(sim, "dc") == racks  # (held back: nothing drained)
