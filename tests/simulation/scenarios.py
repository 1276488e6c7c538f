"""Building small scenarios for the simulator tests, and reading their reports."""

from __future__ import annotations

import json
import pathlib
from collections import Counter
from typing import Any

import yaml

from bigfleet.models import ListFilter, MachineState
from bigfleet.simulation.run import Simulation
from bigfleet.simulation.scenario import Scenario

S = MachineState
EXAMPLES = pathlib.Path(__file__).resolve().parents[2] / "examples"
GPU = "gpu-8xh100"
VM = "m6i.xlarge"
KUBELET = "bigfleet.io/kubelet-version"
RACK = "bigfleet.io/rack"

def rack(name: str, count: int, instance_type: str = GPU, zone: str = "ams-1") -> dict[str, Any]:
    return {"rack": name, "zone": zone, "instance_type": instance_type, "count": count}


def bare_metal(*racks: dict[str, Any], name: str = "dc-ams", **kw: Any) -> dict[str, Any]:
    return {"name": name, "kind": "bare-metal", "racks": list(racks), **kw}


def quota(
    capacity_type: str, count: int, price: float, interruption: float = 0.0
) -> dict[str, Any]:
    return {
        "instance_type": VM,
        "zone": "us-east-1a",
        "capacity_type": capacity_type,
        "count": count,
        "price_per_hour": price,
        "interruption_probability": interruption,
    }


def cloud(*lines: dict[str, Any], name: str = "aws", **kw: Any) -> dict[str, Any]:
    return {"name": name, "kind": "cloud", "quota": list(lines), **kw}


def need(priority: int, count: int, **kw: Any) -> dict[str, Any]:
    return {"priority": priority, "count": count, **kw}


def cluster(name: str, *rollups: tuple[float, list[dict[str, Any]]], **kw: Any) -> dict[str, Any]:
    return {"name": name, "rollups": [{"at": at, "needs": ns} for at, ns in rollups], **kw}


def scenario(
    providers: list[dict[str, Any]], clusters: list[dict[str, Any]], duration: float, **kw: Any
) -> dict[str, Any]:
    return {
        "name": "test",
        "duration_seconds": duration,
        "providers": providers,
        "clusters": clusters,
        **kw,
    }


def simulate(raw: dict[str, Any], seed: int | None = None) -> tuple[Simulation, dict[str, Any]]:
    sim = Simulation(Scenario.model_validate_json(json.dumps(raw)), seed)
    return sim, sim.run()


def need_of(report: dict[str, Any], name: str, index: int = 0) -> dict[str, Any]:
    return report["clusters"][name]["needs"][index]


def shard_states(sim: Simulation) -> Counter[str]:
    total: Counter[str] = Counter()
    for shard in sim.shards:
        total.update({k: v for k, v in shard.machines_by_state().items() if v})
    return total


def provider_machines(sim: Simulation, name: str) -> list:
    return sim.providers[name].list(ListFilter())


def created_for(report: dict[str, Any], name: str) -> list[dict[str, Any]]:
    return [a for a in report["actions"] if a["kind"] == "create" and a["cluster"] == name]


def example(name: str) -> dict[str, Any]:
    return yaml.safe_load((EXAMPLES / name).read_text())
