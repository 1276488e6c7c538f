"""`bigfleet bench engine`: cycle times and memory of the fast engine beside the reference.

Numbers, not assertions: the machines this runs on are shared and noisy, so it prints what it
measured and docs/benchmarks.md records it with the command.
"""

from __future__ import annotations

import gc
import random
import statistics
import time
import tracemalloc
from collections.abc import Callable
from typing import Any

from .engine import FastEngine
from .engine.reference import ReferenceEngine
from .inventory import Inventory
from .models import ClusterCapacityNeeds
from .needs import NeedsTable
from .policy import Policy
from .synthetic import fleet, need, rollups

CLUSTERS = 100
NEEDS_PER_CLUSTER = 15


def _cycle(engine: Any, table: NeedsTable, now: float) -> float:
    return _timed_cycle(engine, table, now)[0]


def _timed_cycle(engine: Any, table: NeedsTable, now: float) -> tuple[float, float]:
    """Milliseconds to decide and apply, then to read every action of the decision once.

    The fast engine makes most per-machine actions only when they are read (`Actions`); the
    shard reads each once, turning it into a transition's input. Both times are reported so
    that cost is seen, not hidden behind the cycle."""
    start = time.perf_counter()
    decision = engine.decide(table, now)
    engine.apply(decision, now)
    decided = time.perf_counter()
    for _ in decision.actions:
        pass
    return (decided - start) * 1000, (time.perf_counter() - decided) * 1000


class _Scenario:
    """The same roll-up history for both engines, so they face identical work."""

    def __init__(self, seed: int, machines: int) -> None:
        self.seed = seed
        self.machines = machines
        self.scale = max(2, machines // 1250)

    def initial(self) -> list[ClusterCapacityNeeds]:
        return rollups(random.Random(self.seed), CLUSTERS, NEEDS_PER_CLUSTER, self.scale)

    def churned(self, rng: random.Random, table: NeedsTable, generation: int) -> list:
        """10 % of all needs change: new counts or new needs, in the clusters that hold them."""
        out = []
        changes = CLUSTERS * NEEDS_PER_CLUSTER // 10
        touched: dict[str, list] = {}
        for _ in range(changes):
            cluster = f"c{rng.randrange(CLUSTERS):03d}"
            specs = touched.setdefault(cluster, [n.spec for n in table.needs_of(cluster)])
            if specs:
                i = rng.randrange(len(specs))
                specs[i] = specs[i].model_copy(update={"count": rng.randint(0, self.scale)})
        for cluster, specs in touched.items():
            out.append(ClusterCapacityNeeds(cluster=cluster, generation=generation, needs=specs))
        return out

    def arrival(self, rng: random.Random, table: NeedsTable, generation: int) -> list:
        """Every cluster asks for a burst of new demand at once."""
        return [
            ClusterCapacityNeeds(
                cluster=cluster,
                generation=generation,
                needs=[n.spec for n in table.needs_of(cluster)]
                + [need(rng, self.scale * 4) for _ in range(3)],
            )
            for cluster in table.clusters()
        ]


def measure(
    make: Callable[[list], Any], scenario: _Scenario, repeats: int, phases: bool = False
) -> dict[str, Any]:
    """Steady, churn and arrival cycle times and bytes a machine; with `phases` (the fast
    engine only), also the time of each part of the churn and arrival cycles."""
    machines = fleet(random.Random(scenario.seed), scenario.machines, CLUSTERS)
    gc.collect()
    tracemalloc.start()
    before = tracemalloc.get_traced_memory()[0]
    engine = make(machines)
    after = tracemalloc.get_traced_memory()[0]
    tracemalloc.stop()
    del machines
    table = NeedsTable(max_silence_seconds=float("inf"))
    now = 0.0
    for rollup in scenario.initial():
        table.apply(rollup, now)
    for _ in range(3):  # settle: the first cycles start everything the roll-ups ask for
        now += 10
        _cycle(engine, table, now)
    generation = 2
    steady = []
    for _ in range(repeats):
        now += 10
        for cluster in table.clusters():
            table.apply(
                ClusterCapacityNeeds(
                    cluster=cluster,
                    generation=generation,
                    needs=[n.spec for n in table.needs_of(cluster)],
                ),
                now,
            )
        generation += 1
        steady.append(_cycle(engine, table, now))
    rng = random.Random(scenario.seed + 1)
    churn, churn_read = [], []
    clock = engine.clock if phases else None
    parts: list[dict[str, float]] = []
    if clock is not None:
        clock.on = True
        clock.take()
    for _ in range(repeats):
        now += 10
        for rollup in scenario.churned(rng, table, generation):
            table.apply(rollup, now)
        generation += 1
        cycle, read = _timed_cycle(engine, table, now)
        churn.append(cycle)
        churn_read.append(read)
        if clock is not None:
            parts.append(clock.take())
    now += 10
    for rollup in scenario.arrival(rng, table, generation):
        table.apply(rollup, now)
    arrival, arrival_read = _timed_cycle(engine, table, now)
    result: dict[str, Any] = {
        "steady_ms": round(statistics.median(steady), 3),
        "churn_ms": round(statistics.median(churn), 3),
        "arrival_ms": round(arrival, 3),
        "churn_read_ms": round(statistics.median(churn_read), 3),
        "arrival_read_ms": round(arrival_read, 3),
        "bytes_per_machine": round(_bytes(engine, after - before) / scenario.machines, 1),
    }
    if clock is not None:
        result["phases"] = _phases(parts, clock.take())
    return result


def _phases(churn: list[dict[str, float]], arrival: dict[str, float]) -> dict[str, Any]:
    """Per part of the cycle, in the order the cycle runs them: the median of the churn
    cycles' times and the arrival cycle's time, in ms."""
    names = list(dict.fromkeys([*(n for c in churn for n in c), *arrival]))
    return {
        name: {
            "churn_ms": round(statistics.median(c.get(name, 0.0) for c in churn), 3),
            "arrival_ms": round(arrival.get(name, 0.0), 3),
        }
        for name in names
    }


def _bytes(engine: Any, traced: int) -> float:
    if isinstance(engine, FastEngine):
        return float(engine.inventory.nbytes())
    return float(traced)


def run(
    sizes: list[int], reference_max: int, seed: int = 7, phases: bool = False
) -> dict[str, Any]:
    policy = Policy()
    rows = []
    for size in sizes:
        scenario = _Scenario(seed, size)

        def fast(machines: list, size: int = size) -> FastEngine:
            inventory = Inventory(capacity=size)
            inventory.add(machines, 0)
            return FastEngine(inventory, policy)

        row: dict[str, Any] = {
            "machines": size,
            "clusters": CLUSTERS,
            "needs": CLUSTERS * NEEDS_PER_CLUSTER,
            "fast": measure(fast, scenario, repeats=7, phases=phases),
            "reference": None,
            "speedup_steady": None,
            "speedup_churn": None,
        }
        if size <= reference_max:
            ref = measure(lambda ms: ReferenceEngine(ms, policy), scenario, repeats=2)
            row["reference"] = ref
            row["speedup_steady"] = round(ref["steady_ms"] / row["fast"]["steady_ms"], 1)
            row["speedup_churn"] = round(ref["churn_ms"] / row["fast"]["churn_ms"], 1)
        rows.append(row)
    return {"rows": rows}


def render(result: dict[str, Any]) -> str:
    head = (
        f"{'machines':>9} {'engine':>9} {'steady ms':>10} {'churn ms':>9} {'arrival ms':>11} "
        f"{'read ms':>12} {'B/machine':>10} {'speedup':>14}"
    )
    lines = [head, "-" * len(head)]
    for row in result["rows"]:
        for name in ("fast", "reference"):
            m = row[name]
            if m is None:
                skipped = "(skipped: see --reference-max)"
                lines.append(f"{row['machines']:>9} {name:>9} {skipped:>59}")
                continue
            speed = (
                f"{row['speedup_steady']}x/{row['speedup_churn']}x"
                if name == "reference" and row["speedup_steady"]
                else ""
            )
            read = f"{m['churn_read_ms']:.2f}/{m['arrival_read_ms']:.2f}"
            lines.append(
                f"{row['machines']:>9} {name:>9} {m['steady_ms']:>10} {m['churn_ms']:>9} "
                f"{m['arrival_ms']:>11} {read:>12} {m['bytes_per_machine']:>10} {speed:>14}"
            )
    lines.append("speedup = reference ÷ fast, steady/churn; ms are medians of decide()+apply()")
    lines.append("read ms = reading each action of the churn/arrival decision once (as a shard)")
    for row in result["rows"]:
        if row["fast"].get("phases"):
            lines += ["", *_render_phases(row["machines"], row["fast"]["phases"])]
    return "\n".join(lines)


def _render_phases(machines: int, phases: dict[str, Any]) -> list[str]:
    title = f"part of the cycle at {machines:,} machines"
    head = f"{title:<42} {'churn ms':>9} {'arrival ms':>11}"
    lines = [head, "-" * len(head)]
    for name, t in phases.items():
        lines.append(f"{name:<42} {t['churn_ms']:>9.2f} {t['arrival_ms']:>11.2f}")
    churn = sum(t["churn_ms"] for t in phases.values())
    arrival = sum(t["arrival_ms"] for t in phases.values())
    lines.append(f"{'sum (churn: of the medians)':<42} {churn:>9.2f} {arrival:>11.2f}")
    return lines
