"""One metrics endpoint per worker process (issue 48): `--metrics-port` alone carries BigFleet's
own metrics, the workflows' (cost, machines, rejected inputs, which go through the Temporal
SDK's meter) and OpenCost's node metrics of the shards' machines; and every counter a dashboard
or alert names exists from the start, at 0 (issue 34)."""

from __future__ import annotations

import asyncio
import re
import urllib.request

from prometheus_client import CollectorRegistry
from temporalio.client import Client
from temporalio.contrib.pydantic import pydantic_data_converter
from temporalio.testing import WorkflowEnvironment

from bigfleet.models import from_wire
from bigfleet.simulation.scenario import Scenario
from tests.conftest import eventually, fleet_workers
from workers.connect import runtime
from workers.node_costs import keep_node_costs
from workers.process import serve_metrics
from workers.worker import ensure_shards

FLEET = {
    "name": "metrics", "cycle_seconds": 1, "duration_seconds": 1, "shards": 1,
    "providers": [
        {"name": "dc", "kind": "bare-metal", "racks": [
            {"rack": "r1", "zone": "ams-1", "instance_type": "gpu-8xh100", "count": 2,
             "price_per_hour": 12.5}]},
    ],
    "clusters": [{"name": "a"}],
}  # fmt: skip


def scrape(port: int) -> str:
    """What the one endpoint serves."""
    with urllib.request.urlopen(f"http://127.0.0.1:{port}/metrics", timeout=5) as reply:
        return str(reply.read().decode())


async def test_one_port_serves_cost_machines_node_costs_and_zero_counters(
    dev_env: WorkflowEnvironment,
):
    registry = CollectorRegistry()
    rt = runtime(registry)
    port = serve_metrics("127.0.0.1", 0, registry)
    client = await Client.connect(
        dev_env.client.service_client.config.target_host,
        runtime=rt,
        data_converter=pydantic_data_converter,
    )
    stop = asyncio.Event()
    async with fleet_workers(client, from_wire(Scenario, FLEET)) as sim:
        await ensure_shards(client, sim.fleet, transition_poll_seconds=0.5)
        costs = asyncio.create_task(keep_node_costs(client, stop, every=0.5, registry=registry))
        try:
            text = await eventually(
                lambda: scrape(port),
                lambda t: "bigfleet_cost_dollars_per_hour{" in t
                and "bigfleet_machines{" in t
                and "node_total_hourly_cost{" in t,
                what="cost, machines and node costs on the one port",
            )
        finally:
            stop.set()
            await costs
    # Both bare-metal machines, at their price, under OpenCost's labels.
    nodes = re.findall(r'^node_total_hourly_cost\{([^}]*)\} (\S+)$', text, re.M)
    assert len(nodes) == 2, text
    for labels, value in nodes:
        assert 'instance_type="gpu-8xh100"' in labels and 'region="ams"' in labels, labels
        assert 'provider_id="dc/ams-1/' in labels, labels
        assert float(value) == 12.5
    assert re.search(r'^kubecost_node_is_spot\{[^}]*\} 0\.0$', text, re.M), text
    # The SDK's own metrics keep their names, on the same port.
    assert re.search(r"^temporal_workflow_task_execution_latency_bucket\{", text, re.M), text
    # The shard's rejection counter is there before any rejection.
    zeros = re.findall(r'^bigfleet_rejected_inputs_total\{([^}]*)\} 0\.0$', text, re.M)
    handlers = {m.group(1) for z in zeros if 'workflow="Shard"' in z
                for m in [re.search(r'handler="([^"]+)"', z)] if m}  # fmt: skip
    assert {"rollup", "(unknown)"} <= handlers, text
