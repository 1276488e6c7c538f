"""Generate examples/week-16-clusters.yaml: a simulated week of 16 clusters, deterministically.

    python examples/make_week_16_clusters.py > examples/week-16-clusters.yaml

The fleet, 352 machines: two datacenters of bare metal (a GPU rack and two CPU racks each) and
two cloud regions (reserved, spot and on-demand m6i.4xlarge, a few p5.48xlarge). Sixteen
clusters whose demand moves through the week:

- serving (900000 and 1000000) and GPU inference (900000) in each region: a day curve in local
  time, lower at the weekend, re-sent every 30 or 60 minutes;
- a training run (1000000) on one GPU rack (`same: bigfleet.io/rack`), Tuesday to Thursday;
- ETL (500000) every night, a Monday-morning report run (500000), batch (100000) all week and
  CI (100000) in working hours on weekdays;
- best-effort research and backfill (0) on bare metal only.

Same output for the same SEED: the file is generated once and committed. Roll-up helpers and
the YAML layout are those of make_mixed_fleet_day.py.
"""

from __future__ import annotations

import random
import sys
from itertools import accumulate
from typing import Any

import yaml
from make_mixed_fleet_day import (
    CPU,
    CPU_RES,
    GPU,
    GPU_RES,
    HOUR,
    P5,
    PRICE,
    RACK,
    REGIONS,
    VM,
    VM_RES,
    ZONE,
    _clusters_yaml,
    _dedupe,
    _Dumper,
    day_curve,
    in_region,
    req,
)

SEED = 20240610
DAY = 24 * HOUR
WEEK = 7 * DAY
WEEKEND = (5, 6)  # the week starts on a Monday at 00:00 UTC


def _rack(site: str, kind: str, i: int, zone: str, count: int) -> dict[str, Any]:
    gpu = kind == "gpu"
    return {
        "rack": f"{site}-{kind}-r{i:02d}",
        "zone": zone,
        "instance_type": GPU if gpu else CPU,
        "count": count,
        "price_per_hour": PRICE[GPU if gpu else CPU],
        "resources": GPU_RES if gpu else CPU_RES,
    }


def _slot(zone: str, capacity_type: str, count: int, price: float, **extra: Any) -> dict[str, Any]:
    slot = dict(instance_type=VM, zone=zone, capacity_type=capacity_type, count=count)
    return {**slot, "price_per_hour": price, "resources": VM_RES, **extra}


def providers() -> list[dict[str, Any]]:
    def metal(site: str, gpus: int) -> dict[str, Any]:
        zone = f"{site}-1"
        racks = [_rack(site, "gpu", 1, zone, gpus)]
        racks += [_rack(site, "cpu", i, zone, 24) for i in (1, 2)]
        name = f"dc-{site}"
        return {"name": name, "kind": "bare-metal", "configure_latency": 120, "racks": racks}

    def cloud(region: str) -> dict[str, Any]:
        quota = []
        for zone in (f"{region}a", f"{region}b"):
            quota += [
                _slot(zone, "reserved", 4, 0.25),
                _slot(zone, "spot", 18, 0.30, interruption_probability=0.05),
                _slot(zone, "on-demand", 28, 0.768),
            ]
        p5 = {**_slot(f"{region}a", "on-demand", 4, 98.32), "instance_type": P5}
        quota.append({**p5, "resources": GPU_RES})
        latencies = {"create_latency": [30, 90], "configure_latency": 30, "delete_latency": 5}
        api = {"api_calls_per_second": 2}
        return dict(name=f"aws-{region}", kind="cloud", region=region, **api, **latencies,
                    quota=quota)

    return [metal("ams", 32), metal("iad", 16), cloud("eu-west-1"), cloud("us-east-1")]


def _need(
    kinds: tuple[str, ...], where: list[dict[str, Any]], priority: int, penalty: float,
    drain: int, count: int = 0, **extra: Any,
) -> dict[str, Any]:
    """A capacity need for one of `kinds` of machine, also matching `where`."""
    kind = req("node.kubernetes.io/instance-type", *kinds)
    return dict(requirements=[kind, *where], priority=priority, count=count,
                interruption_penalty=penalty, drain_seconds=drain, **extra)


def _weekday(t: float) -> int:
    return int(t // DAY) % 7


def serving(
    rng: random.Random, name: str, region: str, priority: int, penalty: float,
    levels: tuple[int, int], every_minutes: int, *, gpu: bool = False,
) -> dict[str, Any]:
    """A day curve in local time between `levels`; the weekend asks for 60 % of a weekday."""
    _, _, offset = REGIONS[region]
    kinds = (GPU, P5) if gpu else (CPU, VM)
    need = _need(kinds, [in_region(region)], priority, penalty, 30,
                 spread=[{"key": ZONE, "max_skew": 10}])
    low, high = levels

    def count(at: int) -> int:
        weekend = 0.6 if _weekday(at + offset * HOUR) in WEEKEND else 1.0
        level = (low + (high - low) * day_curve(at, offset)) * weekend
        return round(level * rng.uniform(0.93, 1.07))

    times = range(rng.randrange(600), WEEK, every_minutes * 60)
    rollups = [{"at": at, "needs": [{**need, "count": count(at)}]} for at in times]
    return {"name": name, "kubelet_version": "1.33", "rollups": _dedupe(rollups)}


def jobs(
    rng: random.Random,
    name: str,
    region: str,
    priority: int,
    windows: list[tuple[float, float]],
    per_window: int,
    sizes: tuple[int, int],
    hours: tuple[float, float],
    *,
    bare_metal_only: bool = False,
) -> dict[str, Any]:
    """`per_window` jobs arrive in each window (hours since Monday 00:00 UTC), run and finish;
    the roll-up carries the sum of the running jobs' machines."""
    where = [in_region(region)]
    if bare_metal_only:
        where.append(req("bigfleet.io/capacity-type", "bare-metal"))
    changes: list[tuple[int, int]] = []
    for window in windows:
        for _ in range(per_window):
            start = int(rng.uniform(*window) * HOUR) // 60 * 60
            end = start + int(rng.uniform(*hours) * HOUR) // 60 * 60
            size = rng.randint(*sizes)
            changes += [(start, size)] + ([(end, -size)] if end < WEEK else [])
    need = _need((CPU, VM), where, priority, 0.0 if priority == 0 else 2.0, 120)
    changes.sort()
    running = accumulate(delta for _, delta in changes)
    rollups = [{"at": 0, "needs": [need]}] + [
        {"at": at, "needs": [{**need, "count": n}]}
        for (at, _), n in zip(changes, running, strict=True)
    ]
    return {"name": name, "kubelet_version": "1.32", "rollups": _dedupe(rollups)}


def _days(first: float, last: float, days: range = range(7)) -> list[tuple[float, float]]:
    """The window [first, last) hours of UTC on each of `days` (0 = Monday)."""
    return [(d * 24 + first, d * 24 + last) for d in days]


def _fixed(name: str, need: dict[str, Any], spans: list[tuple[float, float]]) -> dict[str, Any]:
    """A cluster asking for `need` during each span (hours since Monday), for nothing between."""
    rollups = []
    for start, end in spans:
        rollups += [
            {"at": int(start * HOUR), "needs": [need]},
            {"at": int(end * HOUR), "needs": [{**need, "count": 0}]},
        ]
    return {"name": name, "kubelet_version": "1.33", "rollups": rollups}


def clusters() -> list[dict[str, Any]]:
    rng = random.Random(SEED)
    out = []
    for region in ("eu", "us"):
        out += [
            serving(rng, f"web-{region}", region, 900_000, 0.5, (10, 45), 30),
            serving(rng, f"api-{region}", region, 1_000_000, 10.0, (8, 24), 30),
            serving(rng, f"infer-{region}", region, 900_000, 5.0, (2, 10), 60, gpu=True),
        ]
    train = _need((GPU,), [in_region("eu")], 1_000_000, 1000.0, 600, 32,
                  same=RACK, reclamation_penalty=8000.0)
    out.append(_fixed("train-llm", train, [(24 + 6, 3 * 24 + 20)]))
    research = _need((GPU,), [req("bigfleet.io/capacity-type", "bare-metal")], 0, 0.5, 30, 48)
    out.append({"name": "research-gpu", "kubelet_version": "1.31",
                "rollups": [{"at": 60, "needs": [research]}]})
    weekdays = range(5)
    return out + [
        jobs(rng, "etl-eu", "eu", 500_000, _days(0, 4), 3, (4, 12), (1, 3)),
        jobs(rng, "etl-us", "us", 500_000, _days(5, 9), 3, (4, 12), (1, 3)),
        jobs(rng, "reports-weekly", "eu", 500_000, [(1, 2)], 4, (10, 20), (4, 6)),
        jobs(rng, "batch-eu", "eu", 100_000, _days(0, 24), 3, (2, 12), (0.5, 4)),
        jobs(rng, "batch-us", "us", 100_000, _days(0, 24), 3, (2, 12), (0.5, 4)),
        jobs(rng, "ci-eu", "eu", 100_000, _days(7, 18, weekdays), 12, (1, 4), (0.2, 0.6)),
        jobs(rng, "ci-us", "us", 100_000, _days(13, 23, weekdays), 12, (1, 4), (0.2, 0.6)),
        jobs(rng, "backfill", "us", 0, _days(0, 24), 1, (10, 30), (3, 8), bare_metal_only=True),
    ]


def scenario() -> dict[str, Any]:
    top = dict(name="week-16-clusters", seed=7, cycle_seconds=10, duration_seconds=WEEK)
    top |= {"shards": 1, "sample_seconds": 3600}
    return {**top, "providers": providers(), "clusters": clusters()}


HEADER = """\
# GENERATED by examples/make_week_16_clusters.py -- edit the script, not this file:
#   python examples/make_week_16_clusters.py > examples/week-16-clusters.yaml
#
# A simulated week (604800 s, from Monday 00:00 UTC) of 16 clusters on 352 machines: bare metal
# in dc-ams and dc-iad (a GPU rack and two CPU racks each) and two cloud regions (reserved, spot
# and on-demand m6i.4xlarge, four p5.48xlarge each). Serving and GPU inference on a day curve,
# lower at the weekend (900000 / 1000000); a 32-GPU same-rack training run Tuesday to Thursday
# (1000000); nightly ETL and a Monday report run (500000); batch and weekday CI (100000);
# best-effort research and backfill (0) on bare metal. Run:
#   bigfleet simulate examples/week-16-clusters.yaml
#
# Prices. Owned capacity is billed for the whole week, used or not, at a stated amortised rate
# (purchase over 4 years plus power, space and network; the same rate in every example):
# gpu-8xh100 $15.00/h, cpu-64 $0.80/h. Reserved m6i.4xlarge $0.25/h (owned too: billed all week).
# Cloud, per hour used: m6i.4xlarge spot $0.30 (5 % hourly interruption), on-demand $0.768;
# p5.48xlarge on-demand $98.32.
"""


def main() -> None:
    """The scenario's top level in block style, then one line per roll-up (as the day's)."""
    top = scenario()
    rollups = _clusters_yaml(top.pop("clusters"))
    body = yaml.dump(top, Dumper=_Dumper, sort_keys=False, default_flow_style=None)
    sys.stdout.write(HEADER + body + rollups)


if __name__ == "__main__":
    main()
