"""Rebalancing and cross-shard preemption as sagas (design §5, §8, §9): each step an update on a
shard workflow, each with its compensation, run backwards when a later step fails. No machine is
ever owned by two shards or by none: it is released by the donor before the receiver adopts it,
and if the receiver refuses, the donor takes it back."""

from __future__ import annotations

from datetime import timedelta
from typing import Any

from temporalio import workflow
from temporalio.common import RetryPolicy
from temporalio.exceptions import ActivityError

with workflow.unsafe.imports_passed_through():
    from activities.wire import (
        COORDINATOR_ID,
        SHARD_TASK_QUEUE,
        Instruction,
        SagaInput,
        SagaResult,
        ShardCall,
    )
    from bigfleet.models import Machine
    from workflows.guard import NoSignals

__all__ = ["COORDINATOR_ID", "STEP", "UNDO", "TransferSagaWorkflow"]

STEP: dict[str, Any] = dict(
    task_queue=SHARD_TASK_QUEUE,
    start_to_close_timeout=timedelta(seconds=30),
    retry_policy=RetryPolicy(initial_interval=timedelta(seconds=1), maximum_attempts=5),
)
# A compensation is retried until it lands (a shard's worker may be down for a while): giving
# up would leave machines owned by no shard. Only a refusal stops it.
UNDO: dict[str, Any] = dict(
    STEP,
    retry_policy=RetryPolicy(
        initial_interval=timedelta(seconds=1), maximum_interval=timedelta(minutes=1)
    ),
)


@workflow.defn(name="TransferSaga")
class TransferSagaWorkflow(NoSignals):
    """Workflow `TransferSaga`: moves machines (idle, speculative, or drained for a
    preemption) from a donor shard to a receiver, undoing its steps in reverse on failure."""
    @workflow.run
    async def run(self, s: SagaInput) -> SagaResult:
        """Run the transfer's steps, or their compensations; say which step failed, if one did."""
        self.s = s
        try:
            return await self._run(s)
        finally:
            try:
                await workflow.get_external_workflow_handle(COORDINATOR_ID).signal(
                    "saga_done", workflow.info().workflow_id
                )
            except Exception:  # the coordinator restarted: it no longer tracks this saga
                pass

    async def _run(self, s: SagaInput) -> SagaResult:
        where = f"shard {s.donor} → shard {s.receiver}" if s.receiver >= 0 else f"shard {s.donor}"
        workflow.set_current_details(f"**{s.kind}** {len(s.machine_ids)} machines, {where}")
        result = SagaResult()
        seqs = iter(s.seqs)
        undo: list[tuple[int, str, list[str], list[Machine]]] = []
        step = ""
        try:
            if s.kind == "preempt" or s.drain:
                step = "drain_for_transfer"
                await self._update(s.donor, step, next(seqs), s.machine_ids)
                undo.append((s.donor, "cancel_transfer", s.machine_ids, []))
                step = "wait_drained"
                await self._wait_idle(s.machine_ids)
            if s.receiver < 0:
                # Decommission (design §16): the machines leave the fleet, to no other shard.
                step = "decommission"
                await self._update(s.donor, step, next(seqs), s.machine_ids)
                result.moved = list(s.machine_ids)
                return result
            step = "release"
            machines: list[Machine] = await self._update(
                s.donor, step, next(seqs), s.machine_ids, result_type=list[Machine]
            )
            # Released: nothing left to cancel on the donor; if the receiver refuses, the donor
            # takes them back.
            undo = [(s.donor, "adopt", [], machines)]
            step = "adopt"
            await self._update(s.receiver, step, next(seqs), machines=machines)
        except (ActivityError, TimeoutError) as err:
            for shard, update, ids, back in reversed(undo):
                moved = ids or [m.id for m in back]
                try:
                    await self._update(shard, update, next(seqs), ids, machines=back, undo=True)
                    result.compensated += moved
                except ActivityError as refused:
                    workflow.logger.error(
                        "compensation %s on shard %s refused, machines %s need a human: %s",
                        update, shard, moved, refused.cause,
                    )
                    result.orphaned += moved
            return self._failed(result, step, err)
        result.moved = [m.id for m in machines]
        return result

    async def _update(
        self,
        shard: int,
        update: str,
        seq: int,
        machine_ids: list[str] | None = None,
        machines: list[Machine] | None = None,
        result_type: type | None = None,
        undo: bool = False,
    ):
        ins = Instruction(
            term=self.s.term,
            seq=seq,
            machine_ids=machine_ids or [m.id for m in machines or []],
            machines=machines or [],
            grace_seconds=self.s.grace_seconds,
            compensation=undo,
        )
        return await workflow.execute_activity(
            "shard_update",
            ShardCall(shard=shard, update=update, instruction=ins),
            result_type=result_type,
            **(UNDO if undo else STEP),
        )

    async def _wait_idle(self, machine_ids: list[str]) -> None:
        """A drain for transfer is done when the donor has the machines idle again."""
        deadline = workflow.now() + timedelta(
            seconds=self.s.grace_seconds + self.s.drain_timeout_seconds
        )
        ins = Instruction(term=self.s.term, seq=0, machine_ids=machine_ids)
        while True:
            states: dict[str, str] = await workflow.execute_activity(
                "shard_machine_states",
                ShardCall(shard=self.s.donor, update="machine_states", instruction=ins),
                result_type=dict[str, str],
                **STEP,
            )
            if all(v == "IDLE" for v in states.values()):
                return
            if workflow.now() >= deadline:
                raise TimeoutError(f"machines still draining: {states}")
            await workflow.sleep(self.s.poll_seconds)

    def _failed(self, result: SagaResult, step: str, err: BaseException) -> SagaResult:
        cause = err.cause if isinstance(err, ActivityError) and err.cause else err
        workflow.logger.warning("saga step %s failed: %s", step, cause)
        result.failed_step = step
        result.error = str(cause)
        return result
