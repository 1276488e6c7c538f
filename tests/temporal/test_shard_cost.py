"""Cost you can see live (issue 31), on a real shard workflow: its `status` and `cluster`
queries carry its $/h, `bigfleet status` and `bigfleet cluster` print them, and each cycle sets
`bigfleet_cost_dollars_per_hour`, `bigfleet_idle_owned_machines` and
`bigfleet_elastic_while_owned_idle_machines` through the workflow's metric meter."""

from __future__ import annotations

import asyncio
from typing import Any

from temporalio.testing import WorkflowEnvironment

from tests.conftest import eventually, fleet_workers
from tests.temporal.test_temporal_coordinator import start
from tests.temporal.test_temporal_transitions import metered
from workers import cli

BM = "dc/gpu-8xh100/ams-1/bare-metal"
FLEET = {
    "name": "cost-fleet",
    "cycle_seconds": 1,
    "duration_seconds": 1,
    "shards": 1,
    "providers": [
        {
            "name": "dc",
            "kind": "bare-metal",
            "configure_latency": 1,
            "drain_latency": 1,
            "racks": [
                {"rack": "r1", "zone": "ams-1", "instance_type": "gpu-8xh100", "count": 3,
                 "price_per_hour": 15.0},  # fmt: skip
            ],
        }
    ],
    "clusters": [{"name": "web"}],
}
LABELS = ("cluster", "priority_band", "capacity_type", "profile")
NEED = {"requirements": [], "priority": 900_000, "count": 2}


def last_set(buffer: Any) -> dict[tuple[str, tuple[tuple[str, str], ...]], float]:
    """The last value each gauge of shard 0 was set to, per (name, its other attributes)."""
    out = {}
    for u in buffer.retrieve_updates():
        if u.metric.name.startswith(("bigfleet_cost", "bigfleet_idle", "bigfleet_elastic")):
            a = dict(u.attributes)  # (with the SDK's namespace, task_queue, workflow_type)
            assert a["shard"] == "0"
            mine = {k: v for k, v in a.items() if k in LABELS}
            out[(u.metric.name, tuple(sorted(mine.items())))] = float(u.value)
    return out


def cost(cluster: str, band: str, capacity_type: str) -> tuple[str, tuple[tuple[str, str], ...]]:
    labels = {"capacity_type": capacity_type, "cluster": cluster, "priority_band": band}
    return ("bigfleet_cost_dollars_per_hour", tuple(sorted(labels.items())))


async def test_status_cluster_and_gauges_carry_the_cost(dev_env: WorkflowEnvironment, capsys):
    client = dev_env.client
    address = client.service_client.config.target_host
    workers_client, buffer = await metered(dev_env)
    shard = client.get_workflow_handle("shard-0")
    async with fleet_workers(workers_client, FLEET):
        await start(client, FLEET)
        await shard.signal("rollup", {"cluster": "web", "generation": 1, "needs": [NEED]})
        status = await eventually(
            lambda: shard.query("status"),
            lambda s: s["machines"].get("CONFIGURED") == 2 and s["spend"] is not None,
            timeout=60,
            what="web's two machines configured",
        )
        # Two machines at 900 000 for web, one idle: owned, so paid for all the same.
        spend = status["spend"]
        assert spend["dollars_per_hour"] == 45.0
        assert spend["by_capacity_type"] == {
            "on-demand": 0.0, "spot": 0.0, "reserved": 0.0, "bare-metal": 45.0,
        }  # fmt: skip
        assert spend["by_band"] == {">=900000": 30.0, "unassigned": 15.0}
        assert spend["idle_owned_machines"] == {BM: 1}
        assert spend["elastic_while_owned_idle_machines"] == 0
        assert spend["at"] > 0
        view = await shard.query("cluster", "web")
        assert view["spend"] == {
            "dollars_per_hour": 30.0,
            "by_band": {">=900000": {"bare-metal": 30.0}},
        }

        capsys.readouterr()
        assert await asyncio.to_thread(cli.main, ["status", "--address", address]) == 0
        out = capsys.readouterr().out
        assert "cost:       $45.00/h (bare-metal $45.00); idle owned 1" in out
        assert await asyncio.to_thread(cli.main, ["cluster", "web", "--address", address]) == 0
        out = capsys.readouterr().out
        assert "  cost:      $30.00/h\n    >=900000: bare-metal $30.00" in out

    gauges = last_set(buffer)
    assert gauges[cost("web", ">=900000", "bare-metal")] == 30.0
    assert gauges[cost("", "unassigned", "bare-metal")] == 15.0
    assert gauges[("bigfleet_idle_owned_machines", (("profile", BM),))] == 1
    assert gauges[("bigfleet_elastic_while_owned_idle_machines", ())] == 0
