"""The fleets `bigfleet plan` searches: a bare-metal provider's racks of one instance type (a
*kind*), counted by machine (the last rack trimmed) or by whole racks, and the scenario holding
a given count of each (`plan_search.py` searches them)."""

from __future__ import annotations

import json
from dataclasses import dataclass
from typing import Any, Literal

from .scenario import BareMetalProviderSpec, Scenario

By = Literal["machine", "rack"]


@dataclass(frozen=True)
class Kind:
    provider: str
    instance_type: str
    racks: tuple[dict[str, Any], ...]  # the scenario's racks of this kind, as dumped

    @property
    def name(self) -> str:
        return f"{self.provider}/{self.instance_type}"

    def rack(self, i: int) -> dict[str, Any]:
        base = self.racks[i % len(self.racks)]
        copy = i // len(self.racks)
        return base if copy == 0 else {**base, "rack": f"{base['rack']}+{copy}"}

    def machines(self, racks: int) -> int:
        """The machines in the first `racks` racks."""
        return sum(self.rack(i)["count"] for i in range(racks))

    def layout(self, machines: int) -> list[dict[str, Any]]:
        """The racks holding `machines`: whole racks in order, the last trimmed."""
        out, left, i = [], machines, 0
        while left > 0:
            r = self.rack(i)
            out.append(r if r["count"] <= left else {**r, "count": left})
            left -= out[-1]["count"]
            i += 1
        return out

    def hourly(self, machines: int) -> float:
        return float(sum(r["count"] * r.get("price_per_hour", 0.0) for r in self.layout(machines)))

    def counts(self, racks: int, by: By) -> list[int]:
        """The candidate machine counts, 0 to the machines of `racks` racks."""
        if by == "rack":
            return [self.machines(n) for n in range(racks + 1)]
        return list(range(self.machines(racks) + 1))


def kinds_of(scenario: Scenario) -> list[Kind]:
    raw = scenario.model_dump(mode="json", exclude_unset=True)
    found: dict[tuple[str, str], list[dict[str, Any]]] = {}
    for spec, dumped in zip(scenario.providers, raw["providers"], strict=True):
        if isinstance(spec, BareMetalProviderSpec):
            for r in dumped["racks"]:
                found.setdefault((spec.name, r["instance_type"]), []).append(r)
    return [Kind(p, t, tuple(racks)) for (p, t), racks in found.items()]


def with_machines(scenario: Scenario, kinds: list[Kind], counts: dict[str, int]) -> Scenario:
    """The scenario with `counts[kind]` machines of each kind (a provider left with none is
    dropped)."""
    raw = scenario.model_dump(mode="json", exclude_unset=True)
    providers = []
    for spec, dumped in zip(scenario.providers, raw["providers"], strict=True):
        if not isinstance(spec, BareMetalProviderSpec):
            providers.append(dumped)
            continue
        racks = [r for k in kinds if k.provider == spec.name for r in k.layout(counts[k.name])]
        if racks:
            providers.append({**dumped, "racks": racks})
    raw["providers"] = providers
    return Scenario.model_validate_json(json.dumps(raw))
