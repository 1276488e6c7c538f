"""A shard workflow with a planted bug, for the recovery tests: a run that starts from a state
holding a roll-up of cluster `poison` breaks on its first cycle, and on every workflow task
after it (the shape of any bug in what a run carries over: the roll-up is taken without
trouble, and the next run, started from the snapshot that holds it, cannot decide). Registered
under the shard's own workflow type."""

from __future__ import annotations

from temporalio import workflow

with workflow.unsafe.imports_passed_through():
    from activities.wire import ShardInput
    from bigfleet.engine import Decision
    from workflows.shard import ShardWorkflow

POISON = "poison"


@workflow.defn(name="Shard")
class PoisonedShard(ShardWorkflow):
    carried = False  # the run started from a state that holds the poison

    @workflow.run
    async def run(self, inp: ShardInput) -> None:
        await super().run(inp)

    async def _take_over(self, inp: ShardInput) -> None:
        await super()._take_over(inp)
        self.carried = POISON in self.shard.needs.clusters()

    def _cycle(self, now: float) -> Decision:
        if self.carried and POISON in self.shard.needs.clusters():
            raise RuntimeError(f"planted bug: a roll-up of cluster {POISON!r} carried over")
        return super()._cycle(now)
