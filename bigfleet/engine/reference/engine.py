# mypy: disable-error-code="arg-type,index,misc"
# (The reference is the seed's pseudo-code written plainly: a domain of a machine without the
# label is None and is tallied like any other, as the seed does; typed loosely on purpose.)
"""The reference engine: the seed's pseudo-code, plainly (one object per machine, linear scans).

It is deliberately slow and obvious. It is the oracle the fast engine is property-tested against
and the baseline `bigfleet bench engine` measures it against. Same rules as docs/engine.md, in
the same steps as the fast engine (engine/fast.py), each in the module named like the fast
engine's for it: claims, phase1 (and regret), phase2 (and displace), consolidate, phase3.
"""

from __future__ import annotations

from collections.abc import Iterable

from ...models import DeleteAction, DeleteReason, MachineState, VerifyAction
from ...needs import Need
from ..decision import Decision
from ..shortfalls import age_shortfalls
from .actions import configure, create
from .claims import claim_own_machines
from .consolidate import consolidate
from .cycle import Cycle
from .fleet import ReferenceFleet
from .phase1 import assign_free_capacity
from .phase2 import resolve_inversions
from .phase3 import reclaim_excess, release_idle
from .yielding import yield_owned

S = MachineState


class ReferenceEngine(ReferenceFleet):
    """The decision engine of design §8 over a plain list of machines: `decide` a cycle, then
    `apply` it (`ReferenceFleet.apply`)."""

    def decide(self, needs: Iterable[Need], now: float) -> Decision:
        """One cycle of design §8's worker loop (docs/engine.md, The cycle), step by step as
        `FastEngine.decide` takes them: claims, Phase 1, Phase 2 (owned machines swapped and
        backfill yielding for cost inside it), the assignments' actions, shortfalls (design §9),
        consolidation, owned machines yielding across cycles (engine/yielding.py), Phase 3, the
        demand forecast, then idle timeouts, stuck transitions and health. Returns the
        `Decision`; updates the engine's memory, changes no machine (that is `apply`'s job)."""
        needs = list(needs)
        policy = self.policy
        out = Decision()
        self.memory.observe_counts(needs, now)
        self.assigned = {}
        cycle = Cycle(self, needs, now=now)
        claim_own_machines(cycle)
        assign_free_capacity(cycle)
        resolve_inversions(cycle, out)
        out.actions.extend(configure(need, m) for need, m in cycle.configures)
        create(cycle.creates, cycle.holder, policy, out)
        keys = {k for m in self.machines for k in m.profile.label_map}
        out.shortfalls = age_shortfalls(self.memory, policy, cycle.unmet, keys.__contains__)
        consolidate(cycle, out, now)
        yield_owned(cycle, out, now, dict(out.consolidations))
        reclaim_excess(cycle, out)
        self.memory.observe_demand(cycle.demand, policy)
        self.upkeep(out, release_idle(cycle, now), now)
        return out

    def upkeep(self, out: Decision, gone: set[int], now: float) -> None:
        """One pass over the machines, in fleet order: a Delete for each idle machine
        released (`gone`), stuck transitions reported `timed_out`, and a Verify for each
        CONFIGURED machine missing `health_missed_reports` health reports (design §9)."""
        policy = self.policy
        timeouts = policy.transition_timeouts()
        for m in self.machines:
            if m.ordinal in gone:
                out.actions.append(
                    DeleteAction(
                        provider=m.profile.provider,
                        machine_id=m.id,
                        reason=DeleteReason.IDLE_TIMEOUT,
                    )
                )
            limit = timeouts.get(m.state)
            if limit is not None and now - m.since > limit:
                out.timed_out.append(m.id)
            if m.state is S.CONFIGURED and m.missed >= policy.health_missed_reports:
                out.actions.append(
                    VerifyAction(provider=m.profile.provider, machine_id=m.id, cluster=m.cluster)
                )
