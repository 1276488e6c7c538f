"""Synthetic fleets and roll-ups for the property tests and `bigfleet bench engine`."""

from __future__ import annotations

import random
from dataclasses import dataclass

from . import labels as L
from .models import (
    CapacityNeed,
    CapacityType,
    ClusterCapacityNeeds,
    HostRef,
    Machine,
    MachineState,
    NodeSelectorRequirement,
    Operator,
    Resources,
    TopologySpread,
)


@dataclass(frozen=True)
class Offer:
    provider: str
    instance_type: str
    zone: str
    capacity_type: CapacityType
    price: float
    interruption: float
    gpu: int


OFFERS = (
    Offer("dc-ams", "gpu-8xh100", "ams-1", CapacityType.BARE_METAL, 0.0, 0.0, 8),
    Offer("dc-ams", "cpu-64", "ams-1", CapacityType.BARE_METAL, 0.0, 0.0, 0),
    Offer("aws-euw1", "p5.48xlarge", "eu-west-1a", CapacityType.SPOT, 31.0, 0.05, 8),
    Offer("aws-euw1", "p5.48xlarge", "eu-west-1a", CapacityType.ON_DEMAND, 98.0, 0.0, 8),
    Offer("aws-euw1", "m6i.xlarge", "eu-west-1b", CapacityType.SPOT, 1.8, 0.1, 0),
    Offer("aws-euw1", "m6i.xlarge", "eu-west-1b", CapacityType.ON_DEMAND, 6.0, 0.0, 0),
    Offer("gcp-usc1", "a3-highgpu-8g", "us-central1-a", CapacityType.RESERVED, 20.0, 0.0, 8),
)
PRIORITIES = (0, 100_000, 500_000, 900_000, 1_000_000)


def machine(
    machine_id: str,
    offer: Offer,
    state: MachineState,
    cluster: str | None = None,
    rack: str | None = None,
    since: int = 0,
) -> Machine:
    labels = {L.REGION: offer.zone.rsplit("-", 1)[0], L.ARCH: "amd64", L.PROVIDER: offer.provider}
    if rack:
        labels[L.RACK] = rack
    hosted = state not in (MachineState.SPECULATIVE, MachineState.CREATING)
    bound = state in (MachineState.CONFIGURED, MachineState.DRAINING, MachineState.CONFIGURING)
    return Machine(
        id=machine_id,
        state=state,
        host=HostRef(provider=offer.provider, ref=f"h-{machine_id}") if hosted else None,
        instance_type=offer.instance_type,
        zone=offer.zone,
        capacity_type=offer.capacity_type,
        price_per_hour=offer.price,
        interruption_probability=offer.interruption,
        resources=Resources(cpu=64.0, memory_gib=512.0, gpu=offer.gpu),
        labels=labels,
        transition_started_unix=since,
        cluster=cluster if bound else None,
    )


def fleet(
    rng: random.Random,
    machines: int,
    clusters: int,
    busy: float = 0.6,
    rack_size: int = 64,
    transitional: float = 0.02,
) -> list[Machine]:
    """A shard's machines: about `busy` of them configured for clusters, the rest idle or
    speculative, a few mid-transition; fixed machines in racks of `rack_size`."""
    out = []
    names = [f"c{c:03d}" for c in range(clusters)]
    block = rack_size * len(OFFERS)
    # A fleet BigFleet grew fills racks in order, so neighbours mostly serve the same cluster.
    owners = [rng.choice(names) for _ in range(machines // block + 1)]
    for i in range(machines):
        offer = OFFERS[i % len(OFFERS)]
        fixed = offer.capacity_type is CapacityType.BARE_METAL
        rack = f"{offer.zone}-r{i // block:04d}" if fixed else None
        roll = rng.random()
        if roll < busy:
            owner = owners[i // block] if rng.random() < 0.9 else rng.choice(names)
            state, cluster = MachineState.CONFIGURED, owner
        elif roll < busy + transitional:
            state = rng.choice([MachineState.CONFIGURING, MachineState.DRAINING])
            cluster = rng.choice(names)
        else:
            state = MachineState.IDLE if fixed or rng.random() < 0.1 else MachineState.SPECULATIVE
            cluster = None
        out.append(machine(f"m-{i:07d}", offer, state, cluster, rack))
    return out


def need(rng: random.Random, scale: int) -> CapacityNeed:
    offer = rng.choice(OFFERS)
    reqs = [
        NodeSelectorRequirement(
            key=L.INSTANCE_TYPE, operator=Operator.IN, values=[offer.instance_type]
        )
    ]
    if rng.random() < 0.2:
        reqs.append(
            NodeSelectorRequirement(
                key=L.CAPACITY_TYPE, operator=Operator.NOT_IN, values=[CapacityType.SPOT.value]
            )
        )
    kind = rng.random()
    return CapacityNeed(
        requirements=reqs,
        priority=rng.choice(PRIORITIES),
        count=rng.randint(0, scale),
        same=L.RACK if kind < 0.05 else None,
        spread=[TopologySpread(key=L.ZONE, max_skew=1)] if 0.05 <= kind < 0.1 else [],
        interruption_penalty=rng.choice((0.0, 0.5, 5.0, 50.0, 1000.0)),
        reclamation_penalty=rng.choice((0.0, 100.0, 10_000.0)),
        drain_seconds=rng.choice((None, 5.0, 1800.0)),
    )


def rollups(
    rng: random.Random, clusters: int, needs_per_cluster: int, scale: int, generation: int = 1
) -> list[ClusterCapacityNeeds]:
    return [
        ClusterCapacityNeeds(
            cluster=f"c{c:03d}",
            generation=generation,
            needs=[need(rng, scale) for _ in range(needs_per_cluster)],
        )
        for c in range(clusters)
    ]
