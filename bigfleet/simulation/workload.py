"""Roll-ups derived from a pod trace: the Alibaba GPU trace v2023 ("openb") format.

A trace is a CSV of pods, one a row, with at least the columns `name`, `cpu_milli`, `num_gpu`,
`gpu_milli`, `qos`, `creation_time` and `deletion_time` (seconds from the trace's start; an empty
`deletion_time` means the pod outlives the trace). Other columns (`memory_mib`, `gpu_spec`,
`pod_phase`, `scheduled_time`, ...) are read past: a pod that was never scheduled still asked for
capacity, so it counts from creation to deletion like any other.

How a replay maps the trace (docs/alibaba-replay.md has the long form):

- Grouping: the pods are split into `spec.clusters` groups by CRC-32 of the pod name, modulo the
  number of groups; the cluster replays group `spec.index`. Stable across runs and machines.
- Priority bands, from `qos`: Guaranteed 1,000,000; LS (latency-sensitive) 900,000; Burstable
  500,000; BE (best-effort) 0. Interruption penalties, in dollars per interruption:
  Guaranteed 1000, LS 50, Burstable 5, BE 0.5. Reclamation penalty 0 throughout.
- Time: simulated second `t` is trace second `start + t * time_scale`. `start` defaults to the
  creation time of the first pod of the busiest 34-day window (the one with the most pod
  creations; the earliest such window on a tie).
- Demand: at every cycle boundary the live pods of the group (creation <= T < deletion) are
  summed per band. GPU pods (num_gpu * gpu_milli > 0) need
  ceil(demand_scale * sum(num_gpu * gpu_milli / 1000) / gpus_per_node) machines of
  `gpu_instance_type`; CPU-only pods need ceil(demand_scale * sum(cpu_milli / 1000) /
  cpus_per_node) machines of `cpu_instance_type`. GPU pods' CPUs ride on their GPU machines.
- Roll-ups: one need per (band, GPU/CPU) that is ever non-zero in the replay, in a fixed order
  (band by falling priority, GPU before CPU), so a need keeps its index for the whole replay; a
  roll-up is emitted at t=0 and then only when some count changes (the simulator re-sends the
  latest one every cycle itself).
"""

from __future__ import annotations

import csv
import math
import os
import zlib
from dataclasses import dataclass
from functools import lru_cache

import numpy as np

from .. import labels
from ..models import CapacityNeed, NodeSelectorRequirement, Operator
from .scenario import WorkloadSpec

BANDS = ("Guaranteed", "LS", "Burstable", "BE")
"""The trace's qos classes, highest priority first."""

QOS_PRIORITY = {"Guaranteed": 1_000_000, "LS": 900_000, "Burstable": 500_000, "BE": 0}
QOS_INTERRUPTION_PENALTY = {"Guaranteed": 1000.0, "LS": 50.0, "Burstable": 5.0, "BE": 0.5}

BUSY_WINDOW_SECONDS = 34 * 86400.0
"""Length of the window whose first pod creation is the default replay start."""

REQUIRED_COLUMNS = (
    "name",
    "cpu_milli",
    "num_gpu",
    "gpu_milli",
    "qos",
    "creation_time",
    "deletion_time",
)

_EPSILON = 1e-9  # slack on the ceiling, so 16.0000000001 GPUs on 8-GPU nodes is still 2


@dataclass(frozen=True)
class Trace:
    """A parsed pod trace, one array entry per pod, in file order."""

    names: tuple[str, ...]
    band: np.ndarray  # int8 index into BANDS
    gpu_milli: np.ndarray  # int64: num_gpu * gpu_milli
    cpu_milli: np.ndarray  # int64
    creation: np.ndarray  # float64 trace seconds
    deletion: np.ndarray  # float64 trace seconds; inf when the pod outlives the trace

    def __len__(self) -> int:
        return len(self.names)


def group_of(name: str, groups: int) -> int:
    """The group a pod belongs to: CRC-32 of its name modulo `groups` (process-independent,
    unlike Python's salted `hash`)."""
    return zlib.crc32(name.encode("utf-8")) % groups


def read_trace(path: str | os.PathLike[str]) -> Trace:
    """Parse and validate a pod trace. Raises ValueError naming the file, line and column of the
    first bad value. Parsed once per file version (path, size, mtime)."""
    path = os.fspath(path)
    try:
        st = os.stat(path)
    except OSError as err:
        raise ValueError(f"{path}: cannot read pod trace: {err.strerror}") from None
    return _read_trace(path, st.st_size, st.st_mtime_ns)


@lru_cache(maxsize=8)
# Over 60 lines: one pass over the trace file, column by column, kept together so the
# file is read once (it is cached by size and mtime).
def _read_trace(path: str, size: int, mtime_ns: int) -> Trace:
    del size, mtime_ns  # cache key only: a rewritten file is read again
    names: list[str] = []
    bands: list[int] = []
    gpu: list[int] = []
    cpu: list[int] = []
    created: list[float] = []
    deleted: list[float] = []
    band_index = {q: i for i, q in enumerate(BANDS)}
    try:
        with open(path, newline="", encoding="utf-8") as f:
            reader = csv.reader(f)
            header = next(reader, None)
            if header is None:
                raise ValueError(f"{path}: line 1: empty file, expected a header row")
            header = [h.strip() for h in header]
            missing = [c for c in REQUIRED_COLUMNS if c not in header]
            if missing:
                raise ValueError(
                    f"{path}: line 1: missing column(s) {', '.join(missing)} "
                    f"(a pod trace needs {', '.join(REQUIRED_COLUMNS)})"
                )
            col = {c: header.index(c) for c in REQUIRED_COLUMNS}
            width = len(header)

            for row in reader:
                line = reader.line_num
                if not row or (len(row) == 1 and not row[0].strip()):
                    continue  # a blank line
                if len(row) != width:
                    raise ValueError(
                        f"{path}: line {line}: {len(row)} fields, the header has {width}"
                    )

                def number(column: str, *, empty: float | None = None, row=row, line=line):
                    text = row[col[column]].strip()
                    if not text and empty is not None:
                        return empty
                    try:
                        value = float(text)
                    except ValueError:
                        value = math.nan
                    if not math.isfinite(value) or value < 0:
                        raise ValueError(
                            f"{path}: line {line}, column {column}: expected a non-negative "
                            f"number, got {text!r}"
                        )
                    return value

                name = row[col["name"]].strip()
                if not name:
                    raise ValueError(f"{path}: line {line}, column name: empty pod name")
                qos = row[col["qos"]].strip()
                if qos not in band_index:
                    raise ValueError(
                        f"{path}: line {line}, column qos: unknown class {qos!r} "
                        f"(expected one of {', '.join(BANDS)})"
                    )
                cpu_milli = number("cpu_milli")
                num_gpu = number("num_gpu")
                gpu_milli = number("gpu_milli")
                creation = number("creation_time")
                deletion = number("deletion_time", empty=math.inf)
                if deletion < creation:
                    raise ValueError(
                        f"{path}: line {line}, column deletion_time: {deletion:g} is before "
                        f"creation_time {creation:g}"
                    )
                names.append(name)
                bands.append(band_index[qos])
                gpu.append(round(num_gpu * gpu_milli))
                cpu.append(round(cpu_milli))
                created.append(creation)
                deleted.append(deletion)
    except OSError as err:
        raise ValueError(f"{path}: cannot read pod trace: {err.strerror}") from None
    except UnicodeDecodeError as err:
        raise ValueError(f"{path}: not UTF-8 text: {err.reason}") from None
    except csv.Error as err:
        raise ValueError(f"{path}: not a valid CSV file: {err}") from None
    return Trace(
        names=tuple(names),
        band=np.asarray(bands, dtype=np.int8),
        gpu_milli=np.asarray(gpu, dtype=np.int64),
        cpu_milli=np.asarray(cpu, dtype=np.int64),
        creation=np.asarray(created, dtype=np.float64),
        deletion=np.asarray(deleted, dtype=np.float64),
    )


def default_start(creation: np.ndarray, window: float = BUSY_WINDOW_SECONDS) -> float:
    """The creation time of the first pod of the `window`-long span holding the most pod
    creations (the earliest such span on a tie); 0 for an empty trace."""
    if len(creation) == 0:
        return 0.0
    c = np.sort(creation)
    ends = np.searchsorted(c, c + window, side="left")  # pods created in [c[i], c[i] + window)
    return float(c[int(np.argmax(ends - np.arange(len(c))))])


def _live_sum(
    weights: np.ndarray, creation: np.ndarray, deletion: np.ndarray, at: np.ndarray
) -> np.ndarray:
    """Sum of `weights` over the pods live (creation <= T < deletion) at each time T in `at`."""
    if len(weights) == 0:
        return np.zeros(len(at), dtype=np.int64)
    zero = np.zeros(1, dtype=np.int64)
    order = np.argsort(creation, kind="stable")
    born = np.concatenate([zero, np.cumsum(weights[order])])
    born_at = born[np.searchsorted(creation[order], at, side="right")]
    order = np.argsort(deletion, kind="stable")
    gone = np.concatenate([zero, np.cumsum(weights[order])])
    gone_at = gone[np.searchsorted(deletion[order], at, side="right")]
    return born_at - gone_at  # deletion >= creation: every pod gone by T was born by T


# Over 60 lines: the replay loop (arrivals and departures in time order, one roll-up a
# step); its helpers are the functions above.
def rollups_from_trace(
    spec: WorkloadSpec, cycle_seconds: float, duration_seconds: float
) -> list[tuple[float, list[CapacityNeed]]]:
    """The roll-ups of cluster group `spec.index` of the trace, as (simulated second, needs),
    one at t=0 and one at every cycle boundary within [0, duration_seconds] where a count
    changes."""
    if cycle_seconds <= 0:
        raise ValueError(f"cycle_seconds must be positive, got {cycle_seconds}")
    trace = read_trace(spec.trace)
    start = default_start(trace.creation) if spec.start is None else spec.start
    mine = np.fromiter(
        (group_of(n, spec.clusters) == spec.index for n in trace.names),
        dtype=bool,
        count=len(trace),
    )
    cycles = int(math.floor(duration_seconds / cycle_seconds + _EPSILON)) + 1
    sim_t = np.arange(cycles, dtype=np.float64) * cycle_seconds
    at = start + sim_t * spec.time_scale

    is_gpu = trace.gpu_milli > 0
    columns: list[np.ndarray] = []
    slots: list[CapacityNeed] = []
    for b, qos in enumerate(BANDS):
        in_band = mine & (trace.band == b)
        for gpu, instance_type, per_node in (
            (True, spec.gpu_instance_type, spec.gpus_per_node),
            (False, spec.cpu_instance_type, spec.cpus_per_node),
        ):
            pods = in_band & (is_gpu if gpu else ~is_gpu)
            weights = trace.gpu_milli[pods] if gpu else trace.cpu_milli[pods]
            milli = _live_sum(weights, trace.creation[pods], trace.deletion[pods], at)
            per_milli = spec.demand_scale / (1000.0 * per_node)  # machines per milli-unit
            machines = np.maximum(np.ceil(milli * per_milli - _EPSILON), 0).astype(np.int64)
            if not machines.any():
                continue
            columns.append(machines)
            slots.append(
                CapacityNeed(
                    requirements=[
                        NodeSelectorRequirement(
                            key=labels.INSTANCE_TYPE, operator=Operator.IN, values=[instance_type]
                        )
                    ],
                    priority=QOS_PRIORITY[qos],
                    count=0,
                    interruption_penalty=QOS_INTERRUPTION_PENALTY[qos],
                    reclamation_penalty=0.0,
                )
            )
    if not slots:
        return [(0.0, [])]
    counts = np.stack(columns, axis=1)  # cycles x slots
    changed = np.ones(cycles, dtype=bool)
    changed[1:] = (counts[1:] != counts[:-1]).any(axis=1)
    out: list[tuple[float, list[CapacityNeed]]] = []
    for k in np.flatnonzero(changed).tolist():
        needs = [
            slot.model_copy(update={"count": int(n)})
            for slot, n in zip(slots, counts[k].tolist(), strict=True)
        ]
        out.append((float(sim_t[k]), needs))
    return out
