"""Small fleets for the decision-core tests: machines, roll-ups, and one shard to run them on.

A `Shard` wraps either engine (fast or reference) behind the same few calls, so a worked example
is written once and run against both: `@ENGINES` parametrizes a test over `make_shard`.
"""

from __future__ import annotations

from collections.abc import Iterable
from typing import Any

import pytest

from bigfleet import labels as L
from bigfleet.engine import Decision, FastEngine
from bigfleet.engine.reference import ReferenceEngine
from bigfleet.inventory import Inventory
from bigfleet.models import CapacityType, HostRef, Machine, MachineState
from bigfleet.needs import NeedsTable
from bigfleet.policy import Policy

S = MachineState
GPU = "gpu-8xh100"
DC = "dc-ams"
AWS = "aws-eu-west-1"
UNHOSTED = (S.SPECULATIVE, S.CREATING)


def machine(
    mid: str,
    capacity_type: CapacityType,
    state: MachineState = S.IDLE,
    *,
    provider: str,
    cluster: str | None = None,
    price: float = 0.0,
    interruption: float = 0.0,
    rack: str | None = None,
    instance_type: str = GPU,
    zone: str = "ams-1",
    since: int = 0,
) -> Machine:
    labels = {L.PROVIDER: provider}
    if rack is not None:
        labels[L.RACK] = rack
    return Machine(
        id=mid,
        state=state,
        host=None if state in UNHOSTED else HostRef(provider=provider, ref=f"host-{mid}"),
        instance_type=instance_type,
        zone=zone,
        capacity_type=capacity_type,
        price_per_hour=price,
        interruption_probability=interruption,
        labels=labels,
        transition_started_unix=since,
        cluster=cluster,
    )


def bare_metal(i: int, state: MachineState = S.IDLE, *, rack: str = "r1", **kw: Any) -> Machine:
    """A bare-metal GPU server: free to hold, never deleted."""
    return machine(f"gpu-{i:04d}", CapacityType.BARE_METAL, state, provider=DC, rack=rack, **kw)


def on_demand(i: int, state: MachineState = S.SPECULATIVE, *, price: float = 6.0, **kw: Any):
    return machine(f"od-{i:04d}", CapacityType.ON_DEMAND, state, provider=AWS, price=price, **kw)


def spot(i: int, state: MachineState = S.SPECULATIVE, *, price: float = 1.8, **kw: Any):
    return machine(f"spot-{i:04d}", CapacityType.SPOT, state, provider=AWS, price=price, **kw)


def many(make, count: int, *, start: int = 0, **kw: Any) -> list[Machine]:
    """`count` machines from `make`, numbered from `start`."""
    return [make(i, **kw) for i in range(start, start + count)]


def ids(machines: Iterable[Machine]) -> list[str]:
    return [m.id for m in machines]


# ---- roll-ups -------------------------------------------------------------------------------


def need(count: int, priority: int, *, types: Iterable[str] = (GPU,), **extra: Any) -> dict:
    """One raw `CapacityNeed`, as an operator sends it: `count` machines of `types`."""
    requirement = {"key": L.INSTANCE_TYPE, "operator": "In", "values": list(types)}
    return {"requirements": [requirement], "priority": priority, "count": count, **extra}


def rollup(cluster: str, generation: int, *needs: dict) -> dict:
    return {"cluster": cluster, "generation": generation, "needs": list(needs)}


def table(*rollups: dict, now: float = 0) -> NeedsTable:
    needs = NeedsTable()
    for raw in rollups:
        assert needs.submit(raw, now)
    return needs


# ---- one shard, either engine ---------------------------------------------------------------


class Shard:
    """An engine over a fleet, plus what providers would report back (finished transitions)."""

    def __init__(self, engine: FastEngine | ReferenceEngine, inventory: Inventory | None):
        self.engine = engine
        self.inventory = inventory

    def decide(self, needs: NeedsTable, now: float) -> Decision:
        return self.engine.decide(needs, now)

    def cycle(self, needs: NeedsTable, now: float) -> Decision:
        """Decide, then start every transition the decision asks for."""
        decision = self.engine.decide(needs, now)
        self.engine.apply(decision, now)
        return decision

    def finish(self, machine_ids: Iterable[str], target: MachineState, now: float) -> None:
        """The provider reports these machines reached `target` (e.g. a drain completed)."""
        for mid in machine_ids:
            if self.inventory is not None:
                self.inventory.move(self.inventory.row(mid), target, now)
            else:
                self.engine._move(self.engine.find(mid), target, now)

    def mark(self, machine_ids: Iterable[str]) -> None:
        """Their clusters marked these machines do-not-disrupt (as the shard flags them)."""
        for mid in machine_ids:
            if self.inventory is not None:
                self.inventory.kept[self.inventory.row(mid)] = 1
                self.inventory.version += 1
            else:
                self.engine.find(mid).kept = True

    def bound(self, **room: int) -> None:
        """Per cluster, how many more of its machines its preempt budget lets drain now."""
        self.engine.memory.drain_room = dict(room)
        if self.inventory is not None:
            self.inventory.version += 1

    def state(self, mid: str) -> MachineState:
        if self.inventory is not None:
            return self.inventory.state_of(self.inventory.row(mid))
        return self.engine.find(mid).state

    def set_holder(self, mid: str, priority: int, interruption: float, reclamation: float):
        """Record the need a configured machine serves, as a configure cycle would have."""
        if self.inventory is not None:
            rows = [self.inventory.row(mid)]
            self.inventory.set_holder(rows, priority, interruption, reclamation)
        else:
            rec = self.engine.find(mid)
            rec.holder_priority = priority
            rec.holder_interruption = interruption
            rec.holder_reclamation = reclamation


def fast_shard(machines: list[Machine], policy: Policy | None = None, now: float = 0) -> Shard:
    inventory = Inventory()
    inventory.add(machines, now)
    return Shard(FastEngine(inventory, policy or Policy()), inventory)


def reference_shard(machines: list[Machine], policy: Policy | None = None, now: float = 0) -> Shard:
    return Shard(ReferenceEngine(machines, policy or Policy(), now), None)


ENGINES = pytest.mark.parametrize(
    "make_shard",
    [pytest.param(fast_shard, id="fast"), pytest.param(reference_shard, id="reference")],
)


# ---- reading a decision ---------------------------------------------------------------------


def of_kind(decision: Decision, kind: str) -> list:
    return [a for a in decision.actions if a.kind == kind]


def created(decision: Decision) -> list[str]:
    return [mid for a in of_kind(decision, "create") for mid in a.machine_ids]


def configured(decision: Decision) -> list[str]:
    return [a.machine_id for a in of_kind(decision, "configure")]


def drained(decision: Decision) -> list[str]:
    return [a.machine_id for a in of_kind(decision, "drain")]


def shortfall_of(decision: Decision, cluster: str):
    found = [s for s in decision.shortfalls if s.cluster == cluster]
    assert len(found) <= 1, found
    return found[0] if found else None
