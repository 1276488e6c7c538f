"""Connecting to Temporal the way every Temporal tool does (TEMPORAL_ADDRESS, profiles, TLS)."""

from __future__ import annotations

from temporalio.client import Client
from temporalio.contrib.pydantic import pydantic_data_converter
from temporalio.envconfig import ClientConfig
from temporalio.runtime import PrometheusConfig, Runtime, TelemetryConfig


def runtime(metrics_address: str | None) -> Runtime | None:
    """A runtime serving the SDK's own metrics on `metrics_address` (host:port), if given."""
    if not metrics_address:
        return None
    return Runtime(
        telemetry=TelemetryConfig(metrics=PrometheusConfig(bind_address=metrics_address))
    )


async def connect(
    address: str | None = None,
    namespace: str | None = None,
    rt: Runtime | None = None,
) -> Client:
    config = dict(ClientConfig.load_client_connect_config())
    if address:
        config["target_host"] = address
    if namespace:
        config["namespace"] = namespace
    config.setdefault("target_host", "localhost:7233")
    return await Client.connect(
        **config, data_converter=pydantic_data_converter, runtime=rt
    )
