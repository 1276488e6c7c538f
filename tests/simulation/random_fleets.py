"""Small random fleets for property tests of the simulator (issue 45): a few owned racks of
2-3 instance types, a cloud quota of spot and on-demand lines, and 2-8 clusters whose needs
change at a few times, built with the helpers of `scenarios.py`; and what a property reads off
a run (cost, served fraction per band, and why: transfers, shortfalls, cost by capacity type)."""

from __future__ import annotations

from typing import Any

from hypothesis import strategies as st

from bigfleet.simulation.compare import SERVICE_BANDS
from bigfleet.simulation.measures import band

from .scenarios import RACK, bare_metal, cloud, cluster, need, quota, scenario, simulate

PRIORITIES = (0, 100_000, 500_000, 900_000, 1_000_000)
ITYPE = "node.kubernetes.io/instance-type"
# Owned instance types and their amortised prices per machine-hour (billed used or not).
OWNED = {"cpu-64": (0.4, 0.8, 1.5), "cpu-32": (0.2, 0.4), "gpu-8xh100": (8.0, 15.0)}
# Cloud lines: (instance type, capacity type) -> prices per hour used.
CLOUD = {
    ("m6i.xlarge", "spot"): (0.2, 0.3),
    ("m6i.xlarge", "on-demand"): (0.768, 1.5),
    ("p5.48xlarge", "on-demand"): (30.0, 98.32),
}
# What a need may run on: a requirement on the instance type (None: any machine).
KINDS: dict[str, list[str] | None] = {
    "cpu": ["cpu-64", "cpu-32", "m6i.xlarge"],
    "cpu-owned": ["cpu-64", "cpu-32"],
    "cpu-64": ["cpu-64", "m6i.xlarge"],
    "gpu": ["gpu-8xh100", "p5.48xlarge"],
    "gpu-owned": ["gpu-8xh100"],
    "any": None,
}


@st.composite
def racks(draw: st.DrawFn) -> dict[str, Any]:
    types = draw(st.lists(st.sampled_from(sorted(OWNED)), min_size=1, max_size=3, unique=True))
    out = []
    for i in range(draw(st.integers(len(types), 4))):
        itype = types[i % len(types)]
        out.append(
            {
                "rack": f"r{i + 1}",
                "zone": "ams-1",
                "instance_type": itype,
                "count": draw(st.integers(1, 6)),
                "price_per_hour": draw(st.sampled_from(OWNED[itype])),
            }
        )
    return bare_metal(*out, configure_latency=draw(st.sampled_from([30.0, 120.0])))


@st.composite
def quota_lines(draw: st.DrawFn) -> dict[str, Any]:
    keys = draw(st.lists(st.sampled_from(sorted(CLOUD)), min_size=1, max_size=3, unique=True))
    lines = []
    for itype, capacity in keys:
        line = quota(
            capacity,
            draw(st.integers(0, 8)),
            draw(st.sampled_from(CLOUD[itype, capacity])),
            draw(st.sampled_from([0.0, 0.05, 0.3])) if capacity == "spot" else 0.0,
        )
        lines.append({**line, "instance_type": itype})
    return cloud(*lines)


@st.composite
def needs_of(draw: st.DrawFn) -> list[dict[str, Any]]:
    """A cluster's needs (their shape; counts come per roll-up)."""
    out = []
    for _ in range(draw(st.integers(1, 3))):
        kind = KINDS[draw(st.sampled_from(sorted(KINDS)))]
        shape: dict[str, Any] = {"priority": draw(st.sampled_from(PRIORITIES))}
        if kind is not None:
            shape["requirements"] = [{"key": ITYPE, "operator": "In", "values": kind}]
        if (p := draw(st.sampled_from([0.0, 0.5, 10.0]))) > 0:
            shape["interruption_penalty"] = p
        if (p := draw(st.sampled_from([0.0, 0.0, 2.0]))) > 0:
            shape["reclamation_penalty"] = p
        if draw(st.integers(0, 5)) == 0:
            shape["same"] = RACK
        if draw(st.booleans()):
            shape["drain_seconds"] = 30.0
        out.append(shape)
    # Two needs of one cluster with the same shape would be one need: keep the first.
    return [s for i, s in enumerate(out) if s not in out[:i]]


@st.composite
def clusters_of(draw: st.DrawFn, duration: float) -> list[dict[str, Any]]:
    out = []
    for c in range(draw(st.integers(2, 8))):
        shapes = draw(needs_of())
        times = [0.0] + sorted(
            draw(st.lists(st.integers(1, int(duration // 60) - 1), max_size=3, unique=True))
        )
        rollups = [
            (60.0 * t, [need(**{**s, "count": draw(st.integers(0, 6))}) for s in shapes])
            for t in times
        ]
        out.append(cluster(f"c{c + 1}", *rollups))
    return out


@st.composite
def fleets(draw: st.DrawFn) -> dict[str, Any]:
    """A random small fleet: owned racks, a cloud quota, 2-8 clusters; 1 or 2 hours."""
    duration = draw(st.sampled_from([3600.0, 7200.0]))
    return scenario([draw(racks()), draw(quota_lines())], draw(clusters_of(duration)), duration)


def outcome(report: dict[str, Any]) -> dict[str, Any]:
    """What the property reads off a run: its cost, and served fraction per band >= 500000."""
    bands = report["summary"]["bands"]
    return {
        "cost": report["summary"]["cost_total"],
        "served": {
            b: bands[b]["served_fraction"]
            for b in SERVICE_BANDS
            if b in bands and bands[b]["served_fraction"] is not None
        },
        "by_capacity_type": report["cost"]["by_capacity_type"],
    }


def run_on(raw: dict[str, Any], shards: int) -> dict[str, Any]:
    """The report of `raw` run on `shards` shards (the scenario's seed)."""
    return simulate({**raw, "shards": shards})[1]


def asks(raw: dict[str, Any]) -> tuple[dict[str, int], dict[str, float]]:
    """Per band >= 500000 (`SERVICE_BANDS`) and in all (`"all"`): the machines asked for over
    the run (every rise of a need's count from one roll-up to its cluster's next; the first
    counts from 0), and the machine-hours asked. A need is its index in the roll-up, as
    `needs_of` keeps shapes in order."""
    keys = (*SERVICE_BANDS, "all")
    machines, hours = dict.fromkeys(keys, 0), dict.fromkeys(keys, 0.0)
    for c in raw["clusters"]:
        before: list[int] = []
        rollups = sorted(c["rollups"], key=lambda r: r["at"])
        ends = [r["at"] for r in rollups[1:]] + [raw["duration_seconds"]]
        for r, end in zip(rollups, ends, strict=True):
            for i, n in enumerate(r["needs"]):
                rise = max(0, n["count"] - (before[i] if i < len(before) else 0))
                for b in {band(n["priority"]), "all"} & set(keys):
                    machines[b] += rise
                    hours[b] += n["count"] * (end - r["at"]) / 3600.0
            before = [n["count"] for n in r["needs"]]
    return machines, hours


def dearest_elastic(raw: dict[str, Any]) -> float:
    """The dearest price per hour of the scenario's cloud quota lines with machines (0: none)."""
    return max(
        (
            q["price_per_hour"]
            for p in raw["providers"]
            if p["kind"] == "cloud"
            for q in p["quota"]
            if q["count"]
        ),
        default=0.0,
    )
