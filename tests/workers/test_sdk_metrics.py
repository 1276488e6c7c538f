"""The SDK's buffered metrics as Prometheus serves them (workers/sdk_metrics.py), and a node's
price split as OpenCost splits it (bigfleet/node_costs.py)."""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

import pytest
from prometheus_client import CollectorRegistry, generate_latest
from temporalio.runtime import (
    BUFFERED_METRIC_KIND_COUNTER,
    BUFFERED_METRIC_KIND_GAUGE,
    BUFFERED_METRIC_KIND_HISTOGRAM,
)

from bigfleet.node_costs import split
from workers.sdk_metrics import SdkMetrics


@dataclass(frozen=True)
class _Metric:
    name: str
    kind: int
    description: str = ""
    unit: str = ""


@dataclass
class _Update:
    metric: _Metric
    value: float
    attributes: dict[str, Any] = field(default_factory=dict)


class _Buffer:
    def __init__(self) -> None:
        self.pending: list[_Update] = []

    def retrieve_updates(self) -> list[_Update]:
        out, self.pending = self.pending, []
        return out


def test_counters_add_up_gauges_keep_the_last_value_histograms_count_into_buckets():
    buffer = _Buffer()
    registry = CollectorRegistry()
    SdkMetrics(buffer, {"bigfleet_decision_cycle_seconds": [0.01, 0.1]}).attach(registry)
    actions = _Metric("bigfleet_actions_total", BUFFERED_METRIC_KIND_COUNTER)
    requests = _Metric("temporal_request", BUFFERED_METRIC_KIND_COUNTER)
    machines = _Metric("bigfleet_machines", BUFFERED_METRIC_KIND_GAUGE)
    cycle = _Metric("bigfleet_decision_cycle_seconds", BUFFERED_METRIC_KIND_HISTOGRAM)
    buffer.pending = [
        _Update(actions, 2, {"shard": "0", "kind": "create"}),
        _Update(actions, 3, {"shard": "0", "kind": "create"}),
        _Update(requests, 1),
        _Update(machines, 7, {"state": "IDLE"}),
        _Update(machines, 4, {"state": "IDLE"}),
        _Update(cycle, 0.005, {"shard": "0"}),
        _Update(cycle, 0.05, {"shard": "0"}),
    ]
    text = generate_latest(registry).decode()
    buffer.pending = [_Update(actions, 1, {"shard": "0", "kind": "create"})]
    again = generate_latest(registry).decode()
    assert "# TYPE bigfleet_actions_total counter" in text
    assert 'bigfleet_actions_total{kind="create",shard="0"} 5.0' in text
    assert 'bigfleet_actions_total{kind="create",shard="0"} 6.0' in again
    # A counter the SDK names without _total keeps its name (untyped).
    assert "# TYPE temporal_request untyped" in text and "\ntemporal_request 1.0" in text
    assert 'bigfleet_machines{state="IDLE"} 4.0' in text
    assert 'bigfleet_decision_cycle_seconds_bucket{le="0.01",shard="0"} 1.0' in text
    assert 'bigfleet_decision_cycle_seconds_bucket{le="0.1",shard="0"} 2.0' in text
    assert 'bigfleet_decision_cycle_seconds_bucket{le="+Inf",shard="0"} 2.0' in text
    assert 'bigfleet_decision_cycle_seconds_count{shard="0"} 2.0' in text


def test_a_price_splits_into_per_unit_prices_that_add_back_up():
    cpu, ram, gpu = split(98.32, cpu=192, ram_gib=2048, gpu=8)
    assert cpu * 192 + ram * 2048 + gpu * 8 == pytest.approx(98.32)
    assert gpu / cpu == pytest.approx(0.95 / 0.031611)
    assert split(1.0, 0, 0, 0) == (0.0, 0.0, 0.0)
