"""A shard workflow with a planted bug, for the recovery tests: a cycle that finds a roll-up of
cluster `poison` raises, so every workflow task after that roll-up arrives fails (the shape of
any bug a signal can trigger). Registered under the shard's own workflow type."""

from __future__ import annotations

from temporalio import workflow

with workflow.unsafe.imports_passed_through():
    from activities.wire import ShardInput
    from bigfleet.engine import Decision
    from workflows.shard import ShardWorkflow

POISON = "poison"


@workflow.defn(name="Shard")
class PoisonedShard(ShardWorkflow):
    @workflow.run
    async def run(self, inp: ShardInput) -> None:
        await super().run(inp)

    def _cycle(self, now: float) -> Decision:
        if POISON in self.shard.needs.clusters():
            raise RuntimeError(f"planted bug: a roll-up of cluster {POISON!r}")
        return super()._cycle(now)
