"""Capacity providers: the seed §7 contract and its simulated cloud and bare-metal backends."""

from .baremetal import RackSpec, SimulatedBareMetalProvider
from .base import (
    MAX_CREATE_BATCH,
    CapacityProvider,
    InvalidTransition,
    MachineNotFound,
    NotSupported,
    ProviderError,
    ProviderReplyError,
    QuotaExhausted,
    RateLimited,
    StaleFencingToken,
    UnissuedEpoch,
    parse_machine_reply,
)
from .cloud import QuotaSpec, SimulatedCloudProvider
from .simulated import DEFAULT_TIMEOUTS, SimulatedProvider

__all__ = [
    "DEFAULT_TIMEOUTS",
    "MAX_CREATE_BATCH",
    "CapacityProvider",
    "InvalidTransition",
    "MachineNotFound",
    "NotSupported",
    "ProviderError",
    "ProviderReplyError",
    "QuotaExhausted",
    "QuotaSpec",
    "RackSpec",
    "RateLimited",
    "SimulatedBareMetalProvider",
    "SimulatedCloudProvider",
    "SimulatedProvider",
    "StaleFencingToken",
    "UnissuedEpoch",
    "parse_machine_reply",
]
