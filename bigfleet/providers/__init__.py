"""Capacity providers: the design §7 contract (base.py) and its backends.

simulated/ holds the simulated cloud and bare-metal backends (no I/O, virtual time); ec2/ and
redfish/ the real ones (AWS through boto3, bare metal through Redfish BMCs), loaded by kind from
an operator's config file (configured.py) and served by `bigfleet provider serve`. fencing.py
is the fencing-epoch rule every backend applies, nocloud.py the cloud-init seeds Redfish
publishes. This package re-exports the contract and the simulated backends; the real ones are
imported from their own packages (they need boto3 or sushy).
"""

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
from .simulated.baremetal import RackSpec, SimulatedBareMetalProvider
from .simulated.cloud import QuotaSpec, SimulatedCloudProvider
from .simulated.provider import DEFAULT_TIMEOUTS, SimulatedProvider

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
