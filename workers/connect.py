"""Connecting to Temporal the way every Temporal tool does (TEMPORAL_ADDRESS, profiles, TLS)."""

from __future__ import annotations

from temporalio.client import Client
from temporalio.contrib.pydantic import pydantic_data_converter
from temporalio.envconfig import ClientConfig
from temporalio.runtime import PrometheusConfig, Runtime, TelemetryConfig

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


def runtime(metrics_address: str | None) -> Runtime | None:
    """A runtime serving the SDK's own metrics on `metrics_address` (host:port), if given.

    Metric names are exported exactly as the workflows spell them: no `_total` is appended to
    counters (the counters are named `..._total` themselves) and no unit suffix to anything.
    """
    if not metrics_address:
        return None
    return Runtime(
        telemetry=TelemetryConfig(
            metrics=PrometheusConfig(
                bind_address=metrics_address,
                counters_total_suffix=False,
                unit_suffix=False,
                histogram_bucket_overrides=SDK_HISTOGRAM_BUCKETS,
            )
        )
    )


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
