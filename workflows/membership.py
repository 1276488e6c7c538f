"""Shard splits and merges as sagas (design §16): the only time clusters move between shards.

A split starts a new shard (empty, deciding nothing yet), asks the donor to let half its
clusters and machines go, then hands the machines over in parts of `chunk` records (each far
below Temporal's payload limit), the clusters' needs with the first part. A merge is the same
with everything, repeated until machines that were mid-transition have settled and moved too;
then the emptied shard retires and its workflow ends. If the receiver refuses a part, that part
and everything not yet handed over go back to the donor: what moved stays moved, every cluster
and every machine is on exactly one shard throughout.
"""

from __future__ import annotations

from datetime import timedelta
from typing import Any

from temporalio import workflow
from temporalio.exceptions import ActivityError

with workflow.unsafe.imports_passed_through():
    from activities.wire import (
        Instruction,
        MembershipInput,
        MembershipResult,
        ShardCall,
        SplitInstruction,
        TakeIn,
    )
    from bigfleet.models import Machine
    from workflows.guard import NoSignals
    from workflows.sagas import COORDINATOR_ID, STEP


@workflow.defn(name="MembershipSaga")
class MembershipSagaWorkflow(NoSignals):
    """Workflow `MembershipSaga`: one shard split or merge (see the module)."""
    @workflow.run
    async def run(self, m: MembershipInput) -> MembershipResult:
        """Move clusters and machines part by part; hand back what a refused part carried."""
        self.m, self.seq = m, m.seq
        self.split = False  # the donor has let something go
        self.donor_inherited: list[int] = []  # a merge: shards merged into the donor before
        result = MembershipResult(kind=m.kind, donor=m.donor, into=m.into)
        workflow.set_current_details(f"**{m.kind}** shard {m.donor} → shard {m.into}")
        try:
            return await self._run(result)
        finally:
            try:
                await workflow.get_external_workflow_handle(COORDINATOR_ID).signal(
                    "membership_done", result
                )
            except Exception:  # no coordinator running: it relearns from the shards' reports
                pass

    async def _run(self, result: MembershipResult) -> MembershipResult:
        m = self.m
        step = "start"
        needs: list[dict[str, Any]] = []
        part: list[Machine] = []
        try:
            if m.kind == "split":
                await workflow.execute_activity(
                    "start_split_shard", [m.donor, m.into], result_type=str, **STEP
                )
            deadline = workflow.now() + timedelta(seconds=m.settle_timeout_seconds)
            while True:
                step = "split_out"
                split = SplitInstruction(term=m.term, seq=0, to=m.into, fraction=m.fraction)
                header = await self._update(m.donor, step, split)
                self.split = True
                needs = header["needs"]
                result.clusters += header["clusters"]
                while True:
                    step = "hand_out"
                    part = await self._update(
                        m.donor, step, Instruction(term=m.term, seq=0, limit=m.chunk),
                        result_type=list[Machine],
                    )
                    if not part and not needs:
                        break
                    step = "take_in"
                    await self._update(
                        m.into, step, TakeIn(term=m.term, seq=0, needs=needs, machines=part)
                    )
                    result.machines += len(part)
                    needs, part = [], []
                if m.kind != "merge" or await self._emptied(m.donor):
                    break
                if workflow.now() >= deadline:
                    raise TimeoutError(f"shard {m.donor} still has machines in transitions")
                await workflow.sleep(m.poll_seconds)  # machines mid-transition settle
            step = "finish"
            inherit = [m.donor, *self.donor_inherited] if m.kind == "merge" else []
            finish = TakeIn(term=m.term, seq=0, last=True, inherit=inherit)
            await self._update(m.into, "take_in", finish)
            if m.kind == "merge":
                step = "retire"
                await self._update(m.donor, "retire", Instruction(term=m.term, seq=0))
                result.retired = True
        except (ActivityError, TimeoutError) as err:
            cause = err.cause if isinstance(err, ActivityError) and err.cause else err
            workflow.logger.warning("%s step %s failed: %s", m.kind, step, cause)
            # Set first: if giving back fails too, the coordinator still hears of the failure.
            result.failed_step, result.error = step, str(cause)
            await self._give_back(result, needs, part)
        return result

    async def _give_back(
        self, result: MembershipResult, needs: list[dict[str, Any]], part: list[Machine]
    ) -> None:
        """Compensation: the refused part and whatever was not handed over yet go back to the
        donor, which decides again; the receiver keeps what it took (or, if it took nothing
        from a split, goes away)."""
        m = self.m
        returned = {c["cluster"] for c in needs}  # their needs never reached the receiver
        result.clusters = [c for c in result.clusters if c not in returned]
        while self.split:
            back = TakeIn(term=m.term, seq=0, needs=needs, machines=part)
            await self._update(m.donor, "take_in", back)
            result.returned += len(part)
            needs = []
            part = await self._update(
                m.donor, "hand_out", Instruction(term=m.term, seq=0, limit=m.chunk),
                result_type=list[Machine],
            )
            if not part:
                await self._update(m.donor, "take_in", TakeIn(term=m.term, seq=0, last=True))
                break
        if m.kind == "split" and result.machines == 0 and not result.clusters:
            await workflow.execute_activity("stop_split_shard", m.into, **STEP)
        else:
            await self._update(m.into, "take_in", TakeIn(term=m.term, seq=0, last=True))

    async def _emptied(self, shard: int) -> bool:
        status: dict[str, Any] = await workflow.execute_activity(
            "shard_status", shard, result_type=dict, **STEP
        )
        self.donor_inherited = list(status.get("inherited", []))
        return not sum(status["machines"].values()) and not status["clusters"]

    async def _update(
        self,
        shard: int,
        update: str,
        ins: Instruction | SplitInstruction | TakeIn,
        result_type: type | None = None,
    ) -> Any:
        """One fenced step; each gets the next seq of the saga's block."""
        self.seq += 1
        ins = ins.model_copy(update={"seq": self.seq})
        return await workflow.execute_activity(
            "shard_update",
            ShardCall(shard=shard, update=update, instruction=ins),
            result_type=result_type,
            **STEP,
        )
