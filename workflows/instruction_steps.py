"""What each coordinator instruction checks and does to a shard (design §6, §11, §16): transfers,
splits, merges, decommissions. A helper object of the shard workflow, handed the shard it acts
on, how that shard runs and how to make transition inputs; it keeps the fencing state and the
shard's membership flags, which cross continue-as-new with the shard (`state()`).

`check_*` refuse an instruction (`ApplicationError`) before it enters history; they run in the
update's validator. The effects run in the update handler and return the update's answer, and
the transitions to start, if any, for the workflow's pipeline. Instructions already carried out
(the same term and seq) are answered with their first outcome and change nothing again.
"""

from __future__ import annotations

from typing import Any

from temporalio import workflow
from temporalio.exceptions import ApplicationError

with workflow.unsafe.imports_passed_through():
    from activities.wire import (
        Instruction,
        ShardConfig,
        SplitInstruction,
        TakeIn,
        TransitionInput,
    )
    from bigfleet.inputs import clip
    from bigfleet.models import Machine, MachineState, Transition
    from bigfleet.shard import Shard
    from bigfleet.shard_state import ShardState
    from workflows.actions import TransitionInputs
    from workflows.fencing import Fencing

S = MachineState
# Machine records an update may return (release, hand_out): ~630 bytes each, and an update's
# result is one payload, under the server's payload limit (workers/dev/server.py
# BLOB_ERROR_BYTES: 600 KB since issue 44; refused, it fails the workflow task with it).
RECORDS_MAX = 600
RECORDS_MAX_BEFORE = 2_000  # (what an update's handler re-checking it takes: `records_max`)


def records_max() -> int:
    """RECORDS_MAX in an update's validator; in its handler (after the validator, or replaying
    an update a run begun before took) what it was before."""
    return RECORDS_MAX if workflow.unsafe.is_read_only() else RECORDS_MAX_BEFORE


class InstructionSteps:
    """The coordinator's instructions to one shard: their checks and effects, their fencing,
    and the shard's membership flags (split-born and joining, merging away, retired)."""

    def __init__(
        self,
        shard: Shard,
        cfg: ShardConfig,
        inputs: TransitionInputs,
        state: ShardState | None = None,
    ) -> None:
        self.shard = shard
        self.cfg = cfg
        self.inputs = inputs
        self.fencing = Fencing(state)
        # Membership: a split-born shard decides nothing until its last part arrives; a shard
        # merging away decides nothing more, and ends once it owns nothing.
        self.joining = state.joining if state else False
        self.merging = state.merging if state else False
        self.retired = False
        self.inherited: list[int] = list(state.inherited) if state else []
        # New coordinator terms being checked with the coordinator (this run only).
        self.asking_terms: set[int] = set()

    def state(self) -> dict[str, Any]:
        """Its keys of the `ShardState` the next run starts from (fencing and membership)."""
        return {
            **self.fencing.state(),
            "joining": self.joining,
            "merging": self.merging,
            "inherited": self.inherited,
        }

    def fence(
        self,
        ins: Instruction | SplitInstruction | TakeIn,
        touched: int,
        now: float,
        any_term: bool = False,
        share: float | None = None,
    ) -> bool:
        """`Fencing.check` against this shard as it is now (at most `share` of its machines
        touched, by default `max_share`). True: a replay."""
        return self.fencing.check(
            ins,
            touched,
            shard=self.shard.id,
            size=len(self.shard.inventory) + len(self.shard.handoff),
            max_share=self.cfg.max_share if share is None else share,
            now_ms=now * 1000,
            any_term=any_term,
        )

    # ---- moving machines between shards (design §9) ---------------------------------------------

    def taking_back(self, ins: Instruction) -> bool:
        """A saga's compensation giving this shard back what it released itself: accepted
        from any term, and it moves no term."""
        return ins.compensation and self.fencing.released_here(ins)

    def check_adopt(self, ins: Instruction, now: float) -> None:
        """An adopt: fenced, with no share limit (it takes nothing away)."""
        # Adopting takes nothing away from the shard: fenced, but no share limit.
        self.fence(ins, 0, now, any_term=self.taking_back(ins))

    def adopt(self, ins: Instruction, now: float) -> int:
        """Take the instruction's machines in; how many were new."""
        if self.fencing.accept(ins, take_term=not self.taking_back(ins)):
            return 0
        return self.shard.adopt(ins.machines, now)

    def check_release(self, ins: Instruction, now: float) -> None:
        """A release: fenced and share-limited, at most RECORDS_MAX, idle or speculative only.
        Handing over idle machines disrupts nothing: `idle_share` bounds it, not `max_share`
        (the larger of the two: a config that sets only `max_share` higher keeps it)."""
        # Machines drained for this transfer were counted when the drain was accepted.
        touched = sum(1 for mid in ins.machine_ids if mid not in self.shard.handoff)
        share = max(self.cfg.max_share, self.cfg.idle_share)
        if self.fence(ins, touched, now, share=share):
            self.fencing.first_outcome(ins, "release")  # refused if no longer kept
            return
        if len(ins.machine_ids) > records_max():
            raise ApplicationError(
                f"machine_ids: {len(ins.machine_ids)} machines, at most {records_max()} a release "
                "(their records must fit one reply)"
            )
        self.check_free(ins)

    def release(self, ins: Instruction) -> list[Machine]:
        """Give the machines up; their records (the first outcome again for a replay)."""
        if self.fencing.accept(ins):
            return self.fencing.first_outcome(ins, "release")  # type: ignore[no-any-return]
        released = self.shard.release(ins.machine_ids)
        self.fencing.remember(ins, "release", [m.model_dump(mode="json") for m in released])
        return released

    def check_free(self, ins: Instruction) -> None:
        """Every machine is this shard's, and idle, speculative or drained for a transfer."""
        inv = self.shard.inventory
        for mid in ins.machine_ids:
            if mid in self.shard.handoff:
                continue
            row = inv.ids.find(mid)
            if row < 0:
                raise ApplicationError(
                    f"machine {clip(mid, 80)} is not owned by shard {self.shard.id}"
                )
            if inv.state_of(row) not in (S.IDLE, S.SPECULATIVE):
                raise ApplicationError(
                    f"machine {clip(mid, 80)} is {inv.state_of(row)}: only idle or speculative "
                    "machines move between shards"
                )

    def check_drain_for_transfer(self, ins: Instruction, now: float) -> None:
        """A transfer's drain: configured machines of this shard, within their clusters'
        disruption bounds."""
        if self.fence(ins, len(ins.machine_ids), now):
            return
        inv = self.shard.inventory
        for mid in ins.machine_ids:
            row = inv.ids.find(mid)
            if row < 0 or inv.state_of(row) is not S.CONFIGURED:
                raise ApplicationError(
                    f"machine {clip(mid, 80)} is not a configured machine of this shard"
                )
        # Its clusters' disruption budgets and do-not-disrupt marks (bigfleet/disruption.py).
        why = self.shard.disruption.refuse_transfer(ins.machine_ids, inv, now)
        if why:
            raise ApplicationError(clip(why, 300))

    def drain_for_transfer(
        self, ins: Instruction, now: float
    ) -> tuple[list[str], list[TransitionInput]]:
        """Drain the machines to leave the shard: their ids, and the drains to start."""
        if self.fencing.accept(ins):
            return ins.machine_ids, []
        inv = self.shard.inventory
        clusters = {mid: inv.cluster_of(inv.row(mid)) for mid in ins.machine_ids}
        self.shard.drain_for_transfer(ins.machine_ids, now)
        drains = [
            self.inputs.make(
                Transition.DRAIN,
                [mid],
                cluster=clusters[mid],
                grace_seconds=ins.grace_seconds,
                reason="transfer",
            )
            for mid in ins.machine_ids
        ]
        return ins.machine_ids, drains

    def check_cancel_transfer(self, ins: Instruction, now: float) -> None:
        """A cancelled transfer: fenced, accepted from any term (it gives machines back)."""
        self.fence(ins, 0, now, any_term=True)

    def cancel_transfer(self, ins: Instruction, now: float) -> list[str]:
        """The transfer's machines are this shard's to use again; their ids."""
        if not self.fencing.accept(ins, take_term=False):
            self.shard.cancel_transfer(ins.machine_ids, now)
        return ins.machine_ids

    # ---- splits, merges, decommissions (design §16) ---------------------------------------------

    def check_split_out(self, ins: SplitInstruction, now: float) -> None:
        """A split (or merge) out: fenced, never into itself, one at a time."""
        # Dividing is the one instruction that moves half a shard: fenced, but not share-limited
        # (each part handed out is bounded by the saga's chunk instead).
        if self.fence(ins, 0, now):
            self.fencing.first_outcome(ins, "split_out")
            return
        if ins.to == self.shard.id:
            raise ApplicationError(f"shard {self.shard.id} cannot split into itself")
        if self.shard.leaving:
            raise ApplicationError(
                f"shard {self.shard.id} is already handing {len(self.shard.leaving)} machines over"
            )

    def split_out(self, ins: SplitInstruction) -> dict[str, Any]:
        """Let `fraction` of the clusters and machines go to shard `to` (a merge: all; the
        shard then merges away): the clusters, their needs, and how many machines leave."""
        if self.fencing.accept(ins):
            return self.fencing.first_outcome(ins, "split_out")  # type: ignore[no-any-return]
        clusters, ids = self.shard.membership.split_plan(ins.fraction)
        needs = self.shard.membership.split_out(clusters, ids, ins.to)
        if ins.fraction >= 1:
            self.merging = True
        out = {"clusters": clusters, "needs": needs, "machines": len(self.shard.leaving)}
        return self.fencing.remember(ins, "split_out", out)  # type: ignore[no-any-return]

    def check_hand_out(self, ins: Instruction, now: float) -> None:
        """A hand-out of leaving machines: fenced, `limit` 1 … RECORDS_MAX."""
        if self.fence(ins, 0, now):
            self.fencing.first_outcome(ins, "hand_out")
            return
        if not 0 < ins.limit <= records_max():
            raise ApplicationError(f"limit: must be 1 … {records_max()}, got {ins.limit}")

    def hand_out(self, ins: Instruction) -> list[Any]:
        """Up to `limit` of the machines leaving in a split, as records."""
        if self.fencing.accept(ins):
            return self.fencing.first_outcome(ins, "hand_out")  # type: ignore[no-any-return]
        part = [m.model_dump(mode="json") for m in self.shard.membership.hand_out(ins.limit)]
        return self.fencing.remember(ins, "hand_out", part)  # type: ignore[no-any-return]

    def check_take_in(self, ins: TakeIn, now: float) -> None:
        """A part of a split or merge coming in: fenced; refused once retired."""
        if self.fence(ins, 0, now):
            return
        if self.retired:
            raise ApplicationError(f"shard {self.shard.id} has retired: it takes nothing in")

    def take_in(self, ins: TakeIn, now: float) -> int:
        """Take a split's needs and machines in (the last part: decide again); how many."""
        if self.fencing.accept(ins):
            return 0
        taken = self.shard.membership.take_in(ins.needs, ins.machines, now)
        if ins.last:  # the split is complete (or undone): decide again
            self.joining = self.merging = False
        # A merge: the retired shard's share of capacity that appears later is this shard's.
        self.inherited = sorted(set(self.inherited) | set(ins.inherit))
        return taken

    def check_retire(self, ins: Instruction, now: float) -> None:
        """Retiring: only a merging shard that owns no machine and serves no cluster."""
        if self.fence(ins, 0, now):
            return
        owned = sum(self.shard.machines_by_state().values())
        if not self.merging or owned or self.shard.needs.clusters():
            raise ApplicationError(
                f"shard {self.shard.id} still owns {owned} machines and "
                f"{len(self.shard.needs.clusters())} clusters: only an emptied, merging shard "
                "retires"
            )

    def retire(self, ins: Instruction) -> int:
        """The shard ends after this cycle; the cycles it ran."""
        self.fencing.accept(ins)
        self.retired = True
        return self.shard.cycles

    def check_decommission(self, ins: Instruction, now: float) -> None:
        """A decommission: fenced and share-limited, idle or drained machines only."""
        touched = sum(1 for m in ins.machine_ids if m not in self.shard.handoff)
        if not self.fence(ins, touched, now):
            self.check_free(ins)

    def decommission(
        self, ins: Instruction, now: float
    ) -> tuple[list[str], list[TransitionInput]]:
        """Idle or drained machines are given up; cloud machines are deleted, bare metal goes
        back to its provider as it is."""
        if self.fencing.accept(ins):
            return ins.machine_ids, []
        inv = self.shard.inventory
        # Drained for this: back from the handoff first, so everything leaves the same way.
        drained = [mid for mid in ins.machine_ids if mid in self.shard.handoff]
        self.shard.cancel_transfer(drained, now)
        deletes = []
        for mid in ins.machine_ids:
            row = inv.ids.find(mid)
            if inv.state_of(row) is S.IDLE:
                if inv.profile_of(row).capacity_type.value != "bare-metal":
                    deletes.append(
                        self.inputs.make(Transition.DELETE, [mid], reason="decommission")
                    )
        self.shard.release(ins.machine_ids)
        self.shard.decommissioned.update(ins.machine_ids)
        return ins.machine_ids, deletes
