"""The simulation report: one JSON-ready dict, and its text rendering."""

from __future__ import annotations

from collections import Counter
from typing import TYPE_CHECKING, Any

import numpy as np

from .recorder import CAPACITY_TYPES, band

if TYPE_CHECKING:
    from .run import Simulation


def _percentiles(values: list[float]) -> dict[str, float]:
    if not values:
        return {}
    arr = np.asarray(values, dtype=np.float64)
    return {
        "p50": round(float(np.percentile(arr, 50)), 1),
        "p90": round(float(np.percentile(arr, 90)), 1),
        "p99": round(float(np.percentile(arr, 99)), 1),
        "machines": len(values),
    }


def build_report(sim: Simulation) -> dict[str, Any]:
    rec = sim.recorder
    clusters: dict[str, Any] = {}
    for cluster in sim.scenario.clusters:
        tracks = sorted(
            (t for (c, _), t in rec.needs.items() if c == cluster.name), key=lambda t: t.index
        )
        clusters[cluster.name] = {
            "shard": sim.coordinator.clusters.get(cluster.name),
            "needs": [
                {
                    "index": t.index,
                    "priority": t.priority,
                    "count": t.count,
                    "satisfied": t.satisfied,
                    # From the last time the need asked for more than it had.
                    "time_to_ready_seconds": None
                    if t.ready_at is None
                    else round(t.ready_at - t.demand_since, 1),
                    "satisfied_over_time": t.samples,
                }
                for t in tracks
            ],
        }
    by_band: dict[str, list[float]] = {}
    for priority, seconds in rec.latencies:
        by_band.setdefault(band(priority), []).append(seconds)
    kinds = Counter(a["kind"] for a in rec.actions)
    reasons = Counter(f"{a['kind']}/{a['reason']}" for a in rec.actions if a["reason"])
    by_type = {t: round(rec.cost.get(t, 0.0), 2) for t in CAPACITY_TYPES}
    return {
        "scenario": sim.scenario.name,
        "seed": sim.seed,
        "duration_seconds": sim.scenario.duration_seconds,
        "shards": len(sim.shards),
        "clusters": clusters,
        "time_to_ready_by_priority_band": {b: _percentiles(v) for b, v in sorted(by_band.items())},
        "actions_by_kind": dict(kinds),
        "actions_by_reason": dict(reasons),
        "preemptions": rec.preemptions,
        "transfers": sim.rebalancer.log,
        "cost": {
            "total": round(sum(rec.cost.values()), 2),
            "by_capacity_type": by_type,
            "idle_machine_hours": round(rec.idle_machine_hours, 2),
        },
        "shortfalls": sorted(rec.shortfalls.values(), key=lambda s: (-s["priority"], s["cluster"])),
        "escalations": [s for s in rec.shortfalls.values() if s["escalated"]],
        "providers": {
            name: {"calls": dict(p.calls), "rate_limited": rec.rate_limits.get(name, 0)}
            for name, p in sim.providers.items()
        },
        "failures": rec.failures,
        "errors": [{"t": t, "message": m} for t, m in rec.errors],
        "rejected_rollups": rec.rejected_rollups,
        "actions": rec.actions,
    }


# Over 60 lines: one section of the printed report after another, in the order a reader
# reads them; split, it would only scatter the layout.
def render_text(report: dict[str, Any], log_lines: int = 20) -> str:
    out = [
        f"scenario {report['scenario']} (seed {report['seed']}): "
        f"{report['duration_seconds']:g} s simulated, {report['shards']} shard(s)",
        "",
        "needs (at the end):",
    ]
    for name, cluster in report["clusters"].items():
        for n in cluster["needs"]:
            ready = n["time_to_ready_seconds"]
            out.append(
                f"  {name}#{n['index']:<3} priority {n['priority']:>8}  "
                f"{n['satisfied']:>6}/{n['count']:<6} configured  "
                f"ready after {'-' if ready is None else f'{ready:g} s'}"
            )
    out.append("")
    out.append("time to ready (arrival of demand -> machine configured), per priority band:")
    for b, p in report["time_to_ready_by_priority_band"].items():
        out.append(
            f"  {b:>14}: p50 {p['p50']} s  p90 {p['p90']} s  p99 {p['p99']} s"
            f"  ({p['machines']} machines)"
        )
    cost = report["cost"]
    out += [
        "",
        f"cost: ${cost['total']:,.2f}  "
        + "  ".join(f"{k} ${v:,.2f}" for k, v in cost["by_capacity_type"].items() if v)
        + f"  idle machine-hours {cost['idle_machine_hours']:,.1f}",
        "actions: " + ", ".join(f"{k} {v}" for k, v in sorted(report["actions_by_kind"].items())),
        "reasons: " + ", ".join(f"{k} {v}" for k, v in sorted(report["actions_by_reason"].items())),
    ]
    pre = report["preemptions"]
    if pre:
        graces = Counter((p["victim"], p["preemptor"], p["grace_seconds"]) for p in pre)
        out.append("preemptions:")
        for (victim, preemptor, grace), n in sorted(graces.items()):
            out.append(f"  {n} machines of {victim} for {preemptor}, grace {grace:g} s")
    if report["shortfalls"]:
        escalated = len(report["escalations"])
        out.append(f"shortfalls ({len(report['shortfalls'])}, {escalated} escalated):")
        for s in report["shortfalls"][:10]:
            flag = ", escalated" if s["escalated"] else ""
            out.append(
                f"  {s['cluster']} priority {s['priority']}: up to {s['max_count']} x "
                f"{s['profile']} (age {s['max_age']}{flag})"
            )
    out.append("provider API calls:")
    for name, p in report["providers"].items():
        calls = ", ".join(f"{k} {v}" for k, v in sorted(p["calls"].items()))
        out.append(f"  {name}: {calls}; rate-limit waits {p['rate_limited']}")
    if report["failures"]:
        out.append(f"failed transitions: {len(report['failures'])}")
    if report["rejected_rollups"]:
        out.append(f"rejected roll-ups: {len(report['rejected_rollups'])}")
    out.append(f"action log (first {log_lines} of {len(report['actions'])}):")
    for a in report["actions"][:log_lines]:
        extra = f" grace {a['grace_seconds']:g} s" if a["grace_seconds"] is not None else ""
        why = f" ({a['reason']})" if a["reason"] else ""
        out.append(
            f"  t={a['t']:>7g} {a['kind']:<9} {a['machine']} cluster={a['cluster']} "
            f"{a['provider']}/{a['capacity_type']}{extra}{why}"
        )
    return "\n".join(out)
