"""`bigfleet simulate --compare shards --shards N`: the same fleet, demand, engine and cost model
on one shard and on N (issue 45). Pooling that holds only inside a shard shows here as a dearer
or worse-served N-shard run; the coordinator is the one the shard workflows plan with."""

from __future__ import annotations

from typing import Any

from .compare import SERVICE_BANDS, _dollars, _fraction, difference, served_worse, summary_rows
from .compare import table as side_by_side
from .run import Simulation
from .scenario import Scenario, on_shards
from .units import duration


def compare_shards(scenario: Scenario, seed: int | None, shards: int) -> dict[str, Any]:
    """Run `scenario` on 1 shard and on `shards` shards (every other field as the file says)."""
    one = Simulation(on_shards(scenario, 1), seed).run()
    many = Simulation(on_shards(scenario, shards), seed).run()
    return shard_comparison(one, many, scenario.name, shards)


def shard_comparison(
    one: dict[str, Any], many: dict[str, Any], scenario: str, shards: int
) -> dict[str, Any]:
    """The comparison of a 1-shard and an N-shard report, as `compare_shards` returns it.
    `difference` is the N-shard run's figures subtracted from the 1-shard run's (negative
    `cost_saved`: N shards cost more)."""
    a, b = one["summary"], many["summary"]
    gap = round(b["cost_total"] - a["cost_total"], 2)
    bands = {
        band: {
            "one_shard": (a["bands"].get(band) or {}).get("served_fraction"),
            "sharded": (b["bands"].get(band) or {}).get("served_fraction"),
        }
        for band in reversed(SERVICE_BANDS)  # the highest first
        if band in a["bands"] or band in b["bands"]
    }
    return {
        "scenario": scenario,
        "seed": one.get("seed"),
        "shards": shards,
        "one_shard": one,
        "sharded": many,
        "difference": difference(a, b),
        "verdict": {
            "cost_difference": gap,
            "cost_difference_fraction": round(gap / a["cost_total"], 4)
            if a["cost_total"]
            else None,
            "served_by_band": bands,
            "bands_served_worse_on_n_shards": served_worse(b, a),
            "machines_moved_between_shards": moved_between_shards(many),
            STRANDED: {"one_shard": one["cost"][STRANDED], "sharded": many["cost"][STRANDED]},
        },
        "headline": {
            "text": _headline(
                a, b, shards, gap, bands, moved_between_shards(many), many["cost"][STRANDED]
            )
        },
    }


# Report field (report.py, Recorder.stranded): cloud machine-hours bought in one shard while
# owned machines that could have stood in sat idle in another.
STRANDED = "cloud_machine_hours_beside_idle_owned_elsewhere"


def moved_between_shards(report: dict[str, Any]) -> int:
    """Machines the coordinator moved from one shard to another (idle hand-overs, speculative
    quota, preemptions, splits and merges; not decommissions, which leave the fleet)."""
    return sum(t.get("machines", 0) for t in report["transfers"] if t["kind"] != "decommission")


def _headline(
    a: dict[str, Any],
    b: dict[str, Any],
    shards: int,
    gap: float,
    bands: dict[str, dict[str, float | None]],
    moved: int,
    stranded: float,
) -> str:
    if not gap:
        cost = f"the same cost as on one shard ({_dollars(a['cost_total'])})"
    else:
        pct = f" ({100 * abs(gap) / a['cost_total']:.1f} %)" if a["cost_total"] else ""
        cost = (
            f"{_dollars(b['cost_total'])} against {_dollars(a['cost_total'])} on one shard: "
            f"{_dollars(abs(gap))}{pct} {'more' if gap > 0 else 'less'}"
        )
    served = (
        "; ".join(
            f"{band} served {_fraction(v['sharded'])} against {_fraction(v['one_shard'])}"
            for band, v in bands.items()
        )
        or "nobody asked for capacity at priority >= 500000"
    )
    return (
        f"On {shards} shards: {cost}; {served}; {stranded:,.1f} cloud machine-hours bought while "
        f"matching owned machines sat idle in another shard; {moved} machine(s) moved between "
        "shards by the coordinator."
    )


def render_shard_comparison(result: dict[str, Any]) -> str:
    one, many, n = result["one_shard"], result["sharded"], result["shards"]
    extra = [
        (
            "machines moved between shards",
            [str(moved_between_shards(one)), str(moved_between_shards(many))],
        ),
        (
            "cloud machine-hours beside idle owned elsewhere",
            [f"{r['cost'][STRANDED]:,.1f}" for r in (one, many)],
        ),
        *(
            (
                f"cost: {kind}",
                [_dollars(r["cost"]["by_capacity_type"].get(kind)) for r in (one, many)],
            )
            for kind in one["cost"]["by_capacity_type"]
            if one["cost"]["by_capacity_type"].get(kind)
            or many["cost"]["by_capacity_type"].get(kind)
        ),
    ]
    rows = summary_rows([one["summary"], many["summary"]])
    return "\n".join(
        [
            result["headline"]["text"],
            "",
            f"scenario {result['scenario']} (seed {result['seed']}): "
            f"{duration(one['duration_seconds'])} simulated; the same fleet on 1 shard and on {n}"
            + (
                f" (ending on {many['shards']} after the coordinator's splits and merges)"
                if many["shards"] != n
                else ""
            ),
            "",
            *side_by_side(["1 shard", f"{n} shards"], rows[:1] + extra + rows[1:]),
        ]
    )
