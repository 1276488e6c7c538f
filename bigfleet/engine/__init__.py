"""The decision engine of seed §8: claims, Phase 1, Phase 2, Phase 3, shortfalls."""

from .common import Decision, EngineMemory, Preemption
from .fast import FastEngine

__all__ = ["Decision", "EngineMemory", "FastEngine", "Preemption"]
