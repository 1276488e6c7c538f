"""Roll-ups derived from a pod trace (placeholder replaced by the trace workload model)."""

from __future__ import annotations

from ..models import CapacityNeed
from .scenario import WorkloadSpec


def rollups_from_trace(
    spec: WorkloadSpec, cycle_seconds: float, duration_seconds: float
) -> list[tuple[float, list[CapacityNeed]]]:
    raise NotImplementedError("trace workloads arrive with the trace workload model")
