"""Acting on trouble before it costs work (issue 33; docs/operations.md, "Notices and repair").

- **Notices.** A provider warns of what it will do to a machine (`Machine.notice`): a spot
  interruption or scheduled change (the machine goes at the deadline) dooms it: a configured
  one is drained at once, with the time left as its grace (at most `notice_grace_seconds`), so
  the engine starts its replacement in the same cycle; an idle one is deleted. Neither waits
  for a disruption budget: the machine goes whatever BigFleet does. A rebalance
  recommendation makes the machine its cluster's first to be given up (`Inventory.risk`: the
  engine takes excess and preemption victims from the at-risk end).
- **Repair.** A configured machine is unhealthy when its cluster leaves it out of
  `health_missed_reports` health reports in a row, when its provider says so (an `unhealthy`
  notice), or when its provider answered a verify with "up" while the cluster still did not
  see it. The last two are repaired (drained, replaced, deleted once idle) — one its provider
  says is dead is replaced by the usual path — unless more of its cluster's machines are
  unhealthy at once than `max_unhealthy` allows: then nothing of that cluster is repaired, and
  the shard reports an escalated shortfall saying why (`repair_held`), until enough come back.
  A broken network or operator makes every machine look unhealthy at once; that is exactly
  when replacing them would take the whole cluster down.

Pure and deterministic, kept in the shard's snapshot: the shard workflow feeds it what the
providers and operators said, and the cycle asks it for its actions before the engine decides.
"""

from __future__ import annotations

from collections import Counter
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

import numpy as np

from .disruption import count_members
from .held import NONE16
from .inventory import CODE, Inventory
from .models import (
    CapacityType,
    DeleteAction,
    DeleteReason,
    DrainAction,
    DrainReason,
    Machine,
    MachineState,
    Notice,
    NoticeKind,
    Shortfall,
    from_wire,
)
from .policy import Policy

if TYPE_CHECKING:  # (types only)
    from .disruption import DisruptionBook, Members

S = MachineState
K = NoticeKind
DOOMING = frozenset({K.INTERRUPTION, K.SCHEDULED})
UNSEEN = "missing from its cluster's health reports while its provider says it is up"


@dataclass
class Noted:
    notice: Notice
    seen: float  # when the shard first heard of it
    own: bool = False  # the shard's own finding (repair), not a provider's word


@dataclass
class Hold:
    unhealthy: int
    allowed: int
    machines: int
    since: float


class NoticeBook:
    def __init__(self, policy: Policy) -> None:
        self.policy = policy
        self.notes: dict[str, Noted] = {}
        # Verifies a machine's provider answered "up" while its cluster did not report it.
        self.strikes: dict[str, int] = {}
        self.holds: dict[str, Hold] = {}  # clusters whose repair is held
        # Bare metal drained for a notice or repair, out of the engine's reach until then.
        self.quarantined: dict[str, tuple[Machine, float]] = {}
        self.acted: Counter[str] = Counter()  # machines acted on, by notice kind
        self._risky: list[int] = []

    # ---- what providers and operators say ---------------------------------------------------

    def note(self, machine_id: str, notice: Notice | None, now: float) -> None:
        """A provider's record of a machine: its notice (none: whatever it had has ended;
        the shard's own repair findings stand)."""
        had = self.notes.get(machine_id)
        if notice is None:
            if had is not None and not had.own:
                del self.notes[machine_id]
        elif had is None or had.notice != notice:
            self.notes[machine_id] = Noted(notice, had.seen if had else now)

    def settle(self, machine_ids: set[str], listed: set[str]) -> None:
        """A provider's complete listing of its noticed machines: `listed` of those it has
        (`machine_ids`, the shard's). Notices of the others have ended."""
        for mid in [m for m, n in self.notes.items() if not n.own and m not in listed]:
            if mid in machine_ids:
                del self.notes[mid]

    def up(self, machine_id: str) -> None:
        """A verify found the machine up at its provider though its cluster does not see it."""
        self.strikes[machine_id] = min(self.strikes.get(machine_id, 0) + 1, 255)

    def seen(self, machine_id: str) -> None:
        """Its cluster reports the machine again."""
        self.strikes.pop(machine_id, None)
        had = self.notes.get(machine_id)
        if had is not None and had.own:
            del self.notes[machine_id]

    def get(self, machine_id: str) -> Notice | None:
        noted = self.notes.get(machine_id)
        return noted.notice if noted is not None else None

    # ---- the cycle ----------------------------------------------------------------------------

    def act(
        self,
        inv: Inventory,
        bounds: DisruptionBook,
        members: Members | None,
        skip: set[str],
        now: float,
    ) -> tuple[list[DrainAction | DeleteAction], list[Shortfall]]:
        """Before the engine decides: drains and deletes of doomed and repaired machines (their
        rows moved already, so the engine counts them gone and replaces them), the at-risk
        marks, and an escalation per cluster whose repair is held. `skip`: machines leaving
        the shard (a transfer's), left alone."""
        self._release(inv, now)
        self._forget(inv)
        self._mark_risk(inv)
        unhealthy = self._unhealthy(inv)
        if unhealthy or self.holds:
            members = members or count_members(inv)
        shortfalls = self._judge(unhealthy, bounds, members, now)
        actions: list[DrainAction | DeleteAction] = []
        for mid, strikes in sorted(self.strikes.items()):
            if strikes >= self.policy.repair_after_verifies and mid not in self.notes:
                self.notes[mid] = Noted(Notice(kind=K.UNHEALTHY, detail=UNSEEN), now, own=True)
        for mid in sorted(self.notes):
            if mid in skip:
                continue
            noted = self.notes[mid]
            row = inv.ids.find(mid)
            if row < 0:
                continue  # (quarantined)
            cluster = inv.cluster_of(row)
            kind = noted.notice.kind
            if kind is K.REBALANCE:
                continue
            doomed = kind in DOOMING
            if not doomed and (
                (cluster is not None and cluster in self.holds)
                or (cluster is not None and bounds.marked(cluster, mid, now))
            ):
                continue  # repair: held for the cluster, or the machine marked do-not-disrupt
            action = self._action(inv, row, noted, doomed, now)
            if action is not None:
                actions.append(action)
                self.acted[f"{action.kind} {kind}"] += 1
        return actions, shortfalls

    def _release(self, inv: Inventory, now: float) -> None:
        """Quarantined machines whose time is over are the shard's to use again (one still
        under its provider's notice is found again at the next read of the notices)."""
        done = sorted(mid for mid, (_, until) in self.quarantined.items() if until <= now)
        if done:
            inv.add([self.quarantined.pop(mid)[0] for mid in done], now)
            for mid in done:
                noted = self.notes.get(mid)
                if noted is not None and noted.own:
                    del self.notes[mid]

    def _forget(self, inv: Inventory) -> None:
        """Machines the shard no longer has; strikes of machines no longer configured, and
        the shard's own findings about machines given back (speculative again)."""
        for mid in list(self.strikes):
            row = inv.ids.find(mid)
            if row < 0 or inv.state_of(row) is not S.CONFIGURED:
                del self.strikes[mid]
        for mid, noted in list(self.notes.items()):
            row = inv.ids.find(mid)
            if mid in self.quarantined:
                continue
            if row < 0 or (noted.own and inv.state_of(row) is S.SPECULATIVE):
                del self.notes[mid]

    def _mark_risk(self, inv: Inventory) -> None:
        for row in self._risky:
            if row < len(inv.risk):
                inv.risk[row] = 0
        self._risky = [
            inv.ids.find(mid) for mid, n in self.notes.items() if n.notice.kind is K.REBALANCE
        ]
        for row in self._risky:
            inv.risk[row] = 1

    def _unhealthy(self, inv: Inventory) -> dict[str, list[str]]:
        """Per cluster, its configured machines that are unhealthy (sorted ids)."""
        n, configured = inv.rows_used, CODE[S.CONFIGURED]
        # (Few rows miss reports: their states are read after.)
        missing = np.flatnonzero(inv.missed[:n] >= self.policy.health_missed_reports)
        sick = {row for row in missing.tolist() if inv.state[row] == configured}
        for mid in list(self.strikes) + [
            m for m, noted in self.notes.items() if noted.notice.kind is K.UNHEALTHY
        ]:
            row = inv.ids.find(mid)
            if 0 <= row < n and inv.state[row] == configured:
                sick.add(row)
        out: dict[str, list[str]] = {}
        for row in sick:
            code = int(inv.cluster[row])
            if code != NONE16:
                out.setdefault(inv.clusters.names[code], []).append(inv.machine_id(row))
        return {c: sorted(ids) for c, ids in out.items()}

    def _judge(
        self,
        unhealthy: dict[str, list[str]],
        bounds: DisruptionBook,
        members: Members | None,
        now: float,
    ) -> list[Shortfall]:
        """Hold repair where more of a cluster is unhealthy than its `max_unhealthy`; an
        escalated shortfall for each such cluster."""
        holds: dict[str, Hold] = {}
        for cluster, ids in unhealthy.items():
            assert members is not None
            size = members(cluster)[0]
            allowed = bounds.max_unhealthy(cluster, size)
            if len(ids) > allowed:
                was = self.holds.get(cluster)
                holds[cluster] = Hold(len(ids), allowed, size, was.since if was else now)
        self.holds = holds
        cycle = self.policy.cycle_seconds
        return [
            Shortfall(
                cluster=cluster,
                profile=(
                    f"repair held: {h.unhealthy} of {h.machines} machines unhealthy at once, "
                    f"max_unhealthy allows {h.allowed}"
                ),
                priority=0,
                count=h.unhealthy,
                age=1 + int((now - h.since) // cycle),
                escalated=True,
                repair_held=True,
            )
            for cluster, h in sorted(holds.items())
        ]

    def _action(
        self, inv: Inventory, row: int, noted: Noted, doomed: bool, now: float
    ) -> DrainAction | DeleteAction | None:
        state = inv.state_of(row)
        provider = inv.profile_of(row).provider
        mid = inv.machine_id(row)
        if state is S.CONFIGURED:
            grace = self.policy.notice_grace_seconds
            if noted.notice.deadline_unix:
                grace = min(grace, max(0.0, noted.notice.deadline_unix - now))
            cluster = inv.cluster_of(row) or ""
            inv.move(row, S.DRAINING, now)
            return DrainAction(
                provider=provider,
                machine_id=mid,
                cluster=cluster,
                grace_seconds=grace,
                reason=DrainReason.NOTICE if doomed else DrainReason.UNHEALTHY,
            )
        if state is S.IDLE and inv.profile_of(row).capacity_type is CapacityType.BARE_METAL:
            # Bare metal is not deleted (design §10): it waits out of the engine's reach.
            self.quarantined[mid] = (inv.remove(mid), now + self.policy.quarantine_seconds)
            return None
        if state is S.IDLE:
            inv.move(row, S.DELETING, now)
            return DeleteAction(
                provider=provider,
                machine_id=mid,
                reason=DeleteReason.NOTICE if doomed else DeleteReason.UNHEALTHY,
            )
        return None  # (in a transition: acted on once it settles)

    # ---- what people ask, and the snapshot ------------------------------------------------------

    def view(self, cluster: str, inv: Inventory) -> dict[str, Any]:
        """For `bigfleet cluster`: the cluster's machines under notice, and its repair hold."""
        notices = {
            mid: {"kind": str(n.notice.kind), "deadline_unix": n.notice.deadline_unix,
                  "detail": n.notice.detail}
            for mid, n in sorted(self.notes.items())
            if (row := inv.ids.find(mid)) >= 0 and inv.cluster_of(row) == cluster
        }  # fmt: skip
        hold = self.holds.get(cluster)
        return {
            "notices": notices,
            "repair_held": None
            if hold is None
            else {"unhealthy": hold.unhealthy, "allowed": hold.allowed, "since": hold.since},
        }

    def state(self) -> dict[str, Any]:
        return {
            "notes": {
                mid: [n.notice.model_dump(mode="json"), n.seen, n.own]
                for mid, n in self.notes.items()
            },
            "strikes": self.strikes,
            "holds": {c: [h.unhealthy, h.allowed, h.machines, h.since]
                      for c, h in self.holds.items()},  # fmt: skip
            "acted": dict(self.acted),
            "quarantined": {mid: [m.model_dump(mode="json"), until]
                            for mid, (m, until) in self.quarantined.items()},  # fmt: skip
        }

    def restore(self, state: Any) -> None:
        if not isinstance(state, dict):
            return
        self.notes = {
            mid: Noted(from_wire(Notice, n), float(seen), bool(own))
            for mid, (n, seen, own) in state.get("notes", {}).items()
        }
        self.strikes = {str(k): int(v) for k, v in state.get("strikes", {}).items()}
        self.holds = {c: Hold(*h) for c, h in state.get("holds", {}).items()}
        self.acted = Counter(state.get("acted", {}))
        self.quarantined = {
            mid: (from_wire(Machine, m), float(until))
            for mid, (m, until) in state.get("quarantined", {}).items()
        }

    def __bool__(self) -> bool:
        """Whether it holds anything (the snapshot then carries it)."""
        return bool(
            self.notes or self.strikes or self.holds or self.acted or self.quarantined
        )
