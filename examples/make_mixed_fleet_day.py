"""Generate examples/mixed-fleet-day.yaml: a day of a mixed fleet, deterministically.

    python examples/make_mixed_fleet_day.py > examples/mixed-fleet-day.yaml

The fleet: two datacenters of bare metal (racks of GPU and CPU machines) and two cloud regions
(reserved, spot and on-demand quota). Twenty clusters:

- serving (priority 900000 and 1000000): CPU demand following a day curve in the cluster's local
  time, re-sent every 30 or 60 minutes;
- GPU inference (900000): a smaller day curve on GPU machines;
- a training run (1000000) that needs 64 GPU machines on one rack from 06:00 to 20:00;
- batch (500000 ETL, 100000 batch and CI): jobs that arrive, run for a while and finish;
- best-effort (0): research on idle bare-metal GPUs and a CPU backfill, both bare metal only.

Same output for the same SEED: the file is generated once and committed.
"""

from __future__ import annotations

import math
import random
import sys
from typing import Any

import yaml

SEED = 20240601
DAY = 86400
HOUR = 3600

GPU = "gpu-8xh100"
CPU = "cpu-64"
VM = "m6i.4xlarge"
P5 = "p5.48xlarge"
RACK = "bigfleet.io/rack"
ZONE = "topology.kubernetes.io/zone"

GPU_RES = {"cpu": 192, "memory_gib": 2048, "gpu": 8}
CPU_RES = {"cpu": 64, "memory_gib": 512}
VM_RES = {"cpu": 16, "memory_gib": 64}

# Owned machines are billed at a stated amortised rate (purchase over 4 years plus power, space
# and network), the same in every example, so a comparison charges both sides for what they own.
PRICE = {GPU: 15.00, CPU: 0.80}

# region -> (bare-metal region, cloud region, UTC offset in hours)
REGIONS = {"eu": ("ams", "eu-west-1", 1), "us": ("iad", "us-east-1", -5)}


def req(key: str, *values: str) -> dict[str, Any]:
    return {"key": key, "operator": "In", "values": list(values)}


def in_region(region: str) -> dict[str, Any]:
    metal, cloud, _ = REGIONS[region]
    return req("topology.kubernetes.io/region", metal, cloud)


def providers() -> list[dict[str, Any]]:
    def racks(site: str, zone: str, gpu: list[int], cpu: list[int]) -> list[dict[str, Any]]:
        out = []
        for i, n in enumerate(gpu, 1):
            out.append(
                {
                    "rack": f"{site}-gpu-r{i:02d}",
                    "zone": zone,
                    "instance_type": GPU,
                    "count": n,
                    "price_per_hour": PRICE[GPU],
                    "resources": GPU_RES,
                }
            )
        for i, n in enumerate(cpu, 1):
            out.append(
                {
                    "rack": f"{site}-cpu-r{i:02d}",
                    "zone": zone,
                    "instance_type": CPU,
                    "count": n,
                    "price_per_hour": PRICE[CPU],
                    "resources": CPU_RES,
                }
            )
        return out

    def cloud(name: str, region: str) -> dict[str, Any]:
        quota = []
        for zone in (f"{region}a", f"{region}b"):
            quota += [
                # A reserved-instance commitment: owned, billed all day whether used or not, at
                # an assumed effective rate of $0.25/h (a third of on-demand's $0.768).
                {
                    "instance_type": VM,
                    "zone": zone,
                    "capacity_type": "reserved",
                    "count": 10,
                    "price_per_hour": 0.25,
                    "resources": VM_RES,
                },
                {
                    "instance_type": VM,
                    "zone": zone,
                    "capacity_type": "spot",
                    "count": 60,
                    "price_per_hour": 0.30,
                    "interruption_probability": 0.05,
                    "resources": VM_RES,
                },
                {
                    "instance_type": VM,
                    "zone": zone,
                    "capacity_type": "on-demand",
                    "count": 100,
                    "price_per_hour": 0.768,
                    "resources": VM_RES,
                },
            ]
        quota.append(
            {
                "instance_type": P5,
                "zone": f"{region}a",
                "capacity_type": "on-demand",
                "count": 8,
                "price_per_hour": 98.32,
                "resources": GPU_RES,
            }
        )
        return {
            "name": name,
            "kind": "cloud",
            "region": region,
            "api_calls_per_second": 2,
            "create_latency": [30, 90],
            "configure_latency": 30,
            "delete_latency": 5,
            "quota": quota,
        }

    return [
        {
            "name": "dc-ams",
            "kind": "bare-metal",
            "configure_latency": 120,
            "racks": racks("ams", "ams-1", [64, 64], [40, 40, 40]),
        },
        {
            "name": "dc-iad",
            "kind": "bare-metal",
            "configure_latency": 120,
            "racks": racks("iad", "iad-1", [64, 32], [40, 40, 40]),
        },
        cloud("aws-eu-west-1", "eu-west-1"),
        cloud("aws-us-east-1", "us-east-1"),
    ]


def day_curve(t: float, utc_offset: float) -> float:
    """0 at 04:00 local, 1 at 16:00 local: a smooth daily swing."""
    local = (t / HOUR + utc_offset) % 24
    return 0.5 - 0.5 * math.cos(2 * math.pi * (local - 4) / 24)


def serving(
    rng: random.Random,
    name: str,
    region: str,
    priority: int,
    penalty: float,
    low: int,
    high: int,
    every_minutes: int,
    stagger: int,
    *,
    gpu: bool = False,
    spread: bool = False,
) -> dict[str, Any]:
    _, cloud, offset = REGIONS[region]
    kinds = (GPU, P5) if gpu else (CPU, VM)
    need: dict[str, Any] = {
        "requirements": [req("node.kubernetes.io/instance-type", *kinds), in_region(region)],
        "priority": priority,
        "count": 0,
        "interruption_penalty": penalty,
        "drain_seconds": 30,
    }
    if spread:
        need["spread"] = [{"key": ZONE, "max_skew": 10}]
    rollups = []
    for at in range(stagger, DAY, every_minutes * 60):
        level = low + (high - low) * day_curve(at, offset)
        count = max(0, round(level * rng.uniform(0.93, 1.07)))
        rollups.append({"at": at, "needs": [{**need, "count": count}]})
    return {"name": name, "kubelet_version": "1.33", "rollups": _dedupe(rollups)}


def batch(
    rng: random.Random,
    name: str,
    region: str,
    priority: int,
    penalty: float,
    jobs: int,
    sizes: tuple[int, int],
    hours: tuple[float, float],
    window: tuple[float, float] = (0, 24),
    *,
    bare_metal_only: bool = False,
) -> dict[str, Any]:
    """Jobs arrive (uniformly in `window`, hours of UTC), run, and finish; the roll-up carries
    the sum of the running jobs' machines, re-computed whenever one arrives or finishes."""
    reqs = [req("node.kubernetes.io/instance-type", CPU, VM), in_region(region)]
    if bare_metal_only:
        reqs.append(req("bigfleet.io/capacity-type", "bare-metal"))
    changes: list[tuple[int, int]] = []
    for _ in range(jobs):
        start = int(rng.uniform(*window) * HOUR) // 60 * 60
        length = int(rng.uniform(*hours) * HOUR) // 60 * 60
        size = rng.randint(*sizes)
        changes.append((start, size))
        if start + length < DAY:
            changes.append((start + length, -size))
    need = {
        "requirements": reqs,
        "priority": priority,
        "count": 0,
        "interruption_penalty": penalty,
        "drain_seconds": 120,
    }
    rollups, running = [{"at": 0, "needs": [need]}], 0
    for at, delta in sorted(changes):
        running += delta
        rollups.append({"at": at, "needs": [{**need, "count": running}]})
    return {"name": name, "kubelet_version": "1.32", "rollups": _dedupe(rollups)}


def _dedupe(rollups: list[dict[str, Any]]) -> list[dict[str, Any]]:
    """One roll-up per instant (the last), and none that repeats the one before it."""
    by_time: dict[int, dict[str, Any]] = {}
    for r in rollups:
        by_time[r["at"]] = r
    out: list[dict[str, Any]] = []
    for at in sorted(by_time):
        if not out or out[-1]["needs"] != by_time[at]["needs"]:
            out.append(by_time[at])
    return out


def clusters() -> list[dict[str, Any]]:
    rng = random.Random(SEED)
    out = []
    # Serving: low penalty goes to spot in the cloud, critical (penalty 10) to on-demand.
    for region in ("eu", "us"):
        out += [
            serving(rng, f"web-{region}-1", region, 900_000, 0.5, 20, 70, 30, 13),
            serving(rng, f"web-{region}-2", region, 900_000, 0.5, 10, 45, 60, 97),
            serving(rng, f"api-{region}", region, 1_000_000, 10.0, 15, 40, 30, 211),
            serving(rng, f"shop-{region}", region, 900_000, 2.0, 10, 50, 60, 307),
            serving(rng, f"search-{region}", region, 1_000_000, 10.0, 10, 30, 30, 401, spread=True),
            serving(rng, f"infer-{region}", region, 900_000, 5.0, 6, 24, 30, 503, gpu=True),
        ]
    # A training run: 64 GPU machines on one rack, priority 1000000, 06:00-20:00 UTC.
    train_need = {
        "requirements": [req("node.kubernetes.io/instance-type", GPU), in_region("eu")],
        "priority": 1_000_000,
        "count": 64,
        "same": RACK,
        "interruption_penalty": 1000.0,
        "reclamation_penalty": 8000.0,
        "drain_seconds": 600,
    }
    out.append(
        {
            "name": "train-llm",
            "kubelet_version": "1.33",
            "rollups": [
                {"at": 6 * HOUR, "needs": [train_need]},
                {"at": 20 * HOUR, "needs": [{**train_need, "count": 0}]},
            ],
        }
    )
    # Research: best-effort GPU work on whatever bare metal is idle, around the clock.
    gpu_research = {
        "requirements": [
            req("node.kubernetes.io/instance-type", GPU),
            req("bigfleet.io/capacity-type", "bare-metal"),
        ],
        "priority": 0,
        "count": 150,
        "interruption_penalty": 0.5,
        "drain_seconds": 30,
    }
    out.append(
        {
            "name": "research-gpu",
            "kubelet_version": "1.31",
            "rollups": [{"at": 60, "needs": [gpu_research]}],
        }
    )
    out += [
        batch(rng, "etl-eu", "eu", 500_000, 5.0, 10, (8, 32), (1, 3)),
        batch(rng, "etl-us", "us", 500_000, 5.0, 10, (8, 32), (1, 3)),
        batch(rng, "batch-eu", "eu", 100_000, 1.0, 14, (4, 24), (0.5, 4)),
        batch(rng, "batch-us", "us", 100_000, 1.0, 14, (4, 24), (0.5, 4)),
        batch(rng, "ci-eu", "eu", 100_000, 0.5, 40, (1, 6), (0.2, 0.6), (7, 19)),
        batch(rng, "backfill", "us", 0, 0.0, 6, (20, 60), (3, 8), bare_metal_only=True),
    ]
    return out


def scenario() -> dict[str, Any]:
    return {
        "name": "mixed-fleet-day",
        "seed": 11,
        "cycle_seconds": 10,
        "duration_seconds": DAY,
        "shards": 1,
        "sample_seconds": 1800,
        "providers": providers(),
        "clusters": clusters(),
    }


HEADER = """\
# GENERATED by examples/make_mixed_fleet_day.py -- edit the script, not this file:
#   python examples/make_mixed_fleet_day.py > examples/mixed-fleet-day.yaml
#
# A simulated day (86400 s) of a mixed fleet: bare metal in two datacenters (dc-ams, dc-iad:
# racks of 8xH100 GPU machines and 64-core CPU machines) plus two cloud regions (reserved, spot
# and on-demand m6i.4xlarge, a few on-demand p5.48xlarge). Twenty clusters: serving on a day
# curve (900000 / 1000000), GPU inference, a 64-GPU same-rack training run (1000000, 06:00-20:00
# UTC), batch and ETL jobs (100000 / 500000), and best-effort research and backfill (0) on
# idle bare metal. Run:  bigfleet simulate examples/mixed-fleet-day.yaml
#
# Prices. Owned capacity is billed for the whole day, used or not, at a stated amortised rate
# (purchase over 4 years plus power, space and network; the same rate in every example):
# gpu-8xh100 $15.00/h, cpu-64 $0.80/h. Reserved m6i.4xlarge $0.25/h (owned too: billed all day).
# Cloud, per hour used: m6i.4xlarge spot $0.30 (5 % hourly interruption), on-demand $0.768;
# p5.48xlarge on-demand $98.32.
"""


class _Dumper(yaml.SafeDumper):
    """Block style for the structure, flow style for leaves, and no `&id001` aliases."""

    def ignore_aliases(self, data: Any) -> bool:
        return True


def _flow(data: Any) -> str:
    return yaml.dump(
        data, Dumper=_Dumper, default_flow_style=True, sort_keys=False, width=10_000
    ).strip()


def _clusters_yaml(clusters: list[dict[str, Any]]) -> str:
    """One line per roll-up. Each cluster sends one need whose count changes: it is written out
    in full once, anchored, and later roll-ups merge it (`<<: *name`) with their own count."""
    lines = ["clusters:"]
    for c in clusters:
        lines += [f"- name: {c['name']}", f"  kubelet_version: '{c['kubelet_version']}'"]
        lines.append("  rollups:")
        first = c["rollups"][0]["needs"][0]
        for i, rollup in enumerate(c["rollups"]):
            (need,) = rollup["needs"]
            assert {k: v for k, v in need.items() if k != "count"} == {
                k: v for k, v in first.items() if k != "count"
            }
            if i == 0:
                text = f"&{c['name']} {_flow(need)}"
            else:
                text = f"{{<<: *{c['name']}, count: {need['count']}}}"
            lines.append(f"  - {{at: {rollup['at']}, needs: [{text}]}}")
    return "\n".join(lines) + "\n"


def main() -> None:
    data = scenario()
    clusters = data.pop("clusters")
    sys.stdout.write(HEADER)
    yaml.dump(data, sys.stdout, Dumper=_Dumper, sort_keys=False, default_flow_style=None)
    sys.stdout.write(_clusters_yaml(clusters))


if __name__ == "__main__":
    main()
