"""The simulated providers and operators a scenario (or a dev fleet file) describes.

The simulator runs them on its virtual clock; `bigfleet worker`/`bigfleet dev` run the same
objects on workflow time.
"""

from __future__ import annotations

import zlib
from collections.abc import Callable

from ..operators import SimulatedOperator
from ..providers.simulated.baremetal import SimulatedBareMetalProvider
from ..providers.simulated.cloud import SimulatedCloudProvider
from ..providers.simulated.provider import SimulatedProvider
from .scenario import CloudProviderSpec, ProviderSpec, Scenario

Clock = Callable[[], float]


def provider(spec: ProviderSpec, clock: Clock, seed: int) -> SimulatedProvider:
    if isinstance(spec, CloudProviderSpec):
        region = spec.region or spec.quota[0].zone.rstrip("abcdefghijklmnopqrstuvwxyz")
        return SimulatedCloudProvider(
            spec.name,
            region,
            spec.quota,
            clock,
            seed,
            api_calls_per_second=spec.api_calls_per_second,
            create_latency=spec.create_latency,
            configure_latency=spec.configure_latency,
            delete_latency=spec.delete_latency,
            drain_latency=spec.drain_latency,
            failure_rates=spec.failure_rates,
            notice_seconds=spec.notice_seconds,
        )
    return SimulatedBareMetalProvider(
        spec.name,
        spec.racks,
        clock,
        seed,
        configure_latency=spec.configure_latency,
        drain_latency=spec.drain_latency,
        failure_rates=spec.failure_rates,
    )


def providers(
    scenario: Scenario, clock_for: Callable[[str], Clock], seed: int
) -> dict[str, SimulatedProvider]:
    return {
        spec.name: provider(spec, clock_for(spec.name), seed * 1_000_003 + _named(spec.name))
        for spec in scenario.providers
    }


def operators(scenario: Scenario, seed: int) -> dict[str, SimulatedOperator]:
    return {
        c.name: SimulatedOperator(
            c.name,
            c.endpoint or f"https://{c.name}.k8s.example:6443",
            kubelet_version=c.kubelet_version,
            seed=seed * 7919 + _named(c.name),
        )
        for c in scenario.clusters
    }


def _named(name: str) -> int:
    """A provider's or cluster's share of the seed, by its name (not its place in the file), so
    the same provider or cluster draws the same numbers in a scenario cut down to part of it
    (`--compare`'s per-cluster runs)."""
    return zlib.crc32(name.encode())
