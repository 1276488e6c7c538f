"""The reference engine: the seed's pseudo-code over a plain list of machines, the oracle the
fast engine is tested against. Its steps live in modules named like the fast engine's."""

from .engine import ReferenceEngine
from .fleet import ReferenceFleet

__all__ = ["ReferenceEngine", "ReferenceFleet"]
