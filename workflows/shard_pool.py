"""What the coordinator tells a shard of the machines other shards hold free (`AsksFirst`, mixed
into workflows/shard.py; issue 45, bigfleet/pooling/ask_first.py): the `pool_summary` signal,
kept and handed to the engine before every cycle, so a need about to preempt asks first.

The last summary crosses continue-as-new in the shard's state (`pool_summary`, present only
when the shard has one: bounded by `SUMMARY_BYTES`, a few KB for a real fleet's profiles), so
a run just continued does not preempt for want of it. Runs begun before take no summary
(`ASK_PATCH`): a run whose history holds one refused replays as it ran.
"""

from __future__ import annotations

from typing import Any

from temporalio import workflow

with workflow.unsafe.imports_passed_through():
    from bigfleet.inputs import Rejected
    from bigfleet.models import from_wire
    from bigfleet.pooling.ask_first import SUMMARY_BYTES, PoolSummary, tell
    from workflows.guard import accepts
    from workflows.shard_parts import ShardParts

ASK_PATCH = "shards-ask-before-preempting"
FUTURE_SECONDS = 60.0  # a summary from further ahead of this shard's clock is refused


class AsksFirst(ShardParts):
    """The `pool_summary` signal, and the summary it keeps (None: none yet)."""

    free_elsewhere: PoolSummary | None = None

    @accepts(PoolSummary, max_bytes=SUMMARY_BYTES)
    def pool_summary(self, summary: PoolSummary) -> None:
        """The coordinator's summary of the machines other shards hold free. Refused from a
        term older than the one this shard serves, from the future, or older than the last
        one taken; a run begun before shards asked before preempting takes none."""
        if not workflow.patched(ASK_PATCH):
            raise Rejected("pool_summary: this shard's run began before it took summaries")
        now = workflow.now().timestamp()
        if summary.term < self.steps.fencing.term:
            raise Rejected(
                f"pool_summary: term: {summary.term} is older than this shard's "
                f"{self.steps.fencing.term}"
            )
        if summary.at > now + FUTURE_SECONDS:
            raise Rejected(f"pool_summary: at: {summary.at} is in the future")
        last = self.free_elsewhere
        if last is not None and summary.at < last.at:
            raise Rejected("pool_summary: at: older than the last summary taken")
        self.free_elsewhere = summary
        tell(self.shard, summary, now)

    def _tell_engine(self, now: float) -> None:
        """Before a cycle: the engine's view of what is free elsewhere (none once the last
        summary is stale: `ask_first.STALE_SECONDS`)."""
        tell(self.shard, self.free_elsewhere, now)

    def _summary_carried(self) -> dict[str, Any] | None:
        """The summary as the next run takes it back (None: none to carry)."""
        s = self.free_elsewhere
        return None if s is None else s.model_dump(mode="json")

    def _summary_restored(self, raw: Any) -> None:
        """The last run's summary back (anyone may start a shard with any input: what does
        not read as a summary is dropped)."""
        if raw is None:
            return
        try:
            self.free_elsewhere = from_wire(PoolSummary, raw)
        except ValueError:
            workflow.logger.warning("the carried pool_summary does not read as one: dropped")
