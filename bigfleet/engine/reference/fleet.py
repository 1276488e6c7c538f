"""The reference engine's fleet: one plain object per machine, as the seed's pseudo-code has it.

`ReferenceEngine` (engine.py) decides over it; this module holds the records, says which
machines a need matches and starts the transitions a decision asks for.
"""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import dataclass

from ...models import Machine, MachineState
from ...needs import Need
from ...policy import Policy
from ...profiles import Profile
from ...requirements import all_match
from ...states import check_transition
from ..decision import Decision
from ..domains import need_matches
from ..memory import EngineMemory

S = MachineState


@dataclass(eq=False)
class Rec:
    """One machine as the reference sees it: its place in the fleet (`ordinal`), state, cluster,
    profile, since when it has been in its state, and what its last holder asked of it."""

    ordinal: int
    id: str
    state: MachineState
    cluster: str | None
    profile: Profile
    since: float
    holder_priority: int = 0
    holder_interruption: float = 0.0
    holder_reclamation: float = 0.0
    missed: int = 0
    # Marked do-not-disrupt by its cluster now (the fast engine's inventory `kept` flag).
    kept: bool = False


class ReferenceFleet:
    """The machines of a shard as a plain list, the policy and the engine's memory."""

    def __init__(self, machines: Iterable[Machine], policy: Policy, now: float = 0.0) -> None:
        self.policy = policy
        self.memory = EngineMemory()
        # Machines assigned this cycle, and the need each was assigned to (set on apply).
        self.assigned: dict[int, Need] = {}
        self.machines: list[Rec] = []
        for m in machines:
            self.add(m, now)

    def add(self, m: Machine, now: float) -> Rec:
        rec = Rec(
            ordinal=len(self.machines),
            id=m.id,
            state=m.state,
            cluster=m.cluster,
            profile=Profile.of(m),
            since=float(m.transition_started_unix or now),
        )
        self.machines.append(rec)
        return rec

    def find(self, machine_id: str) -> Rec:
        for rec in self.machines:
            if rec.id == machine_id:
                return rec
        raise KeyError(machine_id)

    def matches(self, need: Need, rec: Rec) -> bool:
        """The machine can serve the need: resources, requirements and its `Same` key."""
        return self.fits(need, rec.profile)

    def fits(self, need: Need, profile: Profile) -> bool:
        """Machines of the profile can serve the need (`matches`)."""
        ok = profile.resources.covers(need.spec.resources) and all_match(
            need.spec.requirements, profile.label_map
        )
        return need_matches(need, profile, ok)

    # ---- applying a decision ----------------------------------------------------------------

    def apply(self, decision: Decision, now: float) -> None:
        """Start every transition the decision asked for, as the shard would."""
        for need_ord, need in self.assigned.items():
            m = self.machines[need_ord]
            m.holder_priority = need.priority
            m.holder_interruption = need.spec.interruption_penalty
            m.holder_reclamation = need.spec.reclamation_penalty
        for action in decision.actions:
            if action.kind == "create":
                for mid in action.machine_ids:
                    self._move(self.find(mid), S.CREATING, now, action.cluster)
            elif action.kind == "configure":
                self._move(self.find(action.machine_id), S.CONFIGURING, now, action.cluster)
            elif action.kind == "drain":
                self._move(self.find(action.machine_id), S.DRAINING, now)
            elif action.kind == "delete":
                self._move(self.find(action.machine_id), S.DELETING, now)
        for mid in decision.timed_out:
            self._move(self.find(mid), S.FAILED, now)

    def _move(self, m: Rec, target: S, now: float, cluster: str | None = None) -> None:
        check_transition(m.id, m.state, target)
        m.state = target
        m.since = now
        if target in (S.IDLE, S.SPECULATIVE):
            m.cluster = None
        elif cluster is not None:
            m.cluster = cluster

