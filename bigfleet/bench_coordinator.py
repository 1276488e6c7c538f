"""`bigfleet bench coordinator`: one planning round of the coordinator (issue 45) on synthetic
shard reports, timed: the plan (`Coordinator.plan`), the pool's stranded count
(`pooling/stranded.py`) and the shards' summaries (`pooling/ask_first.py`). A workflow task must
end within the SDK's 2 s deadlock bound: the coordinator workflow plans a round in steps
(`pooling/pace.py`), then counts the stranded machines and makes the summaries in a task each;
the longest step is timed too.

Each shard reports `groups` settled needs paying for elastic machines (5 each, at a random
priority, for a random one of `profiles` instance types), 10 idle owned machines of each
type, 50 configured machines held by priority 0, and a shortfall for every tenth group; what
its needs ask for by type (`demand`), and 10 free spot slots of a type none of its needs asks
for (so every round deals quota, `pooling/quota.py`). Also timed: the count of shards short
beside free machines elsewhere (`fleet_shape.short_beside_free`, for split proposals)."""

from __future__ import annotations

import random
import time
from typing import Any

from .coordinator import Coordinator
from .fleet_shape import short_beside_free
from .models import CapacityType, MachineState, Shortfall, from_wire
from .pooling.ask_first import summaries
from .pooling.stranded import stranded
from .reports import Demand, ElasticGroup, Preemptible, ShardReport
from .synthetic import Offer, machine

S = MachineState
PRIORITIES = (0, 100_000, 500_000, 900_000, 1_000_000)


def _reports(shards: int, groups: int, profiles: int, seed: int) -> list[ShardReport]:
    rng = random.Random(seed)
    types = [f"type-{i}" for i in range(profiles)]
    offers = [Offer("dc", t, "z-1", CapacityType.BARE_METAL, 1.0, 0.0, 0) for t in types]
    out = []
    for s in range(shards):

        def req(kind: str) -> list[dict[str, Any]]:
            return [{"key": "node.kubernetes.io/instance-type", "operator": "In", "values": [kind]}]

        idle = [
            machine(f"s{s}-{o.instance_type}-{i}", o, S.IDLE, rack=f"r{s}-{o.instance_type}")
            for o in offers
            for i in range(10)
        ]
        held = [
            Preemptible(
                machine=machine(f"s{s}-held-{i}", offers[0], S.CONFIGURED, "bf", rack=f"h{s}"),
                priority=0,
                cluster="bf",
            )
            for i in range(50)
        ]
        elastic = [
            from_wire(
                ElasticGroup,
                {
                    "cluster": f"c{s}-{g}",
                    "priority": rng.choice(PRIORITIES),
                    "requirements": req(rng.choice(types)),
                    "count": 5,
                    "cost_per_hour": 3.0,
                    "displace_below": 1,
                    "settled": True,
                },
            )
            for g in range(groups)
        ]
        short = [
            from_wire(Shortfall, {
                "cluster": e.cluster, "profile": "p", "priority": e.priority, "count": 1,
                "age": 1, "requirements": [r.model_dump(mode="json") for r in e.requirements]})
            for e in elastic[::10]
        ]  # fmt: skip
        asked: dict[str, int] = {}
        for e in elastic:
            kind = e.requirements[0].values[0]
            asked[kind] = asked.get(kind, 0) + e.count
        demand = [from_wire(Demand, {"requirements": req(k), "count": n}) for k, n in asked.items()]
        unused = next((t for t in types if t not in asked), types[s % profiles])
        spot = Offer("cloud", unused, "z-1", CapacityType.SPOT, 2.0, 0.05, 0)
        slots = [machine(f"s{s}-spot-{i}", spot, S.SPECULATIVE) for i in range(10)]
        out.append(
            ShardReport.of(
                s,
                0.0,
                idle=idle,
                speculative=slots,
                preemptible=held,
                machines={"CONFIGURED": 10_000},
                elastic=elastic,
                shortfalls=short,
                clusters=[e.cluster for e in elastic],
                demand=demand,
            )  # fmt: skip
        )
    return out


def _ms(f: Any) -> tuple[float, Any]:
    start = time.perf_counter()
    out = f()
    return round(1000 * (time.perf_counter() - start), 1), out


def _steps(c: Coordinator) -> tuple[list[float], list]:
    """The plan in the coordinator workflow's steps (`pooling/pace.py`): each step's ms."""
    steps, times = c.plan_steps(), []
    done: StopIteration | None = None
    while done is None:
        start = time.perf_counter()
        try:
            next(steps)
        except StopIteration as end:
            done = end
        times.append(round(1000 * (time.perf_counter() - start), 1))
    return times, done.value


def run(sizes: list[int], groups: int = 128, profiles: int = 20, seed: int = 7) -> dict:
    rows = []
    for shards in sizes:
        c = Coordinator(term=1)
        for r in _reports(shards, groups, profiles, seed):
            c.receive(r, 0.0)
        reports, members = c.reports, c.shards
        steps, moves = _steps(c)
        plan_ms = round(sum(steps), 1)
        stranded_ms, _ = _ms(lambda: stranded(reports))  # noqa: B023 (called at once)
        summary_ms, _ = _ms(lambda: summaries(reports, members, 1, 0.0))  # noqa: B023
        short_ms, _ = _ms(lambda: short_beside_free(reports, (), c.last_round))  # noqa: B023
        rows.append(
            {
                "shards": shards,
                "elastic_groups": shards * groups,
                "plan_ms": plan_ms,
                "plan_steps": len(steps),
                "longest_step_ms": max(steps),
                "machines_moved": sum(len(m.machine_ids) for m in moves),
                "stranded_ms": stranded_ms,
                "summaries_ms": summary_ms,
                "short_beside_free_ms": short_ms,
                "quota_moved": sum(len(m.machine_ids) for m in moves if m.reason == "quota"),
            }
        )
    return {"groups_per_shard": groups, "profiles": profiles, "rows": rows}


def render(result: dict) -> str:
    lines = [
        f"one coordinator round, {result['groups_per_shard']} elastic groups a shard, "
        f"{result['profiles']} instance types",
        f"{'shards':>7} {'groups':>7} {'plan ms':>9} {'steps':>6} {'longest':>8} "
        f"{'moved':>7} {'stranded ms':>12} "
        f"{'summaries ms':>13} {'short ms':>9} {'quota moved':>12}",
    ]
    for r in result["rows"]:
        lines.append(
            f"{r['shards']:>7} {r['elastic_groups']:>7} {r['plan_ms']:>9} "
            f"{r['plan_steps']:>6} {r['longest_step_ms']:>8} "
            f"{r['machines_moved']:>7} {r['stranded_ms']:>12} {r['summaries_ms']:>13} "
            f"{r['short_beside_free_ms']:>9} {r['quota_moved']:>12}"
        )
    return "\n".join(lines)
