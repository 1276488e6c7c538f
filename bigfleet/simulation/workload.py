"""Roll-ups derived from a real trace, read through a mapping (docs/traces.md).

`rollups_from_trace` turns a per-job log or a per-group time series into the timed roll-ups of one
cluster. The mapping comes from the `workload:` block's `mapping:` file; without one, the built-in
mapping of the Alibaba GPU trace v2023 ("openb") is used, built from the block's own fields
(`openb_mapping`; examples/traces/alibaba-openb.mapping.yaml is the same mapping as a file).

How a replay of a job log works (docs/alibaba-replay.md has the long form for openb):

- Grouping: with `group:` set, the cluster replays the jobs whose group column holds that value;
  otherwise the jobs are split into `clusters` groups by CRC-32 of the job id, modulo the number
  of groups, and the cluster replays group `index`. Stable across runs and machines.
- Time: simulated second `t` is trace second `start + t * time_scale`. `start` defaults to the
  start time of the first job of the busiest 34-day window (the one with the most job starts;
  the earliest such window on a tie).
- Demand: at every cycle boundary the live jobs (start <= T < end) are summed per (class, kind):
  ceil(demand_scale * sum(units of the kind's resource) / per_machine) machines.
- Roll-ups: one need per (class, kind) that is ever non-zero in the replay, in a fixed order
  (class by falling priority, then kind in mapping order), so a need keeps its index for the
  whole replay; a roll-up is emitted at t=0 and then only when some count changes (the simulator
  re-sends the latest one every cycle itself).

A time series works the same, except that demand at T is running + pending of each group's
latest row at or before T, and `start` defaults to the first row's time.
"""

from __future__ import annotations

import math
import os
import zlib

import numpy as np

from .. import labels
from ..models import CapacityNeed, from_wire
from .scenario import WorkloadSpec
from .trace_mapping import JobsMapping, Mapping, SeriesMapping, load_mapping
from .traces import Jobs, read_jobs, read_series

BANDS = ("Guaranteed", "LS", "Burstable", "BE")
"""The openb trace's qos classes, highest priority first."""

QOS_PRIORITY = {"Guaranteed": 1_000_000, "LS": 900_000, "Burstable": 500_000, "BE": 0}
QOS_INTERRUPTION_PENALTY = {"Guaranteed": 1000.0, "LS": 50.0, "Burstable": 5.0, "BE": 0.5}

BUSY_WINDOW_SECONDS = 34 * 86400.0
"""Length of the window whose first job start is the default replay start."""

_EPSILON = 1e-9  # slack on the ceiling, so 16.0000000001 GPUs on 8-GPU nodes is still 2

Rollups = list[tuple[float, list[CapacityNeed]]]


def openb_mapping(spec: WorkloadSpec | None = None) -> JobsMapping:
    """The Alibaba openb pod list, with the instance types and machine sizes of `spec` (the
    `workload:` block's defaults without one)."""
    spec = spec or WorkloadSpec(trace="-")

    def kind(name: str, when: str | None, instance_type: str, per_machine: int) -> dict:
        requirement = {"key": labels.INSTANCE_TYPE, "operator": "In", "values": [instance_type]}
        return {
            "name": name,
            "when": when,
            "resource": name,
            "per_machine": per_machine,
            "requirements": [requirement],
        }

    return from_wire(
        JobsMapping,
        {
            "format": "jobs",
            "columns": {
                "id": "name",
                "start": "creation_time",
                "end": "deletion_time",
                "class": "qos",
            },
            "resources": {
                "gpu": {"columns": ["num_gpu", "gpu_milli"], "scale": 0.001},
                "cpu": {"columns": ["cpu_milli"], "scale": 0.001},
            },
            "classes": {
                q: {
                    "priority": QOS_PRIORITY[q],
                    "interruption_penalty": QOS_INTERRUPTION_PENALTY[q],
                }
                for q in BANDS
            },
            "kinds": [
                kind("gpu", "gpu", spec.gpu_instance_type, spec.gpus_per_node),
                kind("cpu", None, spec.cpu_instance_type, spec.cpus_per_node),
            ],
        },
    )


def mapping_for(spec: WorkloadSpec) -> Mapping:
    """The spec's mapping file, or the built-in openb mapping when it names none."""
    return openb_mapping(spec) if spec.mapping is None else load_mapping(spec.mapping)


def read_trace(path: str | os.PathLike[str]) -> Jobs:
    """An openb pod list, parsed and validated (errors name the file, line and column)."""
    return read_jobs(path, openb_mapping())


def group_of(name: str, groups: int) -> int:
    """The group a job belongs to: CRC-32 of its id modulo `groups` (process-independent,
    unlike Python's salted `hash`)."""
    return zlib.crc32(name.encode("utf-8")) % groups


def selected(jobs: Jobs, spec: WorkloadSpec) -> np.ndarray:
    """Which jobs this cluster replays: those of group `spec.group`, or of hash group
    `spec.index` of `spec.clusters`."""
    if spec.group is not None:
        return np.fromiter((g == spec.group for g in jobs.groups), dtype=bool, count=len(jobs))
    return np.fromiter(
        (group_of(n, spec.clusters) == spec.index for n in jobs.ids),
        dtype=bool,
        count=len(jobs),
    )


def need_slots(mapping: Mapping) -> list[tuple[int, int, CapacityNeed]]:
    """(class index, kind index, need with count 0) for every pair, in roll-up order."""
    slots = []
    for c, name in enumerate(mapping.class_order()):
        cls = mapping.classes[name]
        for k, kind in enumerate(mapping.kinds):
            need = CapacityNeed(
                requirements=kind.requirements,
                priority=cls.priority,
                count=0,
                interruption_penalty=cls.interruption_penalty,
                reclamation_penalty=cls.reclamation_penalty,
            )
            slots.append((c, k, need))
    return slots


def machines(units: np.ndarray | float, per_machine: float) -> np.ndarray:
    """Machines for `units` of a resource, `per_machine` to a machine (float dust forgiven)."""
    return np.maximum(np.ceil(np.asarray(units) / per_machine - _EPSILON), 0).astype(np.int64)


def default_start(creation: np.ndarray, window: float = BUSY_WINDOW_SECONDS) -> float:
    """The start time of the first job of the `window`-long span holding the most job starts
    (the earliest such span on a tie); 0 for an empty trace."""
    if len(creation) == 0:
        return 0.0
    c = np.sort(creation)
    ends = np.searchsorted(c, c + window, side="left")  # jobs started in [c[i], c[i] + window)
    return float(c[int(np.argmax(ends - np.arange(len(c))))])


def _live_sum(
    weights: np.ndarray, creation: np.ndarray, deletion: np.ndarray, at: np.ndarray
) -> np.ndarray:
    """Sum of `weights` over the jobs live (creation <= T < deletion) at each time T in `at`."""
    if len(weights) == 0:
        return np.zeros(len(at), dtype=np.float64)
    zero = np.zeros(1, dtype=np.float64)
    order = np.argsort(creation, kind="stable")
    born = np.concatenate([zero, np.cumsum(weights[order])])
    born_at = born[np.searchsorted(creation[order], at, side="right")]
    order = np.argsort(deletion, kind="stable")
    gone = np.concatenate([zero, np.cumsum(weights[order])])
    gone_at = gone[np.searchsorted(deletion[order], at, side="right")]
    return born_at - gone_at  # end >= start: every job gone by T was born by T


def rollups_from_trace(
    spec: WorkloadSpec, cycle_seconds: float, duration_seconds: float
) -> Rollups:
    """The roll-ups of this cluster's part of the trace, as (simulated second, needs), one at t=0
    and one at every cycle boundary within [0, duration_seconds] where a count changes."""
    if cycle_seconds <= 0:
        raise ValueError(f"cycle_seconds must be positive, got {cycle_seconds}")
    mapping = mapping_for(spec)
    cycles = int(math.floor(duration_seconds / cycle_seconds + _EPSILON)) + 1
    sim_t = np.arange(cycles, dtype=np.float64) * cycle_seconds
    if isinstance(mapping, SeriesMapping):
        columns = _series_columns(spec, mapping, sim_t)
    else:
        columns = _job_columns(spec, mapping, sim_t)
    slots = [need for (c, k, need) in need_slots(mapping) if columns[(c, k)].any()]
    if not slots:
        return [(0.0, [])]
    counts = np.stack([col for col in columns.values() if col.any()], axis=1)  # cycles x slots
    changed = np.ones(cycles, dtype=bool)
    changed[1:] = (counts[1:] != counts[:-1]).any(axis=1)
    out: Rollups = []
    for k in np.flatnonzero(changed).tolist():
        needs = [
            slot.model_copy(update={"count": int(n)})
            for slot, n in zip(slots, counts[k].tolist(), strict=True)
        ]
        out.append((float(sim_t[k]), needs))
    return out


def _job_columns(
    spec: WorkloadSpec, mapping: JobsMapping, sim_t: np.ndarray
) -> dict[tuple[int, int], np.ndarray]:
    """Machines per cycle for every (class, kind), in roll-up order."""
    jobs = read_jobs(spec.trace, mapping)
    start = default_start(jobs.start) if spec.start is None else spec.start
    at = start + sim_t * spec.time_scale
    mine = selected(jobs, spec)
    out = {}
    for c, k, _ in need_slots(mapping):
        pick = mine & (jobs.cls == c) & (jobs.kind == k)
        units = _live_sum(jobs.units[pick], jobs.start[pick], jobs.end[pick], at)
        out[(c, k)] = machines(units * spec.demand_scale, mapping.kinds[k].per_machine)
    return out


def _series_columns(
    spec: WorkloadSpec, mapping: SeriesMapping, sim_t: np.ndarray
) -> dict[tuple[int, int], np.ndarray]:
    """Machines per cycle for every (class, kind), in roll-up order: each group's latest row at
    or before the cycle, summed over the groups this cluster replays."""
    series = read_series(spec.trace, mapping)
    first = min((times[0] for times, _ in series.steps.values()), default=0.0)
    at = (first if spec.start is None else spec.start) + sim_t * spec.time_scale
    out = {}
    for c, k, _ in need_slots(mapping):
        total = np.zeros(len(at), dtype=np.float64)
        for (group, cls, kind), (times, values) in series.steps.items():
            if cls == c and kind == k and spec.group in (None, group):
                row = np.searchsorted(times, at, side="right") - 1
                total += np.where(row >= 0, values[np.maximum(row, 0)], 0.0)
        per_machine = mapping.kinds[k].per_machine if mapping.counts == "units" else 1.0
        out[(c, k)] = machines(total * spec.demand_scale, per_machine)
    return out
