"""The decision engine of design §8: claims, Phase 1, Phase 2, Phase 3, shortfalls.

`FastEngine` (fast.py, one module per step) decides for the shards; `reference/` is the plain
engine it is tested against; the rules both read are in decision, memory, ranking, domains,
moves, shortfalls and fleet_cost.
"""

from .decision import Decision, Preemption
from .fast import FastEngine
from .memory import EngineMemory

__all__ = ["Decision", "EngineMemory", "FastEngine", "Preemption"]
