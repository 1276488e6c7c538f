"""The records a simulated provider keeps: pools of interchangeable slots, each slot a machine.

A slot is a machine id that exists whether or not a host backs it (design §10): quota and racks are
pools of slots, and shrinking a pool withdraws only slots that nothing runs on.
"""

from __future__ import annotations

import itertools
import math
from dataclasses import dataclass, field

from ...models import (
    CapacityType,
    HostRef,
    ListFilter,
    Machine,
    MachineState,
    Notice,
    Resources,
    Transition,
)
from ...states import TRANSITIONAL
from ..base import MachineNotFound, QuotaExhausted

S = MachineState


@dataclass
class Pool:
    """Interchangeable slots (a quota line, a rack): what their machines are and how many."""

    key: str
    id_prefix: str
    instance_type: str
    zone: str
    capacity_type: CapacityType
    price_per_hour: float
    interruption_probability: float
    resources: Resources
    labels: dict[str, str]
    quota: int
    create_latency: tuple[float, float]
    create_allowance: float = 0.0  # added to the CREATING timeout for a create slow by design
    members: dict[int, Slot] = field(default_factory=dict, repr=False)


@dataclass
class Op:
    """One in-flight lifecycle operation; its id is what a repeated call gets back."""

    id: str
    transition: Transition
    started: float
    due: float | None  # None: the operation hangs until its deadline
    deadline: float
    grace_end: float = math.inf  # drains only: when the grace period runs out
    cluster: str | None = None  # configures only


@dataclass
class Slot:
    """One machine id of a pool and what it is now: state, host, cluster, its operation."""

    id: str
    pool: Pool
    index: int
    state: MachineState = S.SPECULATIVE
    host: str | None = None
    cluster: str | None = None
    op: Op | None = None
    since: float = 0.0  # when the current transitional or FAILED state began
    last_error: str = ""
    clock_generation: int = 0  # the interruption clock armed last; older ones are void
    notice: Notice | None = None  # what the provider warns of (`Machine.notice`)
    interrupt_at: float = 0.0  # when the armed interruption clock fires


class SlotTable:
    """Every slot of one provider by id, and the ids a shrinking quota withdrew."""

    def __init__(self, provider: str) -> None:
        self.provider = provider
        self._by_id: dict[str, Slot] = {}
        self._withdrawn: dict[str, Pool] = {}

    def find(self, machine_id: str) -> Slot | None:
        """The slot with this machine id, or None."""
        return self._by_id.get(machine_id)

    def __getitem__(self, machine_id: str) -> Slot:
        slot = self._by_id.get(machine_id)
        if slot is not None:
            return slot
        if machine_id in self._withdrawn:
            raise QuotaExhausted(self.provider, machine_id, self._withdrawn[machine_id].key)
        raise MachineNotFound(self.provider, machine_id)

    def select(self, filter: ListFilter) -> list[Slot]:
        """The slots a `ListFilter` asks for, in id order so listings are stable."""
        states = set(filter.states)
        found = []
        for machine_id in sorted(self._by_id):
            slot = self._by_id[machine_id]
            if states and slot.state not in states:
                continue
            if filter.noticed and slot.notice is None:
                continue
            if filter.zone and slot.pool.zone != filter.zone:
                continue
            if filter.instance_type and slot.pool.instance_type != filter.instance_type:
                continue
            found.append(slot)
            if len(found) == filter.max_results:
                break
        return found

    def resize(self, pool: Pool, quota: int) -> None:
        """Hold `quota - running` speculative slots; running machines are never removed."""
        pool.quota = quota
        slots = sorted(pool.members.values(), key=lambda s: s.index)
        speculative = [s for s in slots if s.state is S.SPECULATIVE]
        want = max(0, quota - (len(slots) - len(speculative)))
        for slot in speculative[want:]:
            del pool.members[slot.index], self._by_id[slot.id]
            self._withdrawn[slot.id] = pool
        free = (i for i in itertools.count() if i not in pool.members)
        for index in itertools.islice(free, max(0, want - len(speculative))):
            slot = Slot(id=f"{pool.id_prefix}-{index:05d}", pool=pool, index=index)
            pool.members[index] = self._by_id[slot.id] = slot
            self._withdrawn.pop(slot.id, None)


def snapshot(slot: Slot, provider: str, failed_from: MachineState | None = None) -> Machine:
    """The slot as the provider reports it: no host until a create has finished or failed."""
    pool = slot.pool
    shows_host = slot.host is not None and slot.state not in (S.SPECULATIVE, S.CREATING)
    moving = slot.state in TRANSITIONAL or slot.state is S.FAILED
    return Machine(
        id=slot.id,
        state=slot.state,
        host=HostRef(provider=provider, ref=slot.host) if shows_host and slot.host else None,
        instance_type=pool.instance_type,
        zone=pool.zone,
        capacity_type=pool.capacity_type,
        price_per_hour=pool.price_per_hour,
        interruption_probability=pool.interruption_probability,
        resources=pool.resources,
        labels=pool.labels,
        transition_started_unix=int(max(0.0, slot.since)) if moving else 0,
        last_error=slot.last_error,
        cluster=slot.cluster,
        failed_from=failed_from if slot.state is S.FAILED else None,
        notice=slot.notice,
    )
