"""Closed-loop replay of a job log: demand that cannot be served waits in a queue instead of
vanishing (docs/traces.md, "Closed loop").

Open loop (bigfleet/simulation/workload.py) asks for every job's machines from its start to its
end in the trace, whether or not the fleet gave them. Here a job arrives at its trace start and
waits, first in first out per need (class x kind), until the machines configured for its need
have room for it; it then runs for its trace duration, so its end moves later by its wait.

The simulator drives it once a cycle: `needs_at(t, served)` is told how many machines each need
held (`served[i]`, configured machines of need i over the interval since the previous call) and
answers the roll-up to send at t (running plus waiting demand), or None when no count changed.

Capacity is pooled per need, as in the open-loop roll-up: `served[i] * per_machine` units of the
kind's resource. A job starts as soon as the jobs ahead of it have started and the running jobs
leave room for it (no backfilling past a job that does not fit). A running job keeps its machines
until it ends, even if `served` falls below what runs (the simulator's preemptions are not fed
back into the jobs).
"""

from __future__ import annotations

import heapq
import math
from collections import deque
from dataclasses import dataclass, field

from ..models import CapacityNeed
from .scenario import WorkloadSpec
from .trace_mapping import SeriesMapping
from .traces import read_jobs
from .workload import default_start, machines, mapping_for, need_slots, selected


@dataclass(frozen=True)
class QueuedJob:
    """One job of the replay, in simulated seconds: it arrives at `arrival` and, started at once,
    would end at `until` (inf: it outlives the trace); it needs `units` of its need's resource."""

    name: str
    need: int
    arrival: float
    until: float
    units: float


@dataclass
class BandWaits:
    """Waits of one priority band, in simulated seconds (times `time_scale` for trace seconds):
    `started` (job, waited) in start order; `waiting` (job, waited so far) in queue order."""

    started: list[tuple[str, float]] = field(default_factory=list)
    waiting: list[tuple[str, float]] = field(default_factory=list)


@dataclass
class _Need:
    per_machine: float
    arrivals: list[QueuedJob]
    next: int = 0  # index of the next arrival not yet queued
    queue: deque[QueuedJob] = field(default_factory=deque)
    queued_units: float = 0.0
    running: list[tuple[float, int, float]] = field(default_factory=list)  # (end, seq, units) heap
    running_units: float = 0.0
    started: list[tuple[str, float]] = field(default_factory=list)


class ClosedLoop:
    def __init__(
        self, needs: list[CapacityNeed], per_machine: list[float], jobs: list[QueuedJob]
    ) -> None:
        if len(needs) != len(per_machine):
            raise ValueError(f"{len(needs)} needs but {len(per_machine)} per_machine sizes")
        for job in jobs:
            if not 0 <= job.need < len(needs):
                raise ValueError(f"job {job.name}: need {job.need} is not one of {len(needs)}")
            if job.until < job.arrival or job.units < 0:
                raise ValueError(f"job {job.name}: ends before it arrives or has negative units")
        self.needs = needs
        self._state = [
            _Need(per_machine=p, arrivals=sorted((j for j in jobs if j.need == i), key=_arrival))
            for i, p in enumerate(per_machine)
        ]
        self.now = 0.0
        self._seq = 0
        self._sent: list[int] | None = None

    @classmethod
    def from_spec(cls, spec: WorkloadSpec) -> ClosedLoop:
        """The jobs this cluster replays (same mapping, grouping, start, time and demand scale as
        the open-loop roll-ups). One need per (class, kind) that has a job, in roll-up order."""
        mapping = mapping_for(spec)
        if isinstance(mapping, SeriesMapping):
            raise ValueError("closed_loop: needs a job log (format: jobs), not a time series")
        jobs = read_jobs(spec.trace, mapping)
        start = default_start(jobs.start) if spec.start is None else spec.start
        arrival = (jobs.start - start) / spec.time_scale
        until = (jobs.end - start) / spec.time_scale
        keep = selected(jobs, spec) & (jobs.kind >= 0) & (until > 0)
        slots = [
            (c, k, need)
            for c, k, need in need_slots(mapping)
            if (keep & (jobs.cls == c) & (jobs.kind == k)).any()
        ]
        index = {(c, k): i for i, (c, k, _) in enumerate(slots)}
        queued = [
            QueuedJob(
                name=jobs.ids[j],
                need=index[(int(jobs.cls[j]), int(jobs.kind[j]))],
                arrival=max(0.0, float(arrival[j])),
                until=float(until[j]),
                units=float(jobs.units[j]) * spec.demand_scale,
            )
            for j in keep.nonzero()[0].tolist()
        ]
        sizes = [mapping.kinds[k].per_machine for _, k, _ in slots]
        return cls([need for _, _, need in slots], sizes, queued)

    # ---- the feedback loop -------------------------------------------------------------------

    def needs_at(self, t: float, served: list[int]) -> list[CapacityNeed] | None:
        """Advance the queues to simulated second `t` with `served[i]` machines of need i since
        the previous call; the roll-up to send now, or None when no count changed."""
        if len(served) != len(self._state):
            raise ValueError(
                f"served has {len(served)} entries, there are {len(self._state)} needs"
            )
        if t < self.now:
            raise ValueError(f"needs_at({t}) is before the previous call ({self.now})")
        for need, machines_held in zip(self._state, served, strict=True):
            self._advance(need, t, machines_held * need.per_machine)
        self.now = t
        counts = self.counts()
        if counts == self._sent:
            return None
        self._sent = counts
        return [n.model_copy(update={"count": c}) for n, c in zip(self.needs, counts, strict=True)]

    def counts(self) -> list[int]:
        """Machines each need asks for now: its running jobs and its waiting ones."""
        return [int(machines(n.running_units + n.queued_units, n.per_machine)) for n in self._state]

    def waits(self) -> dict[int, BandWaits]:
        """Per priority band: how long started jobs waited, and the wait so far of those still
        queued (as of the last call)."""
        out: dict[int, BandWaits] = {}
        for need, state in zip(self.needs, self._state, strict=True):
            band = out.setdefault(need.priority, BandWaits())
            band.started += state.started
            band.waiting += [(j.name, self.now - j.arrival) for j in state.queue]
        return out

    # ---- mechanics -------------------------------------------------------------------------

    def _advance(self, need: _Need, t: float, capacity: float) -> None:
        """Play arrivals and ends up to t, in time order (ends first on a tie), starting what
        fits after each."""
        self._start_fitting(need, self.now, capacity)
        while True:
            arrival = (
                need.arrivals[need.next].arrival if need.next < len(need.arrivals) else math.inf
            )
            end = need.running[0][0] if need.running else math.inf
            at = min(arrival, end)
            if at > t:
                return
            if end <= arrival:
                _, _, units = heapq.heappop(need.running)
                need.running_units -= units
            else:
                job = need.arrivals[need.next]
                need.next += 1
                need.queue.append(job)
                need.queued_units += job.units
            self._start_fitting(need, at, capacity)

    def _start_fitting(self, need: _Need, at: float, capacity: float) -> None:
        while need.queue and need.running_units + need.queue[0].units <= capacity + 1e-9:
            job = need.queue.popleft()
            need.queued_units -= job.units
            need.running_units += job.units
            end = job.until if at == job.arrival else at + (job.until - job.arrival)
            heapq.heappush(need.running, (end, self._seq, job.units))
            self._seq += 1
            need.started.append((job.name, at - job.arrival))
        if not need.queue:
            need.queued_units = 0.0  # no float dust left behind an empty queue
        if not need.running:
            need.running_units = 0.0


def _arrival(job: QueuedJob) -> float:
    return job.arrival
