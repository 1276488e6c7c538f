"""`bench fleet`'s result: the summary of a run (per shard and for the fleet, with the
limits it ran into) and its text rendering.
"""

from __future__ import annotations

import argparse
from typing import Any

from bigfleet.providers.base import MAX_CREATE_BATCH
from workers.bench.fleet_samples import LIFECYCLE, Closed, Run
from workers.bench.temporal import (
    percentile,
)

QUARTERS = (0.25, 0.5, 0.75, 1.0)  # where the text shows a shard's machines CONFIGURED


# What a configured machine costs the server, in the ceiling's trivial workflows: the history
# events of its create and its configure (each batched, so a workflow's events are shared by
# its machines; `transition_costs` reads them from completed workflows of the run) over the
# trivial workflow's 5 (workflows/bench.py: one workflow task). Events stand for the server's
# work: each is written, and most come with a task dispatched. If the run completed none of
# either kind, the ratio `bench temporal` measured (1.20 machine transitions a trivial
# workflow; docs/temporal.md) stands in: 2 / 1.20.
TRIVIAL_EVENTS = 5


FALLBACK_WORKFLOWS_PER_MACHINE = 2 / 1.20


def calls_per_machine(c: dict[str, float]) -> float:
    """Provider calls that pass its API rate limit for one machine, from create to configured,
    derived from its counters over the run: (create calls / machines whose create began) +
    (configure calls / machines whose configure began). A create call begins up to 64 machines
    (MAX_CREATE_BATCH), a configure call one; a call repeated after an activity retry begins
    nothing and counts. Calls the token bucket refused took no token: the refusals (counted
    without their kind) are taken off each kind in proportion to its calls. Before any create
    (configure) began, the nominal 1/64 (1)."""
    made = sum(c[kind] for kind in LIFECYCLE)
    passed = 1 - c["refused"] / made if made else 1.0
    create = passed * c["create"] / c["created"] if c["created"] else 1 / MAX_CREATE_BATCH
    configure = passed * c["configure"] / c["configured"] if c["configured"] else 1.0
    return create + configure


def history_growth(samples: list[dict[str, Any]]) -> tuple[int, int, int]:
    """Events and bytes a shard's history grew by over its samples, and its continues-as-new
    (a new run counts from zero; what the old one grew since the last sample is not seen)."""
    events = nbytes = runs = 0
    for a, b in zip(samples, samples[1:], strict=False):
        if a["run_id"] == b["run_id"]:
            events += b["events"] - a["events"]
            nbytes += b["bytes"] - a["bytes"]
        else:
            runs += 1
            events += b["events"]
            nbytes += b["bytes"]
    return events, nbytes, runs


def intervals(ends: set[float], first: float, last: float) -> list[float]:
    """Seconds between consecutive cycle ends, both inside [first, last]."""
    inside = sorted(t for t in ends if first <= t <= last)
    return [b - a for a, b in zip(inside, inside[1:], strict=False)]


LONGEST = 3  # the longest intervals between cycles a shard's summary names


def longest(ends: set[float], samples: list[dict[str, Any]], i: int) -> list[list[Any]]:
    """Shard `i`'s LONGEST longest intervals between cycles: [seconds, when it began (seconds
    into the run), whether a continue-as-new fell in it (a run the samples saw began inside
    it)]. What a p99 over a few hundred intervals is made of."""
    first, last = samples[0]["t"], samples[-1]["t"]
    inside = sorted(t for t in ends if first <= t <= last)
    gaps = sorted(zip(inside, inside[1:], strict=False), key=lambda g: g[0] - g[1])
    began = {s["shards"][i]["run_began"] for s in samples}
    return [
        [round(b - a, 2), round(a - first, 1), any(a < t < b for t in began)]
        for a, b in gaps[:LONGEST]
    ]


def p(values: list[float], q: float, digits: int) -> float | None:
    return round(percentile(values, q), digits) if values else None


def shard_summary(i: int, run: Run, closed: Closed, seconds: float) -> dict[str, Any]:
    first_t = run.samples[0]["t"]
    mine = [s["shards"][i] for s in run.samples]
    events, nbytes, runs = history_growth(mine)
    gaps = intervals(run.cycle_ends[i], first_t, run.samples[-1]["t"])
    cycle_ms = [s["cycle_ms"] for s in mine if s["cycle_ms"] > 0]
    latencies = closed.latencies.get(str(i), [])
    minutes = seconds / 60
    return {
        "shard": i,
        "clusters": sum(1 for shard in run.assigned.values() if shard == i),
        "cycles": mine[-1]["cycles"] - mine[0]["cycles"],
        "cycles_per_s": round((mine[-1]["cycles"] - mine[0]["cycles"]) / seconds, 3),
        "cycle_interval_p50_s": p(gaps, 50, 3),
        "cycle_interval_p99_s": p(gaps, 99, 3),
        "cycle_intervals": len(gaps),
        "longest_intervals": longest(run.cycle_ends[i], run.samples, i),
        "decision_cycle_p50_ms": p(cycle_ms, 50, 1),
        "decision_cycle_p99_ms": p(cycle_ms, 99, 1),
        "configured_over_time": [
            [round(s["t"] - first_t, 1), s["shards"][i]["configured"]] for s in run.samples
        ],
        "configured_machines_end": mine[-1]["configured"],
        "configures": len(latencies),
        "rollup_to_configured_p50_s": p(latencies, 50, 2),
        "rollup_to_configured_p99_s": p(latencies, 99, 2),
        "history_events_per_min": round(events / minutes),
        "history_mb_per_min": round(nbytes / 1e6 / minutes, 2),
        "continues_as_new": runs,
        "queued_starts_max": max(s["queued_starts"] for s in mine),
        "oldest_queued_seconds_max": max(s["oldest_queued_seconds"] for s in mine),
        "in_flight_max": max(s["in_flight"] for s in mine),
        "status_unanswered": run.shard_unanswered[i],
    }


def limits(
    args: argparse.Namespace,
    calls: dict[str, float],
    server: dict[str, Any],
    sustained: float,
    costs: dict[str, Any],
) -> dict[str, Any]:
    """What the run's physical limits allow in machines configured a second: (a) the provider's
    API rate over the calls a machine needs from create to configured; (b) the server's
    trivial-workflow ceiling over what a configured machine costs it in such workflows."""
    per_machine = calls_per_machine(calls)
    provider_max = args.calls_per_second / per_machine
    events = costs.get("events_per_machine")
    workflows_per_machine = (
        events / TRIVIAL_EVENTS if events else FALLBACK_WORKFLOWS_PER_MACHINE
    )
    server_max = server["per_s"] / workflows_per_machine
    binding = min(provider_max, server_max)
    return {
        "provider_calls_per_machine": round(per_machine, 3),
        "provider_configured_per_s_max": round(provider_max, 1),
        "server_workflows_per_s": round(server["per_s"], 1),
        "ceiling_workflows": server["workflows"],
        "ceiling_seconds": round(server["seconds"], 2),
        "ceiling_workflows_per_machine": round(workflows_per_machine, 2),
        **costs,
        "server_configured_per_s_max": round(server_max, 1),
        "binding_limit": "provider" if provider_max <= server_max else "server",
        "binding_limit_per_s": round(binding, 1),
        "configured_vs_binding": round(sustained / binding, 3),
    }


def summary(
    args: argparse.Namespace,
    run: Run,
    closed: Closed,
    adopt_s: float,
    calls: dict[str, float],
    server: dict[str, Any],
    costs: dict[str, Any],
) -> dict[str, Any]:
    first, last = run.samples[0], run.samples[-1]
    seconds = max(1e-9, last["t"] - first["t"])
    minutes = seconds / 60
    shards = [shard_summary(i, run, closed, seconds) for i in range(args.shards)]
    cycles = [ms for ms in run.cycle_ms if ms > 0] or [0.0]
    latencies = closed.all_latencies()
    middle = first["t"] + seconds / 2
    whole = sum(n for t, n in closed.machines if first["t"] <= t <= last["t"])
    second_half = sum(n for t, n in closed.machines if middle <= t <= last["t"])
    sustained = second_half / (seconds / 2)
    growth = [history_growth([s["shards"][i] for s in run.samples]) for i in range(args.shards)]
    return {
        "clusters": args.clusters,
        "machines": args.machines,
        "shard_count": args.shards,
        "moving": args.moving,
        "step": args.step,
        "serving_at_start": args.serving,
        # What the moving demand asks of the fleet: machines wanted more, a second.
        "demand_raised_per_s": round(
            run.raised_machines / max(1e-9, (run.rounds - 1) * args.rollup_seconds), 2
        ),
        "seconds": round(seconds, 1),
        "adopt_seconds": round(adopt_s, 1),
        "adopted_machines": run.adopted,
        "rollup_rounds": run.rounds,
        "late_rollup_rounds": run.late_rounds,
        "decision_cycle_p50_ms": round(percentile(cycles, 50), 1),
        "decision_cycle_p99_ms": round(percentile(cycles, 99), 1),
        # A shard's, on average: 1 at cycle_seconds 1 when every shard keeps up.
        "cycles_per_s": round(sum(s["cycles"] for s in shards) / len(shards) / seconds, 3),
        "transitions_started_per_s": round((last["started"] - first["started"]) / seconds, 1),
        "transitions_completed_per_s": round((last["completed"] - first["completed"]) / seconds, 1),
        "configured_during_run": len(latencies),
        "rollup_to_configured_p50_s": round(percentile(latencies or [0.0], 50), 2),
        "rollup_to_configured_p99_s": round(percentile(latencies or [0.0], 99), 2),
        "configured_machines_end": sum(s["configured_machines_end"] for s in shards),
        "configured_per_s": round(whole / seconds, 2),
        "sustained_configured_per_s": round(sustained, 2),
        **limits(args, calls, server, sustained, costs),
        "worker_rss_mb_max": round(max(s["worker_rss_kb"] for s in run.samples) / 1024, 1),
        "server_rss_mb_max": round(max(s["server_rss_kb"] for s in run.samples) / 1024, 1),
        "worker_cpu_percent": round(
            100 * (last["worker_cpu_s"] - first["worker_cpu_s"]) / seconds, 1
        ),
        "shard_worker_rss_mb_max": round(
            max(s["shard_worker_rss_kb"] for s in run.samples) / 1024, 1
        ),
        "shard_worker_cpu_percent": round(
            100 * (last["shard_worker_cpu_s"] - first["shard_worker_cpu_s"]) / seconds, 1
        ),
        "server_cpu_percent": round(
            100 * (last["server_cpu_s"] - first["server_cpu_s"]) / seconds, 1
        ),
        "history_events_per_min": round(sum(g[0] for g in growth) / minutes),
        "history_mb_per_min": round(sum(g[1] for g in growth) / 1e6 / minutes, 2),
        "continues_as_new": sum(g[2] for g in growth),
        "calls_per_second": args.calls_per_second,
        "rate_limited_calls": int(calls["refused"]),
        "rollups_refused": run.refused,
        "first_refusal": run.first_refusal,
        "status_unanswered": run.unanswered,
        "samples": len(run.samples),
        "shards": shards,
    }


def quarters(series: list[list[float]]) -> list[int]:
    """The count at 25, 50, 75 and 100 % of the run: the last sample at or before each."""
    end = series[-1][0] if series else 0.0
    out = []
    for q in QUARTERS:
        seen = [n for t, n in series if t <= q * end + 1e-6]
        out.append(int(seen[-1]) if seen else 0)
    return out


def fmt(value: float | None, spec: str, unit: str) -> str:
    return "-" if value is None else f"{value:{spec}}{unit}"


def render_shard(s: dict[str, Any]) -> list[str]:
    at = ", ".join(str(n) for n in quarters(s["configured_over_time"]))
    return [
        f"shard {s['shard']:<11} {s['clusters']} clusters; {s['cycles']} cycles, "
        f"{s['cycles_per_s']:.2f}/s; interval p50 {fmt(s['cycle_interval_p50_s'], '.2f', ' s')}"
        f", p99 {fmt(s['cycle_interval_p99_s'], '.2f', ' s')}; decide p50 "
        f"{fmt(s['decision_cycle_p50_ms'], '.1f', ' ms')}",
        f"  configured      {at} at 25/50/75/100 % of the run",
        f"  roll-up -> configured  p50 {fmt(s['rollup_to_configured_p50_s'], '.2f', ' s')}, "
        f"p99 {fmt(s['rollup_to_configured_p99_s'], '.2f', ' s')} ({s['configures']} configures)",
        f"  history         +{s['history_events_per_min']} events/min, "
        f"+{s['history_mb_per_min']:.2f} MB/min, {s['continues_as_new']} continues-as-new",
        "  longest         "
        + ", ".join(
            f"{g:g} s at {at:g} s" + (" (continue-as-new)" if new else "")
            for g, at, new in s["longest_intervals"]
        ),
        f"  queued starts   max {s['queued_starts_max']}, oldest waited max "
        f"{s['oldest_queued_seconds_max']:g} s; in flight max {s['in_flight_max']}; "
        f"{s['status_unanswered']} status queries unanswered",
    ]


def render(r: dict[str, Any]) -> str:
    lines = [
        f"fleet             {r['clusters']} clusters, {r['machines']} machines, "
        f"{r['shard_count']} shard(s); {r['adopted_machines']} adopted in "
        f"{r['adopt_seconds']:.1f} s; measured "
        f"{r['seconds']:.0f} s, {r['rollup_rounds']} roll-up rounds ({r['late_rollup_rounds']} "
        f"late), {r['moving']:.0%} of clusters moving each by {r['step']:.0%}: "
        f"{r['demand_raised_per_s']:g} machines/s wanted more"
        + ("; the fleet served the first round at the start" if r["serving_at_start"] else ""),
        f"decision cycle    p50 {r['decision_cycle_p50_ms']:.1f} ms, p99 "
        f"{r['decision_cycle_p99_ms']:.1f} ms; {r['cycles_per_s']:.2f} cycles/s a shard",
        f"transitions       {r['transitions_started_per_s']:.1f} started/s, "
        f"{r['transitions_completed_per_s']:.1f} completed/s",
        f"roll-up -> configured  p50 {r['rollup_to_configured_p50_s']:.2f} s, p99 "
        f"{r['rollup_to_configured_p99_s']:.2f} s ({r['configured_during_run']} configures)",
        f"configured        {r['configured_per_s']:.2f} machines/s over the run, "
        f"{r['sustained_configured_per_s']:.2f}/s in its second half; "
        f"{r['configured_machines_end']} CONFIGURED at the end",
        f"limits            provider {r['calls_per_second']:g} calls/s / "
        f"{r['provider_calls_per_machine']:.3f} calls a machine = "
        f"{r['provider_configured_per_s_max']:.1f} machines/s; server "
        f"{r['server_workflows_per_s']:.1f} trivial workflows/s ({r['ceiling_workflows']} in "
        f"{r['ceiling_seconds']:.1f} s) / {r['ceiling_workflows_per_machine']:g} a machine = "
        f"{r['server_configured_per_s_max']:.1f} machines/s",
        "history events    "
        + (
            f"{r['events_per_machine']:g} a configured machine (create "
            f"{r['create_events_per_machine']:g}, {r['create_machines_per_workflow']:g} machines "
            f"a workflow; configure {r['configure_events_per_machine']:g}, "
            f"{r['configure_machines_per_workflow']:g} a workflow); a trivial workflow "
            f"{TRIVIAL_EVENTS}"
            if "events_per_machine" in r
            else "not measured (no create or no configure completed)"
        ),
        f"binding           {r['binding_limit']}, {r['binding_limit_per_s']:.1f} machines/s; "
        f"sustained configured / binding {r['configured_vs_binding']:.3f}",
        f"RSS               shard worker {r['shard_worker_rss_mb_max']:.0f} MB, "
        f"transition worker {r['worker_rss_mb_max']:.0f} MB, server "
        f"{r['server_rss_mb_max']:.0f} MB (max)",
        f"CPU               shard worker {r['shard_worker_cpu_percent']:.0f} %, "
        f"transition worker {r['worker_cpu_percent']:.0f} %, server "
        f"{r['server_cpu_percent']:.0f} % (of one core)",
        f"shard history     +{r['history_events_per_min']} events/min, "
        f"+{r['history_mb_per_min']:.2f} MB/min, {r['continues_as_new']} continues-as-new "
        "(all shards)",
        f"provider          {r['rate_limited_calls']} calls throttled "
        f"(limit {r['calls_per_second']:g}/s)",
        f"refused           {r['rollups_refused']} roll-ups {r['first_refusal']}; "
        f"{r['status_unanswered']} of {r['samples'] * r['shard_count']} status queries "
        "unanswered",
    ]
    for s in r["shards"]:
        lines += render_shard(s)
    return "\n".join(lines)
