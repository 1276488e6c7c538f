"""The simulated providers: machines moving through design §5's states in virtual time, for the
simulator, the benchmarks and the tests. No I/O: every call is answered from memory.

provider.py holds what they share (`SimulatedProvider`: operations, timeouts, spot
interruptions, fencing); slots.py the pools of slots they keep; cloud.py a cloud account's
quota lines (`SimulatedCloudProvider`); baremetal.py racks of owned machines
(`SimulatedBareMetalProvider`).
"""

from .baremetal import RackSpec, SimulatedBareMetalProvider
from .cloud import QuotaSpec, SimulatedCloudProvider
from .provider import DEFAULT_TIMEOUTS, SimulatedProvider

__all__ = [
    "DEFAULT_TIMEOUTS",
    "QuotaSpec",
    "RackSpec",
    "SimulatedBareMetalProvider",
    "SimulatedCloudProvider",
    "SimulatedProvider",
]
