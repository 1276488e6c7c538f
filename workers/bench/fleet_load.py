"""`bench fleet`'s load: its fleet file (one simulated cloud provider, many clusters), each
cluster's roll-up, how the counts move round after round (`move`, within LOW..HIGH of the
fleet), `--serving`'s machines configured before the shards start, and the rounds that send
the roll-ups as the gateway routes them.
"""

from __future__ import annotations

import argparse
import asyncio
import random
import time
from collections.abc import Callable
from typing import Any

from bigfleet.models import BootstrapBlob, FencingToken, ListFilter, MachineState
from bigfleet.providers.base import MAX_CREATE_BATCH, RateLimited
from workers.bench.fleet_samples import Run
from workers.bench.temporal import (
    INSTANCE_TYPE,
    PROVIDER,
    cluster_name,
    shares,
)
from workers.routing import ShardRouter

MOVING = 0.2  # default share of clusters whose counts change each round (--moving)


STEP = 0.2  # default share of its count a moving cluster changes by (--step)


LOW, HIGH = 0.6, 0.8  # total demand kept within these shares of the fleet


def fleet(args: argparse.Namespace) -> dict[str, Any]:
    line = {
        "instance_type": INSTANCE_TYPE,
        "zone": "us-east-1a",
        "capacity_type": "on-demand",
        "count": args.machines,
        "price_per_hour": 1,
    }
    provider = {
        "name": PROVIDER,
        "kind": "cloud",
        "api_calls_per_second": args.calls_per_second,
        "create_latency": [2.0, 5.0],
        "configure_latency": 3.0,
        "quota": [line],
    }
    return {
        "name": "bench-fleet",
        "cycle_seconds": 1,
        "duration_seconds": 1,
        "shards": args.shards,
        "providers": [provider],
        "clusters": [{"name": cluster_name(i)} for i in range(args.clusters)],
    }


def rollup(cluster: str, generation: int, count: int) -> dict[str, Any]:
    """One need for `count` machines of any type (the fleet has one). No node-selector
    requirements: a shard that continues as new with queued starts carrying requirements fails
    to load them (workflows/shard.py `_load` validates the stored JSON as Python, and the strict
    `Operator` enum refuses the string) and would stall the run."""
    need = {"requirements": [], "priority": 1, "count": count}
    return {"cluster": cluster, "generation": generation, "needs": [need]}


def move(
    rng: random.Random,
    counts: list[int],
    machines: int,
    moving: float = MOVING,
    step: float = STEP,
) -> None:
    """A share `moving` of the clusters change their counts, each by a share `step` of its
    count (one machine at least); the total stays in LOW..HIGH."""
    total = sum(counts)
    for i in rng.sample(range(len(counts)), max(1, int(len(counts) * moving))):
        step_i = max(1, int(counts[i] * step))
        up = total < LOW * machines or (total <= HIGH * machines and rng.random() < 0.5)
        delta = min(step_i, int(HIGH * machines) - total) if up else -min(step_i, counts[i])
        counts[i] += delta
        total += delta


def first_counts(args: argparse.Namespace) -> list[int]:
    """Each cluster's count in the first round: 70 % of the fleet, shared out."""
    return shares(int(0.7 * args.machines), args.clusters)


def serve(provider: Any, clock: Any, counts: list[int]) -> None:
    """`--serving`: before any shard starts, cluster i's `counts[i]` machines are created and
    configured for it through the provider's own calls, rate limit included, on its clock an
    hour before now (the clock then catches up with the shards' time). The provider's
    counters start again from zero after."""
    token = FencingToken(shard_id=0, shard_epoch=1, seq=1)  # (every shard's epoch is later)
    blob = BootstrapBlob(user_data=b"#cloud-config\n", ttl_seconds=3600)
    clock.now = time.time() - 3600

    def call(f: Callable[[], Any]) -> None:
        while True:
            try:
                f()
                return
            except RateLimited as err:  # (at least 1 ms: a float near 1.8e9 absorbs less)
                clock.now += max(err.retry_after, 1e-3)

    def wait(seconds: float) -> None:
        clock.now += seconds
        provider.advance(clock.now)

    free = sorted(m.id for m in provider.list(ListFilter(states=[MachineState.SPECULATIVE])))
    clusters = [cluster_name(i) for i, n in enumerate(counts) for _ in range(n)]
    placed = list(zip(clusters, free, strict=False))  # (70 % of the fleet: enough free)
    ids = [mid for _, mid in placed]
    for at in range(0, len(ids), MAX_CREATE_BATCH):
        batch = ids[at : at + MAX_CREATE_BATCH]
        call(lambda: provider.create(batch, token))  # noqa: B023 (called at once)
    wait(60.0)
    for cluster, mid in placed:
        call(lambda: provider.configure(mid, blob, cluster, token))  # noqa: B023
    wait(60.0)
    serving = provider.list(ListFilter(states=[MachineState.CONFIGURED]))
    if len(serving) != len(ids):
        raise RuntimeError(f"--serving: {len(serving)} of {len(ids)} machines configured")
    provider.calls.clear()
    provider.started.clear()
    provider.rate_limited = 0


async def rounds(client: Any, args: argparse.Namespace, run: Run) -> None:
    """Every --rollup-seconds, every cluster's roll-up (--moving of them changed), for
    --minutes, routed as the gateway routes them (workers/routing.py ShardRouter: the
    coordinator names a cluster's shard on first contact, then roll-ups are batched to it)."""
    router = ShardRouter(client, args.shards)
    run.assigned = router.assigned
    rng = random.Random(14)
    counts = first_counts(args)
    before = list(counts) if args.serving else [0] * args.clusters  # (served already)
    end = time.time() + args.minutes * 60
    generation = 1
    while time.time() < end:
        began = time.time()
        for i, (old, new) in enumerate(zip(before, counts, strict=True)):
            if new > old:
                run.raised.setdefault(cluster_name(i), []).append(began)
                if run.rounds:  # (the first round's demand is the start, not its moving)
                    run.raised_machines += new - old
        sent = await asyncio.gather(
            *(
                router(cluster_name(i), rollup(cluster_name(i), generation, n))
                for i, n in enumerate(counts)
            ),
            return_exceptions=True,
        )
        refused = [e for e in sent if isinstance(e, BaseException)]
        if refused and not run.refused:
            run.first_refusal = f"round {run.rounds + 1}: {refused[0]}"
        run.refused += len(refused)
        run.rounds += 1
        before = list(counts)
        move(rng, counts, args.machines, args.moving, args.step)
        generation += 1
        spare = args.rollup_seconds - (time.time() - began)
        if spare < 0:
            run.late_rounds += 1  # sending the round took longer than the period
        await asyncio.sleep(max(0.0, spare))
