"""Coordinator instructions a shard accepts (seed §6, §11): fenced updates, and shard reports.

Every instruction carries (coordinator_term, seq). A stale term, a replayed seq, or one that
would take more than `ShardConfig.max_share` (10 %) of the shard's machines away is refused
before it changes anything.
"""

# About 400 lines: every coordinator instruction a shard takes, each an update with its
# validator (Temporal finds handlers on the workflow class, so they are declared here and mixed
# in); their fencing state is a helper object (workflows/fencing.py).

from __future__ import annotations

from typing import Any, TypeVar

from temporalio import workflow
from temporalio.common import RawValue
from temporalio.exceptions import ApplicationError

with workflow.unsafe.imports_passed_through():
    from activities.wire import (
        Instruction,
        ShardConfig,
        SplitInstruction,
        TakeIn,
        TransitionInput,
    )
    from bigfleet.coordinator import Matching, ShardReport
    from bigfleet.inputs import clip
    from bigfleet.models import Machine, MachineState, Transition
    from bigfleet.shard import Shard
    from workflows.actions import TransitionInputs
    from workflows.fencing import Fencing
    from workflows.guard import NO_ARGUMENT, Guard, guarded
    from workflows.sagas import COORDINATOR_ID

S = MachineState
REPORT_SAMPLE = 32


QUERY_IDS = 50_000  # ids a query may ask about (an answer stays below gRPC's 4 MB)
# Machine records an update may return (release, hand_out): ~630 bytes each, and an update's
# result is one payload (Temporal refuses one over 2 MB, and the workflow task with it).
RECORDS_MAX = 2_000
Ins = TypeVar("Ins", Instruction, SplitInstruction, TakeIn)


def _page(start: object, limit: object) -> tuple[int, int]:
    """(start, limit) of a paged query, checked: whole numbers, limit 1…QUERY_IDS."""
    for name, value in (("start", start), ("limit", limit)):
        if isinstance(value, bool) or not isinstance(value, int) or value < 0:
            raise ApplicationError(f"{name}: a whole number ≥ 0 is required, got {clip(value, 40)}")
    assert isinstance(start, int) and isinstance(limit, int)
    return start, max(1, min(limit, QUERY_IDS))


class InstructionHandlers:
    """The shard workflow's instruction handlers (mixed in: Temporal finds handlers on the
    workflow class). What they share is the shard, its config, the input maker and the fencing
    helper, all made in the workflow's `__init__`."""

    shard: Shard
    cfg: ShardConfig
    pipeline: list[TransitionInput]
    inputs: TransitionInputs

    def __init__(self, state: dict[str, Any]) -> None:
        # Membership: a split-born shard decides nothing until its last part arrives; a shard
        # merging away decides nothing more, and ends once it owns nothing.
        self.joining = bool(state.get("joining", False))
        self.merging = bool(state.get("merging", False))
        self.retired = False
        self.inherited: list[int] = list(state.get("inherited", []))
        self.fencing = Fencing(state)
        self.last_report = 0.0

    def instruction_state(self) -> dict[str, Any]:
        return {
            **self.fencing.state(),
            "joining": self.joining,
            "merging": self.merging,
            "inherited": self.inherited,
        }

    restoring: bool
    snapshotting: bool = False

    def _not_restoring(self) -> None:
        """Until a shard has read its state back from the snapshot store (a moment after each
        continue-as-new of a large shard), it knows nothing to check an instruction against or
        to answer a query with: the caller asks again (shard_update retries, the CLI too)."""
        if self.restoring:
            raise ApplicationError(
                f"shard {self.shard.id} is reading its snapshot back; retry",
                type="ShardRestoring",
            )

    def _not_moving(self) -> None:
        """Nor does it take instructions while it writes its snapshot before continuing as new:
        one carried out then would be missing from the state the next run starts from."""
        self._not_restoring()
        if self.snapshotting:
            raise ApplicationError(
                f"shard {self.shard.id} is writing its snapshot; retry", type="ShardRestoring"
            )

    guard: Guard

    def _ins(self, raw: RawValue, model: type[Ins], update: str) -> Ins:
        """An update's instruction, decoded strictly; refused (before it enters history, in
        the validator) if it is missing, malformed or oversized."""
        ins: Ins = self.guard.arg(raw, model, update)
        return ins

    def _fence(
        self, ins: Instruction | SplitInstruction | TakeIn, touched: int, any_term: bool = False
    ) -> bool:
        """`Fencing.check` against this shard as it is now; refused while it moves its state."""
        self._not_moving()
        return self.fencing.check(
            ins,
            touched,
            shard=self.shard.id,
            size=len(self.shard.inventory) + len(self.shard.handoff),
            max_share=self.cfg.max_share,
            now_ms=workflow.now().timestamp() * 1000,
            any_term=any_term,
        )

    @workflow.query
    def machine_states(self, machine_ids: list[str]) -> dict[str, str]:
        """Where machines are as this shard holds them: a state (drained for a transfer: IDLE),
        DECOMMISSIONED (taken out of the fleet here), or GONE (not this shard's)."""
        self._not_restoring()
        if not isinstance(machine_ids, list) or len(machine_ids) > QUERY_IDS:
            raise ApplicationError(f"machine_ids: a list of at most {QUERY_IDS} ids is required")
        return {mid: self.shard.ownership(mid) for mid in machine_ids if isinstance(mid, str)}

    @workflow.query
    def owned_ids(self, start: int, limit: int) -> tuple[list[str], int]:
        self._not_restoring()
        return self.shard.owned_ids(*_page(start, limit))

    @workflow.query
    def speculative_ids(self, provider: str, start: int, limit: int) -> tuple[list[str], int]:
        self._not_restoring()
        return self.shard.speculative_ids(str(provider), *_page(start, limit))

    @workflow.update
    @guarded
    def adopt(self, raw: RawValue = NO_ARGUMENT) -> int:
        """Take ownership of machines another shard released (or new capacity)."""
        ins = self._ins(raw, Instruction, "adopt")
        if self.fencing.accept(ins):
            return 0
        return self.shard.adopt(ins.machines, workflow.now().timestamp())

    @adopt.validator
    def _adopt_ok(self, raw: RawValue = NO_ARGUMENT) -> None:
        ins = self._ins(raw, Instruction, "adopt")
        # Adopting takes nothing away from the shard: fenced, but no share limit. Taking back
        # what this shard released (a saga's compensation) is accepted from any term.
        self._fence(ins, 0, any_term=ins.compensation and self.fencing.released_here(ins))

    @workflow.update
    @guarded
    def release(self, raw: RawValue = NO_ARGUMENT) -> list[Machine]:
        """Give up idle or speculative machines; returns their records for the receiver."""
        ins = self._ins(raw, Instruction, "release")
        if self.fencing.accept(ins):
            return self.fencing.first_outcome(ins, "release")
        released = self.shard.release(ins.machine_ids)
        self.fencing.remember(ins, "release", [m.model_dump(mode="json") for m in released])
        return released

    @release.validator
    def _release_ok(self, raw: RawValue = NO_ARGUMENT) -> None:
        ins = self._ins(raw, Instruction, "release")
        # Machines drained for this transfer were counted when the drain was accepted.
        if self._fence(ins, sum(1 for mid in ins.machine_ids if mid not in self.shard.handoff)):
            self.fencing.first_outcome(ins, "release")  # refused if no longer kept
            return
        if len(ins.machine_ids) > RECORDS_MAX:
            raise ApplicationError(
                f"machine_ids: {len(ins.machine_ids)} machines, at most {RECORDS_MAX} a release "
                "(their records must fit one reply)"
            )
        self._check_free(ins)

    def _check_free(self, ins: Instruction) -> None:
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
                    "machines "
                    "move between shards"
                )

    @workflow.update
    @guarded
    def drain_for_transfer(self, raw: RawValue = NO_ARGUMENT) -> list[str]:
        """Drain configured machines so they can be handed over (cross-shard preemption)."""
        ins = self._ins(raw, Instruction, "drain_for_transfer")
        if self.fencing.accept(ins):
            return ins.machine_ids
        now = workflow.now().timestamp()
        inv = self.shard.inventory
        clusters = {mid: inv.cluster_of(inv.row(mid)) for mid in ins.machine_ids}
        self.shard.drain_for_transfer(ins.machine_ids, now)
        for mid in ins.machine_ids:
            self.pipeline.append(
                self.inputs.make(
                    Transition.DRAIN,
                    [mid],
                    cluster=clusters[mid],
                    grace_seconds=ins.grace_seconds,
                    reason="transfer",
                )
            )
        return ins.machine_ids

    @workflow.update
    @guarded
    def cancel_transfer(self, raw: RawValue = NO_ARGUMENT) -> list[str]:
        """Compensation of a drain for transfer: the machines stay and are the shard's again
        (idempotent; it only touches the shard's own machines, so any term may ask)."""
        ins = self._ins(raw, Instruction, "cancel_transfer")
        if not self.fencing.accept(ins):
            self.shard.cancel_transfer(ins.machine_ids, workflow.now().timestamp())
        return ins.machine_ids

    @cancel_transfer.validator
    def _cancel_ok(self, raw: RawValue = NO_ARGUMENT) -> None:
        ins = self._ins(raw, Instruction, "cancel_transfer")
        self._fence(ins, 0, any_term=True)

    @drain_for_transfer.validator
    def _drain_ok(self, raw: RawValue = NO_ARGUMENT) -> None:
        ins = self._ins(raw, Instruction, "drain_for_transfer")
        if self._fence(ins, len(ins.machine_ids)):
            return
        inv = self.shard.inventory
        for mid in ins.machine_ids:
            row = inv.ids.find(mid)
            if row < 0 or inv.state_of(row) is not S.CONFIGURED:
                raise ApplicationError(
                    f"machine {clip(mid, 80)} is not a configured machine of this shard"
                )

    # ---- splits, merges, decommissions (seed §16) --------------------------------------------

    @workflow.update
    @guarded
    def split_out(self, raw: RawValue = NO_ARGUMENT) -> dict[str, Any]:
        """Let `fraction` of the clusters and machines go to shard `ins.to` (all of them: a
        merge). Returns the clusters, their needs, and how many machines will be handed out."""
        ins = self._ins(raw, SplitInstruction, "split_out")
        if self.fencing.accept(ins):
            return self.fencing.first_outcome(ins, "split_out")
        clusters, ids = self.shard.membership.split_plan(ins.fraction)
        needs = self.shard.membership.split_out(clusters, ids, ins.to)
        if ins.fraction >= 1:
            self.merging = True
        out = {"clusters": clusters, "needs": needs, "machines": len(self.shard.leaving)}
        return self.fencing.remember(ins, "split_out", out)

    @split_out.validator
    def _split_ok(self, raw: RawValue = NO_ARGUMENT) -> None:
        ins = self._ins(raw, SplitInstruction, "split_out")
        # Dividing is the one instruction that moves half a shard: fenced, but not share-limited
        # (each part handed out is bounded by the saga's chunk instead).
        if self._fence(ins, 0):
            self.fencing.first_outcome(ins, "split_out")
            return
        if ins.to == self.shard.id:
            raise ApplicationError(f"shard {self.shard.id} cannot split into itself")
        if self.shard.leaving:
            raise ApplicationError(
                f"shard {self.shard.id} is already handing {len(self.shard.leaving)} machines over"
            )

    @workflow.update
    @guarded
    def hand_out(self, raw: RawValue = NO_ARGUMENT) -> list[Machine]:
        """The next part of a split's machines (at most `ins.limit` records)."""
        ins = self._ins(raw, Instruction, "hand_out")
        if self.fencing.accept(ins):
            return self.fencing.first_outcome(ins, "hand_out")
        part = [m.model_dump(mode="json") for m in self.shard.membership.hand_out(ins.limit)]
        return self.fencing.remember(ins, "hand_out", part)

    @hand_out.validator
    def _hand_out_ok(self, raw: RawValue = NO_ARGUMENT) -> None:
        ins = self._ins(raw, Instruction, "hand_out")
        if self._fence(ins, 0):
            self.fencing.first_outcome(ins, "hand_out")
            return
        if not 0 < ins.limit <= RECORDS_MAX:
            raise ApplicationError(f"limit: must be 1 … {RECORDS_MAX}, got {ins.limit}")

    @workflow.update
    @guarded
    def take_in(self, raw: RawValue = NO_ARGUMENT) -> int:
        """Clusters and machines of a split or merge (or given back after one failed)."""
        ins = self._ins(raw, TakeIn, "take_in")
        if self.fencing.accept(ins):
            return 0
        taken = self.shard.membership.take_in(ins.needs, ins.machines, workflow.now().timestamp())
        if ins.last:  # the split is complete (or undone): decide again
            self.joining = self.merging = False
        # A merge: the retired shard's share of capacity that appears later is this shard's.
        self.inherited = sorted(set(self.inherited) | set(ins.inherit))
        return taken

    @take_in.validator
    def _take_in_ok(self, raw: RawValue = NO_ARGUMENT) -> None:
        ins = self._ins(raw, TakeIn, "take_in")
        if self._fence(ins, 0):
            return
        if self.retired:
            raise ApplicationError(f"shard {self.shard.id} has retired: it takes nothing in")

    @workflow.update
    @guarded
    def retire(self, raw: RawValue = NO_ARGUMENT) -> int:
        """End a merged-away shard's workflow. Returns its last cycle count."""
        ins = self._ins(raw, Instruction, "retire")
        self.fencing.accept(ins)
        self.retired = True
        return self.shard.cycles

    @retire.validator
    def _retire_ok(self, raw: RawValue = NO_ARGUMENT) -> None:
        ins = self._ins(raw, Instruction, "retire")
        if self._fence(ins, 0):
            return
        owned = sum(self.shard.machines_by_state().values())
        if not self.merging or owned or self.shard.needs.clusters():
            raise ApplicationError(
                f"shard {self.shard.id} still owns {owned} machines and "
                f"{len(self.shard.needs.clusters())} clusters: only an emptied, merging shard "
                "retires"
            )

    @workflow.update
    @guarded
    def decommission(self, raw: RawValue = NO_ARGUMENT) -> list[str]:
        """Machines leaving the fleet (seed §16): idle or drained ones are given up; cloud
        machines are deleted, bare metal goes back to its provider as it is."""
        ins = self._ins(raw, Instruction, "decommission")
        if self.fencing.accept(ins):
            return ins.machine_ids
        inv = self.shard.inventory
        # Drained for this: back from the handoff first, so everything leaves the same way.
        self.shard.cancel_transfer(
            [mid for mid in ins.machine_ids if mid in self.shard.handoff],
            workflow.now().timestamp(),
        )
        for mid in ins.machine_ids:
            row = inv.ids.find(mid)
            if inv.state_of(row) is S.IDLE:
                if inv.profile_of(row).capacity_type.value != "bare-metal":
                    self.pipeline.append(
                        self.inputs.make(Transition.DELETE, [mid], reason="decommission")
                    )
        self.shard.release(ins.machine_ids)
        self.shard.decommissioned.update(ins.machine_ids)
        return ins.machine_ids

    @decommission.validator
    def _decommission_ok(self, raw: RawValue = NO_ARGUMENT) -> None:
        ins = self._ins(raw, Instruction, "decommission")
        if not self._fence(ins, sum(1 for m in ins.machine_ids if m not in self.shard.handoff)):
            self._check_free(ins)

    @workflow.query
    def matching(self, where: dict[str, str], limit: int) -> Matching:
        """Machines a decommission could take (see `Shard.matching`)."""
        self._not_restoring()
        if not isinstance(where, dict) or not all(
            isinstance(k, str) and isinstance(v, str) for k, v in where.items()
        ):
            raise ApplicationError("where: a map of field names to values is required")
        limit = _page(0, limit)[1]
        return self.shard.membership.matching(where, limit)

    def report_due(self, now: float) -> ShardReport | None:
        """The report, every 30 s, taken right after a decision at `now`: what it offers
        (idle, speculative, preemptible) and what it lacks (shortfalls) are that decision's.
        Machines adopted later in the cycle are in the next report, after a decision has
        claimed them; else the coordinator would see them idle beside a shortfall they are
        about to serve, and with a report newer than the saga that brought them, plan again."""
        if now - self.last_report < self.cfg.report_seconds:
            return None
        self.last_report = now
        # Small samples: every report lands in the coordinator's history.
        return self.shard.report(now, sample=REPORT_SAMPLE)

    async def send_report(self, report: ShardReport | None) -> None:
        """To the coordinator, if one runs (static stability: without one the shard carries
        on alone)."""
        if report is None:
            return
        try:
            await workflow.get_external_workflow_handle(COORDINATOR_ID).signal(
                "shard_report", report
            )
        except Exception:  # no coordinator running: nothing to tell
            pass
