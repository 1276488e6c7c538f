"""The decision engine of seed §8: claims, Phase 1, Phase 2, Phase 3, shortfalls."""

from .decision import Decision, Preemption
from .fast import FastEngine
from .memory import EngineMemory

__all__ = ["Decision", "EngineMemory", "FastEngine", "Preemption"]
