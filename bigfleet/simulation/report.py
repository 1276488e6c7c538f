"""The simulation report: one JSON-ready dict, and its text rendering."""

from __future__ import annotations

from collections import Counter
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

import numpy as np

from .measures import BANDS, band
from .recorder import CAPACITY_TYPES, Recorder, merge_recorders
from .units import duration

if TYPE_CHECKING:
    from .run import Simulation
    from .scenario import Scenario


@dataclass
class Run:
    """What a report is made of: one simulation, or several merged (the per-cluster baseline)."""

    scenario: Scenario
    seed: int
    recorder: Recorder
    shard_of: dict[str, int]
    shards: int
    transfers: list[dict[str, Any]]
    calls: dict[str, dict[str, Any]]
    # Closed-loop replays: per band, how long jobs waited to start, and those still queued.
    job_waits: dict[str, dict[str, list[float]]] = field(default_factory=dict)

    @classmethod
    def of(cls, sim: Simulation) -> Run:
        return cls(
            scenario=sim.scenario,
            seed=sim.seed,
            recorder=sim.recorder,
            shard_of=dict(sim.coordinator.clusters),
            shards=len(sim.shards),
            transfers=sim.rebalancer.log,
            calls={
                name: {"calls": dict(p.calls), "rate_limited": sim.recorder.rate_limits[name]}
                for name, p in sim.providers.items()
            },
            job_waits=_job_waits([sim]),
        )

    @classmethod
    def merged(cls, scenario: Scenario, seed: int, runs: list[Run]) -> Run:
        """Independent runs (one per cluster) as one: every cluster on shard 0 of its own."""
        calls: dict[str, dict[str, Any]] = {}
        for run in runs:
            for name, c in run.calls.items():
                into = calls.setdefault(name, {"calls": Counter(), "rate_limited": 0})
                into["calls"].update(c["calls"])
                into["rate_limited"] += c["rate_limited"]
        return cls(
            scenario=scenario,
            seed=seed,
            recorder=merge_recorders([r.recorder for r in runs]),
            shard_of={c: 0 for r in runs for c in r.shard_of},
            shards=len(runs),
            transfers=[],
            job_waits={
                b: {
                    k: [w for r in runs for w in r.job_waits.get(b, {}).get(k, [])]
                    for k in ("started", "waiting")
                }
                for b in {b for r in runs for b in r.job_waits}
            },
            calls={
                n: {"calls": dict(c["calls"]), "rate_limited": c["rate_limited"]}
                for n, c in calls.items()
            },
        )


def _job_waits(sims: list[Simulation]) -> dict[str, dict[str, list[float]]]:
    out: dict[str, dict[str, list[float]]] = {}
    for sim in sims:
        for loop in sim.loops.values():
            for priority, waits in loop.waits().items():
                into = out.setdefault(band(priority), {"started": [], "waiting": []})
                into["started"] += [w for _, w in waits.started]
                into["waiting"] += [w for _, w in waits.waiting]
    return out


def job_wait_summary(job_waits: dict[str, dict[str, list[float]]]) -> dict[str, Any]:
    """Per band: jobs started and how long they waited in the queue (p50/p99), and jobs still
    queued at the end with the longest wait so far."""
    out = {}
    for b, w in sorted(job_waits.items()):
        started = np.asarray(w["started"], dtype=np.float64)
        out[b] = {
            "started": len(started),
            "p50_s": round(float(np.percentile(started, 50)), 1) if len(started) else None,
            "p99_s": round(float(np.percentile(started, 99)), 1) if len(started) else None,
            "still_queued": len(w["waiting"]),
            "longest_queued_s": round(max(w["waiting"]), 1) if w["waiting"] else None,
        }
    return out


def build_report(sim: Simulation) -> dict[str, Any]:
    return report_of(Run.of(sim))


def report_of(run: Run) -> dict[str, Any]:
    rec = run.recorder
    clusters: dict[str, Any] = {}
    for cluster in run.scenario.clusters:
        tracks = sorted(
            (t for (c, _), t in rec.needs.items() if c == cluster.name), key=lambda t: t.index
        )
        clusters[cluster.name] = {
            "shard": run.shard_of.get(cluster.name),
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
    to_capacity = rec.book.by_band(rec.open_asks(run.scenario.duration_seconds))
    kinds = Counter(a["kind"] for a in rec.actions)
    reasons = Counter(f"{a['kind']}/{a['reason']}" for a in rec.actions if a["reason"])
    by_type = {t: round(rec.cost.get(t, 0.0), 2) for t in CAPACITY_TYPES}
    total = round(sum(rec.cost.values()), 2)
    useful = sum(rec.book.served_seconds.values()) / 3600.0
    moves = moves_away_from_work(rec)
    return {
        "scenario": run.scenario.name,
        "seed": run.seed,
        "duration_seconds": run.scenario.duration_seconds,
        "shards": run.shards,
        "clusters": clusters,
        "summary": {
            "bands": {
                b: {
                    "served_fraction": v["served_fraction"],
                    "p50_s": v["p50"],
                    "p99_s": v["p99"],
                    "waiting": v["waiting"],
                }
                for b, v in to_capacity.items()
            },
            "cost_total": total,
            "cost_per_useful_machine_hour": round(total / useful, 4) if useful else None,
            "useful_machine_hours": round(useful, 2),
            "preemptions": moves["preempted"] + moves["in_cluster"],
            "idle_machine_hours": round(rec.idle_machine_hours, 2),
            "consolidations": rec.consolidations,
            "cost_moves": rec.cost_moves,
        },
        "time_to_capacity_by_priority_band": to_capacity,
        "moves_away_from_work": moves,
        "notices_and_repair": notices_and_repair(rec),
        # Machine-cycles a disruption budget or mark held back, by reason (docs/operations.md).
        "disruption_held_back": dict(sorted(rec.held_back.items())),
        "job_waits_by_priority_band": job_wait_summary(run.job_waits),
        "in_cluster_moves": rec.in_cluster,
        "actions_by_kind": dict(kinds),
        "actions_by_reason": dict(reasons),
        "preemptions": rec.preemptions,
        "transfers": run.transfers,
        "cost": {
            "total": total,
            "by_capacity_type": by_type,
            "idle_machine_hours": round(rec.idle_machine_hours, 2),
            "consolidations": rec.consolidations,
            "cost_moves": rec.cost_moves,
            # Cloud machine-hours bought while matching owned machines sat idle in another
            # shard (Recorder.stranded; 0 on one shard).
            "cloud_machine_hours_beside_idle_owned_elsewhere": round(
                rec.stranded_machine_hours, 2
            ),
        },
        "shortfalls": sorted(rec.shortfalls.values(), key=lambda s: (-s["priority"], s["cluster"])),
        "escalations": [s for s in rec.shortfalls.values() if s["escalated"]],
        "providers": run.calls,
        "failures": rec.failures,
        "errors": [{"t": t, "message": m} for t, m in rec.errors],
        "rejected_rollups": rec.rejected_rollups,
        "actions": rec.actions,
        "series": rec.series,
    }


def notices_and_repair(rec: Recorder) -> dict[str, Any]:
    """What the providers' notices saved, and what repair did (bigfleet/notices.py).

    - `drained_ahead`: machines at work drained on a notice before their deadline; each one's
      work left gracefully instead of being killed.
    - `ahead_machine_seconds`: for those, the sum of (deadline - when the shard acted): the
      head start their replacements got. Without notices each replacement starts only once the
      machine is gone, and its cluster is a machine short meanwhile.
    - `penalty_saved`: the interruption penalties (seed: dollars of lost work per interruption)
      of the needs those machines served.
    - `interrupted_at_work`: interruptions that still hit a machine at work (no notice, or
      one that came too late to act on).
    - `repaired`: unhealthy machines drained and replaced; `repair_held`: clusters whose
      repair was held because more than `max_unhealthy` were unhealthy at once, with the most
      unhealthy seen."""
    ahead = [a for a in rec.actions if a["kind"] == "drain" and "ahead_seconds" in a]
    held: dict[str, int] = {}
    for s in rec.shortfalls.values():
        if s.get("repair_held"):
            held[s["cluster"]] = max(held.get(s["cluster"], 0), s["max_count"])
    return {
        "drained_ahead": len(ahead),
        "ahead_machine_seconds": round(sum(a["ahead_seconds"] for a in ahead), 1),
        "penalty_saved": round(sum(a["penalty"] for a in ahead), 2),
        "interrupted_at_work": sum(
            1
            for f in rec.failures
            if f["failed_from"] == "CONFIGURED" and f["error"] == "spot interruption"
        ),
        "repaired": sum(
            1 for a in rec.actions if a["kind"] == "drain" and a["reason"] == "unhealthy"
        ),
        "repair_held": dict(sorted(held.items())),
    }


def _notices_line(n: dict[str, Any]) -> str:
    held = ", ".join(f"{c} (up to {k} unhealthy)" for c, k in n["repair_held"].items())
    return (
        f"notices: {n['drained_ahead']} machines drained ahead of their end "
        f"({n['ahead_machine_seconds']:,.0f} machine-seconds of head start, "
        f"${n['penalty_saved']:,.2f} of interruption penalty saved), "
        f"{n['interrupted_at_work']} interrupted at work; repair: {n['repaired']} replaced"
        + (f", held for {held}" if held else "")
    )


def moves_away_from_work(rec: Recorder) -> dict[str, int]:
    """Every time a machine was taken away from work it was doing, by why."""
    drains = Counter(a["reason"] for a in rec.actions if a["kind"] == "drain")
    working = [f for f in rec.failures if f["failed_from"] == "CONFIGURED"]
    interrupted = sum(1 for f in working if f["error"] == "spot interruption")
    return {
        "preempted": len(rec.preemptions),
        "in_cluster": sum(m["machines"] for m in rec.in_cluster),
        "interrupted": interrupted,
        "failed": len(working) - interrupted,
        "transferred": drains.get("transfer", 0),
        "decommissioned": drains.get("decommission", 0),
    }


def _highest_first(by_band: dict[str, Any]) -> list[tuple[str, Any]]:
    return [(b, by_band[b]) for b in reversed(BANDS) if b in by_band]


def _capacity_lines(report: dict[str, Any]) -> list[str]:
    out = ["time to capacity (a machine asked for -> one configured for it), per priority band:"]
    for b, w in _highest_first(report["job_waits_by_priority_band"]):
        longest = w["longest_queued_s"]
        out.append(
            f"  {b:>14}: jobs waited to start p50 {duration(w['p50_s'])}"
            f"  p99 {duration(w['p99_s'])}"
            f"  ({w['started']} started, {w['still_queued']} still queued"
            + ("" if longest is None else f", longest {duration(longest)}")
            + ")  [closed loop]"
        )
    for b, p in _highest_first(report["time_to_capacity_by_priority_band"]):
        served = p["served_fraction"]
        longest = "" if p["longest_wait"] is None else f", longest {duration(p['longest_wait'])}"
        out.append(
            f"  {b:>14}: p50 {duration(p['p50'])}  p90 {duration(p['p90'])}"
            f"  p99 {duration(p['p99'])}"
            f"  ({p['answered']} answered, {p['waiting']} still waiting{longest},"
            f" {p['withdrawn']} withdrawn)  served "
            + ("-" if served is None else f"{100 * served:.1f} %")
        )
    return out


# Over 60 lines: one section of the printed report after another, in the order a reader
# reads them; split, it would only scatter the layout.
def render_text(report: dict[str, Any], log_lines: int = 20) -> str:
    out = [
        f"scenario {report['scenario']} (seed {report['seed']}): "
        f"{duration(report['duration_seconds'])} simulated, {report['shards']} shard(s)",
        "",
        "needs (at the end):",
    ]
    for name, cluster in report["clusters"].items():
        for n in cluster["needs"]:
            ready = n["time_to_ready_seconds"]
            out.append(
                f"  {name}#{n['index']:<3} priority {n['priority']:>8}  "
                f"{n['satisfied']:>6}/{n['count']:<6} configured  "
                f"ready after {duration(ready)}"
            )
    out.append("")
    out += _capacity_lines(report)
    cost = report["cost"]
    per_useful = report["summary"]["cost_per_useful_machine_hour"]
    moves = report["moves_away_from_work"]
    out += [
        "",
        f"cost: ${cost['total']:,.2f}  "
        + "  ".join(f"{k} ${v:,.2f}" for k, v in cost["by_capacity_type"].items() if v)
        + f"  idle machine-hours {cost['idle_machine_hours']:,.1f}"
        + (
            f"  cloud machine-hours beside idle owned machines in another shard "
            f"{cost['cloud_machine_hours_beside_idle_owned_elsewhere']:,.1f}"
            if report["shards"] > 1
            else ""
        ),
        f"cost per useful machine-hour: {'-' if per_useful is None else f'${per_useful:,.2f}'}"
        f" ({report['summary']['useful_machine_hours']:,.1f} useful machine-hours)",
        "machines taken from work: " + ", ".join(f"{k} {v}" for k, v in moves.items()),
        _notices_line(report["notices_and_repair"]),
        "held back by disruption budgets and marks (machine-cycles): "
        + (", ".join(f"{k} {v}" for k, v in report["disruption_held_back"].items()) or "none"),
        f"machines moved for cost: {report['summary']['consolidations']} toward cheaper capacity"
        f" (consolidations), {report['summary']['cost_moves']} for the fleet's bill (cost moves)",
        "actions: " + ", ".join(f"{k} {v}" for k, v in sorted(report["actions_by_kind"].items())),
        "reasons: " + ", ".join(f"{k} {v}" for k, v in sorted(report["actions_by_reason"].items())),
    ]
    pre = report["preemptions"]
    if pre:
        graces = Counter((p["victim"], p["preemptor"], p["grace_seconds"]) for p in pre)
        out.append("preemptions:")
        for (victim, preemptor, grace), n in sorted(graces.items()):
            out.append(f"  {n} machines of {victim} for {preemptor}, grace {duration(grace)}")
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
        extra = f" grace {duration(a['grace_seconds'])}" if a["grace_seconds"] is not None else ""
        why = f" ({a['reason']})" if a["reason"] else ""
        out.append(
            f"  t={a['t']:>7g} {a['kind']:<9} {a['machine']} cluster={a['cluster']} "
            f"{a['provider']}/{a['capacity_type']}{extra}{why}"
        )
    return "\n".join(out)
