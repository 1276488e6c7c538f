"""Not a test: explore how far N shards stray from one shard on many random fleets (issue 45),
to choose and defend the tolerances of test_shards_property.py.

    .venv/bin/python -m tests.simulation.shards_explore --examples 300 --out /tmp/explore.jsonl

Writes one JSON line per example (the scenario, and per shard count its cost, cost by capacity
type, served fraction per band >= 500000, transfers and shortfall count), then prints the
distribution: cost ratio N/1 and served gap (1 shard minus N) per band, worst first."""

from __future__ import annotations

import argparse
import json
import time
from typing import Any

from hypothesis import HealthCheck, given, settings

from .random_fleets import fleets, outcome, run_on
from .test_shards_property import broken

SHARDS = (1, 2, 4)


def measure(raw: dict[str, Any]) -> dict[str, Any]:
    out: dict[str, Any] = {"scenario": raw}
    for n in SHARDS:
        report = run_on(raw, n)
        out[str(n)] = {
            **outcome(report),
            "transfers": [
                {k: t.get(k) for k in ("t", "kind", "reason", "machines", "donor", "receiver")}
                for t in report["transfers"]
            ],
            "shortfalls": len(report["shortfalls"]),
        }
    return out


def gaps(row: dict[str, Any], n: int) -> tuple[float, float, dict[str, float]]:
    one, many = row["1"], row[str(n)]
    ratio = many["cost"] / one["cost"] if one["cost"] else (1.0 if not many["cost"] else 9e9)
    served = {b: one["served"][b] - many["served"].get(b, 0.0) for b in one["served"]}
    return ratio, many["cost"] - one["cost"], served


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--examples", type=int, default=300)
    parser.add_argument("--out", default="/tmp/i45-explore.jsonl")
    parser.add_argument("--derandomize", action="store_true")
    args = parser.parse_args()
    rows: list[dict[str, Any]] = []
    started = time.monotonic()

    @settings(
        max_examples=args.examples,
        deadline=None,
        derandomize=args.derandomize,
        database=None,
        suppress_health_check=list(HealthCheck),
    )
    @given(fleets())
    def explore(raw: dict[str, Any]) -> None:
        row = measure(raw)
        rows.append(row)
        with open(args.out, "a") as f:
            f.write(json.dumps(row) + "\n")

    explore()
    print(f"{len(rows)} examples in {time.monotonic() - started:.0f} s")
    for n in SHARDS[1:]:
        measured = [gaps(r, n) for r in rows]
        ratios = sorted(m[0] for m in measured)
        print(f"N={n}: cost ratio max {ratios[-1]:.4f}, p99 {ratios[int(0.99 * len(ratios))]:.4f}")
        for band in ("500000-899999", ">=900000"):
            worst = sorted((m[2][band] for m in measured if band in m[2]), reverse=True)
            if worst:
                print(f"  {band}: worst served gap {worst[0]:.4f} (of {len(worst)})")
        bad = [r for r in rows if broken(r["scenario"], r["1"], r[str(n)])]
        print(f"  {len(bad)} of {len(rows)} break test_shards_property.py's targets")


if __name__ == "__main__":
    main()
