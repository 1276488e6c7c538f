"""Every counter a dashboard or alert names exists from the start, at 0 (issue 34): a shard
that has refused nothing still exports `bigfleet_rejected_inputs_total` for each of its
handlers, so `increase(...)` in the alert has a series to read before the first rejection."""

from __future__ import annotations

import re
import urllib.request

from temporalio.client import Client
from temporalio.testing import WorkflowEnvironment

from bigfleet.models import from_wire
from bigfleet.simulation.scenario import Scenario
from tests.conftest import eventually, fleet_workers
from tests.procs import free_port
from workers.connect import runtime
from workers.worker import ensure_shards

FLEET = {
    "name": "metrics", "cycle_seconds": 1, "duration_seconds": 1, "shards": 1,
    "providers": [{"name": "dc", "kind": "bare-metal", "racks": [
        {"rack": "r1", "zone": "ams-1", "instance_type": "gpu-8xh100", "count": 1}]}],
    "clusters": [{"name": "a"}],
}  # fmt: skip


def scrape(address: str) -> str:
    """The lines of the rejection counter the SDK's Prometheus endpoint serves."""
    with urllib.request.urlopen(f"http://{address}/metrics", timeout=5) as reply:
        text = reply.read().decode()
    return "\n".join(x for x in text.splitlines() if x.startswith("bigfleet_rejected_inputs"))


async def test_rejected_inputs_are_exported_at_zero_before_any_rejection(
    dev_env: WorkflowEnvironment,
):
    address = f"127.0.0.1:{free_port()}"
    client = await Client.connect(
        dev_env.client.service_client.config.target_host, runtime=runtime(address)
    )
    async with fleet_workers(client, from_wire(Scenario, FLEET)) as sim:
        await ensure_shards(client, sim.fleet, transition_poll_seconds=0.5)
        text = await eventually(
            lambda: scrape(address),
            lambda t: 'workflow="Shard"' in t,
            what="the shard's rejection counter exported",
        )
    zeros = re.findall(
        r'^bigfleet_rejected_inputs_total\{[^}]*handler="([^"]+)"[^}]*workflow="Shard"[^}]*\} 0$',
        text,
        re.M,
    ) + re.findall(
        r'^bigfleet_rejected_inputs_total\{[^}]*workflow="Shard"[^}]*handler="([^"]+)"[^}]*\} 0$',
        text,
        re.M,
    )
    assert {"rollup", "(unknown)"} <= set(zeros), text
