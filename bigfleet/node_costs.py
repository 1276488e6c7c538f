"""The machines a shard pays for, under the names OpenCost gives node costs (issue 48), so that
an OpenCost or Kubecost dashboard shows BigFleet's fleet unchanged. Pure: the shard's `nodes`
query returns `nodes(inventory)`; workers/node_costs.py exports it.

Billed machines only (bigfleet/spend.py's rule: owned capacity in every state, elastic while the
provider runs it). Per machine (`node`: its id), with `instance_type`, `region`, `provider_id`
(`PROVIDER/ZONE/ID`, as OpenCost writes a cloud's `aws:///us-east-1a/i-...`), `cluster` (the
cluster holding it, `""` for none), and OpenCost's gauges:

- `node_total_hourly_cost`: the machine's price per hour;
- `node_cpu_hourly_cost` (per vCPU), `node_ram_hourly_cost` (per GiB), `node_gpu_hourly_cost`
  (per GPU): that price split as OpenCost splits a price it only knows in total, in proportion
  to its default per-unit prices (`CPU_WEIGHT`, `RAM_WEIGHT`, `GPU_WEIGHT`), so that
  cpu × vCPUs + ram × GiB + gpu × GPUs = total;
- `kubecost_node_is_spot`: 1 for spot capacity.
"""

from __future__ import annotations

from typing import Any

import numpy as np

from . import labels as L
from .cost import OWNED
from .inventory import CODE, GONE, Inventory
from .models import CapacityType, MachineState

# OpenCost's default prices (its `default.json`): $ per vCPU-hour, per GiB-hour, per GPU-hour.
CPU_WEIGHT = 0.031611
RAM_WEIGHT = 0.004237
GPU_WEIGHT = 0.95

_ELASTIC_BILLED = np.zeros(256, dtype=bool)
for _s in ("CREATING", "IDLE", "CONFIGURING", "CONFIGURED", "DRAINING", "DELETING"):
    _ELASTIC_BILLED[CODE[MachineState[_s]]] = True


def split(total: float, cpu: float, ram_gib: float, gpu: int) -> tuple[float, float, float]:
    """`total` $/h as (per vCPU, per GiB, per GPU) in OpenCost's default proportions; (0, 0, 0)
    for a machine that declares no resources (`node_total_hourly_cost` alone carries its
    price)."""
    weight = CPU_WEIGHT * cpu + RAM_WEIGHT * ram_gib + GPU_WEIGHT * gpu
    if weight <= 0:
        return (0.0, 0.0, 0.0)
    scale = total / weight
    return (CPU_WEIGHT * scale, RAM_WEIGHT * scale, GPU_WEIGHT * scale)


def region_of(labels: dict[str, str], zone: str) -> str:
    """The machine's region label, else its zone less the last `-part` (`ams-1` -> `ams`)."""
    return labels.get(L.REGION) or (zone.rsplit("-", 1)[0] if "-" in zone else zone)


def nodes(inv: Inventory) -> dict[str, Any]:
    """What the shard's `nodes` query answers: `profiles` (one entry per profile with billed
    machines: provider, instance_type, zone, region, spot, and the price split) and `machines`
    (`[id, profile index in that list, cluster, price per hour]`)."""
    n = inv.rows_used
    st = inv.state[:n]
    owned = np.array([p.capacity_type in OWNED for p in inv.profiles.profiles] + [False])
    pf = inv.profile[:n].astype(np.int64)
    billed = ((st != GONE) & owned[np.minimum(pf, len(owned) - 1)]) | _ELASTIC_BILLED[st]
    profiles: list[dict[str, Any]] = []
    index: dict[int, int] = {}
    machines: list[list[Any]] = []
    for row in np.flatnonzero(billed).tolist():
        p = int(pf[row])
        if p not in index:
            prof = inv.profiles.profiles[p]
            index[p] = len(profiles)
            res = prof.resources
            profiles.append({
                "provider": prof.provider,
                "instance_type": prof.instance_type,
                "zone": prof.zone,
                "region": region_of(prof.label_map, prof.zone),
                "spot": prof.capacity_type is CapacityType.SPOT,
                "cpu": res.cpu,
                "memory_gib": res.memory_gib,
                "gpu": res.gpu,
            })  # fmt: skip
        machines.append(
            [inv.machine_id(row), index[p], inv.cluster_of(row) or "", float(inv.price[row])]
        )
    return {"profiles": profiles, "machines": machines}
