"""`bigfleet bench engine --against REV`: this checkout's engine beside another revision's, in
one process, cycle by cycle.

The machines these benchmarks run on are shared: the same code's churn cycle measured 53 ms one
hour and 95 ms the next (docs/engine.md). Two runs of `bench engine` compare hours, not code.
Here both engines face the same roll-ups in the same process; each churn cycle runs both, in
alternating order, and each is timed by the CPU time of the thread as well as the wall clock,
so a slow hour slows both and the comparison stands.

REV's `bigfleet` package is taken from git (`git archive`) into a temporary directory and
imported under another name; its own bench scenario (`bigfleet.bench._Scenario`) drives it.
"""

from __future__ import annotations

import atexit
import importlib
import io
import random
import shutil
import statistics
import subprocess
import sys
import tarfile
import tempfile
import time
from pathlib import Path
from types import ModuleType
from typing import Any

PACKAGE = Path(__file__).resolve().parent


def revision(rev: str) -> str:
    """The commit `rev` names in this checkout's repository (ValueError if none)."""
    found = subprocess.run(
        ["git", "-C", str(PACKAGE), "rev-parse", "--verify", "--quiet", f"{rev}^{{commit}}"],
        capture_output=True,
        text=True,
        check=False,
    )
    if found.returncode != 0:
        raise ValueError(f"--against: {rev!r} is not a commit of this checkout's repository")
    return found.stdout.strip()


def load(commit: str) -> ModuleType:
    """The `bigfleet` package as of `commit`, imported as `bigfleet_at_<commit[:12]>`."""
    name = f"bigfleet_at_{commit[:12]}"
    if name in sys.modules:
        return sys.modules[name]
    top = subprocess.run(
        ["git", "-C", str(PACKAGE), "rev-parse", "--show-toplevel"],
        capture_output=True,
        text=True,
        check=True,
    ).stdout.strip()
    archive = subprocess.run(
        ["git", "-C", top, "archive", "--format=tar", commit, "bigfleet"],
        capture_output=True,
        check=True,
    ).stdout
    where = Path(tempfile.mkdtemp(prefix="bigfleet-against-"))
    atexit.register(shutil.rmtree, where, ignore_errors=True)
    with tarfile.open(fileobj=io.BytesIO(archive)) as tar:
        if hasattr(tarfile, "data_filter"):  # (Python 3.11.4 and later)
            tar.extractall(where, filter="data")
        else:  # pragma: no cover - our own repository's archive
            tar.extractall(where)  # noqa: S202
    (where / "bigfleet").rename(where / name)
    sys.path.insert(0, str(where))
    return importlib.import_module(name)


class _Side:
    """One revision's engine, inventory and needs table on the benchmark's fleet."""

    def __init__(self, package: str, machines: int, seed: int) -> None:
        def part(module: str) -> Any:
            return importlib.import_module(f"{package}.{module}")

        bench = part("bench")
        self.scenario = bench._Scenario(seed, machines)
        inventory = part("inventory").Inventory(capacity=machines)
        fleet = part("synthetic").fleet(random.Random(seed), machines, bench.CLUSTERS)
        inventory.add(fleet, 0)
        self.engine = part("engine").FastEngine(inventory, part("policy").Policy())
        self.table = part("needs").NeedsTable(max_silence_seconds=float("inf"))
        for rollup in self.scenario.initial():
            self.table.apply(rollup, 0.0)
        self.rng = random.Random(seed + 1)
        self.cpu: list[float] = []
        self.wall: list[float] = []

    def cycle(self, now: float, generation: int | None) -> None:
        """One cycle (a churn cycle when `generation` is given), timed."""
        if generation is not None:
            for rollup in self.scenario.churned(self.rng, self.table, generation):
                self.table.apply(rollup, now)
        cpu, wall = time.thread_time(), time.perf_counter()
        decision = self.engine.decide(self.table, now)
        self.engine.apply(decision, now)
        self.cpu.append((time.thread_time() - cpu) * 1000)
        self.wall.append((time.perf_counter() - wall) * 1000)
        for _ in decision.actions:  # (as the shard reads them; untimed)
            pass


def run(rev: str, sizes: list[int], seed: int = 7, cycles: int = 9) -> dict[str, Any]:
    """Churn cycles of REV's engine and this checkout's, alternating, per size."""
    commit = revision(rev)
    base = load(commit).__name__
    rows = []
    for size in sizes:
        sides = {"base": _Side(base, size, seed), "this": _Side("bigfleet", size, seed)}
        now = 0.0
        for _ in range(3):  # settle, untimed
            now += 10
            for side in sides.values():
                side.cycle(now, None)
        for side in sides.values():
            side.cpu.clear()
            side.wall.clear()
        for i in range(cycles):
            now += 10
            for name in ("base", "this") if i % 2 else ("this", "base"):
                sides[name].cycle(now, 2 + i)
        pairs = zip(sides["this"].cpu, sides["base"].cpu, strict=True)
        rows.append(
            {
                "machines": size,
                **{
                    name: {
                        "churn_cpu_ms": round(statistics.median(side.cpu), 2),
                        "churn_wall_ms": round(statistics.median(side.wall), 2),
                        "cycles_cpu_ms": [round(t, 1) for t in side.cpu],
                    }
                    for name, side in sides.items()
                },
                "this_faster_cycles": sum(a < b for a, b in pairs),
                "cycles": cycles,
            }
        )
    return {"against": commit, "rows": rows}


def render(result: dict[str, Any]) -> str:
    lines = [
        f"churn cycles, this checkout against {result['against'][:12]} "
        "(one process, alternating; CPU ms median / wall ms median)",
        f"{'machines':>9} {'base cpu':>9} {'this cpu':>9} {'base wall':>10} {'this wall':>10}"
        f" {'this faster':>12}",
    ]
    for row in result["rows"]:
        base, this = row["base"], row["this"]
        lines.append(
            f"{row['machines']:>9} {base['churn_cpu_ms']:>9} {this['churn_cpu_ms']:>9}"
            f" {base['churn_wall_ms']:>10} {this['churn_wall_ms']:>10}"
            f" {row['this_faster_cycles']:>5} of {row['cycles']}"
        )
    return "\n".join(lines)
