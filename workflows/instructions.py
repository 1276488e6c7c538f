"""Coordinator instructions a shard accepts (design §6, §11): fenced updates, and shard reports.

Every instruction carries (coordinator_term, seq). A stale term, a replayed seq, or one that
would take more than `ShardConfig.max_share` (10 %) of the shard's machines away is refused
before it changes anything.
"""


from __future__ import annotations

from datetime import timedelta
from typing import Any, TypeVar

from temporalio import workflow
from temporalio.common import RawValue, RetryPolicy
from temporalio.exceptions import ActivityError, ApplicationError

with workflow.unsafe.imports_passed_through():
    from activities.wire import (
        CoordinatorTerm,
        Instruction,
        SplitInstruction,
        TakeIn,
    )
    from bigfleet.decommission import Matching
    from bigfleet.inputs import clip
    from bigfleet.models import Machine, MachineState
    from bigfleet.reports import ShardReport
    from workflows.guard import NO_ARGUMENT, guarded
    from workflows.sagas import COORDINATOR_ID
    from workflows.shard_parts import ShardParts

S = MachineState
REPORT_SAMPLE = 32


QUERY_IDS = 50_000  # ids a query may ask about (an answer stays below gRPC's 4 MB)
Ins = TypeVar("Ins", Instruction, SplitInstruction, TakeIn)
AnyIns = Instruction | SplitInstruction | TakeIn
# Asking the coordinator for its term: a few quick tries; the saga's step retries after that.
ASK_TERM: dict[str, Any] = dict(
    start_to_close_timeout=timedelta(seconds=10),
    retry_policy=RetryPolicy(initial_interval=timedelta(seconds=1), maximum_attempts=3),
)


def _page(start: object, limit: object) -> tuple[int, int]:
    """(start, limit) of a paged query, checked: whole numbers, limit 1…QUERY_IDS."""
    for name, value in (("start", start), ("limit", limit)):
        if isinstance(value, bool) or not isinstance(value, int) or value < 0:
            raise ApplicationError(f"{name}: a whole number ≥ 0 is required, got {clip(value, 40)}")
    assert isinstance(start, int) and isinstance(limit, int)
    return start, max(1, min(limit, QUERY_IDS))


class InstructionHandlers(ShardParts):
    """The shard workflow's instruction handlers (mixed in: Temporal finds handlers on the
    workflow class). Each decodes its instruction, lets `InstructionSteps` check it (in the
    validator) and carry it out (in the handler); what they share is made in the workflow's
    `__init__` (declared in `ShardParts`): the shard, its config and the steps."""

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

    def _ins(self, raw: RawValue, model: type[Ins], update: str) -> Ins:
        """An update's instruction, decoded strictly; refused (before it enters history, in
        the validator) if it is missing, malformed or oversized."""
        ins: Ins = self.guard.arg(raw, model, update)
        return ins

    def _checked(self, raw: RawValue, model: type[Ins], update: str) -> tuple[Ins, float]:
        """For a validator: the instruction, and now; refused while the state moves, and by a
        shard in shadow mode (its machines are the providers' truth, never moved by it)."""
        self._not_moving()
        if self.cfg.shadow:
            raise ApplicationError(
                f"{update}: shard {self.shard.id} is in shadow mode and moves no machines",
                type="ShadowShard",
                non_retryable=True,
            )
        return self._ins(raw, model, update), workflow.now().timestamp()

    def _fence(self, ins: AnyIns, touched: int, any_term: bool = False) -> bool:
        """`Fencing.check` against this shard as it is now; refused while it moves its state."""
        self._not_moving()
        return self.steps.fence(ins, touched, workflow.now().timestamp(), any_term)

    async def _new_term(self, ins: AnyIns, any_term: bool = False) -> bool:
        """A term above every one this shard has seen is taken only from the coordinator that
        runs now (design §11: terms fence zombies; anyone who can write to the namespace could
        send any term, and one taken on trust would fence the real coordinator out). Asked
        once per new term (`coordinator_term`): its own term, or — no coordinator running — a
        term not after this shard's clock, which any coordinator started later exceeds. A
        term the coordinator disowns is refused, and remembered so that it is refused on
        sight. True if it waited for the answer: the caller checks the instruction again,
        since the shard went on meanwhile. `any_term`: a compensation, which takes no term."""
        fencing = self.steps.fencing
        if any_term or not fencing.unverified(ins) or not workflow.patched("verified-terms"):
            return False
        term = ins.term
        if term in self.steps.asking_terms:  # another instruction of this term asks already
            await workflow.wait_condition(lambda: term not in self.steps.asking_terms)
        else:
            self.steps.asking_terms.add(term)
            try:
                answer: CoordinatorTerm = await workflow.execute_activity(
                    "coordinator_term",
                    task_queue=workflow.info().task_queue,
                    result_type=CoordinatorTerm,
                    **ASK_TERM,
                )
            except ActivityError as err:
                raise ApplicationError(
                    f"term: {term} could not be checked with the coordinator "
                    f"({err.cause or err}); retry",
                    type="TermUnchecked",
                ) from err
            finally:
                self.steps.asking_terms.discard(term)
            now_ms = workflow.now().timestamp() * 1000
            if answer.running and answer.term == 0:
                raise ApplicationError(
                    "term: the coordinator is starting; retry", type="TermUnchecked"
                )
            if (answer.running and answer.term == term) or (
                not answer.running and term <= now_ms
            ):
                fencing.confirm(term)
            else:
                fencing.disown(term)
        if term in fencing.forged:
            raise ApplicationError(
                f"term: {term} is not the running coordinator's term; the instruction is "
                "refused",
                type="StaleInstruction",
                non_retryable=True,
            )
        if fencing.unverified(ins):  # (the other instruction's question got no answer)
            raise ApplicationError(
                f"term: {term} could not be checked with the coordinator; retry",
                type="TermUnchecked",
            )
        return True

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
        """A page of the machines this shard holds (`Shard.owned_ids`)."""
        self._not_restoring()
        return self.shard.owned_ids(*_page(start, limit))

    @workflow.query
    def speculative_ids(self, provider: str, start: int, limit: int) -> tuple[list[str], int]:
        """A page of this shard's speculative machines of `provider` (`Shard.speculative_ids`)."""
        self._not_restoring()
        return self.shard.speculative_ids(str(provider), *_page(start, limit))

    @workflow.query
    def matching(self, where: dict[str, str], limit: int) -> Matching:
        """Machines a decommission could take (see `Membership.matching`)."""
        self._not_restoring()
        if not isinstance(where, dict) or not all(
            isinstance(k, str) and isinstance(v, str) for k, v in where.items()
        ):
            raise ApplicationError("where: a map of field names to values is required")
        return self.shard.membership.matching(where, _page(0, limit)[1])

    # ---- moving machines between shards (design §9) ---------------------------------------------

    @workflow.update
    @guarded
    async def adopt(self, raw: RawValue = NO_ARGUMENT) -> int:
        """Take ownership of machines another shard released (or new capacity)."""
        ins = self._ins(raw, Instruction, "adopt")
        if await self._new_term(ins, self.steps.taking_back(ins)):
            self._adopt_ok(raw)  # (checked again: the shard went on while it asked)
        return self.steps.adopt(ins, workflow.now().timestamp())

    @adopt.validator
    def _adopt_ok(self, raw: RawValue = NO_ARGUMENT) -> None:
        self.steps.check_adopt(*self._checked(raw, Instruction, "adopt"))

    @workflow.update
    @guarded
    async def release(self, raw: RawValue = NO_ARGUMENT) -> list[Machine]:
        """Give up idle or speculative machines; returns their records for the receiver."""
        ins = self._ins(raw, Instruction, "release")
        if await self._new_term(ins):
            self._release_ok(raw)
        return self.steps.release(ins)

    @release.validator
    def _release_ok(self, raw: RawValue = NO_ARGUMENT) -> None:
        self.steps.check_release(*self._checked(raw, Instruction, "release"))

    @workflow.update
    @guarded
    async def drain_for_transfer(self, raw: RawValue = NO_ARGUMENT) -> list[str]:
        """Drain configured machines so they can be handed over (cross-shard preemption)."""
        ins = self._ins(raw, Instruction, "drain_for_transfer")
        if await self._new_term(ins):
            self._drain_ok(raw)
        ids, drains = self.steps.drain_for_transfer(ins, workflow.now().timestamp())
        self.pipeline += drains
        return ids

    @drain_for_transfer.validator
    def _drain_ok(self, raw: RawValue = NO_ARGUMENT) -> None:
        self.steps.check_drain_for_transfer(*self._checked(raw, Instruction, "drain_for_transfer"))

    @workflow.update
    @guarded
    def cancel_transfer(self, raw: RawValue = NO_ARGUMENT) -> list[str]:
        """Compensation of a drain for transfer: the machines stay and are the shard's again
        (idempotent; it only touches the shard's own machines, so any term may ask)."""
        ins = self._ins(raw, Instruction, "cancel_transfer")
        return self.steps.cancel_transfer(ins, workflow.now().timestamp())

    @cancel_transfer.validator
    def _cancel_ok(self, raw: RawValue = NO_ARGUMENT) -> None:
        self.steps.check_cancel_transfer(*self._checked(raw, Instruction, "cancel_transfer"))

    # ---- splits, merges, decommissions (design §16) --------------------------------------------

    @workflow.update
    @guarded
    async def split_out(self, raw: RawValue = NO_ARGUMENT) -> dict[str, Any]:
        """Let `fraction` of the clusters and machines go to shard `ins.to` (all of them: a
        merge). Returns the clusters, their needs, and how many machines will be handed out."""
        ins = self._ins(raw, SplitInstruction, "split_out")
        if await self._new_term(ins):
            self._split_ok(raw)
        return self.steps.split_out(ins)

    @split_out.validator
    def _split_ok(self, raw: RawValue = NO_ARGUMENT) -> None:
        self.steps.check_split_out(*self._checked(raw, SplitInstruction, "split_out"))

    @workflow.update
    @guarded
    async def hand_out(self, raw: RawValue = NO_ARGUMENT) -> list[Machine]:
        """The next part of a split's machines (at most `ins.limit` records)."""
        ins = self._ins(raw, Instruction, "hand_out")
        if await self._new_term(ins):
            self._hand_out_ok(raw)
        return self.steps.hand_out(ins)

    @hand_out.validator
    def _hand_out_ok(self, raw: RawValue = NO_ARGUMENT) -> None:
        self.steps.check_hand_out(*self._checked(raw, Instruction, "hand_out"))

    @workflow.update
    @guarded
    async def take_in(self, raw: RawValue = NO_ARGUMENT) -> int:
        """Clusters and machines of a split or merge (or given back after one failed)."""
        ins = self._ins(raw, TakeIn, "take_in")
        if await self._new_term(ins):
            self._take_in_ok(raw)
        return self.steps.take_in(ins, workflow.now().timestamp())

    @take_in.validator
    def _take_in_ok(self, raw: RawValue = NO_ARGUMENT) -> None:
        self.steps.check_take_in(*self._checked(raw, TakeIn, "take_in"))

    @workflow.update
    @guarded
    async def retire(self, raw: RawValue = NO_ARGUMENT) -> int:
        """End a merged-away shard's workflow. Returns its last cycle count."""
        ins = self._ins(raw, Instruction, "retire")
        if await self._new_term(ins):
            self._retire_ok(raw)
        return self.steps.retire(ins)

    @retire.validator
    def _retire_ok(self, raw: RawValue = NO_ARGUMENT) -> None:
        self.steps.check_retire(*self._checked(raw, Instruction, "retire"))

    @workflow.update
    @guarded
    async def decommission(self, raw: RawValue = NO_ARGUMENT) -> list[str]:
        """Machines leaving the fleet (design §16): idle or drained ones are given up; cloud
        machines are deleted, bare metal goes back to its provider as it is."""
        ins = self._ins(raw, Instruction, "decommission")
        if await self._new_term(ins):
            self._decommission_ok(raw)
        ids, deletes = self.steps.decommission(ins, workflow.now().timestamp())
        self.pipeline += deletes
        return ids

    @decommission.validator
    def _decommission_ok(self, raw: RawValue = NO_ARGUMENT) -> None:
        self.steps.check_decommission(*self._checked(raw, Instruction, "decommission"))

    # ---- reports to the coordinator ---------------------------------------------------------

    def report_due(self, now: float) -> ShardReport | None:
        """The report, every 30 s, taken right after a decision at `now`: what it offers
        (idle, speculative, preemptible) and what it lacks (shortfalls) are that decision's.
        Machines adopted later in the cycle are in the next report, after a decision has
        claimed them; else the coordinator would see them idle beside a shortfall they are
        about to serve, and with a report newer than the saga that brought them, plan again."""
        if now - self.last_report < self.cfg.report_seconds:
            return None
        self.last_report = now
        if self.cfg.shadow:
            # Alive and what it holds, but nothing offered or asked for: the coordinator plans
            # no moves to or from a shard in shadow mode.
            return ShardReport(
                shard=self.shard.id,
                at=now,
                machines=self.shard.machines_by_state(),
                clusters=self.shard.needs.clusters(),
            )
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
