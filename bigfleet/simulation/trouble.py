"""Racks that fail in a simulation, and what the clusters' operators see of their nodes
(issue 33): the node health an operator puts in its roll-ups is the cluster's configured
machines that are up and reachable, as its Kubernetes API would list them Ready.

A scenario's `rack_failures` (scenario.py) each hit one rack of one provider for a while:
- `power`: its machines die (their provider reports them FAILED);
- `network`: they stay up at their provider, but their clusters stop seeing them;
- `degraded`: their provider's health check warns (an `unhealthy` notice, as a BMC's
  `Status.Health` Warning), until the failure ends.
"""

from __future__ import annotations

from collections.abc import Mapping

from .. import labels as L
from ..models import ListFilter, MachineState, Notice, NoticeKind
from ..providers.simulated.provider import SimulatedProvider
from .scenario import RackFailure

S = MachineState


class Trouble:
    def __init__(
        self, failures: list[RackFailure], providers: Mapping[str, SimulatedProvider]
    ) -> None:
        self.providers = providers
        self.events: list[tuple[float, int, bool, RackFailure]] = []
        for i, f in enumerate(failures):
            self.events.append((f.at, i, True, f))
            if f.duration_seconds is not None:
                self.events.append((f.at + f.duration_seconds, i, False, f))
        self.events.sort(key=lambda e: (e[0], e[1], e[2]))
        self.unreachable: set[tuple[str, str]] = set()  # (provider, rack) cut off
        self.log: list[dict[str, object]] = []

    def next_at(self) -> float | None:
        return self.events[0][0] if self.events else None

    def apply(self, now: float) -> None:
        """Start and end every failure due by `now`."""
        while self.events and self.events[0][0] <= now:
            at, _, starts, f = self.events.pop(0)
            provider = self.providers[f.provider]
            members = self._rack(provider, f.rack)
            self.log.append({"t": at, "rack": f.rack, "kind": f.kind, "starts": starts,
                             "machines": len(members)})  # fmt: skip
            if f.kind == "network":
                (self.unreachable.add if starts else self.unreachable.discard)(
                    (f.provider, f.rack)
                )
            elif f.kind == "power" and starts:
                for mid in members:
                    provider.power_off(mid, at, f"rack {f.rack} lost power")
            elif f.kind == "degraded":
                notice = Notice(
                    kind=NoticeKind.UNHEALTHY, detail=f"rack {f.rack}: health Warning"
                )
                for mid in members:
                    provider.warn(mid, notice if starts else None)

    @staticmethod
    def _rack(provider: SimulatedProvider, rack: str) -> list[str]:
        hosted = [S.IDLE, S.CONFIGURING, S.CONFIGURED, S.DRAINING]
        return [
            m.id for m in provider.list(ListFilter(states=hosted)) if m.labels.get(L.RACK) == rack
        ]

    def health(self) -> dict[str, list[str]]:
        """Per cluster, its machines its operator sees Ready: configured for it at their
        provider, and not on a rack cut off."""
        seen: dict[str, list[str]] = {}
        for name, provider in self.providers.items():
            for m in provider.list(ListFilter(states=[S.CONFIGURED])):
                if m.cluster and (name, m.labels.get(L.RACK, "")) not in self.unreachable:
                    seen.setdefault(m.cluster, []).append(m.id)
        return seen
