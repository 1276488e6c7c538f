"""OpenCost's node metrics for the machines BigFleet runs (issue 48), on the worker's metrics
endpoint: `keep_node_costs` asks every running shard its `nodes` (bigfleet/node_costs.py) every
`every` seconds, and `NodeCosts` serves the last answers:

    node_total_hourly_cost, node_cpu_hourly_cost, node_ram_hourly_cost, node_gpu_hourly_cost,
    kubecost_node_is_spot   {node, instance_type, region, provider_id, cluster}

A process of role `shards` runs it (`bigfleet worker`, `bigfleet dev`): one per deployment
(deploy/kubernetes/workers.yaml runs one shards replica), so sums over `node` are the fleet's.
A machine gone from every shard is gone from the metrics at the next refresh; a shard that does
not answer keeps its last answer until it does.
"""

from __future__ import annotations

import asyncio
import logging
import threading
from collections.abc import Iterable, Iterator
from typing import Any

from prometheus_client.core import REGISTRY, GaugeMetricFamily, Metric
from prometheus_client.registry import Collector, CollectorRegistry

from activities.wire import shard_workflow_id
from bigfleet.node_costs import split
from workers.plumbing import running_shards

log = logging.getLogger("bigfleet.node_costs")

LABELS = ["node", "instance_type", "region", "provider_id", "cluster"]
GAUGES = (
    ("node_total_hourly_cost", "Total node cost per hour ($), BigFleet's price of the machine"),
    ("node_cpu_hourly_cost", "Cost per vCPU-hour ($), the node's price split as OpenCost does"),
    ("node_ram_hourly_cost", "Cost per GiB-hour of RAM ($), the node's price split"),
    ("node_gpu_hourly_cost", "Cost per GPU-hour ($), the node's price split"),
    ("kubecost_node_is_spot", "1 if the node is spot capacity"),
)


class NodeCosts(Collector):
    """The shards' last `nodes` answers, as OpenCost's gauges."""

    def __init__(self) -> None:
        self.by_shard: dict[int, dict[str, Any]] = {}
        self.lock = threading.Lock()

    def update(self, shard: int, answer: dict[str, Any]) -> None:
        with self.lock:
            self.by_shard[shard] = answer

    def keep_only(self, shards: Iterable[int]) -> None:
        keep = set(shards)
        with self.lock:
            for s in [s for s in self.by_shard if s not in keep]:
                del self.by_shard[s]

    def describe(self) -> Iterable[Metric]:
        return [GaugeMetricFamily(name, doc, labels=LABELS) for name, doc in GAUGES]

    def collect(self) -> Iterator[Metric]:
        families = [GaugeMetricFamily(name, doc, labels=LABELS) for name, doc in GAUGES]
        with self.lock:
            answers = list(self.by_shard.values())
        for answer in answers:
            profiles = answer.get("profiles", [])
            for node, p, cluster, price in answer.get("machines", []):
                prof = profiles[p]
                labels = [
                    node,
                    prof["instance_type"],
                    prof["region"],
                    f"{prof['provider']}/{prof['zone']}/{node}",
                    cluster,
                ]
                cpu, ram, gpu = split(price, prof["cpu"], prof["memory_gib"], prof["gpu"])
                values = (price, cpu, ram, gpu, 1.0 if prof["spot"] else 0.0)
                for family, value in zip(families, values, strict=True):
                    family.add_metric(labels, value)
        yield from families

    def attach(self, registry: CollectorRegistry = REGISTRY) -> NodeCosts:
        registry.register(self)
        return self


async def refresh(client: Any, costs: NodeCosts) -> None:
    """Ask every running shard its `nodes` once."""
    shards = await running_shards(client)
    for shard in shards:
        try:
            answer = await client.get_workflow_handle(shard_workflow_id(shard)).query("nodes")
        except Exception as err:  # (restoring, wedged, older code: keep the last answer)
            log.debug("node costs: shard %s: %s", shard, err)
            continue
        costs.update(shard, answer)
    costs.keep_only(shards)


async def keep_node_costs(
    client: Any, stop: asyncio.Event, every: float = 15.0, registry: Any = None
) -> None:
    """Serve the shards' node costs from `registry` and refresh them every `every` seconds
    until `stop`."""
    costs = NodeCosts().attach(registry or REGISTRY)
    try:
        while not stop.is_set():
            try:
                await refresh(client, costs)
            except Exception as err:  # the server may be down for a moment: look again later
                log.warning("node costs: %s", err)
            try:
                await asyncio.wait_for(stop.wait(), timeout=every)
            except TimeoutError:
                pass
    finally:
        (registry or REGISTRY).unregister(costs)
