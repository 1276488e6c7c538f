"""The coordinator's side of fleet membership (design §16): adding a shard, splitting one in two,
merging two, one at a time, each split or merge run as a `MembershipSaga`. A helper object of
the coordinator workflow, handed its planner and how it runs; it keeps the running split or
merge, which crosses continue-as-new with the coordinator (`running`)."""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from temporalio import workflow
from temporalio.workflow import ParentClosePolicy

with workflow.unsafe.imports_passed_through():
    from activities.wire import (
        CoordinatorInput,
        MembershipInput,
        MembershipResult,
        ShardCall,
        TakeIn,
    )
    from bigfleet.coordinator import Coordinator
    from bigfleet.inputs import Rejected, clip
    from workflows.membership import MembershipSagaWorkflow
    from workflows.sagas import STEP

SEQ_BLOCK = 1_000_000  # a split or merge: as many steps as it has parts


class FleetMembership:
    """Adds, splits and merges shards for the coordinator, one membership saga at a time."""
    def __init__(self, c: Coordinator, inp: CoordinatorInput, running: Mapping[str, Any]) -> None:
        self.c = c
        self.inp = inp
        # Running splits and merges (one at a time), by saga id.
        self.running: dict[str, dict[str, Any]] = dict(running)

    def check(self, shards: list[int]) -> None:
        """Refuse a split or merge of shards that are not members, or while one runs."""
        for shard in shards:
            if shard not in self.c.shards or shard in self.c.retiring:
                raise ValueError(f"shard {shard} is not a member of the fleet ({self.c.shards})")
        if self.running:
            raise ValueError(f"a split or merge is already running: {sorted(self.running)}")

    async def start(self, kind: str, donor: int, into: int) -> str:
        """Start the saga of a split (`into` is the new shard) or a merge (`donor` retires)."""
        seq = self.c.seq
        self.c.seq += SEQ_BLOCK  # the saga's steps use seq + 1, seq + 2, …
        saga_id = f"{kind}-{donor}-{into}-{self.c.term}-{seq}"
        self.running[saga_id] = {"kind": kind, "donor": donor, "into": into}
        if kind == "split":
            self.c.add_shard(into)
        else:
            self.c.retiring.add(donor)
        await workflow.start_child_workflow(
            MembershipSagaWorkflow.run,
            MembershipInput(
                kind=kind,
                donor=donor,
                into=into,
                term=self.c.term,
                seq=seq,
                fraction=1.0 if kind == "merge" else 0.5,
                chunk=self.inp.membership_chunk,
                poll_seconds=self.inp.plan_seconds,
            ),
            id=saga_id,
            parent_close_policy=ParentClosePolicy.ABANDON,
            static_summary=f"{kind}: shard {donor} → shard {into}",
        )
        return saga_id

    async def add(self) -> int:
        """A new, empty shard: started as a split's receiver (adopting nothing from the
        providers), then told nothing more follows."""
        new, like = self.c.new_shard_id(), min(self.c.shards)
        self.c.add_shard(new)
        await workflow.execute_activity("start_split_shard", [like, new], **STEP)
        done = TakeIn(term=self.c.term, seq=self.c.next_token()[1], last=True)
        call = ShardCall(shard=new, update="take_in", instruction=done)
        await workflow.execute_activity("shard_update", call, **STEP)
        return new

    def done(self, result: MembershipResult) -> None:
        """A split or merge ended. Refused unless it is the one running; of the clusters it
        says it moved, only the donor's are moved."""
        ended = {
            k: v
            for k, v in self.running.items()
            if (v["kind"], v["donor"], v["into"]) == (result.kind, result.donor, result.into)
        }
        if not ended:
            raise Rejected(
                f"membership_done: no {clip(result.kind, 20)} of shard {result.donor} into "
                f"{result.into} is running"
            )
        self.running = {k: v for k, v in self.running.items() if k not in ended}
        self.c.moved(
            [c for c in result.clusters if self.c.clusters.get(c) == result.donor], result.into
        )
        if result.retired:
            self.c.remove_shard(result.donor)
        elif result.kind == "merge":
            self.c.retiring.discard(result.donor)  # the merge failed: it stays a member
        if result.kind == "split" and result.failed_step and not result.machines:
            if not result.clusters:
                self.c.remove_shard(result.into)

    async def round(self) -> None:
        """Split a shard over a threshold, or merge two under-used ones; one at a time."""
        if self.running:
            return
        change = self.c.membership_change(self.inp.membership)
        if change is not None:
            await self.start(*change)
