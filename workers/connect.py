"""Connecting to Temporal the way every Temporal tool does (TEMPORAL_ADDRESS, profiles, TLS)."""

from __future__ import annotations

from prometheus_client import REGISTRY, CollectorRegistry
from temporalio.client import Client
from temporalio.contrib.pydantic import pydantic_data_converter
from temporalio.envconfig import ClientConfig
from temporalio.runtime import Runtime, TelemetryConfig

from workers.sdk_metrics import SdkMetrics, metric_buffer

# Buckets of the workflows' histograms (the SDK's default ones, 50 … 10000, are milliseconds).
# Keys are the metric names exactly as the workflows create them.
SDK_HISTOGRAM_BUCKETS: dict[str, list[float]] = {
    # decide() plus applying its actions: sub-millisecond for a small shard, ~1 s is too slow.
    "bigfleet_decision_cycle_seconds": [
        0.0005, 0.001, 0.0025, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1.0, 2.0,
    ],
    # A create or configure takes seconds to minutes; a drain its grace period, up to an hour+.
    "bigfleet_transition_duration_seconds": [
        1.0, 5.0, 15.0, 30.0, 60.0, 120.0, 300.0, 600.0, 900.0, 1800.0, 3600.0, 7200.0, 14400.0,
    ],
}


def runtime(registry: CollectorRegistry | None = None) -> Runtime:
    """A runtime whose metrics (the workflows' and the SDK's own) are served from `registry`
    (prometheus_client's global one by default: what `serve_metrics` serves), under the names
    the workflows and the SDK give them (workers/sdk_metrics.py): one endpoint per process."""
    buffer = metric_buffer()
    rt = Runtime(telemetry=TelemetryConfig(metrics=buffer))
    SdkMetrics(buffer, SDK_HISTOGRAM_BUCKETS).attach(registry or REGISTRY)
    return rt


async def connect(
    address: str | None = None,
    namespace: str | None = None,
    rt: Runtime | None = None,
) -> Client:
    """A Temporal client for `address` and `namespace` (else the environment and profiles), with
    BigFleet's pydantic data converter; `rt`: the SDK runtime (its metrics)."""
    config = dict(ClientConfig.load_client_connect_config())
    if address:
        config["target_host"] = address
    if namespace:
        config["namespace"] = namespace
    config.setdefault("target_host", "localhost:7233")
    return await Client.connect(
        **config, data_converter=pydantic_data_converter, runtime=rt
    )
